// The backward kernels' parameters: the forward's (q, k, v, out, lse, layouts and score options)
// plus the gradients, dout, the per-row statistics the dk/dv pass reads and the dq accumulator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "cuda/fwd_params.h"
#include "cuda/seq_info.h"

namespace flashattn::cuda {

// Per (query head, query row): lse in log2 units (+inf for a row without kept keys, so that
// 2^(s - lse) is exactly 0) and delta = dot(dout, out).
struct RowStats {
  float lse2, delta;
};

// The single pass's dq accumulator is tiled so that one warp's m16n8 product of dq lands in 512
// contiguous bytes: per query head, per 16-row tile of a sequence's queries (no tile holds rows
// of two sequences), per n8 tile of the d columns, the 128 floats of the MMA C fragment in lane
// order (lane * 4 + e: rows lane / 4 and + 8, columns 2 (lane % 4) and + 1).
constexpr int kDqAccumTileRows = 16;
constexpr int kDqAccumTileFloats = 128;

// Tiles per head. Dense: ceil(seqlen_q / 16) per sequence. Varlen: sequence b starts at tile
// floor((token + 16 b) / 16) (dq_accum_first_tile); the next one's first tile lies at least
// ceil(seqlen_q / 16) tiles further, and the last one's tiles end by (total_q + 16 batch) / 16.
FA_HD int64_t dq_accum_tiles_per_head(bool varlen_q, int64_t total_q, int64_t batch, int64_t seqlen_q) {
  return varlen_q ? (total_q + kDqAccumTileRows * batch) / kDqAccumTileRows
                  : batch * ((seqlen_q + kDqAccumTileRows - 1) / kDqAccumTileRows);
}
// The single pass with unguarded dq atomics (tile_size.h) adds whole query steps (up to 128 rows)
// without testing for rows past a sequence's end: their dS is exactly 0 (lse +inf, zero-filled
// dout), so what they add to the next sequence's or head's tiles changes nothing, and past the
// last head they land in this padding. Its rows also take the atomics of n8 tiles past d (a head
// dim served by a larger instantiation), at offsets of up to kDqAccumSinkTiles n8 tiles past them
// where d is small (add_dq, kernel_bwd_dkdv_sm80.h).
constexpr int kDqAccumPadTiles = 8;
constexpr int kDqAccumSinkTiles = 8;
FA_HD size_t dq_accum_bytes(int64_t heads_q, int64_t tiles_per_head, int64_t d) {
  return ((size_t(heads_q) * size_t(tiles_per_head) + kDqAccumPadTiles) * kDqAccumTileRows * size_t(d) +
          kDqAccumSinkTiles * kDqAccumTileFloats) *
         sizeof(float);
}
__device__ __forceinline__ int64_t dq_accum_first_tile(const FwdParams& p, const SeqInfo& s, int b) {
  return p.cu_seqlens_q ? (s.q_start + kDqAccumTileRows * int64_t(b)) / kDqAccumTileRows
                        : int64_t(b) * ((p.seqlen_q + kDqAccumTileRows - 1) / kDqAccumTileRows);
}

struct BwdParams : FwdParams {
  const void* dout;  // strides of out (the validation holds dout to out's shape)
  void* dq;
  void* dk;
  void* dv;
  int64_t dout_batch_stride, dout_row_stride, dout_head_stride;
  int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  int64_t dv_batch_stride, dv_row_stride, dv_head_stride;
  int heads_kv;
  int max_stored_k;         // rows of k per sequence the dk/dv grid covers (varlen: bound)
  int dkv_first_key;        // the dk/dv grid's first key (the tail launch: past the main one's tiles)
  RowStats* stats;          // workspace: [heads_q, stats_rows_per_head]
  // The single-pass backward's dq accumulator (workspace, zeroed, f32, unscaled, tiled as above:
  // [heads_q, dq_accum_tiles_per_head, d / 8, 128], then kDqAccumPadTiles tiles and kDqAccumSinkTiles
  // n8 tiles), added to by f32 atomics; nullptr: the two deterministic passes.
  float* dq_accum;
  int64_t stats_rows_per_head;      // dense: batch * seqlen_q; varlen: total_q
  int64_t dq_accum_tiles_per_head;  // dq_accum_tiles_per_head() of the call
};

}  // namespace flashattn::cuda
