// The sm80 backward's score pipeline on the S and dP accumulators of one warp: scores (score
// modifiers, mask) -> P = 2^(s - lse) -> dS = P * (Z * dP - delta) * softcap', elementwise. The dq
// pass holds fragments with query rows, the dk/dv pass the transpose (key rows); both read the
// same functor, so they agree with each other and with the CPU backends.
#pragma once

#include <cstdint>

#include "core/math_constants.h"
#include "core/philox.h"
#include "core/score_mod.h"
#include "cuda/bwd_params.h"
#include "cuda/sm80_primitives.h"
#include "cuda/softmax_sm80.h"

namespace flashattn::cuda {

// What the score pipeline needs of one (sequence, head).
struct BwdScores {
  ScoreMod<float> mod;
  bool plain;          // s = scale * dot: one FFMA per element (scale_log2 folded in)
  float scale_log2;    // scale * log2(e)
  DropoutRng rng;      // rng.threshold == 0: no dropout
  float keep_scale;    // 1 / (1 - p)
  float cap_in;        // FwdParams::softcap_in: 0 without a cap
};

// Dropout factor Z of (i, j): 1 / (1 - p) when kept, else 0.
__device__ __forceinline__ float dropout_factor(const DropoutRng& rng, float keep_scale, int i, int j) {
  const Philox4 bits = rng.block(i, j >> 2);
  const uint32_t w = (j & 2) ? ((j & 1) ? bits.x[3] : bits.x[2]) : ((j & 1) ? bits.x[1] : bits.x[0]);
  return w >= rng.threshold ? keep_scale : 0.f;
}

// Kept columns [lo, hi) of the fragment row `row` (a query; a key when kRowsAreKeys), relative to
// column col0 and clamped to [0, 2^20], so that the per-element test is two 32-bit compares. For a
// key j the kept queries follow from ScoreMod::keep: j < seqlen_k, i >= j - off - right (right
// window) and i <= j - off + left (left window).
template <bool kRowsAreKeys>
__device__ __forceinline__ int2 kept_columns(const ScoreMod<float>& m, int row, int col0) {
  constexpr int64_t kFar = int64_t(1) << 20;
  int64_t lo, hi;
  if constexpr (kRowsAreKeys) {
    lo = m.right < 0 ? 0 : row - m.off - m.right;
    hi = row >= m.seqlen_k ? lo : (m.left < 0 ? col0 + kFar : row - m.off + m.left + 1);
  } else {
    lo = m.first_key(row);
    hi = m.last_key(row);
  }
  auto clamp = [](int64_t x) { return int(x < 0 ? 0 : (x > kFar ? kFar : x)); };
  return make_int2(clamp(lo - col0), clamp(hi - col0));
}

// s (raw dots) <- P * Z, dp <- dS (d loss / d score, the softmax scale not yet applied).
// kRowsAreKeys: the fragment rows are keys and its columns queries (dk/dv pass). stats(col or
// row index within the tile) gives the query's RowStats. kMask: the tile crosses a window edge
// or the end of the keys (a template parameter: a run-time test per element splits the loop into
// one branch per element, and the compiler cannot interleave the elements' instructions).
template <bool kRowsAreKeys, bool kScoreMods, bool kMask, int kM, int kNTiles, class Stats>
__device__ __forceinline__ void probabilities_and_ds(float (&s)[kM][kNTiles][4],
                                                     float (&dp)[kM][kNTiles][4],
                                                     const BwdScores& c, const FragmentOrigin& o,
                                                     Stats stats) {
  int2 kept[kM][2];
  if constexpr (kMask) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        kept[mt][half] = kept_columns<kRowsAreKeys>(c.mod, o.row0 + mt * 16 + o.g + 8 * half, o.col0);
  }
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row_in_tile = mt * 16 + o.g + 8 * (e / 2), col_in_tile = nt * 8 + 2 * o.t + e % 2;
        const int row = o.row0 + row_in_tile, col = o.col0 + col_in_tile;
        const int i = kRowsAreKeys ? col : row, j = kRowsAreKeys ? row : col;
        const RowStats st = stats(kRowsAreKeys ? col_in_tile : row_in_tile);
        float x, derivative = 1.f;
        if (!kScoreMods || c.plain) {
          x = s[mt][nt][e] * c.scale_log2;
        } else {
          float capped = c.mod.scale * s[mt][nt][e];
          if (c.cap_in > 0.f) {
            const float t = softcap_tanh(s[mt][nt][e], c.cap_in);  // as the forward's
            capped = c.mod.softcap * t;
            derivative = 1.f - t * t;  // ScoreMod::capped_derivative
          }
          const int distance = i + int(c.mod.off) - j;
          x = (capped - c.mod.alibi_slope * float(distance < 0 ? -distance : distance)) * kLog2e;
        }
        if (kMask && (col_in_tile < kept[mt][e / 2].x || col_in_tile >= kept[mt][e / 2].y)) x = -INFINITY;
        const float p = fast_exp2(x - st.lse2);
        const float z = kScoreMods && c.rng.threshold != 0 ? dropout_factor(c.rng, c.keep_scale, i, j) : 1.f;
        dp[mt][nt][e] = p * (z * dp[mt][nt][e] - st.delta) * derivative;
        s[mt][nt][e] = p * z;
      }
}

}  // namespace flashattn::cuda
