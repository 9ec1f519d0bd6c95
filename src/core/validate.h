// Argument validation: turns the C params into a validated problem, or throws Failure with a
// message naming the argument, what was expected and what was given. Touches no tensor memory.
#pragma once

#include "core/problem.h"

namespace flashattn {

AttnProblem validate_fwd(const flashattn_fwd_params* params);
AttnProblem validate_bwd(const flashattn_bwd_params* params);
MergeProblem validate_merge(const flashattn_merge_params* params);

// Checks the contents of the index arrays (cu_seqlens monotone and within the tensors, seqused_k
// and cache_seqlens in range, block table entries in range, room in the cache for the append,
// rotary table long enough). Reads those arrays, so they must be host memory: the CPU backends
// call it; the CUDA backend trusts them (see docs/api.md).
void validate_host_contents(const AttnProblem& p);

}  // namespace flashattn
