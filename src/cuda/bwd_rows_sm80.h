// The row-wise kernels around the sm80 backward: the rows' statistics before either schedule and
// the conversion of the single pass's f32 dq accumulator after it (bwd_rows_sm80.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/bwd_params.h"
#include "flashattn/flashattn.h"

namespace flashattn::cuda {

// stats[h][row] = {lse * log2(e) (+inf for lse -inf), dot(dout, out)} for every query row and head;
// with clear_dq_accum also dq_accum = 0 (all of it), for the single pass.
void launch_bwd_row_stats(const BwdParams& p, flashattn_dtype dtype, bool clear_dq_accum, cudaStream_t stream);
// dq = scale * dq_accum, rounded to the element type.
void launch_bwd_dq_convert(const BwdParams& p, flashattn_dtype dtype, cudaStream_t stream);

}  // namespace flashattn::cuda
