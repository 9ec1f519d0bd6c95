// Float tile arithmetic of the tiled CPU kernels: a register-blocked matrix-multiply microkernel,
// a vector exp2, row reductions and the score/mask pass over a score tile.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/math_constants.h"
#include "core/philox.h"
#include "core/score_mod.h"

namespace flashattn::cpu {

// Four floats in one SSE2 register. GCC does not keep a register tile held in a plain array in
// registers (measured: 8.5 GFLOP/s for the 4x8 microkernel against 38 with vectors), so the hot
// loops use GCC/Clang generic vectors: portable code (SSE2 on x86-64, NEON on Arm), no
// intrinsics. aligned(4) makes every load and store unaligned-safe.
typedef float Vec4 __attribute__((vector_size(16), aligned(4)));
typedef int32_t Int4 __attribute__((vector_size(16), aligned(4)));
constexpr int64_t kVec = 4;

// The microkernel's register tile: 2 rows x 4 vectors = 8 accumulators, plus 4 B vectors and 2
// broadcasts, fills SSE2's 16 registers. Measured against 4x8, 6x8, 3x16: 2x16 is as fast or
// faster (~40 GFLOP/s per core in isolation) and pads decode's single query row only to 2.
constexpr int64_t kMr = 2;   // microkernel rows
constexpr int64_t kNr = 16;  // microkernel columns (four vectors)
static_assert(kNr % kMr == 0, "a key tile padded to kNr is a whole number of kMr row blocks");
static_assert(kNr % 4 == 0, "tiles start at multiples of kNr: whole Philox blocks of 4 keys");

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

constexpr int64_t round_up(int64_t x, int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

inline Vec4 load4(const float* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, Vec4 v) { std::memcpy(p, &v, sizeof v); }
inline Vec4 splat4(float x) { return Vec4{x, x, x, x}; }
// mask ? a : b, mask lanes all ones or all zeros (as vector comparisons give).
inline Vec4 select4(Int4 mask, Vec4 a, Vec4 b) {
  return (Vec4)((mask & (Int4)a) | (~mask & (Int4)b));
}
inline Vec4 max4(Vec4 a, Vec4 b) { return select4(a > b, a, b); }

// C[rows x panels*kNr] = (or +=) A[rows x k] * B. A is row-major with leading dimension lda;
// B is packed as column panels of kNr columns, panel p holding k rows of kNr contiguous floats
// at b + p * panel_stride (tile_loader.h packs them). rows must be a multiple of kMr. Panels
// run in the outer loop so that one panel (k * 64 bytes) stays in L1 across the row blocks.
inline void gemm_panels(int64_t rows, int64_t panels, int64_t k, const float* a, int64_t lda,
                        const float* b, int64_t panel_stride, float* c, int64_t ldc,
                        bool accumulate) {
  for (int64_t panel = 0; panel < panels; ++panel) {
    const float* bp = b + panel * panel_stride;
    for (int64_t r0 = 0; r0 < rows; r0 += kMr) {
      const float* ar = a + r0 * lda;
      Vec4 acc[kMr][kNr / kVec] = {};
      for (int64_t p = 0; p < k; ++p) {
        Vec4 bv[kNr / kVec];
        for (int64_t v = 0; v < kNr / kVec; ++v) bv[v] = load4(bp + p * kNr + v * kVec);
        for (int64_t r = 0; r < kMr; ++r) {
          const float x = ar[r * lda + p];
          for (int64_t v = 0; v < kNr / kVec; ++v) acc[r][v] += x * bv[v];
        }
      }
      float* cr = c + r0 * ldc + panel * kNr;
      for (int64_t r = 0; r < kMr; ++r) {
        for (int64_t v = 0; v < kNr / kVec; ++v) {
          if (accumulate) acc[r][v] += load4(cr + r * ldc + v * kVec);
          store4(cr + r * ldc + v * kVec, acc[r][v]);
        }
      }
    }
  }
}

// 2^x, exactly 0 for x < -126 (and -inf) so that masked scores give exactly zero weight; x is
// at most a little above 0 here (a score minus its row max or its lse). Range reduction
// x = n + f with |f| <= 1/2 by the 1.5 * 2^23 rounding trick, then the degree-7 Taylor
// polynomial of 2^f (truncation error 5e-9, under a tenth of float's ulp) times 2^n built in
// the exponent bits. libm's exp2f is a scalar call; this runs four lanes in ~20 instructions.
inline Vec4 exp2_4(Vec4 x) {
  constexpr float kMinExponent = -126.f, kMaxExponent = 127.f;
  constexpr float kRoundMagic = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kC1 = 0.6931471805599453f, kC2 = 0.2402265069591007f;  // ln2^k / k!
  constexpr float kC3 = 0.05550410866482158f, kC4 = 0.009618129107628477f;
  constexpr float kC5 = 0.0013333558146428443f, kC6 = 1.5403530393381606e-4f;
  constexpr float kC7 = 1.525273380405984e-5f;
  const Int4 underflow = x < splat4(kMinExponent);
  x = select4(underflow, splat4(kMinExponent), x);
  x = select4(x > splat4(kMaxExponent), splat4(kMaxExponent), x);
  const Vec4 n = (x + kRoundMagic) - kRoundMagic;
  const Vec4 f = x - n;
  Vec4 poly = kC7 * f + kC6;
  poly = poly * f + kC5;
  poly = poly * f + kC4;
  poly = poly * f + kC3;
  poly = poly * f + kC2;
  poly = poly * f + kC1;
  poly = poly * f + 1.f;
  const Int4 exponent = (__builtin_convertvector(n, Int4) + 127) << 23;
  return (Vec4)(~underflow & (Int4)(poly * (Vec4)exponent));
}

// Reductions over n floats, n a multiple of kVec.
inline float max_of(const float* x, int64_t n) {
  Vec4 m = splat4(kNegInf);
  for (int64_t j = 0; j < n; j += kVec) m = max4(m, load4(x + j));
  return std::fmax(std::fmax(m[0], m[1]), std::fmax(m[2], m[3]));
}

// x[j] = 2^(x[j] - shift), returning the sum of the results.
inline float exp2_shifted_sum(float* x, int64_t n, float shift) {
  Vec4 sum = splat4(0.f);
  for (int64_t j = 0; j < n; j += kVec) {
    const Vec4 e = exp2_4(load4(x + j) - shift);
    store4(x + j, e);
    sum += e;
  }
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// Fills lo/hi with the kept key range of queries [i0, i0 + rows) and returns the union's
// bounds (empty when lo >= hi). first/last_key grow with i but an empty row's range may be
// inverted, so the extremes are taken over the non-empty rows.
inline void key_ranges(const ScoreMod<float>& mod, int64_t i0, int64_t rows, int64_t* lo,
                       int64_t* hi, int64_t* union_lo, int64_t* union_hi) {
  *union_lo = std::numeric_limits<int64_t>::max();
  *union_hi = 0;
  for (int64_t r = 0; r < rows; ++r) {
    lo[r] = mod.first_key(i0 + r);
    hi[r] = mod.last_key(i0 + r);
    if (lo[r] < hi[r]) {
      *union_lo = std::min(*union_lo, lo[r]);
      *union_hi = std::max(*union_hi, hi[r]);
    }
  }
}

// The score pass over a tile of raw dot products: element (r, jj), for query row i0 + r
// (r < rows) and key j0 + jj (jj < cols), sits at s[r * ld_row + jj * ld_key]; one of the two
// strides is 1 (forward and dq pass: query-major; dk/dv pass: key-major). Each becomes
// log2(e) * score, or -inf where the mask drops it; key_lo/key_hi hold each row's kept key range
// (ScoreMod first/last_key). Without softcap and ALiBi the score is ScoreMod's scale * dot, so
// the tile is scaled in one vector pass and the mask only overwrites the dropped ends of rows;
// softcap and ALiBi take ScoreMod::score element by element.
inline void score_tile(const ScoreMod<float>& mod, float* s, int64_t ld_row, int64_t ld_key,
                       int64_t rows, int64_t cols, int64_t i0, int64_t j0, const int64_t* key_lo,
                       const int64_t* key_hi) {
  if (mod.softcap > 0.f || mod.alibi_slope != 0.f) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t jj = 0; jj < cols; ++jj) {
        const int64_t j = j0 + jj;
        float& x = s[r * ld_row + jj * ld_key];
        x = j >= key_lo[r] && j < key_hi[r] ? mod.score(x, i0 + r, j) * kLog2e : kNegInf;
      }
    }
    return;
  }
  const float scale = mod.scale * kLog2e;
  const bool row_major = ld_key == 1;
  const int64_t outer = row_major ? rows : cols, inner = row_major ? cols : rows;
  const int64_t ld = row_major ? ld_row : ld_key;
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t e = 0; e < inner; ++e) s[a * ld + e] *= scale;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = std::clamp<int64_t>(key_lo[r] - j0, 0, cols);
    const int64_t last = std::clamp<int64_t>(key_hi[r] - j0, first, cols);
    for (int64_t jj = 0; jj < first; ++jj) s[r * ld_row + jj * ld_key] = kNegInf;
    for (int64_t jj = last; jj < cols; ++jj) s[r * ld_row + jj * ld_key] = kNegInf;
  }
}

// The dropout factor (0 if dropped, else keep_value) of query i and keys [j0, j0 + cols) at
// z[0], z[ld], ...; j0 and cols are multiples of 4, so one Philox call gives 4 keys.
inline void dropout_factors(const DropoutRng& rng, float keep_value, int64_t i, int64_t j0,
                            int64_t cols, float* z, int64_t ld) {
  for (int64_t jj = 0; jj < cols; jj += 4) {
    const Philox4 bits = rng.block(i, (j0 + jj) >> 2);
    for (int64_t e = 0; e < 4; ++e) {
      z[(jj + e) * ld] = bits.x[e] >= rng.threshold ? keep_value : 0.f;
    }
  }
}

}  // namespace flashattn::cpu
