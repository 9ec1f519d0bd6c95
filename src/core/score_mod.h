// The score modifier and mask of one (batch, head): scale, softcap, ALiBi and the bottom-right
// aligned window. Every kernel and both CPU backends use this functor, so they agree on semantics.
// Index: the type of the query / key positions and the window arithmetic. int64_t everywhere but in
// the sm90a forward, which takes int for calls whose lengths it bounds (kFwdSm90MaxLength) and whose
// windows it clamps to them (launch_fwd_sm90.h), so that no edge overflows: an item's key ranges take
// fewer instructions there (sm90a v58).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace flashattn {

template <class T, class Index = int64_t>
struct ScoreMod {
  T scale;           // applied to dot(q, k)
  T softcap;         // > 0: s = softcap * tanh(s / softcap)
  T alibi_slope;     // s -= slope * |i + off - j|; 0 when ALiBi is off
  Index off;         // seqlen_k - seqlen_q of this sequence
  Index seqlen_k;    // keys at j >= seqlen_k do not exist
  Index left;        // window; -1 = unbounded (causal sets right = 0)
  Index right;

  FA_HD T score(T dot, Index i, Index j) const {
    T s = scale * dot;
    if (softcap > T(0)) s = softcap * std::tanh(s / softcap);
    if (alibi_slope != T(0)) {
      Index distance = i + off - j;
      s -= alibi_slope * T(distance < 0 ? -distance : distance);
    }
    return s;
  }

  // d score / d (scale * dot): the softcap's tanh derivative, 1 without softcap. `s` is the
  // softcapped score before ALiBi (ALiBi is additive and does not change the derivative).
  FA_HD T capped_derivative(T s_capped) const {
    if (softcap <= T(0)) return T(1);
    T t = s_capped / softcap;
    return T(1) - t * t;
  }

  // First and one-past-last kept key of query row i (empty when first >= last).
  FA_HD Index first_key(Index i) const {
    Index first = left < 0 ? 0 : i + off - left;
    return first < 0 ? 0 : first;
  }
  FA_HD Index last_key(Index i) const {
    Index last = right < 0 ? seqlen_k : i + off + right + 1;
    return last > seqlen_k ? seqlen_k : (last < 0 ? 0 : last);
  }
  FA_HD bool keep(Index i, Index j) const { return j >= first_key(i) && j < last_key(i); }
};

}  // namespace flashattn
