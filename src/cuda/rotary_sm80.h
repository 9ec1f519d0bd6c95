// Rotary position embedding on the GPU, with the pair layout and positions of docs/semantics.md:
// one pair (a, b) of a row becomes (a cos - b sin, a sin + b cos), computed in float.
#pragma once

#include <cstdint>

#include "cuda/fwd_params.h"

namespace flashattn::cuda {

// cos and sin of pair r at position pos.
template <class Element>
__device__ __forceinline__ void rotary_angle(const FwdParams& p, int64_t pos, int r, float* c, float* s) {
  const int64_t at = pos * p.rotary_row_stride + r;
  if (p.rotary_f32) {
    *c = static_cast<const float*>(p.rotary_cos)[at];
    *s = static_cast<const float*>(p.rotary_sin)[at];
  } else {
    *c = float(static_cast<const Element*>(p.rotary_cos)[at]);
    *s = float(static_cast<const Element*>(p.rotary_sin)[at]);
  }
}

// The element indices of pair r: (2r, 2r + 1) interleaved, else (r, r + rotary_dim / 2).
__device__ __forceinline__ void rotary_pair(const FwdParams& p, int r, int* first, int* second) {
  *first = p.rotary_interleaved ? 2 * r : r;
  *second = p.rotary_interleaved ? 2 * r + 1 : r + p.rotary_dim / 2;
}

// Rotates pair r of a row in place at position pos, computing in Compute: double for the appended
// keys (which must round exactly as the CPU backends' append does), float for queries. The row's
// column c is at(c) (any memory: a plain row, or one of a swizzled shared-memory tile).
template <class Element, class Compute, class ColumnAt>
__device__ __forceinline__ void rotate_pair(const FwdParams& p, int64_t pos, int r, ColumnAt at) {
  float c, s;
  rotary_angle<Element>(p, pos, r, &c, &s);
  int first, second;
  rotary_pair(p, r, &first, &second);
  Element& x = at(first);
  Element& y = at(second);
  const Compute a = Compute(float(x)), b = Compute(float(y));
  x = Element(float(a * Compute(c) - b * Compute(s)));
  y = Element(float(a * Compute(s) + b * Compute(c)));
}

}  // namespace flashattn::cuda
