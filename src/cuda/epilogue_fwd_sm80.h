// The sm80 forward's epilogue: normalise O by the row sums, stage it through shared memory (the Q
// tile's space) so that global stores are 16 bytes wide, and write lse. Empty rows give out 0 and
// lse -inf.
#pragma once

#include <cstdint>

#include "cuda/fwd_params.h"
#include "cuda/mainloop_fwd_sm80.h"
#include "cuda/seq_info.h"
#include "cuda/softmax_sm80.h"

namespace flashattn::cuda {

// The query tile [m_start, m_start + m_rows) of head h of sequence b. Call after the last use of
// `smem` by any warp and with no cp.async in flight. softmax: the kernel's OnlineSoftmax, whose
// row sums normalise out and which gives lse (both functions here).
template <class K, int kM, class Softmax>
__device__ __forceinline__ void store_fwd_tile(const FwdParams& p, const SeqInfo& seq, int b, int h,
                                               int m_start, int m_rows, const FragmentOrigin& o,
                                               const float (&acc_o)[kM][K::kDTiles][4],
                                               const Softmax& softmax,
                                               typename K::Element* smem) {
  using Element = typename K::Element;
  const bool varlen_q = p.cu_seqlens_q != nullptr;
  const int warp_row0 = o.row0 - m_start;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = softmax.sum(mt, half);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int r = warp_row0 + mt * 16 + o.g + 8 * half;
      // Column groups dt and dt + 8 of a row lie 64 elements apart, past the swizzle's bits, so
      // eight addresses (four at d 32) serve the row: each store an immediate offset from one.
      constexpr int kGroups = K::kDTiles < 8 ? K::kDTiles : 8;
      Element* group[kGroups];
#pragma unroll
      for (int j = 0; j < kGroups; ++j) group[j] = smem + K::Rows::offset(r, j * 8 + 2 * o.t);
#pragma unroll
      for (int dt = 0; dt < K::kDTiles; ++dt) {
        *reinterpret_cast<uint32_t*>(group[dt % kGroups] + dt / kGroups * kGroups * 8) =
            pack2<Element>(acc_o[mt][dt][2 * half] * inv, acc_o[mt][dt][2 * half + 1] * inv);
      }
      if (p.lse != nullptr && o.t == 0 && r < m_rows) {
        const int64_t row = varlen_q ? seq.q_start + m_start + r : m_start + r;
        p.lse[(varlen_q ? 0 : int64_t(b) * p.lse_batch_stride) + int64_t(h) * p.lse_head_stride +
              row * p.lse_row_stride] = softmax.lse(mt, half, sum);
      }
    }
  }
  __syncthreads();
  Element* out = static_cast<Element*>(p.out);
  using Passes = RowPasses<K, K::kBlockM, const Element>;
  if constexpr (Passes::kApplies) {
    // As load_rows_async: one column per thread, its rows by increments (the pointer of a row
    // past the tile's is formed, never dereferenced).
    const Passes src(smem);
    Element* dst = out + q_row_offset(seq, varlen_q, b, m_start + src.row, h, p.out_batch_stride,
                                      p.out_row_stride, p.out_head_stride) + src.col;
    const int rows_left = src.rows_left(m_rows, p.d_v);
#pragma unroll
    for (int pass = 0; pass < Passes::kPasses; ++pass) {
      if (pass * Passes::kRowsPerPass < rows_left) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src(pass));
      }
      dst += Passes::kRowsPerPass * p.out_row_stride;
    }
  } else {  // head dims whose rows do not split evenly over the threads (96, 160, ...)
    for (int c = threadIdx.x; c < K::kBlockM * K::kChunksPerRow; c += K::kThreads) {
      const int r = c / K::kChunksPerRow, col = (c % K::kChunksPerRow) * 8;
      if (r >= m_rows || col >= p.d_v) continue;
      const int64_t offset = q_row_offset(seq, varlen_q, b, m_start + r, h, p.out_batch_stride,
                                          p.out_row_stride, p.out_head_stride);
      *reinterpret_cast<uint4*>(out + offset + col) =
          *reinterpret_cast<const uint4*>(smem + K::Rows::offset(r, col));
    }
  }
}

// Split-KV: this split's normalised out rows and lse, in f32, into the workspace partials
// (rows of a dense q: b * seqlen_q + i). A split with no key writes out 0 and lse -inf, which the
// merge skips.
template <class K, int kM, class Softmax>
__device__ __forceinline__ void store_fwd_partial(const FwdParams& p, int b, int h, int split,
                                                  int m_start, int m_rows, const FragmentOrigin& o,
                                                  const float (&acc_o)[kM][K::kDTiles][4],
                                                  const Softmax& softmax) {
  const int64_t head_rows = (int64_t(split) * gridDim.y + h) * p.accum_rows + int64_t(b) * p.seqlen_q + m_start;
  const int warp_row0 = o.row0 - m_start;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = softmax.sum(mt, half);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int r = warp_row0 + mt * 16 + o.g + 8 * half;
      if (r >= m_rows) continue;
      float* row = p.out_accum + (head_rows + r) * p.d_v;
#pragma unroll
      for (int dt = 0; dt < K::kDTiles; ++dt) {
        const int col = dt * 8 + 2 * o.t;
        if (col < p.d_v) {
          *reinterpret_cast<float2*>(row + col) =
              make_float2(acc_o[mt][dt][2 * half] * inv, acc_o[mt][dt][2 * half + 1] * inv);
        }
      }
      if (o.t == 0) p.lse_accum[head_rows + r] = softmax.lse(mt, half, sum);
    }
  }
}

}  // namespace flashattn::cuda
