// Rotary position embedding of one row, shared by the KV-cache append (new keys) and by both CPU
// backends (queries). Position p uses row p of rotary_cos / rotary_sin [seqlen_ro, rotary_dim/2].
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/problem.h"

namespace flashattn::cpu {

// Rotates x[0, rotary_dim) in place; x[rotary_dim, d) is left as it is.
template <class T>
void apply_rotary(T* x, const AttnProblem& p, int64_t position) {
  const int64_t half = p.rotary_dim / 2;
  for (int64_t r = 0; r < half; ++r) {
    T c = T(load_as_double(p.rotary_cos.data, p.rotary_cos.dtype, p.rotary_cos.offset(position, r)));
    T s = T(load_as_double(p.rotary_sin.data, p.rotary_sin.dtype, p.rotary_sin.offset(position, r)));
    int64_t first = p.rotary_interleaved ? 2 * r : r;
    int64_t second = p.rotary_interleaved ? 2 * r + 1 : r + half;
    T a = x[first], b = x[second];
    x[first] = a * c - b * s;
    x[second] = a * s + b * c;
  }
}

}  // namespace flashattn::cpu
