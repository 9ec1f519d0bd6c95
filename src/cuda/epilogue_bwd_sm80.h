// The sm80 backward's epilogue: gradient accumulators (one warp's rows in the m16n8 C layout),
// scaled and rounded to the element type, staged through shared memory so that the global
// stores are 16 bytes wide.
#pragma once

#include <cstdint>

#include "cuda/sm80_primitives.h"

namespace flashattn::cuda {

// The kRows x kCols tile the warps hold (each warp kM m16 tiles from warp_row0 and its n8 tiles
// from warp_col0): rows [0, rows) and columns [0, cols) go to row_ptr(r) + col_offset + column.
// Call after every warp's last read of `smem`; ends with the stores issued.
template <class K, int kRows, int kCols, class Gemm, int kM, class RowPtr>
__device__ __forceinline__ void store_rows_scaled(const float (&acc)[kM][Gemm::kDTiles][4],
                                                  float scale, typename K::Element* smem,
                                                  int warp_row0, int warp_col0, int rows, int cols,
                                                  int col_offset, RowPtr row_ptr) {
  using Element = typename K::Element;
  constexpr int kChunks = kCols / 8;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_row0 + mt * 16 + g + 8 * half;
#pragma unroll
      for (int dt = 0; dt < Gemm::kDTiles; ++dt) {
        *reinterpret_cast<uint32_t*>(smem + K::Rows::offset(r, warp_col0 + dt * 8 + 2 * t)) =
            pack2<Element>(acc[mt][dt][2 * half] * scale, acc[mt][dt][2 * half + 1] * scale);
      }
    }
  __syncthreads();
  for (int c = threadIdx.x; c < kRows * kChunks; c += K::kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    if (r >= rows || col >= cols) continue;
    *reinterpret_cast<uint4*>(row_ptr(r) + col_offset + col) =
        *reinterpret_cast<const uint4*>(smem + K::Rows::offset(r, col));
  }
}

}  // namespace flashattn::cuda
