// The sm80 backward's mainloop pieces: the tile shapes of the dq pass and of the dk/dv pass, in
// the form the warp-level products of the forward (gemm_qk, gemm_pv) and its cp.async loaders
// take. Both passes recompute S from Q and K and P from the forward's lse.
#pragma once

#include "cuda/mainloop_fwd_sm80.h"
#include "cuda/tile_size.h"

namespace flashattn::cuda {

// The shape gemm_qk / gemm_pv read: each warp owns kWarpMTiles x 16 rows, the first product
// reduces over kHeadDim and yields kNTiles n8 tiles, the second reduces over those kBlockN
// columns into kDTiles n8 output tiles. Operands sit in shared-memory rows laid out as Rows.
template <class Element_, int kHeadDim_, int kWarpMTiles_, int kNTiles_, int kDTiles_>
struct WarpGemmShape {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpMTiles = kWarpMTiles_;
  static constexpr int kNTiles = kNTiles_;
  static constexpr int kBlockN = kNTiles * 8;
  static constexpr int kDTiles = kDTiles_;
  using Rows = SmemRows<kHeadDim>;
  static constexpr int kSmemStride = Rows::kStride;
};

// Shared members: the cp.async loaders' view of a kernel (threads, 16-byte chunks per row, layout
// of the shared-memory rows: swizzled where the head dim allows).
template <int kHeadDim_, class Element_, int kWarps_>
struct BwdSm80Base {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kChunksPerRow = kHeadDim / 8;
  using Rows = SmemRows<kHeadDim>;
  static constexpr int kSmemStride = Rows::kStride;
};

// dq pass: a CTA owns kBlockM query rows of one head and sweeps the keys in kBlockN steps, with
// K and V double-buffered. Shared memory: Q, dout, 2 x (K, V) and the rows' statistics.
template <int kHeadDim, class Element>
struct BwdDqSm80 : BwdSm80Base<kHeadDim, Element, BwdDqTileSm80<kHeadDim>::kWarps> {
  using Base = BwdSm80Base<kHeadDim, Element, BwdDqTileSm80<kHeadDim>::kWarps>;
  static constexpr int kWarpMTiles = BwdDqTileSm80<kHeadDim>::kWarpMTiles;
  static constexpr int kBlockM = Base::kWarps * 16 * kWarpMTiles;
  static constexpr int kBlockN = BwdDqTileSm80<kHeadDim>::kBlockN;
  using Gemm = WarpGemmShape<Element, kHeadDim, kWarpMTiles, kBlockN / 8, kHeadDim / 8>;
  static constexpr int kTileBytes = Base::kSmemStride * int(sizeof(Element));
  static constexpr int kSmemBytes =
      (2 * kBlockM + 4 * kBlockN) * kTileBytes + kBlockM * int(sizeof(float) * 2);
};

// dk/dv pass: a CTA owns kBlockN keys of one kv head (and kCtaCols of the kOutSplit column
// slices of dk and dv) and sweeps the queries of the group's heads in kBlockM steps, with Q,
// dout and their statistics double-buffered. The warps' rows are keys: S^T = K Q^T. The shape of
// each schedule (warp layout, steps) is the tile table's (tile_size.h); the single pass (and its
// compact tile) also adds dq by atomics. kScoreMods: the tile of the instantiation with score
// modifiers (softcap, ALiBi, dropout), whose registers may call for a smaller step.
template <int kHeadDim, BwdDkvSchedule kSchedule, bool kScoreMods>
inline constexpr BwdDkvShape kBwdDkvShape = bwd_dkv_shape<kHeadDim>(kSchedule, kScoreMods);
template <int kHeadDim, class Element, BwdDkvSchedule kSchedule, bool kScoreMods = false>
struct BwdDkvSm80 : BwdSm80Base<kHeadDim, Element, kBwdDkvShape<kHeadDim, kSchedule, kScoreMods>.warps> {
  static constexpr BwdDkvShape kShape = kBwdDkvShape<kHeadDim, kSchedule, kScoreMods>;
  using Base = BwdSm80Base<kHeadDim, Element, kShape.warps>;
  static constexpr bool kSinglePass = kSchedule != BwdDkvSchedule::kTwoPass;
  static constexpr bool kTail = kSchedule == BwdDkvSchedule::kSinglePassTail;
  static constexpr int kWarpMTiles = kShape.warp_m_tiles;
  static constexpr int kColSplit = kShape.col_split;
  static constexpr int kKeyGroups = Base::kWarps / kColSplit;
  static constexpr int kBlockN = kKeyGroups * 16 * kWarpMTiles;
  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kOutSplit = kShape.out_split;
  static constexpr int kCtaCols = kHeadDim / kOutSplit;
  static constexpr int kWarpCols = kCtaCols / kColSplit;   // dk / dv columns per warp
  static constexpr int kWarpQueries = kBlockM / kColSplit;  // S^T / dP^T columns per warp
  using Gemm = WarpGemmShape<Element, kHeadDim, kWarpMTiles, kWarpQueries / 8, kWarpCols / 8>;
  static constexpr int kTileBytes = Base::kSmemStride * int(sizeof(Element));
  // The single pass stages dS^T (keys x queries, the layout of the warps' fragments, so that the
  // stores are 32-bit pairs) in shared memory for dq = dS K, and with split columns P^T too: dq's
  // rows split into kDqMWarps warp rows of kDqWarpMTiles m16 tiles, its kCtaCols columns over
  // kDqWarpsN warps (the largest count the other warp factor allows that divides the n8 tiles;
  // warps beyond it skip dq).
  static constexpr int kDsStride = kBlockM + 8;  // 16 bytes of padding: conflict-free ldmatrix
  // dS^T in the single pass, and P^T with split columns; none for the two-pass kernel.
  static constexpr int kStagedTiles = !kSinglePass ? 0 : (kColSplit > 1 ? 2 : 1);
  static constexpr int kDqWarpMTiles = kShape.dq_warp_m_tiles;
  static constexpr bool kDqBeforeDk = kShape.dq_before_dk && kColSplit > 1;
  static constexpr bool kCopiesAfterTopBarrier = kShape.copies_after_top_barrier;
  static constexpr bool kUnguardedDqAtomics = kShape.unguarded_dq_atomics;
  static constexpr int kDqColumnRounds = kShape.dq_column_rounds;
  static constexpr int kDqMWarps = kBlockM / 16 / kDqWarpMTiles;
  static constexpr int kDqWarpsN = [] {
    int n = Base::kWarps / kDqMWarps;
    while ((kCtaCols / 8) % n != 0) --n;
    return n;
  }();
  static constexpr int kDqDTiles = kCtaCols / 8 / kDqWarpsN;
  static_assert(kDqDTiles % kDqColumnRounds == 0, "dq's rounds split a warp's n8 tiles evenly");
  static constexpr int kSmemBytes = (2 * kBlockN + 4 * kBlockM) * kTileBytes +
                                    2 * kBlockM * int(sizeof(float) * 2) +
                                    kStagedTiles * kBlockN * kDsStride * int(sizeof(Element));
  static_assert(kColSplit > 1 || kWarpCols % 16 == 0, "gemm_pv takes output columns in pairs of n8 tiles");
  static_assert(kWarpQueries % 16 == 0, "P^T in registers is the A operand of k16 steps");
  static_assert(kBlockM % (16 * kDqWarpMTiles) == 0 && Base::kWarps % kDqMWarps == 0,
                "dq's m16 tiles must split evenly over the warps");
};

// acc[mt][dt] += A B for one warp, both operands in shared memory: A is kM m16 tiles x kK,
// row-major at sA (kATransposed: stored transposed, kK rows of kStrideA from which the warp reads
// kM x 16 columns), B is kK rows of a tile laid out as RowsB (on a 128-byte boundary), of which
// the product takes the kDTiles * 8 columns from col0 (a multiple of that width), read through the
// transposing ldmatrix once for all kM tiles; an odd last n8 tile takes its half-width form.
template <bool kATransposed, class Element, int kM, int kK, int kDTiles, int kStrideA, class RowsB>
__device__ __forceinline__ void gemm_smem(const Element* sA, const Element* sB, int col0,
                                          float (&acc)[kM][kDTiles][4], int lane) {
  static_assert(!RowsB::kSwizzled || (kDTiles & (kDTiles - 1)) == 0, "step() needs a power-of-two width");
  // The lanes' row addresses for the first k16 step and m16 / n16 tile; the others at constant offsets.
  const uint32_t a0 = smem_addr(sA) + 2 * (kATransposed ? ((lane / 16) * 8 + lane % 8) * kStrideA + ((lane / 8) % 2) * 8
                                                        : (lane % 16) * kStrideA + (lane / 16) * 8);
  const uint32_t b0 = RowsB::address(sB, lane % 8 + ((lane / 8) % 2) * 8, col0 + (lane / 16) * 8);
#pragma unroll
  for (int kc = 0; kc < kK / 16; ++kc) {
    uint32_t a[kM][4];  // per tile: (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      if constexpr (kATransposed) {
        ldmatrix_x4_trans(a0 + 2 * (kc * 16 * kStrideA + mt * 16), a[mt]);
      } else {
        ldmatrix_x4(a0 + 2 * (mt * 16 * kStrideA + kc * 16), a[mt]);
      }
    }
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(RowsB::step(b0, kc * 16, dp * 16), b);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        mma_16x8x16<Element>(acc[mt][2 * dp], a[mt], b[0], b[1]);
        mma_16x8x16<Element>(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
    if constexpr (kDTiles % 2 == 1) {
      uint32_t b[2];
      ldmatrix_x2_trans(RowsB::address(sB, kc * 16 + lane % 16, col0 + (kDTiles - 1) * 8), b);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) mma_16x8x16<Element>(acc[mt][kDTiles - 1], a[mt], b[0], b[1]);
    }
  }
}

}  // namespace flashattn::cuda
