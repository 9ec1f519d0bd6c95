// The GPU KV-cache append (kv_append_sm80.cu), run before the forward kernel on the same stream.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/fwd_params.h"
#include "flashattn/flashattn.h"

namespace flashattn::cuda {

void kv_append(const FwdParams& p, flashattn_dtype dtype, cudaStream_t stream);

}  // namespace flashattn::cuda
