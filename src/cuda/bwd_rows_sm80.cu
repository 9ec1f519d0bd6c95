// The row-wise kernels of the sm80 backward: one warp per (query row, head) computes the row's
// statistics (both schedules); one thread per 8 columns converts the single pass's f32 dq
// accumulator. Both are bound
// by memory and touch each row once.
#include "cuda/bwd_rows_sm80.h"

#include <cutlass/numeric_types.h>

#include <cmath>

#include "core/error.h"
#include "core/math_constants.h"
#include "cuda/launch_common.h"

namespace flashattn::cuda {
namespace {

constexpr int kRowWarps = 4;
constexpr int kConvertThreads = 256;

// (sequence, row within it) of a workspace row (seq_info.h's workspace_row, inverted): dense q
// numbers rows b * seqlen_q + i; varlen q numbers them by token, with b = 0 so that no batch
// stride applies.
struct RowPlace {
  int64_t b, i;
  __device__ __forceinline__ int64_t offset(int h, int64_t batch_stride, int64_t row_stride,
                                            int64_t head_stride) const {
    return b * batch_stride + i * row_stride + int64_t(h) * head_stride;
  }
};
__device__ __forceinline__ RowPlace place_row(const BwdParams& p, int64_t row) {
  if (p.cu_seqlens_q != nullptr) return {0, row};
  return {row / p.seqlen_q, row % p.seqlen_q};
}

template <class Element>
__global__ void __launch_bounds__(kRowWarps * 32) row_stats_kernel(const __grid_constant__ BwdParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int h = blockIdx.y;
  if (row >= p.stats_rows_per_head) return;
  const RowPlace at = place_row(p, row);
  const Element* out = static_cast<const Element*>(p.out) +
                       at.offset(h, p.out_batch_stride, p.out_row_stride, p.out_head_stride);
  const Element* dout = static_cast<const Element*>(p.dout) +
                        at.offset(h, p.dout_batch_stride, p.dout_row_stride, p.dout_head_stride);
  float delta = 0.f;
  for (int col = lane * 8; col < p.d_v; col += 32 * 8) {
    const uint4 o = *reinterpret_cast<const uint4*>(out + col);
    const uint4 g = *reinterpret_cast<const uint4*>(dout + col);
    const Element* o8 = reinterpret_cast<const Element*>(&o);
    const Element* g8 = reinterpret_cast<const Element*>(&g);
#pragma unroll
    for (int e = 0; e < 8; ++e) delta += float(o8[e]) * float(g8[e]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) delta += __shfl_xor_sync(0xffffffffu, delta, offset);
  if (lane == 0) {
    const float lse = p.lse[at.offset(h, p.lse_batch_stride, p.lse_row_stride, p.lse_head_stride)];
    p.stats[int64_t(h) * p.stats_rows_per_head + row] =
        lse == -INFINITY ? RowStats{INFINITY, 0.f} : RowStats{lse * kLog2e, delta};
  }
}

template <class Element>
__global__ void __launch_bounds__(kConvertThreads) dq_convert_kernel(const __grid_constant__ BwdParams p) {
  const int chunks = p.d / 8;
  const int64_t c = int64_t(blockIdx.x) * kConvertThreads + threadIdx.x;
  const int h = blockIdx.y;
  if (c >= p.stats_rows_per_head * chunks) return;
  const int64_t row = c / chunks;
  const int col = int(c % chunks) * 8;
  const RowPlace at = place_row(p, row);
  const float* acc = p.dq_accum + (int64_t(h) * p.stats_rows_per_head + row) * p.d + col;
  const float4 lo = *reinterpret_cast<const float4*>(acc), hi = *reinterpret_cast<const float4*>(acc + 4);
  alignas(16) Element v[8] = {Element(lo.x * p.scale), Element(lo.y * p.scale), Element(lo.z * p.scale),
                              Element(lo.w * p.scale), Element(hi.x * p.scale), Element(hi.y * p.scale),
                              Element(hi.z * p.scale), Element(hi.w * p.scale)};
  Element* dq = static_cast<Element*>(p.dq) + at.offset(h, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride) + col;
  *reinterpret_cast<uint4*>(dq) = *reinterpret_cast<const uint4*>(v);
}

// A grid of (items / per_block, heads_q) blocks of `threads`.
template <class Kernel>
void launch_rows(Kernel kernel, int64_t items, int per_block, int threads, const BwdParams& p,
                 cudaStream_t stream, const char* what) {
  if (items == 0) return;
  kernel<<<dim3(unsigned((items + per_block - 1) / per_block), unsigned(p.heads_q)), threads, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, what, " launch: ", cudaGetErrorString(err));
}

}  // namespace

void launch_bwd_row_stats(const BwdParams& p, flashattn_dtype dtype, cudaStream_t stream) {
  auto kernel = dtype == FLASHATTN_F16 ? row_stats_kernel<cutlass::half_t> : row_stats_kernel<cutlass::bfloat16_t>;
  launch_rows(kernel, p.stats_rows_per_head, kRowWarps, kRowWarps * 32, p, stream, "backward row statistics kernel");
}

void launch_bwd_dq_convert(const BwdParams& p, flashattn_dtype dtype, cudaStream_t stream) {
  auto kernel = dtype == FLASHATTN_F16 ? dq_convert_kernel<cutlass::half_t> : dq_convert_kernel<cutlass::bfloat16_t>;
  launch_rows(kernel, p.stats_rows_per_head * (p.d / 8), kConvertThreads, kConvertThreads, p, stream, "backward dq conversion kernel");
}

}  // namespace flashattn::cuda
