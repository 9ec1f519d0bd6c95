// The CUDA merge: one warp per (row, head) combines the splits' partial outputs by the weights
// exp(lse_s - lse), lse = log(sum_s exp(lse_s)), in double like the CPU merge (the kernel is bound
// by memory, so the wider math is free and both backends round the same sums). A split whose lse is -inf saw no key and
// is never read (its partial may hold anything); a row with no key anywhere gets out 0, lse -inf.
// Serves flashattn_merge and the split-KV forward's combine step.
#include <cuda_runtime_api.h>

#include <cutlass/numeric_types.h>

#include <cmath>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/launch_common.h"
#include "cuda/merge_params.h"

namespace flashattn::cuda {
namespace {

constexpr int kMergeWarps = 4;
constexpr int kMaxColumnsPerLane = 8;  // d_v <= 256 over 32 lanes

template <class In, class Out>
__global__ void __launch_bounds__(kMergeWarps * 32) merge_kernel(const __grid_constant__ MergeParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t pair = int64_t(blockIdx.x) * kMergeWarps + threadIdx.x / 32;  // (b, i, h) flattened
  if (pair >= int64_t(p.batch) * p.rows * p.heads) return;
  const int h = int(pair % p.heads), i = int(pair / p.heads % p.rows), b = int(pair / p.heads / p.rows);
  const int64_t lp = int64_t(b) * p.lp_batch + int64_t(i) * p.lp_row + int64_t(h) * p.lp_head;
  float max_lse = -INFINITY;
  for (int s = lane; s < p.splits; s += 32) max_lse = fmaxf(max_lse, p.lse_partial[lp + s * p.lp_split]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  double total = 0.0;
  if (max_lse != -INFINITY) {
    for (int s = lane; s < p.splits; s += 32) total += exp(double(p.lse_partial[lp + s * p.lp_split]) - max_lse);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);

  double acc[kMaxColumnsPerLane] = {};
  const In* partial = static_cast<const In*>(p.out_partial) + int64_t(b) * p.op_batch + int64_t(i) * p.op_row +
                      int64_t(h) * p.op_head;
  for (int s = 0; max_lse != -INFINITY && s < p.splits; ++s) {
    const float lse_s = p.lse_partial[lp + s * p.lp_split];
    if (lse_s == -INFINITY) continue;
    const double weight = exp(double(lse_s) - max_lse) / total;
#pragma unroll
    for (int e = 0; e < kMaxColumnsPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < p.d_v) acc[e] += weight * double(float(partial[s * p.op_split + c]));
    }
  }
  Out* out = static_cast<Out*>(p.out) + int64_t(b) * p.o_batch + int64_t(i) * p.o_row + int64_t(h) * p.o_head;
#pragma unroll
  for (int e = 0; e < kMaxColumnsPerLane; ++e) {
    const int c = lane + 32 * e;
    if (c < p.d_v) out[c] = Out(float(acc[e]));
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[int64_t(b) * p.l_batch + int64_t(i) * p.l_row + int64_t(h) * p.l_head] =
        max_lse == -INFINITY ? -INFINITY : float(double(max_lse) + log(total));
  }
}

template <class In>
void launch_with_input(const MergeParams& p, dim3 grid, cudaStream_t stream) {
  switch (p.out_dtype) {
    case FLASHATTN_F32: merge_kernel<In, float><<<grid, kMergeWarps * 32, 0, stream>>>(p); break;
    case FLASHATTN_F16: merge_kernel<In, cutlass::half_t><<<grid, kMergeWarps * 32, 0, stream>>>(p); break;
    case FLASHATTN_BF16: merge_kernel<In, cutlass::bfloat16_t><<<grid, kMergeWarps * 32, 0, stream>>>(p); break;
    default: fail(FLASHATTN_NOT_SUPPORTED, "out: the CUDA merge takes f32, f16 or bf16, got ",
                  flashattn_dtype_string(p.out_dtype));
  }
}

}  // namespace

void launch_merge(const MergeParams& p, cudaStream_t stream) {
  const int64_t pairs = int64_t(p.batch) * p.rows * p.heads;
  if (pairs == 0) return;
  const dim3 grid(unsigned((pairs + kMergeWarps - 1) / kMergeWarps));
  switch (p.partial_dtype) {
    case FLASHATTN_F32: launch_with_input<float>(p, grid, stream); break;
    case FLASHATTN_F16: launch_with_input<cutlass::half_t>(p, grid, stream); break;
    case FLASHATTN_BF16: launch_with_input<cutlass::bfloat16_t>(p, grid, stream); break;
    default: fail(FLASHATTN_NOT_SUPPORTED, "out_partial: the CUDA merge takes f32, f16 or bf16, got ",
                  flashattn_dtype_string(p.partial_dtype));
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, "merge kernel launch: ", cudaGetErrorString(err));
}

void merge(const MergeProblem& m) {
  auto supported = [](const View& t, const char* name) {
    FA_CHECK_SUPPORTED(t.dtype == FLASHATTN_F32 || t.dtype == FLASHATTN_F16 || t.dtype == FLASHATTN_BF16,
                       name, ": the CUDA merge takes f32, f16 or bf16, got ", flashattn_dtype_string(t.dtype));
  };
  supported(m.out_partial, "out_partial");
  supported(m.out, "out");
  FA_CHECK_SUPPORTED(m.d_v <= 32 * kMaxColumnsPerLane, "out: the CUDA merge takes d_v up to ",
                     32 * kMaxColumnsPerLane, ", got d_v=", m.d_v);
  check_int32(m.splits, "out_partial: splits");
  check_int32(m.batch * m.seqlen_q * m.heads, "out: rows * heads");
  const int device_count = cuda::device_count();
  FA_CHECK_ARG(m.exec.device < device_count, "exec.device: expected -1 or a device below ",
               device_count, ", got ", m.exec.device);
  MergeParams p{};
  p.splits = int(m.splits), p.batch = int(m.batch), p.rows = int(m.seqlen_q), p.heads = int(m.heads);
  p.d_v = int(m.d_v);
  p.out_partial = m.out_partial.data;
  p.partial_dtype = m.out_partial.dtype;
  p.lse_partial = m.lse_partial.as<const float>();
  p.out = m.out.data;
  p.out_dtype = m.out.dtype;
  p.lse = m.lse.as<float>();
  const int64_t* op = m.out_partial.stride;
  const int64_t* lp = m.lse_partial.stride;
  if (m.varlen) {  // out [total_q, heads, d_v], lse [heads, total_q]: one "sequence" of total_q rows
    p.op_split = op[0], p.op_batch = 0, p.op_row = op[1], p.op_head = op[2];
    p.lp_split = lp[0], p.lp_batch = 0, p.lp_head = lp[1], p.lp_row = lp[2];
    p.o_batch = 0, p.o_row = m.out.stride[0], p.o_head = m.out.stride[1];
    if (m.lse.present()) p.l_batch = 0, p.l_head = m.lse.stride[0], p.l_row = m.lse.stride[1];
  } else {
    p.op_split = op[0], p.op_batch = op[1], p.op_row = op[2], p.op_head = op[3];
    p.lp_split = lp[0], p.lp_batch = lp[1], p.lp_head = lp[2], p.lp_row = lp[3];
    p.o_batch = m.out.stride[0], p.o_row = m.out.stride[1], p.o_head = m.out.stride[2];
    if (m.lse.present()) p.l_batch = m.lse.stride[0], p.l_head = m.lse.stride[1], p.l_row = m.lse.stride[2];
  }
  DeviceGuard device(m.exec.device);
  launch_merge(p, static_cast<cudaStream_t>(m.exec.stream));
}

}  // namespace flashattn::cuda
