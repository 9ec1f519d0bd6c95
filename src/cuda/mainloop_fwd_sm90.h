// The sm90a forward's building blocks: tile shapes, shared-memory layouts (swizzled for TMA and
// wgmma), the two warpgroup matrix products and the TMA copy types of one instantiation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/fast_math.h>

#include "cuda/fwd_params.h"
#include "cuda/tile_size.h"

namespace flashattn::cuda {

// kWide: the wide tile (FwdWideTileSm90) instead of the table's. kCluster_: CTAs per cluster (1 or
// 2); a cluster of two takes two query tiles of one head with the same key tiles, and each CTA
// loads half of every K / V tile into both CTAs' shared memory (TMA multicast), in the pairs' tile
// (FwdPairTileSm90).
template <int kHeadDim_, class Element_, bool kWide = false, int kCluster_ = 1>
struct FwdSm90 {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kCluster = kCluster_;
  static constexpr bool kWideTile = kWide;
  static_assert(kCluster == 1 || kCluster == 2, "clusters of one or two CTAs");
  using Tile = std::conditional_t<kWide, FwdWideTileSm90<kHeadDim>,
                                  std::conditional_t<kCluster == 2, FwdPairTileSm90<kHeadDim>, FwdTileSm90<kHeadDim>>>;
  static constexpr int kConsumerWarpgroups = Tile::kConsumerWarpgroups;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = 128 + kConsumerThreads;  // warpgroup 0 produces
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;
  static constexpr int kBlockN = Tile::kBlockN;
  static constexpr int kStages = Tile::kStages;
  static constexpr int kVStages = Tile::kVStages;  // V's ring, K's has kStages (tile_size.h)
  static constexpr bool kSoftmaxBranches = Tile::kSoftmaxBranches;
  static constexpr bool kRescaleInTurn = Tile::kRescaleInTurn;
  static constexpr bool kTreeReduce = Tile::kTreeReduce;
  static constexpr int kMaxSlack = Tile::kMaxSlack;
  static constexpr bool kSkipKeyTiles = Tile::kSkipKeyTiles;
  static constexpr bool kSoftmaxOverlapsO = Tile::kSoftmaxOverlapsO;
  static constexpr bool kSplitTurns = Tile::kSplitTurns;
  static_assert(!kSplitTurns || (!kRescaleInTurn && !kSoftmaxOverlapsO),
                "split turns: no O product in flight beside the softmax");
  static constexpr int kOStagingCols = Tile::kOStagingCols;
  static constexpr int kNTiles = kBlockN / 8;   // n8 column groups of S per thread row
  static constexpr bool kNarrowFirstSoftmax = Tile::kNarrowFirstSoftmax;
  static_assert(!kNarrowFirstSoftmax || (kNTiles % 2 == 0 && !kSplitTurns),
                "the narrow softmax: the first half of S's n8 groups (split turns take every tile whole)");
  static constexpr int kDTiles = kHeadDim / 8;  // of O
  // Registers per thread after setmaxnreg. The CTA's pool is what it was launched with: the
  // kernel's register count, which __launch_bounds__(kThreads, 1) caps at 65536 / kThreads rounded
  // down to a multiple of 8 (168 for 384 threads: 64,512; 128 for 512). A budget above the pool
  // makes the consumers' setmaxnreg.inc wait forever. The producer thread keeps the work-item and
  // ring state of the persistent loop (it spilled at 32), the consumers S, P and O: what the pool
  // leaves them, up to setmaxnreg's 240 (240 with two consumer warpgroups, 160 with three).
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters =
      std::min(240, (kLaunchRegisters * kThreads - kProducerRegisters * 128) / kConsumerThreads / 8 * 8);
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * kConsumerThreads <= kLaunchRegisters * kThreads,
                "setmaxnreg must stay within the registers the CTA was launched with");
  static_assert(kHeadDim % 32 == 0, "wgmma tiles need head dims in multiples of 32");

