// The backward kernels' parameters: the forward's (q, k, v, out, lse, layouts and score options)
// plus the gradients, dout, the per-row statistics the dk/dv pass reads and the dq accumulator.
#pragma once

#include <cstdint>

#include "cuda/fwd_params.h"

namespace flashattn::cuda {

// Per (query head, query row): lse in log2 units (+inf for a row without kept keys, so that
// 2^(s - lse) is exactly 0) and delta = dot(dout, out).
struct RowStats {
  float lse2, delta;
};

// The single pass's dq accumulator is tiled so that one warp's m16n8 product of dq lands in 512
// contiguous bytes: per query head, per 16-row tile of a sequence's queries (dq_accum_first_tile
// in seq_info.h: no tile holds rows of two sequences), per n8 tile of the d columns, the 128
// floats of the MMA C fragment in lane order (lane * 4 + e: rows lane / 4 and + 8, columns
// 2 (lane % 4) and + 1).
constexpr int kDqAccumTileRows = 16;
constexpr int kDqAccumTileFloats = 128;

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
  RowStats* stats;          // workspace: [heads_q, stats_rows_per_head]
  // The single-pass backward's dq accumulator (workspace, zeroed, f32, unscaled, tiled as above:
  // [heads_q, dq_accum_tiles_per_head, d / 8, 128]), added to by f32 atomics; nullptr: the two
  // deterministic passes.
  float* dq_accum;
  int64_t stats_rows_per_head;      // dense: batch * seqlen_q; varlen: total_q
  int64_t dq_accum_tiles_per_head;  // dense: batch * ceil(seqlen_q / 16); varlen: (total_q + 16 batch) / 16
};

}  // namespace flashattn::cuda
