// Parameters of the CUDA merge kernel: partial results over disjoint key sets, combined through
// their log-sum-exps. Serves flashattn_merge and the split-KV forward's combine step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::cuda {

// Row (b, i) of head h of split s: out_partial at s * op_split + b * op_batch + i * op_row +
// h * op_head (d_v contiguous elements), its lse at s * lp_split + b * lp_batch + i * lp_row +
// h * lp_head; the same without s for out and lse (lse optional).
struct MergeParams {
  int splits, batch, rows, heads, d_v;
  const void* out_partial;
  flashattn_dtype partial_dtype;
  int64_t op_split, op_batch, op_row, op_head;
  const float* lse_partial;
  int64_t lp_split, lp_batch, lp_row, lp_head;
  void* out;
  flashattn_dtype out_dtype;
  int64_t o_batch, o_row, o_head;
  float* lse;  // nullptr: not requested
  int64_t l_batch, l_row, l_head;
};

// Enqueues the merge on `stream`; the dtypes are f32, f16 or bf16.
void launch_merge(const MergeParams& p, cudaStream_t stream);

}  // namespace flashattn::cuda
