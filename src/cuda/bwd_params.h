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
  // The single-pass backward's dq accumulator (workspace, zeroed, [heads_q, stats_rows_per_head,
  // d] f32, unscaled), added to by f32 atomics; nullptr: the two deterministic passes.
  float* dq_accum;
  int64_t stats_rows_per_head;  // dense: batch * seqlen_q; varlen: total_q
};

}  // namespace flashattn::cuda
