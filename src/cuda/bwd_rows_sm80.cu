// The row-wise kernels of the sm80 backward: a group of lanes per (query row, head) computes the
// row's statistics (both schedules; for the single pass the same kernel clears its dq
// accumulator); one CTA per 16-row tile converts that tiled f32 accumulator. Both are bound by
// memory and touch each row once.
#include "cuda/bwd_rows_sm80.h"

#include <cutlass/numeric_types.h>

#include <cmath>

#include "core/error.h"
#include "core/math_constants.h"
#include "cuda/launch_common.h"
#include "cuda/seq_info.h"

namespace flashattn::cuda {
namespace {

constexpr int kRowWarps = 4;
constexpr int kConvertThreads = 128;
constexpr int kConvertMaxCols = 256;  // the largest head dim the kernels take

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

// With kClearDqAccum, each CTA first zeroes its share of the single pass's dq accumulator, which
// that pass then adds into (in place of a memset of its own: the writes go out beside this
// kernel's reads; FlashAttention-2 clears its accumulator in its row kernel too).
__device__ __forceinline__ void clear_dq_accum_share(const BwdParams& p) {
  const int64_t vectors = int64_t(dq_accum_bytes(p.heads_q, p.dq_accum_tiles_per_head, p.d) / sizeof(float4));
  const int64_t ctas = int64_t(gridDim.x) * gridDim.y, cta = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
  const int64_t share = (vectors + ctas - 1) / ctas, end = min(vectors, (cta + 1) * share);
  float4* accum = reinterpret_cast<float4*>(p.dq_accum);
  for (int64_t i = cta * share + threadIdx.x; i < end; i += blockDim.x) accum[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// A row's d_v columns take lanes_per_row(d_v) lanes (16 bytes of out and of dout each, a power of
// two), and a warp takes 32 / that many rows: no lane idles where d_v / 8 is a power of two (one
// row per warp left half of the lanes idle at d 128).
__host__ __device__ __forceinline__ int lanes_per_row(int d_v) {
  int lanes = 1;
  while (lanes < 32 && lanes * 8 < d_v) lanes *= 2;
  return lanes;
}

template <class Element, bool kClearDqAccum>
__global__ void __launch_bounds__(kRowWarps * 32) row_stats_kernel(const __grid_constant__ BwdParams p) {
  if constexpr (kClearDqAccum) clear_dq_accum_share(p);
  const int lanes = lanes_per_row(p.d_v);
  const int lane = threadIdx.x % 32, part = lane % lanes;
  const int64_t row =
      (int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32) * (32 / lanes) + lane / lanes;
  const int h = blockIdx.y;
  const bool exists = row < p.stats_rows_per_head;  // no return: the row's lanes shuffle below
  RowPlace at{};
  float delta = 0.f;
  if (exists) {
    at = place_row(p, row);
    const Element* out = static_cast<const Element*>(p.out) +
                         at.offset(h, p.out_batch_stride, p.out_row_stride, p.out_head_stride);
    const Element* dout = static_cast<const Element*>(p.dout) +
                          at.offset(h, p.dout_batch_stride, p.dout_row_stride, p.dout_head_stride);
    for (int col = part * 8; col < p.d_v; col += lanes * 8) {
      const uint4 o = *reinterpret_cast<const uint4*>(out + col);
      const uint4 g = *reinterpret_cast<const uint4*>(dout + col);
      const Element* o8 = reinterpret_cast<const Element*>(&o);
      const Element* g8 = reinterpret_cast<const Element*>(&g);
#pragma unroll
      for (int e = 0; e < 8; ++e) delta += float(o8[e]) * float(g8[e]);
    }
  }
  for (int offset = lanes / 2; offset > 0; offset /= 2) delta += __shfl_xor_sync(0xffffffffu, delta, offset);
  if (exists && part == 0) {
    const float lse = p.lse[at.offset(h, p.lse_batch_stride, p.lse_row_stride, p.lse_head_stride)];
    p.stats[int64_t(h) * p.stats_rows_per_head + row] =
        lse == -INFINITY ? RowStats{INFINITY, 0.f} : RowStats{lse * kLog2e, delta};
  }
}

// One CTA per (16-row tile, query head, sequence): the tile's fragment-ordered floats (bwd_params.h)
// are read in order, put back in row order in shared memory, scaled and stored 16 bytes at a time.
template <class Element>
__global__ void __launch_bounds__(kConvertThreads) dq_convert_kernel(const __grid_constant__ BwdParams p) {
  __shared__ float rows[kDqAccumTileRows][kConvertMaxCols + 4];
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqInfo seq = seq_info(p, b);
  const int m0 = blockIdx.x * kDqAccumTileRows;
  if (m0 >= seq.seqlen_q) return;
  const int col_tiles = p.d / 8;
  const float4* tile = reinterpret_cast<const float4*>(
      p.dq_accum + (int64_t(h) * p.dq_accum_tiles_per_head + dq_accum_first_tile(p, seq, b) + blockIdx.x) *
                       col_tiles * kDqAccumTileFloats);
  for (int c = threadIdx.x; c < col_tiles * 32; c += kConvertThreads) {
    const int lane = c % 32, col = (c / 32) * 8 + 2 * (lane % 4), r = lane / 4;
    const float4 v = tile[c];
    rows[r][col] = v.x, rows[r][col + 1] = v.y, rows[r + 8][col] = v.z, rows[r + 8][col + 1] = v.w;
  }
  __syncthreads();
  const bool varlen_q = p.cu_seqlens_q != nullptr;
  for (int c = threadIdx.x; c < kDqAccumTileRows * col_tiles; c += kConvertThreads) {
    const int r = c / col_tiles, col = (c % col_tiles) * 8;
    if (m0 + r >= seq.seqlen_q) continue;
    alignas(16) Element v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = Element(rows[r][col + e] * p.scale);
    Element* dq = static_cast<Element*>(p.dq) + col +
                  q_row_offset(seq, varlen_q, b, m0 + r, h, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
    *reinterpret_cast<uint4*>(dq) = *reinterpret_cast<const uint4*>(v);
  }
}

template <class Kernel>
void launch_rows(Kernel kernel, dim3 grid, int threads, const BwdParams& p, cudaStream_t stream, const char* what) {
  if (grid.x == 0) return;
  kernel<<<grid, threads, 0, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, what, " launch: ", cudaGetErrorString(err));
}

}  // namespace

void launch_bwd_row_stats(const BwdParams& p, flashattn_dtype dtype, bool clear_dq_accum, cudaStream_t stream) {
  using Half = cutlass::half_t;
  using Bf16 = cutlass::bfloat16_t;
  const bool f16 = dtype == FLASHATTN_F16;
  auto kernel = clear_dq_accum ? (f16 ? row_stats_kernel<Half, true> : row_stats_kernel<Bf16, true>)
                               : (f16 ? row_stats_kernel<Half, false> : row_stats_kernel<Bf16, false>);
  // No query rows: no grid, and nothing reads the statistics or the accumulator.
  const int64_t rows_per_cta = kRowWarps * (32 / lanes_per_row(p.d_v));
  const dim3 grid(unsigned((p.stats_rows_per_head + rows_per_cta - 1) / rows_per_cta), unsigned(p.heads_q));
  launch_rows(kernel, grid, kRowWarps * 32, p, stream, "backward row statistics kernel");
}

void launch_bwd_dq_convert(const BwdParams& p, flashattn_dtype dtype, cudaStream_t stream) {
  auto kernel = dtype == FLASHATTN_F16 ? dq_convert_kernel<cutlass::half_t> : dq_convert_kernel<cutlass::bfloat16_t>;
  const dim3 grid(unsigned((p.seqlen_q + kDqAccumTileRows - 1) / kDqAccumTileRows), unsigned(p.heads_q),
                  unsigned(p.batch));
  launch_rows(kernel, grid, kConvertThreads, p, stream, "backward dq conversion kernel");
}

}  // namespace flashattn::cuda