  using TileQ = cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>;
  using TileS = cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>>;
  using TileO = cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>;
  // 128-byte swizzles where a row of the tile spans 64 elements, 64-byte ones for the head dims
  // that are odd multiples of 32 (96 among the instantiated ones).
  using AtomK = std::conditional_t<kHeadDim % 64 == 0, cute::GMMA::Layout_K_SW128_Atom<Element>,
                                   cute::GMMA::Layout_K_SW64_Atom<Element>>;
  using AtomMN = std::conditional_t<kHeadDim % 64 == 0, cute::GMMA::Layout_MN_SW128_Atom<Element>,
                                    cute::GMMA::Layout_MN_SW64_Atom<Element>>;
  // Q and K rows with the head dim contiguous (K-major operands of S = Q K^T). V is stored the
  // same way in memory, and P V reads it as V^T (head dim x keys) with the head dim contiguous:
  // an MN-major B operand, laid out as such so that TMA writes what wgmma reads. Its swizzle atoms
  // (64 head-dim columns, 32 with the 64-byte swizzle, x 8 keys) repeat along the keys first, so
  // that one TMA box spans a whole key tile (2 copies per tile at d 128 instead of 32 of 8 keys).
  using SmemLayoutQ = decltype(cute::tile_to_shape(AtomK{}, TileQ{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(
      AtomK{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  using SmemLayoutVt = decltype(cute::tile_to_shape(
      AtomMN{}, cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>, cute::Int<kVStages>>{},
      cute::Step<cute::_2, cute::_1, cute::_3>{}));

  // The output leaves through a staging tile per consumer warpgroup (its 64 rows x kOStagingCols
  // columns, swizzled as Q) by TMA stores of one box of 64 rows x one swizzle atom's columns each
  // (kOBoxCols). The tiles have their own buffer where shared memory holds one beside Q and the
  // K / V stages (up to d 128; at d 256 with one K / V stage, tiles of half the head dim, filled and
  // stored twice). Else (kStageOInKv: d 192 and d 256's pairs, two consumer warpgroups) warpgroup 0
  // stages its rows in the item's last K stage and warpgroup 1 in its last V stage, once the other
  // warpgroup's last products have read them. Q goes back to the producer at the item's last S, so
  // that the next item's Q loads under this one's last products and epilogue; the two stages go back
  // once the stores have read them, which the leader thread waits for in the next item, after its
  // first S product is issued (that tile is in the other stage, hence two stages at least). An item
  // without keys has no stage: its zeros go through Q's buffer.
  static constexpr int kOBoxCols = int(cute::size<1>(AtomK{}));
  using SmemLayoutOBox = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::_64, cute::Int<kOBoxCols>>{}));
  // A warpgroup's staging tile: its 64 rows x kOStagingCols columns, kOStagingSlots boxes. Narrower
  // than the head dim, its slots take the boxes in turn (kernel_fwd_sm90.h).
  static_assert(kHeadDim % kOStagingCols == 0 && kOStagingCols % kOBoxCols == 0, "staging slots of whole boxes");
  static constexpr int kOStagingSlots = kOStagingCols / kOBoxCols;
  using SmemLayoutO = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::_64, cute::Int<kOStagingCols>>{}));
  static constexpr bool kStageOInKv =
      int(sizeof(Element)) * int(cute::cosize_v<SmemLayoutQ> + kConsumerWarpgroups * cute::cosize_v<SmemLayoutO> +
                                 cute::cosize_v<SmemLayoutK> + cute::cosize_v<SmemLayoutVt>) +
          1024 >
      227 * 1024;
  static_assert(!kStageOInKv || kOStagingCols == kHeadDim,
                "an output staged in a K or V stage takes the whole head dim");
  static constexpr int kKvStageElements = kBlockN * kHeadDim;
  static_assert((kStages == 1 || SmemLayoutK{}(0, 0, 1) == kKvStageElements) &&
                    (kVStages == 1 || SmemLayoutVt{}(0, 0, 1) == kKvStageElements),
                "K / V stages lie one after the other");
  static_assert(!kStageOInKv || kVStages == kStages, "an output staged in a K or V stage: one ring position");
  static_assert(!kSoftmaxBranches || (!kSoftmaxOverlapsO && !kSplitTurns), "one form of the softmax's overlap");
  static_assert(!kStageOInKv || (kConsumerWarpgroups == 2 && kStages >= 2 && kBlockN >= 64 &&
                                 kKvStageElements * sizeof(Element) % 1024 == 0),
                "a warpgroup's output staged in a K or V stage: 64 rows fit it, at a 1024-byte boundary");

  // S = Q K^T from shared memory; O += P V with P from registers. Each consumer warpgroup owns
  // 64 rows of the tile.
  using WarpgroupLayout = cute::Layout<cute::Shape<cute::Int<kConsumerWarpgroups>, cute::_1, cute::_1>>;
  using MmaS = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>, cute::Int<kHeadDim>>>(),
      WarpgroupLayout{}));
  using MmaO = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      WarpgroupLayout{}));

  // Global tensors as TMA sees them: (rows, head dim, heads, batch) for Q, K and O, and V^T as
  // (head dim, rows, heads, batch). Strides in elements.
  using GmemShape = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using RowsStride = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;
  using ColsStride = cute::Stride<cute::_1, int64_t, int64_t, int64_t>;
  template <class Stride, class Pointer = const Element*>
  using GmemTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Pointer>(nullptr)),
                                                GmemShape{}, Stride{}));
  // Q: the whole tile in one box, or in a cluster (whose CTAs' warpgroups take rows 128 apart:
  // fwd_tile) a box of 64 rows x one atom column at a time.
  using SmemLayoutQLoad = std::conditional_t<kCluster == 1, SmemLayoutQ, SmemLayoutOBox>;
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor<RowsStride>{}, SmemLayoutQLoad{}));
  // K and V: a box per CTA of the cluster, each multicast to all of them when there are two.
  using TmaKvOp = std::conditional_t<kCluster == 1, cute::SM90_TMA_LOAD, cute::SM90_TMA_LOAD_MULTICAST>;
  using TmaK = decltype(cute::make_tma_copy(TmaKvOp{}, GmemTensor<RowsStride>{}, cute::take<0, 2>(SmemLayoutK{}),
                                            cute::Int<kCluster>{}));
  using TmaV = decltype(cute::make_tma_copy(TmaKvOp{}, GmemTensor<ColsStride>{}, cute::take<0, 2>(SmemLayoutVt{}),
                                            cute::Int<kCluster>{}));
  // K and V^T in one box per tile (per CTA in a cluster): the head dim seen as (atom columns,
  // atoms), strides 1 and kAtomCols, so that the atoms are a box dim of their own (TMA cuts the
  // box where the smem index steps through a gmem mode with a stride other than one: the plain
  // K / V copies above take a box per atom column). The smem layouts are the same, so are the
  // bytes' places. Only where p.d and p.d_v are multiples of kAtomCols (kernel_fwd_sm90.h,
  // kOneBoxKv): TMA bounds each dim on its own, and no box zero-fills the columns from p.d of a
  // partial atom.
  static constexpr int kAtomCols = int(cute::size<1>(AtomK{}));
  static_assert(int(cute::size<0>(AtomMN{})) == kAtomCols, "K's and V^T's atoms span as many head-dim columns");
  // A head dim of one atom column (d 64) has its one box already.
  CUTE_HOST_DEVICE static constexpr bool one_box_kv(int d, int d_v) {
    return kHeadDim > kAtomCols && d % kAtomCols == 0 && d_v % kAtomCols == 0;
  }
  using HeadDimAtoms = cute::Shape<cute::Int<kAtomCols>, int32_t>;
  using HeadDimAtomsStride = cute::Stride<cute::_1, cute::Int<kAtomCols>>;
  using KAtomsGmem = decltype(cute::make_tensor(
      cute::make_gmem_ptr(static_cast<const Element*>(nullptr)),
      cute::Shape<int32_t, HeadDimAtoms, int32_t, int32_t>{},
      cute::Stride<int64_t, HeadDimAtomsStride, int64_t, int64_t>{}));
  using VtAtomsGmem = decltype(cute::make_tensor(
      cute::make_gmem_ptr(static_cast<const Element*>(nullptr)),
      cute::Shape<HeadDimAtoms, int32_t, int32_t, int32_t>{},
      cute::Stride<HeadDimAtomsStride, int64_t, int64_t, int64_t>{}));
  using TmaKOneBox = decltype(cute::make_tma_copy(TmaKvOp{}, KAtomsGmem{}, cute::take<0, 2>(SmemLayoutK{}),
                                                  cute::Int<kCluster>{}));
  using TmaVOneBox = decltype(cute::make_tma_copy(TmaKvOp{}, VtAtomsGmem{}, cute::take<0, 2>(SmemLayoutVt{}),
                                                  cute::Int<kCluster>{}));
  using TmaO = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{}, GmemTensor<RowsStride, Element*>{},
                                            SmemLayoutOBox{}));
  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKvBytes = kBlockN * kHeadDim * sizeof(Element);

  struct SharedStorage {
    // 128-byte swizzle patterns repeat every 1024 bytes and TMA and wgmma assume tiles start on
    // such a boundary.
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutVt>> v;
    // The consumer warpgroups' output staging tiles, without kStageOInKv (else a token).
    alignas(kStageOInKv ? 16 : 1024)
        cute::array_aligned<Element, kStageOInKv ? 8 : kConsumerWarpgroups * cute::cosize_v<SmemLayoutO>> o;
    // mbarriers: Q / stage s of K / V landed (full) or released by every consumer (empty: with
    // kCluster 2, by the consumers of both CTAs, as either CTA's loads write both); work
    // item slot s written by the producer (full) or read by every consumer (empty).
    uint64_t q_full, q_empty;
    uint64_t k_full[kStages], k_empty[kStages], v_full[kVStages], v_empty[kVStages];
    uint64_t tile_full[2], tile_empty[2];
    int tile[2];  // the work items handed to the consumers (kernel_fwd_sm90.h)
    // In a cluster, the items rank 0's producer hands to rank 1's (kernel_fwd_sm90.h).
    uint64_t handoff_full[2];
    int handoff[2];
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "the sm90a forward tile exceeds shared memory");
};

// The kernel's parameters: the shared forward params and the TMA descriptors built on the host.
template <class K>
struct FwdSm90Args {
  FwdParams p;
  typename K::TmaQ tma_q;
  typename K::TmaK tma_k;
  typename K::TmaV tma_v;
  typename K::TmaO tma_o;
  // Built only where K::one_box_kv holds, the kernel's test for taking them.
  typename K::TmaKOneBox tma_k_one_box;
  typename K::TmaVOneBox tma_v_one_box;
  // The work items' decode by multiply and shift (kernel_fwd_sm90.h, fwd_tile): items per head and
  // query heads.
  cutlass::FastDivmod items_per_head, heads_q;
};

}  // namespace flashattn::cuda
