// Entry points of the two CPU backends. Each takes a validated problem whose pointers and index
// arrays are host memory (validate.cpp has checked the index arrays' contents), and throws
// Failure on errors it alone can detect.
#pragma once

#include "core/problem.h"

namespace flashattn::cpu {

// Writes k_new / v_new (k_new rotated when rotary is given) into the KV cache at cache_seqlens.
// Runs before either forward when the problem has an append.
void kv_append(const AttnProblem& p);

// Naive backend: full score rows in float64, the semantics reference of every test. With
// emulate_low_precision, scores, probabilities, gradients and outputs are rounded to the input
// dtype where an unfused f16/bf16 implementation rounds them (the error baseline of the tests).
void reference_fwd(const AttnProblem& p, bool emulate_low_precision);
void reference_bwd(const AttnProblem& p, bool emulate_low_precision);

// Tiled online-softmax backend (FlashAttention's algorithm), float32 accumulation, multi-threaded.
void tiled_fwd(const AttnProblem& p);
void tiled_bwd(const AttnProblem& p);

// flashattn_merge on the CPU (float64 accumulation).
void merge(const MergeProblem& p);

}  // namespace flashattn::cpu
