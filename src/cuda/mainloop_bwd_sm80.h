// The sm80 backward's mainloop pieces: the tile shapes of the dq pass and of the dk/dv pass, in
// the form the warp-level products of the forward (gemm_qk, gemm_pv) and its cp.async loaders
// take. Both passes recompute S from Q and K and P from the forward's lse.
#pragma once

#include "cuda/mainloop_fwd_sm80.h"
#include "cuda/tile_size.h"

namespace flashattn::cuda {

// The shape gemm_qk / gemm_pv read: each warp owns kWarpMTiles x 16 rows, the first product
// reduces over kHeadDim and yields kNTiles n8 tiles, the second reduces over those kBlockN
// columns into kDTiles n8 output tiles. Operands sit in shared memory rows of kSmemStride.
template <class Element_, int kHeadDim_, int kWarpMTiles_, int kNTiles_, int kDTiles_>
struct WarpGemmShape {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarpMTiles = kWarpMTiles_;
  static constexpr int kNTiles = kNTiles_;
  static constexpr int kBlockN = kNTiles * 8;
  static constexpr int kDTiles = kDTiles_;
  static constexpr int kSmemStride = kHeadDim + 8;  // 16 bytes of padding: conflict-free ldmatrix
};

// Shared members: the cp.async loaders' view of a kernel (threads, 16-byte chunks per row, row
// stride of the padded shared-memory tiles).
template <int kHeadDim_, class Element_, int kWarps_>
struct BwdSm80Base {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kSmemStride = kHeadDim + 8;
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

// dk/dv pass: a CTA owns kBlockN keys of one kv head (and kOutCols of the kOutSplit column
// slices of dk and dv) and sweeps the queries of the group's heads in kBlockM steps, with Q,
// dout and their statistics double-buffered. The warps' rows are keys: S^T = K Q^T.
template <int kHeadDim, class Element>
struct BwdDkvSm80 : BwdSm80Base<kHeadDim, Element, BwdDkvTileSm80<kHeadDim>::kWarps> {
  using Base = BwdSm80Base<kHeadDim, Element, BwdDkvTileSm80<kHeadDim>::kWarps>;
  static constexpr int kWarpMTiles = BwdDkvTileSm80<kHeadDim>::kWarpMTiles;
  static constexpr int kBlockN = Base::kWarps * 16 * kWarpMTiles;
  static constexpr int kBlockM = BwdDkvTileSm80<kHeadDim>::kBlockM;
  static constexpr int kOutSplit = BwdDkvTileSm80<kHeadDim>::kOutSplit;
  static constexpr int kOutCols = kHeadDim / kOutSplit;
  using Gemm = WarpGemmShape<Element, kHeadDim, kWarpMTiles, kBlockM / 8, kOutCols / 8>;
  static constexpr int kTileBytes = Base::kSmemStride * int(sizeof(Element));
  static constexpr int kSmemBytes =
      (2 * kBlockN + 4 * kBlockM) * kTileBytes + 2 * kBlockM * int(sizeof(float) * 2);
  static_assert(kOutCols % 16 == 0, "gemm_pv takes output columns in pairs of n8 tiles");
};

}  // namespace flashattn::cuda
