// The GPU KV-cache append: new keys (rotated when rotary tables are given) and new values are
// written into the dense or paged cache at cache_seqlens, before the forward kernel runs on the
// same stream. One CTA per (new key, kv head, sequence).
#include <cuda_runtime_api.h>

#include <cutlass/numeric_types.h>

#include "core/error.h"
#include "cuda/kv_append_sm80.h"
#include "cuda/rotary_sm80.h"
#include "cuda/seq_info.h"

namespace flashattn::cuda {
namespace {

constexpr int kAppendThreads = 128;

template <class Element>
__global__ void __launch_bounds__(kAppendThreads) kv_append_kernel(const __grid_constant__ FwdParams p) {
  const int t = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const SeqInfo seq{0, 0, 0, 0};  // KV caches are never varlen
  const int64_t j = int64_t(p.cache_seqlens[b]) + t;
  Element* k = static_cast<Element*>(const_cast<void*>(p.k)) +
               k_row_offset(p, seq, b, int(j), hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  Element* v = static_cast<Element*>(const_cast<void*>(p.v)) +
               k_row_offset(p, seq, b, int(j), hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  const Element* k_new = static_cast<const Element*>(p.k_new) + b * p.k_new_batch_stride +
                         t * p.k_new_row_stride + hk * p.k_new_head_stride;
  const Element* v_new = static_cast<const Element*>(p.v_new) + b * p.v_new_batch_stride +
                         t * p.v_new_row_stride + hk * p.v_new_head_stride;
  for (int e = threadIdx.x; e < p.d; e += kAppendThreads) k[e] = k_new[e];
  for (int e = threadIdx.x; e < p.d_v; e += kAppendThreads) v[e] = v_new[e];
  if (p.rotary_cos == nullptr) return;
  __syncthreads();  // the row is in place: rotate its pairs there
  for (int r = threadIdx.x; r < p.rotary_dim / 2; r += kAppendThreads)
    rotate_pair<Element, double>(p, j, r, [&](int c) -> Element& { return k[c]; });
}

}  // namespace

void kv_append(const FwdParams& p, flashattn_dtype dtype, cudaStream_t stream) {
  dim3 grid(p.seqlen_new, p.heads_q / p.group, p.batch);
  if (dtype == FLASHATTN_BF16) {
    kv_append_kernel<cutlass::bfloat16_t><<<grid, kAppendThreads, 0, stream>>>(p);
  } else {
    kv_append_kernel<cutlass::half_t><<<grid, kAppendThreads, 0, stream>>>(p);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, "KV-cache append launch: ", cudaGetErrorString(err));
}

}  // namespace flashattn::cuda
