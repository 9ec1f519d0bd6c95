// Tile sizes of the CUDA kernels, one constexpr table per kernel family with a reason per entry.
#pragma once

namespace flashattn::cuda {

// sm80 forward: kWarps warps of kWarpMTiles x 16 query rows each (kBlockM = 16 * kWarps *
// kWarpMTiles) sweep kBlockN keys per step. Two m16 tiles per warp halve the shared-memory reads of
// K and V per FLOP (each ldmatrix feeds two MMAs) at the price of registers: S (kWarpMTiles *
// kBlockN / 2 floats per thread) plus O (kWarpMTiles * kHeadDim / 2). Measured on H100,
// docs/performance.md (sm80 forward, tiles).
template <int kHeadDim>
struct FwdTileSm80;
// 4 warps x 2 m-tiles (128-row tiles) up to d 128: 255 registers, two CTAs per SM. 128-key tiles
// at d <= 64 (227 TFLOP/s at d 64, 16k, against 219 with 64 keys), 64 at d 96/128 (297 against
// 258 with 32 keys and 211 with 8 warps x 1 m-tile).
// kRoundPEarly: P is rounded to 16 bits pair by pair as the softmax makes it, rather than by the
// O += P V product; at d 96 / 128 (64 S + 128 O floats per thread) that frees the registers the
// allocator otherwise filled with copies into HMMA's operand quads (82 MOV per tile instead of
// 153): 1.005-1.026x at d 128, against 0.987-1.015x at d 64 and 0.986-1.000x at d 256
// (docs/performance.md, sm80 forward v6).
// kMaxSlack: as the sm90a table's below (rows keep their max within 2^kMaxSlack and warps whose
// rows all kept it skip O's rescale, 128 FMUL per thread and tile at d 128); for the table's
// instantiation without score modifiers: 1.02-1.09x at d 128 (its 20 bytes of spills gone), at
// d 256 0.99-1.04x, no gain (sm80 forward v7).
template <> struct FwdTileSm80<32> {
  static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 128;
  static constexpr bool kRoundPEarly = false;
  static constexpr int kMaxSlack = 0;  // follows d 64 (not timed)
};
template <> struct FwdTileSm80<64> {
  static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 128;
  static constexpr bool kRoundPEarly = false;
  static constexpr int kMaxSlack = 0;  // not timed: the sm90a forward lost 0-7% with it at d 64
};
template <> struct FwdTileSm80<96> {
  static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64;
  static constexpr bool kRoundPEarly = true;  // follows d 128 (not timed on its own)
  static constexpr int kMaxSlack = 8;  // follows d 128 (not timed on its own)
};
template <> struct FwdTileSm80<128> {
  static constexpr int kWarps = 4, kWarpMTiles = 2, kBlockN = 64;
  static constexpr bool kRoundPEarly = true;
  static constexpr int kMaxSlack = 8;
};
// d > 128: O alone is 80..128 floats per m-tile, so one m-tile per warp: 4 warps, 64 x 64 tiles
// (260 TFLOP/s at d 256, 16k, against 250 with 8 warps and 214 with 32-key tiles; 8 warps again
// in v8a: 0.88-0.98x, and neither kMaxSlack 8 nor kRoundPEarly gained at d 256, 0.98-1.01x).
template <int kHeadDim>
struct FwdTileSm80Wide {
  static constexpr int kWarps = 4, kWarpMTiles = 1, kBlockN = 64;
  static constexpr bool kRoundPEarly = false;
  static constexpr int kMaxSlack = 0;
};
template <> struct FwdTileSm80<160> : FwdTileSm80Wide<160> {};
template <> struct FwdTileSm80<192> : FwdTileSm80Wide<192> {};
template <> struct FwdTileSm80<224> : FwdTileSm80Wide<224> {};
template <> struct FwdTileSm80<256> : FwdTileSm80Wide<256> {};

// The few-rows variant of the sm80 forward, for problems whose query rows fit one 64-row tile
// (decoding with packed GQA heads, short chunks): one m-tile per warp halves the registers, so four
// CTAs share an SM and twice the K/V bytes are in flight, which is what a memory-bound step needs.
// Only up to d 128 (above, the table already has one m-tile per warp and O fills the registers)
// and without score modifiers (their instantiation stays at two CTAs per SM).
constexpr int kFwdFewRowsBlockM = 64;
constexpr int kFwdFewRowsMaxHeadDim = 128;
constexpr int kFwdFewRowsCtasPerSm = 4;
// The table's tiles keep two CTAs per SM at every head dim (255 registers).
constexpr int kFwdCtasPerSm = 2;

// Query rows and keys of one forward tile at a head dim, for the host's split-KV heuristic (the
// table's rows change only at d 128 and its key tiles only at d 64).
constexpr int fwd_block_m_sm80(int head_dim, bool few_rows) {
  if (few_rows) return kFwdFewRowsBlockM;
  return head_dim <= 128 ? 16 * FwdTileSm80<128>::kWarps * FwdTileSm80<128>::kWarpMTiles
                         : 16 * FwdTileSm80<256>::kWarps * FwdTileSm80<256>::kWarpMTiles;
}
constexpr int fwd_block_n_sm80(int head_dim) {
  return head_dim <= 64 ? FwdTileSm80<64>::kBlockN : FwdTileSm80<128>::kBlockN;
}

// sm90a forward (warp-specialized: one producer warpgroup issuing TMA, kConsumerWarpgroups
// warpgroups of 64 query rows issuing wgmma). kBlockN keys per K / V stage, kStages K and
// kVStages V stages.
// The consumers hold S (kBlockN / 2 floats per thread), P in 16 bits (kBlockN / 4 registers) and
// O (kHeadDim / 2 floats) within the 240 registers setmaxnreg gives them; shared memory holds Q,
// kStages K and kVStages V tiles and, where there is room, the output's staging tiles (kOStagingCols of
// the head dim per pass; without room the output is staged in the item's last K and V stages:
// mainloop_fwd_sm90.h), at most 227 KB.
// Every entry: two consumer warpgroups (128 query rows); two K / V stages, so that the next
// tile's K and V land while this one's products run, except in d 256's single CTAs (one, with
// kSplitTurns) and d 128's V (three, with kSoftmaxBranches).
// kRescaleInTurn: O takes the softmax's corrections in the warpgroup's turn at the tensor cores
// (after the S product's issue) rather than right after the softmax, where it lengthens the span
// the other warpgroup's products must cover; worth it where that span is the limit (d 128:
// 1.010-1.029x on the grid; d 256, whose products outlast the softmax: 0.96-1.02x, no gain;
// docs/performance.md, sm90a v8). kTreeReduce: each row's max and sum over a tile as balanced
// trees (OnlineSoftmax::update_scores), which shortens the softmax's dependent chains:
// 1.00-1.05x on the two-warpgroup tiles (d 64 causal 1k / 2k 1.04-1.05x); the wide tile keeps
// the running accumulators (0.95-0.98x at causal 4k-16k; sm90a v10). kMaxSlack: how far (log2
// units; f16 takes at most 3, OnlineSoftmax) a row's max may grow before the softmax moves it; with
// it, a warp whose rows all kept their max skips O's rescale, which is then most tiles' (0: the max
// follows every tile and O is always rescaled). Above d 64, where O is 48-128 floats per thread:
// 1.01-1.07x from 1k at d 128 and 256; at d 64 (32 floats) the test costs more than the skipped
// rescale saves: 0.93-1.00x (sm90a v11), and with the weights scaled to stay at most 1
// (OnlineSoftmax; above 1 they cost d 128 calls with N(0, 1) inputs about 5% of their cycles, sm90a
// v79) still 0.95-0.98x from 1k keys on either d 64 tile (sm90a v80). No tile prefetches an item's
// Q and first K / V tiles into L2 as the producer takes it: at d 256, where Q is largest against
// an item's work, that gained 1.02-1.05x at 512 / 1k without a mask in v12, but v35's kernel ran
// 1.00-1.02x faster without it from 512 to 2k keys (at d 64 / 128 it never gained: 0.95-1.01x;
// sm90a v12 / v19 / v39). kClusterPairs: calls without softcap, ALiBi or a window's left edge
// (unmasked or causal), from kFwdSm90ClusterMinKeys keys and with an even number of query tiles per
// head (fwd_sm90_cluster_serves), run in clusters of two CTAs that take two query tiles of a head,
// their rows interleaved, and load each K / V tile once for both (TMA multicast): half the K / V
// bytes from L2, which at the power cap the long calls run under gives the SMs a higher clock
// (sustained d 128 8k / 16k and d 256 16k: 1.014-1.023x, 15-70 MHz more at the same 700 W; sm90a
// v29; causal d 128 8k and d 256 16k 1.03x, shorter causal calls 0.99-1.02x, sm90a v49 / v49d).
// kSoftmaxOverlapsO: the leader's release of the K stage (and at an item's last tile of Q) closes a
// tile's softmax rather than opening it. ptxas moves the wait for the previous tile's O product up
// to the start of its basic block: where the arrivals' branch opens the softmax, the block starts
// after them (and after a masked tile's mask), and the exponentials run after both products (the
// turns alone overlap softmax and products); where the arrivals close it, the softmax also overlaps
// the warpgroup's own O product. The latter at d 256 (80-key tiles): causal +1-2% from 512 to 8k in
// two A / B calls (1.006-1.032x and 0.999-1.023x), unmasked within 1%; at d 64 / 128 it lost 1-8%
// (0.93-0.96x at d 64 below 16k: the K and V stages go back a softmax later), and neither three
// stages nor the wait written before the softmax recovered it (sm90a v43). kSplitTurns: no S
// product in flight beside the warpgroup's own O product, and two turns per tile, S then O, so that
// the tensor cores take S of warpgroup 0, S of 1, O of 0, O of 1 and one K / V stage suffices (the
// next K loads under the O products, the next V under the S products); for a tile whose S, P and O
// fill the registers once (kernel_fwd_sm90.h). kSoftmaxBranches: the other way to that overlap,
// with the K stage still released as the softmax opens: the masked and the unmasked tiles' softmax
// in two branches that rejoin after the exponentials, so that the O wait starts the block after
// them (the loop carries the softmax twice). The V stage then goes back a softmax later, which
// kVStages (V's stages, K's kStages) absorbs with one stage more. At d 128: in cycles 1.027x at
// unmasked 2k (Nsight Compute, the same clock; tensor pipe 77.1% against 75.2% active), in bursts
// 1.01-1.05x from 2k to 16k, causal too; at the power cap, where the same work costs the same
// energy, level (0.99-1.02x interleaved); with two V stages the pairs lost 1-2% there (sm90a v78).
// kNarrowFirstSoftmax: a warpgroup whose rows all drop the second half of the keys of its first
// tile (the one that holds their last keys: on a causal diagonal aligned to the tiles, the first 64
// rows of a 128-row item) takes that tile's mask and softmax on the first half alone, half the
// exponentials of the tile that opens its item; its products stay whole (kernel_fwd_sm90.h). At d
// 64, over nine interleaved processes on three H200s: causal 512 / 1k 1.002 / 1.004x (within the
// spread), 2k 1.012x (six on two); at d 128 0.993 / 0.989 / 1.001x (six), no gain. The S product
// cut to the half too gained nothing more at d 64 (0.996-1.002x against main in a call where the
// softmax alone read 0.998-1.017x), and ptxas serialised the wgmma of d 128's kernels with it, and
// of d 64's wide and left-edge ones; the O product, taken off the loop to be cut, serialised every
// d 64 kernel (sm90a v84).
template <int kHeadDim>
struct FwdTileSm90;
// d 64: 128-key tiles; S 64 + O 32 floats per thread, 96 KB of shared memory. It serves what the
// wide tile below does not: masked calls on fewer query rows, and softcap / ALiBi. 64-key tiles,
// with or without each warpgroup's own key range or 4 stages, lost 8-14% at causal 512 / 1k: the
// per-tile costs outweigh the masked products they save (sm90a v26). One 64-row warpgroup per CTA
// and two CTAs per SM lost 2-3% there (v33).
template <> struct FwdTileSm90<64> {
  static constexpr int kConsumerWarpgroups = 2, kBlockN = 128, kStages = 2;
  static constexpr bool kRescaleInTurn = false;  // 0.99-1.01x at causal 512-2k, its main use
  static constexpr bool kTreeReduce = true;
  static constexpr int kMaxSlack = 0;
  // kSkipKeyTiles: each warpgroup's own key range under a right edge (kernel_fwd_sm90.h,
  // warpgroup_keys). Not here: with 128-key tiles, 64-row warpgroups of a 128-row item skip a
  // tile only where the diagonal is not aligned to the tiles (seqlen_k - seqlen_q not a multiple
  // of 128), and in the first form (computed for every call) the 2.5-3.5% it cost at causal 2k /
  // 4k outweighed that (sm90a v24).
  static constexpr bool kSkipKeyTiles = false;
  static constexpr bool kClusterPairs = false;  // calls without a mask take the wide tile
  static constexpr bool kSoftmaxOverlapsO = false;
  static constexpr bool kSoftmaxBranches = false;  // v44's form: causal 0.96-0.99x
  static constexpr int kVStages = kStages;
  static constexpr bool kSplitTurns = false;
  static constexpr bool kNarrowFirstSoftmax = true;  // causal 512 / 1k 1.002 / 1.004x (sm90a v84)
  static constexpr int kOStagingCols = 64;
};
// d 96 / 128: 128-key tiles; S 64 + O 48 / 64 floats, 144 / 224 KB (d 128 with a third V stage,
// kSoftmaxBranches). d 96 follows d 128 here, not timed on its own, but for v78 (the branches, the
// third V stage). 176 keys without a mask, as FlashAttention-3: no gain (0.96-1.03x, sm90a v9).
// Neither a shorter softmax span (the exponentials before the row max: 0.97-1.00x, v27) nor key
// tiles in a rotated order (0.95-0.97x, v28) gained: from 8k keys sustained runs are held by the
// GPU's power cap (docs/performance.md). Nor did a wide tile of three warpgroups without turns at d
// 128 (80- or 64-key tiles, 192 rows): 0.93-0.98x without a mask from 2k, 0.85-0.87 at 512 (v32).
template <> struct FwdTileSm90<96> {
  static constexpr int kConsumerWarpgroups = 2, kBlockN = 128, kStages = 2;
  static constexpr bool kRescaleInTurn = true;
  static constexpr bool kTreeReduce = true;  // follows d 128 (not timed on its own)
  static constexpr int kMaxSlack = 8;  // follows d 128 (not timed on its own)
  static constexpr bool kSkipKeyTiles = false;  // as d 64
  static constexpr bool kClusterPairs = false;  // not timed (nor tested) at d 96
  static constexpr bool kSoftmaxOverlapsO = false;  // follows d 128 (not timed on its own)
  static constexpr bool kSoftmaxBranches = false;  // v78 neither timed nor tested at d 96
  static constexpr int kVStages = kStages;
  static constexpr bool kSplitTurns = false;
  static constexpr bool kNarrowFirstSoftmax = false;  // follows d 128 (not timed on its own)
  static constexpr int kOStagingCols = 96;
};
template <> struct FwdTileSm90<128> {
  static constexpr int kConsumerWarpgroups = 2, kBlockN = 128, kStages = 2;
  static constexpr bool kRescaleInTurn = true;
  static constexpr bool kTreeReduce = true;
  static constexpr int kMaxSlack = 8;
  static constexpr bool kSkipKeyTiles = false;  // as d 64
  static constexpr bool kClusterPairs = true;
  static constexpr bool kSoftmaxOverlapsO = false;
  static constexpr bool kSoftmaxBranches = true;
  static constexpr int kVStages = 3;  // Q 32 + K 64 + V 96 + staging 32 KB: 224 KB
  static constexpr bool kSplitTurns = false;
  static constexpr bool kNarrowFirstSoftmax = false;  // causal 512 / 1k 0.993 / 0.989x: no gain (v84)
  static constexpr int kOStagingCols = 128;
};
// d 192: 96-key tiles: S 48 + O 96 floats and P's 24 registers per thread, 192 KB (the output
// staged in the last K / V stages). (112 keys, as FlashAttention-3, 216 KB, spilled 96 bytes
// while Q's descriptors were held across the loop; it compiles clean since v5: to time against
// 96.)
template <> struct FwdTileSm90<192> {
  static constexpr int kConsumerWarpgroups = 2, kBlockN = 96, kStages = 2;
  static constexpr bool kRescaleInTurn = false;  // its products outlast the softmax, as at d 256 (not timed)
  static constexpr bool kTreeReduce = true;  // follows d 256's pair tile (not timed on its own)
  static constexpr int kMaxSlack = 8;  // follows d 256's pair tile (not timed on its own)
  static constexpr bool kSkipKeyTiles = true;  // follows d 256's pair tile (v24; not timed on its own)
  static constexpr bool kClusterPairs = false;  // not timed (nor tested) at d 192
  static constexpr bool kSoftmaxOverlapsO = true;  // follows d 256's pair tile (v43; not timed on its own)
  static constexpr bool kSoftmaxBranches = false;  // kSoftmaxOverlapsO's form
  static constexpr int kVStages = kStages;  // the output staged in the K / V stages
  static constexpr bool kSplitTurns = false;
  static constexpr bool kNarrowFirstSoftmax = false;  // not timed
  static constexpr int kOStagingCols = 192;
};
// d 256: O alone is 128 floats per thread and Q 64 KB. 128-key tiles in one K and one V stage
// (kSplitTurns): S 64 + P 32 + O 128 registers, Q 64 + K 64 + V 64 KB and a staging tile of half
// the head dim per warpgroup, 225 KB (sm90a v60). Below kFwdSm90ClusterMinKeys keys, where single
// CTAs serve, they ran 1.06-1.08x the 80-key tiles in two stages (FwdPairTileSm90<256>) at 512 keys
// without a mask and 1.03-1.05x causal, 1.00-1.04x at 1k (two calls): those read Q from shared
// memory once per 80 keys and compute 560 key columns per row at 512 keys.
template <> struct FwdTileSm90<256> {
  static constexpr int kConsumerWarpgroups = 2, kBlockN = 128, kStages = 1;
  static constexpr bool kRescaleInTurn = false;
  static constexpr bool kTreeReduce = true;
  static constexpr int kMaxSlack = 8;
  static constexpr bool kSkipKeyTiles = false;  // 128-key tiles: as d 64 (with it 0.99-1.01x, v60)
  static constexpr bool kClusterPairs = true;
  static constexpr bool kSoftmaxOverlapsO = false;
  static constexpr bool kSoftmaxBranches = false;  // split turns: no O product beside the softmax
  static constexpr int kVStages = kStages;  // 225 KB already
  static constexpr bool kSplitTurns = true;
  static constexpr bool kNarrowFirstSoftmax = false;  // split turns
  static constexpr int kOStagingCols = 128;
};

// The clusters of two (kClusterPairs) take the table's tile, but at d 256 80-key tiles in two
// stages (as FlashAttention-3; 1.03-1.09x the 64-key tiles from 2k keys, sm90a v5): S 40 + P 20 +
// O 128 registers, 224 KB (the output staged in the last K / V stages). In a pair the one-stage
// 128-key tile's loads wait for both CTAs' consumers: 0.96-1.00x from 2k keys, but 1.02x causal at
// 2k (sm90a v60).
template <int kHeadDim>
struct FwdPairTileSm90 : FwdTileSm90<kHeadDim> {};
template <> struct FwdPairTileSm90<256> {
  static constexpr int kConsumerWarpgroups = 2, kBlockN = 80, kStages = 2;
  static constexpr bool kRescaleInTurn = false;
  static constexpr bool kTreeReduce = true;
  static constexpr int kMaxSlack = 8;
  static constexpr bool kSkipKeyTiles = true;  // 64-row warpgroups, 80-key tiles: causal 0.99-1.04x (v24)
  static constexpr bool kSoftmaxOverlapsO = true;
  static constexpr bool kSoftmaxBranches = false;  // kSoftmaxOverlapsO's form
  static constexpr int kVStages = kStages;  // the output staged in the K / V stages, 224 KB
  static constexpr bool kSplitTurns = false;
  static constexpr bool kNarrowFirstSoftmax = false;  // not timed
  static constexpr int kOStagingCols = 256;
};

// The wide sm90a forward tile: three consumer warpgroups (192 query rows) that issue their
// products without taking turns, so that two softmaxes run at once beside the tensor cores. At d 64
// the exponentials, the tensor cores and instruction issue take about the same cycles per tile, and
// one warpgroup's softmax outlasts the other's products: the turns leave the tensor cores idle.
// 160 registers per consumer thread (S 64 + P 32 + O 32 floats fit). Measured on an H100 against
// the turn-taking 128-row tile (docs/performance.md, sm90a v7): 1.02-1.12x without a mask,
// 1.03-1.05x with a causal mask from 8k query rows, 1.00 at 4k and 0.82-0.98x below, where more of
// each 192-row tile is masked; so a masked call takes it from kFwdSm90WideMinMaskedRows rows. 8k
// after the 128-row tile's trees (kTreeReduce, sm90a v13); 2k since its warpgroups skip the key
// tiles past their own rows (kSkipKeyTiles: on a causal diagonal 192 rows span two 128-key tiles,
// and the first warpgroup's 64 rows often end before the second), with which it is 1.04 / 1.06x the
// 128-row tile at causal 2k / 4k, and 1.05x the wide tile without it at 8k (sm90a v24); from 512
// rows it ran causal 512 / 1k 0.994 / 1.001x the 128-row tile (v85c). No gain from 4 stages
// (0.99-1.01x).
template <int kHeadDim>
struct FwdWideTileSm90 {
  static constexpr bool kExists = false;
};
template <> struct FwdWideTileSm90<64> {
  static constexpr bool kExists = true;
  static constexpr int kConsumerWarpgroups = 3, kBlockN = 128, kStages = 2;
  static constexpr bool kRescaleInTurn = false;  // no turns: 0.94-0.99x with the rescale between the issues
  static constexpr bool kTreeReduce = false;  // 0.95-0.98x at causal 4k-16k
  static constexpr int kMaxSlack = 0;
  static constexpr bool kSkipKeyTiles = true;
  static constexpr bool kSoftmaxOverlapsO = false;  // 0.93-0.96x below 16k keys (v43)
  static constexpr bool kSoftmaxBranches = false;  // 0.94-0.95x from 512 to 4k keys (v44)
  static constexpr int kVStages = kStages;
  static constexpr bool kSplitTurns = false;
  static constexpr bool kNarrowFirstSoftmax = true;  // causal 2k 1.012x (v84)
  static constexpr int kOStagingCols = 64;
};
constexpr int kFwdSm90WideMinMaskedRows = 2048;
// The clusters of two (kClusterPairs) from this many keys. The two CTAs wait for each other at
// every K / V stage; the L2 bytes saved buy clock at the power cap, where the grid runs. Timed
// interleaved with cuDNN, in one process with the single CTAs: 1.00x at d 128 and 1.04x at d 256
// with 2k keys; 1.04x at 4k in separate processes (in bursts 0.98-1.00); with 1k keys (8 key tiles
// per item) 0.98-1.01x, with 512 0.94x at d 128 (sm90a v29, v45, v47). On an H200 likewise:
// without the pairs 0.95-0.99x from 4k keys, the pairs from 1k 0.96-0.99x at 1k (the H200 entry).
constexpr int kFwdSm90ClusterMinKeys = 2048;
// The sm90a forward's query and key counts: up to 2^29 each, so that its 32-bit window edges
// (ScoreMod<float, int>, the windows clamped to the lengths; rows past the queries in an item's
// last tile included) stay far inside int; longer sequences take the sm80 kernels.
constexpr int kFwdSm90MaxLength = 1 << 29;

// sm80 backward, dq pass: kWarps warps of 16 query rows (kBlockM = 16 * kWarps) sweep kBlockN
// keys per step. Each thread holds dq (kHeadDim / 2 floats) plus S and dP (kBlockN / 4 each),
// so the key step halves above d 128 to stay clear of spills.
template <int kHeadDim>
struct BwdDqTileSm80 {
  static constexpr int kWarps = 4, kWarpMTiles = 1, kBlockN = kHeadDim <= 128 ? 64 : 32;
};

// sm80 backward, dk/dv pass: one shape per schedule. A CTA of `warps` warps holds
// warps / col_split key groups of warp_m_tiles m16 tiles (kBlockN keys) and sweeps block_m
// queries per step. A warp computes S^T and dP^T for its keys and its 1 / col_split of the step's
// queries and holds dk / dv for its keys and its 1 / col_split of the columns (col_split > 1: P^T
// and dS^T meet in shared memory, FlashAttention-2's layout). out_split: column slices over CTAs
// (each recomputes S^T and dP^T). dq_warp_m_tiles: the single pass's dq = dS K, m16 tiles of dq
// rows per warp. dq_before_dk: with split columns, dq's product and atomics between the dV and dK
// products (the atomics drain under dK) rather than after both. copies_after_top_barrier: the
// next step's copies go out after the step's top barrier, which then also stands for the barrier
// that ended the previous step (one barrier per step fewer). unguarded_dq_atomics: the single
// pass's dq atomics without a branch on the sequence's end or on d (add_dq, kernel_bwd_dkdv_sm80.h).
// dq_column_rounds: a dq warp's columns in that many rounds of product and atomics. Measured on
// an H100, docs/performance.md (backward v1-v7, v10, v16-v20).
// kSinglePassTail: the single pass with one m16 tile of keys per warp (half the keys), for the key
// tiles of the last, partial wave (launch_bwd_sm80.h; 1.007-1.011x at d 64 without a mask, the
// standard grid's only point where the wave model launches it).
enum class BwdDkvSchedule { kTwoPass, kSinglePass, kSinglePassCompact, kSinglePassTail };
struct BwdDkvShape {
  int warps, warp_m_tiles, col_split, block_m, out_split, dq_warp_m_tiles, dq_column_rounds;
  bool dq_before_dk, copies_after_top_barrier, unguarded_dq_atomics;
};
template <int kHeadDim>
constexpr BwdDkvShape bwd_dkv_shape(BwdDkvSchedule schedule, bool score_mods) {
  switch (schedule) {
    case BwdDkvSchedule::kTwoPass:
      // Deterministic, after the dq pass: 4 warps of 16 keys, P^T and dS^T in registers. Above
      // d 128 full-width dk and dv alone would need 256 registers, so two CTAs split the columns.
      // Query steps of 32 above d 64: with 64, S^T and dP^T spill at d 128.
      return {4, 1, 1, kHeadDim <= 64 ? 64 : 32, kHeadDim <= 128 ? 1 : 2, 1, 1, false, false, false};
    case BwdDkvSchedule::kSinglePass:
      // dq by atomics. 8 warps: the atomics scale with the queries and columns per key tile
      // (4-warp 64-key tiles measured 0.8x the two passes); columns split over warps rather than
      // CTAs (5 products per step instead of 7). Two m16 tiles of keys per warp: up to d 128 two
      // column parts, 128 keys (32 x 32 warp tiles of S^T at d 128: 152 ldmatrix per warp-step
      // against 184 for 16 keys x 64 queries with P^T and dS^T in registers; 1.05-1.06x); above,
      // four parts, 64 keys (dk and dv 2 x 64 floats per thread at d 256; dV / dK read 24
      // ldmatrix per warp-step instead of 36 for 16 keys x half the columns; 1.02-1.04x; the parts
      // of d 160 / 224 end in an odd n8 tile). Query steps of 64
      // (half the barriers and dS round trips per FLOP of 32), 128 at d 64 without score
      // modifiers (1.02-1.05x; with them 128 spills 828 bytes, 64 spills 44; not timed). dq warps
      // of two m16 tiles (32 x 32: 32 ldmatrix against 40 for 16 x 64 where the step has 128
      // queries or the head dim is over 64; +4-5% at d 128, +2-3% at d 256, at d 64 1.01-1.05x
      // since the swizzled rows of backward v11, 1.00-1.01x before them), but at d 64 with
      // score modifiers (64-query steps: the same count either way; not timed). dq before dK above
      // d 128: 1.014-1.023x at d 256; at d 128 it spills 24 bytes more (0.96-0.98x), at d 64 no
      // gain (0.995-1.009x). The copies after the top barrier at d 128 only: 1.004-1.014x there,
      // 0.973-0.986x at d 64, 1.00x at d 256 (its score-modifier instantiation follows, not timed).
      // Unguarded dq atomics above d 128: 1.010-1.019x at d 256 (half the atomics' code; why it
      // gains is not established), 0.986-0.988x at d 64, 0.994-1.001x at d 128; d 160-224 and the
      // score-modifier instantiations follow d 256, not timed. Their n8 tiles past d by a select
      // instead of a branch: 1.012-1.015x more at d 256. dq's 8 n8 tiles per warp at d 256
      // in two rounds of 4: 1.004-1.015x there, 0.968-0.980x at d 128 in two rounds of 2,
      // 0.993-1.004x at d 64; d 160 / 224 have 5 / 7 tiles per warp, d 192 6 (two rounds of 3
      // not timed). At d 256 four rounds of 2, each followed by a quarter of the dK product
      // over the step's queries: 1.015-1.021x more (two rounds with halves 1.012-1.016x); the
      // single pass's spill goes from 8 to 0 bytes, with score modifiers from 132 to 16.
      return {8, 2, kHeadDim <= 128 ? 2 : 4, kHeadDim <= 64 && !score_mods ? 128 : 64, 1,
              kHeadDim <= 64 && score_mods ? 1 : 2, kHeadDim == 256 ? 4 : 1, kHeadDim > 128, kHeadDim == 128,
              kHeadDim > 128};
    case BwdDkvSchedule::kSinglePassCompact:
      // For devices whose shared memory per block cannot hold the single pass (an A100's 163 KB at
      // d 64 and 128: 166 and 165 KB) but holds this (83 and 147 KB; bwd_has_compact_tile): v6's
      // tile, 16 keys per warp with P^T and dS^T in registers, 64 queries per step.
      return {8, 1, 1, 64, 1, 1, 1, false, false, false};
    case BwdDkvSchedule::kSinglePassTail: {
      BwdDkvShape shape = bwd_dkv_shape<kHeadDim>(BwdDkvSchedule::kSinglePass, score_mods);
      shape.warp_m_tiles = 1;
      return shape;
    }
  }
  return {};
}
// Above d 128 the compact shape's full-width dk and dv would not fit the registers.
constexpr bool bwd_has_compact_tile(int head_dim) { return head_dim <= 128; }

}  // namespace flashattn::cuda
