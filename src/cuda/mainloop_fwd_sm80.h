// The sm80 forward's mainloop pieces: the tile shapes of one instantiation, cp.async loaders of
// Q / K / V tiles into shared memory, and the two warp-level matrix products on m16n8k16
// (S = Q K^T from shared memory, O += P V with P taken from the S registers).
#pragma once

#include <cstdint>

#include "cuda/sm80_primitives.h"
#include "cuda/tile_size.h"

namespace flashattn::cuda {

// kFewRows: the few-rows variant (tile_size.h), one m-tile per warp and four CTAs per SM.
template <int kHeadDim_, class Element_, bool kFewRows = false>
struct FwdSm80 {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = FwdTileSm80<kHeadDim>::kWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpMTiles = kFewRows ? 1 : FwdTileSm80<kHeadDim>::kWarpMTiles;
  static constexpr bool kSkipsEmptyWarps = kFewRows;  // see warp_has_rows in the kernel
  static constexpr int kMinCtasPerSm = kFewRows ? kFwdFewRowsCtasPerSm : 1;
  static constexpr int kBlockM = kWarps * 16 * kWarpMTiles;
  static constexpr int kBlockN = FwdTileSm80<kHeadDim>::kBlockN;
  static constexpr bool kRoundPEarly = FwdTileSm80<kHeadDim>::kRoundPEarly;
  // Not on the few-rows tile: there it spilled 388 bytes at d 128 (sm_80 code) instead of 16.
  static constexpr int kMaxSlack = kFewRows ? 0 : FwdTileSm80<kHeadDim>::kMaxSlack;
  static constexpr int kNTiles = kBlockN / 8;   // n8 tiles of S per warp
  static constexpr int kDTiles = kHeadDim / 8;  // n8 tiles of O per warp
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per smem row
  using Rows = SmemRows<kHeadDim>;
  static constexpr int kSmemStride = Rows::kStride;
  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * kSmemStride * int(sizeof(Element));
  static_assert(kHeadDim % 32 == 0 && kBlockN % 16 == 0, "tile shapes must fit m16n8k16 steps");
  static_assert(!kFewRows || (kBlockM == kFwdFewRowsBlockM && kHeadDim <= kFwdFewRowsMaxHeadDim),
                "the few-rows variant is the host's 64-row tile up to its head dim");
};

// Copies kRows x kHeadDim elements of rows laid out at a constant stride (dense and varlen
// tensors) into shared memory with cp.async: rows >= valid_rows and columns >= d are zero-filled.
// Each thread keeps one column and walks its rows by pointer increments (and its shared rows by
// constant offsets: RowPasses), so a tile costs one add and one compare per 16 bytes (64-bit
// add: two instructions); a copy past the rows keeps its address, which the zero fill never
// reads (cp.async with source size 0). (A separate unpredicated path for whole tiles was
// if-converted: both forms of every copy were issued.)
template <class K, int kRows>
__device__ __forceinline__ void load_rows_async(typename K::Element* smem,
                                                const typename K::Element* row0,
                                                int64_t row_stride, int valid_rows, int d) {
  using Passes = RowPasses<K, kRows, typename K::Element>;
  if constexpr (Passes::kApplies) {
    const Passes dst(smem);
    const typename K::Element* src = row0 + dst.row * row_stride + dst.col;
    const int rows_left = dst.rows_left(valid_rows, d);
#pragma unroll
    for (int pass = 0; pass < Passes::kPasses; ++pass) {
      const bool valid = pass * Passes::kRowsPerPass < rows_left;
      cp_async_16(dst(pass), src, valid);
      src += Passes::kRowsPerPass * row_stride;
    }
  } else {  // head dims whose rows do not split evenly over the threads (96, 160, ...)
#pragma unroll
    for (int c = threadIdx.x; c < kRows * K::kChunksPerRow; c += K::kThreads) {
      const int r = c / K::kChunksPerRow, col = (c % K::kChunksPerRow) * 8;
      const bool valid = r < valid_rows && col < d;
      cp_async_16(smem + K::Rows::offset(r, col), row0 + r * row_stride + col, valid);
    }
  }
}

// The same for key rows of a paged cache, whose page is looked up row by row.
template <class K, int kRows, class RowOffset>
__device__ __forceinline__ void load_paged_rows_async(typename K::Element* smem,
                                                      const typename K::Element* base,
                                                      int valid_rows, int d, RowOffset row_offset) {
  for (int c = threadIdx.x; c < kRows * K::kChunksPerRow; c += K::kThreads) {
    int r = c / K::kChunksPerRow, col = (c % K::kChunksPerRow) * 8;
    bool valid = r < valid_rows && col < d;
    const typename K::Element* src = valid ? base + row_offset(r) + col : base;
    cp_async_16(smem + K::Rows::offset(r, col), src, valid);
  }
}

// acc[mt][nt] += Q[warp rows] K[tile]^T over the full head dim (both operands in smem; tiles on
// 128-byte boundaries).
template <class K>
__device__ __forceinline__ void gemm_qk(const typename K::Element* sQ,
                                        const typename K::Element* sK,
                                        float (&acc)[K::kWarpMTiles][K::kNTiles][4], int warp_row0,
                                        int lane) {
  using Rows = typename K::Rows;
  // The lanes' row addresses for the first k16 step (Q: this warp's first m16 tile, K: the first
  // n16 pair); the others are steps from them.
  const uint32_t q0 = Rows::address(sQ, warp_row0 + lane % 16, (lane / 16) * 8);
  const uint32_t k0 = Rows::address(sK, lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8);
#pragma unroll
  for (int kk = 0; kk < K::kHeadDim / 16; ++kk) {
    uint32_t a[K::kWarpMTiles][4];
#pragma unroll
    for (int mt = 0; mt < K::kWarpMTiles; ++mt) ldmatrix_x4(Rows::step(q0, mt * 16, kk * 16), a[mt]);
#pragma unroll
    for (int np = 0; np < K::kNTiles / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(Rows::step(k0, np * 16, kk * 16), b);
#pragma unroll
      for (int mt = 0; mt < K::kWarpMTiles; ++mt) {
        mma_16x8x16<typename K::Element>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma_16x8x16<typename K::Element>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// acc_o[mt][dt] += P V[tile]: a_of(mt, kc, a) gives P's A fragment of m-tile mt and k16 step kc
// (the C layout of two n8 tiles is the A layout of one k16 step); V's columns
// [col0, col0 + kDTiles * 8) from smem through the transposing ldmatrix (col0 a multiple of that
// width). The fragment is asked for at each product pair: with P in 16 bits, the order that gave
// d 128 its fewest register copies (96 MOV per tile against 125 with one fragment per k16 step).
template <class K, class PFragment>
__device__ __forceinline__ void gemm_pv_fragments(PFragment a_of, const typename K::Element* sV, int col0,
                                                  float (&acc_o)[K::kWarpMTiles][K::kDTiles][4], int lane) {
  using Element = typename K::Element;
  using Rows = typename K::Rows;
  static_assert(!Rows::kSwizzled || (K::kDTiles & (K::kDTiles - 1)) == 0, "step() needs a power-of-two width");
  const uint32_t v0 = Rows::address(sV, lane % 8 + ((lane / 8) % 2) * 8, col0 + (lane / 16) * 8);
#pragma unroll
  for (int kc = 0; kc < K::kBlockN / 16; ++kc) {
#pragma unroll
    for (int dp = 0; dp < K::kDTiles / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(Rows::step(v0, kc * 16, dp * 16), b);
#pragma unroll
      for (int mt = 0; mt < K::kWarpMTiles; ++mt) {
        uint32_t a[4];
        a_of(mt, kc, a);
        mma_16x8x16<Element>(acc_o[mt][2 * dp], a, b[0], b[1]);
        mma_16x8x16<Element>(acc_o[mt][2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
}

// P from f32 accumulators, rounded here.
template <class K>
__device__ __forceinline__ void gemm_pv(const float (&p)[K::kWarpMTiles][K::kNTiles][4],
                                        const typename K::Element* sV, int col0,
                                        float (&acc_o)[K::kWarpMTiles][K::kDTiles][4], int lane) {
  using Element = typename K::Element;
  auto a_of = [&](int mt, int kc, uint32_t (&a)[4]) {
    a[0] = pack2<Element>(p[mt][2 * kc][0], p[mt][2 * kc][1]);
    a[1] = pack2<Element>(p[mt][2 * kc][2], p[mt][2 * kc][3]);
    a[2] = pack2<Element>(p[mt][2 * kc + 1][0], p[mt][2 * kc + 1][1]);
    a[3] = pack2<Element>(p[mt][2 * kc + 1][2], p[mt][2 * kc + 1][3]);
  };
  gemm_pv_fragments<K>(a_of, sV, col0, acc_o, lane);
}

// P already in 16 bits: p[mt][nt][half] = rows g + 8 * half, columns 2t and 2t + 1 of n8 tile nt.
template <class K>
__device__ __forceinline__ void gemm_pv(const uint32_t (&p)[K::kWarpMTiles][K::kNTiles][2],
                                        const typename K::Element* sV, int col0,
                                        float (&acc_o)[K::kWarpMTiles][K::kDTiles][4], int lane) {
  auto a_of = [&](int mt, int kc, uint32_t (&a)[4]) {
    a[0] = p[mt][2 * kc][0], a[1] = p[mt][2 * kc][1], a[2] = p[mt][2 * kc + 1][0], a[3] = p[mt][2 * kc + 1][1];
  };
  gemm_pv_fragments<K>(a_of, sV, col0, acc_o, lane);
}

}  // namespace flashattn::cuda
