// Unit tests of the internal building blocks every backend shares: f16/bf16 conversions, the
// Philox generator and dropout keep rule, the ScoreMod mask, and the reference's exact dropout
// mask; and the sm90a forward's schedule order, which is plain C++.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "attn_case.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "core/score_mod.h"
#include "cuda/schedule_fwd_sm90.h"

namespace flashattn {
namespace {

constexpr int kHalfPatterns = 1 << 16;
constexpr uint16_t kSignBit16 = 0x8000u;
constexpr uint16_t kF16Inf = 0x7c00u;
constexpr uint16_t kBf16Inf = 0x7f80u;
constexpr double kF16MaxFinite = 65504.0;

bool f16_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
bool bf16_is_nan(uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

// The value of an f16 bit pattern from its definition, independently of dtype.h.
double f16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & kSignBit16) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(double(mantissa), -24);
  return sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

// ---- f16 -----------------------------------------------------------------------------------

TEST(Float16, DecodesEveryPatternByDefinition) {
  for (int bits = 0; bits < kHalfPatterns; ++bits) {
    const uint16_t h = uint16_t(bits);
    const double expected = f16_value(h);
    const float got = f16_to_float(h);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      EXPECT_EQ(double(got), expected) << std::hex << bits;
      EXPECT_EQ(std::signbit(got), bool(h & kSignBit16)) << std::hex << bits;  // -0 stays -0
    }
  }
}

TEST(Float16, RoundTripsEveryPattern) {
  for (int bits = 0; bits < kHalfPatterns; ++bits) {
    const uint16_t h = uint16_t(bits);
    const uint16_t back = float_to_f16(f16_to_float(h));
    if (f16_is_nan(h)) {
      EXPECT_TRUE(f16_is_nan(back)) << std::hex << bits;
    } else {
      EXPECT_EQ(back, h) << std::hex << bits;
    }
  }
}

// Between every two adjacent positive f16 values (subnormals and the overflow to inf included),
// the midpoint rounds to the even one and anything off the midpoint to the nearer one.
TEST(Float16, RoundsToNearestEvenBetweenEveryNeighbourPair) {
  for (uint16_t lo = 0; lo < kF16Inf; ++lo) {
    const uint16_t hi = uint16_t(lo + 1);
    const double a = f16_value(lo), b = hi == kF16Inf ? 65536.0 : f16_value(hi);
    const float mid = float((a + b) / 2);  // exact: a float has 13 more mantissa bits
    const uint16_t even = (lo & 1u) ? hi : lo;
    EXPECT_EQ(float_to_f16(mid), even) << "between " << a << " and " << b;
    EXPECT_EQ(float_to_f16(-mid), uint16_t(even | kSignBit16)) << a;
    EXPECT_EQ(float_to_f16(std::nextafter(mid, 0.f)), lo) << a;
    EXPECT_EQ(float_to_f16(std::nextafter(mid, INFINITY)), hi) << a;
  }
}

TEST(Float16, SpecialValues) {
  EXPECT_EQ(float_to_f16(INFINITY), kF16Inf);
  EXPECT_EQ(float_to_f16(-INFINITY), uint16_t(kF16Inf | kSignBit16));
  EXPECT_TRUE(f16_is_nan(float_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(f16_is_nan(float_to_f16(bits_to_float(0x7f800001u))));  // signalling NaN
  EXPECT_EQ(float_to_f16(1e10f), kF16Inf);
  EXPECT_EQ(double(f16_to_float(float_to_f16(65519.f))), kF16MaxFinite);
  EXPECT_EQ(float_to_f16(1e-10f), 0u);  // below half the smallest subnormal
  EXPECT_EQ(float_to_f16(-0.f), kSignBit16);
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00u);
}

// ---- bf16 ----------------------------------------------------------------------------------

TEST(BFloat16, RoundTripsEveryPattern) {
  for (int bits = 0; bits < kHalfPatterns; ++bits) {
    const uint16_t h = uint16_t(bits);
    const float f = bf16_to_float(h);
    EXPECT_EQ(float_to_bits(f), uint32_t(h) << 16) << std::hex << bits;
    const uint16_t back = float_to_bf16(f);
    if (bf16_is_nan(h)) {
      EXPECT_TRUE(bf16_is_nan(back)) << std::hex << bits;
    } else {
      EXPECT_EQ(back, h) << std::hex << bits;
    }
  }
}

// As for f16: every neighbour pair, float subnormals and the overflow into inf included.
TEST(BFloat16, RoundsToNearestEvenBetweenEveryNeighbourPair) {
  for (uint16_t lo = 0; lo < kBf16Inf; ++lo) {
    const uint16_t hi = uint16_t(lo + 1);
    const uint32_t mid_bits = (uint32_t(lo) << 16) | 0x8000u;  // the exact midpoint
    const float mid = bits_to_float(mid_bits);
    const uint16_t even = (lo & 1u) ? hi : lo;
    EXPECT_EQ(float_to_bf16(mid), even) << std::hex << lo;
    EXPECT_EQ(float_to_bf16(-mid), uint16_t(even | kSignBit16)) << std::hex << lo;
    EXPECT_EQ(float_to_bf16(bits_to_float(mid_bits - 1)), lo) << std::hex << lo;
    EXPECT_EQ(float_to_bf16(bits_to_float(mid_bits + 1)), hi) << std::hex << lo;
  }
}

TEST(BFloat16, SpecialValues) {
  EXPECT_EQ(float_to_bf16(INFINITY), kBf16Inf);
  EXPECT_EQ(float_to_bf16(-INFINITY), uint16_t(kBf16Inf | kSignBit16));
  // A NaN whose payload sits in the low bits must not truncate to inf.
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(bits_to_float(0x7f800001u))));
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(bits_to_float(0xff800001u))));
  EXPECT_EQ(float_to_bf16(-0.f), kSignBit16);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80u);
}

TEST(Dtype, LoadStoreAndRoundAgree) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-100.f, 100.f);
  for (flashattn_dtype dtype : {FLASHATTN_F32, FLASHATTN_F16, FLASHATTN_BF16}) {
    uint32_t storage = 0;
    for (int n = 0; n < 1000; ++n) {
      const float x = dist(rng);
      store_from_double(&storage, dtype, 0, x);
      EXPECT_EQ(load_as_float(&storage, dtype, 0), round_to_dtype(x, dtype));
    }
  }
}

// ---- Philox --------------------------------------------------------------------------------

struct PhiloxKat {
  Philox4 counter;
  uint32_t key0, key1;
  Philox4 expected;
};

// Known-answer vectors of philox4x32-10 from Random123 (kat_vectors).
TEST(Philox, MatchesRandom123KnownAnswers) {
  const PhiloxKat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const PhiloxKat& kat : kats) {
    const Philox4 got = philox4x32_10(kat.counter, kat.key0, kat.key1);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(got.x[w], kat.expected.x[w]) << "word " << w;
  }
}

TEST(Dropout, ThresholdIsFloorOfPTimes2To32) {
  EXPECT_EQ(dropout_threshold(0.f), 0u);
  EXPECT_EQ(dropout_threshold(0.5f), 0x80000000u);
  EXPECT_EQ(dropout_threshold(0.25f), 0x40000000u);
  EXPECT_EQ(dropout_threshold(std::nextafter(1.f, 0.f)), 0xffffff00u);
}

// The documented layout (docs/semantics.md): counter (j/4, i, b*heads_q + h, offset low), key
// (seed low, seed high ^ offset high), word j % 4 compared with the threshold.
TEST(Dropout, KeepBitFollowsTheDocumentedCounterLayout) {
  const uint64_t seed = 0x0123456789abcdefull, offset = 0xfedcba9876543210ull;
  const int64_t heads_q = 5, b = 3, h = 2;
  const uint32_t threshold = dropout_threshold(0.37f);
  const DropoutRng rng = make_dropout_rng(seed, offset, threshold, b, heads_q, h);
  for (int64_t i = 0; i < 9; ++i) {
    for (int64_t j = 0; j < 13; ++j) {
      const Philox4 counter{
          {uint32_t(j / 4), uint32_t(i), uint32_t(b * heads_q + h), uint32_t(offset)}};
      const Philox4 bits =
          philox4x32_10(counter, uint32_t(seed), uint32_t(seed >> 32) ^ uint32_t(offset >> 32));
      EXPECT_EQ(rng.keep(i, j), bits.x[j % 4] >= threshold) << i << "," << j;
    }
  }
}

// Keep rates match 1 - p within 5 standard deviations, and the masks of different heads,
// batches, seeds and offsets are not the same.
TEST(Dropout, KeepRateMatchesProbability) {
  constexpr int64_t kRows = 256, kCols = 1024;
  constexpr double kSigmas = 5.0;
  for (float p : {0.f, 0.1f, 0.5f, 0.9f}) {
    const DropoutRng rng = make_dropout_rng(42, 7, dropout_threshold(p), 1, 4, 3);
    int64_t kept = 0;
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) kept += rng.keep(i, j);
    }
    const double n = double(kRows * kCols), rate = double(kept) / n;
    const double sigma = std::sqrt(double(p) * (1 - double(p)) / n);
    EXPECT_NEAR(rate, 1.0 - p, kSigmas * sigma + 1e-12) << "p=" << p;
  }
}

TEST(Dropout, MasksDifferAcrossStreams) {
  const uint32_t threshold = dropout_threshold(0.5f);
  const DropoutRng base = make_dropout_rng(1, 0, threshold, 0, 4, 0);
  const DropoutRng others[] = {
      make_dropout_rng(1, 0, threshold, 0, 4, 1), make_dropout_rng(1, 0, threshold, 1, 4, 0),
      make_dropout_rng(2, 0, threshold, 0, 4, 0), make_dropout_rng(1, 1, threshold, 0, 4, 0),
      make_dropout_rng(1, uint64_t(1) << 32, threshold, 0, 4, 0)};
  constexpr int64_t kCols = 256;
  for (const DropoutRng& other : others) {
    int64_t same = 0;
    for (int64_t j = 0; j < kCols; ++j) same += base.keep(0, j) == other.keep(0, j);
    EXPECT_LT(same, kCols * 3 / 4);  // independent masks agree on about half
  }
}

// ---- ScoreMod ------------------------------------------------------------------------------

// The mask of docs/semantics.md, written out: bottom-right aligned window, -1 unbounded.
bool kept_by_definition(int64_t i, int64_t j, int64_t sq, int64_t sk, int64_t left, int64_t right) {
  const int64_t off = sk - sq;
  if (j < 0 || j >= sk) return false;
  if (left >= 0 && j < i + off - left) return false;
  if (right >= 0 && j > i + off + right) return false;
  return true;
}

ScoreMod<double> mask_only(int64_t sq, int64_t sk, int64_t left, int64_t right) {
  return ScoreMod<double>{1.0, 0.0, 0.0, sk - sq, sk, left, right};
}

TEST(ScoreMod, MaskMatchesDefinitionExhaustively) {
  constexpr int64_t kMaxLen = 9, kMaxWindow = 5;
  for (int64_t sq = 0; sq <= kMaxLen; ++sq) {
    for (int64_t sk = 0; sk <= kMaxLen; ++sk) {
      for (int64_t left = -1; left <= kMaxWindow; ++left) {
        for (int64_t right = -1; right <= kMaxWindow; ++right) {
          const ScoreMod<double> mod = mask_only(sq, sk, left, right);
          for (int64_t i = 0; i < sq; ++i) {
            int64_t first = sk, last = 0;  // of the defined kept set
            for (int64_t j = 0; j < sk; ++j) {
              const bool kept = kept_by_definition(i, j, sq, sk, left, right);
              EXPECT_EQ(mod.keep(i, j), kept) << sq << " " << sk << " " << left << " " << right;
              if (kept) {
                first = std::min(first, j);
                last = std::max(last, j + 1);
              }
            }
            if (first < last) {
              EXPECT_EQ(mod.first_key(i), first);
              EXPECT_EQ(mod.last_key(i), last);
            } else {
              EXPECT_GE(mod.first_key(i), mod.last_key(i)) << "row " << i << " must be empty";
            }
          }
        }
      }
    }
  }
}

TEST(ScoreMod, CausalIsBottomRightAligned) {
  const ScoreMod<double> more_keys = mask_only(3, 5, -1, 0);  // off = 2
  EXPECT_EQ(more_keys.first_key(0), 0);
  EXPECT_EQ(more_keys.last_key(0), 3);
  EXPECT_EQ(more_keys.last_key(2), 5);
  const ScoreMod<double> more_queries = mask_only(5, 3, -1, 0);  // off = -2: rows 0, 1 empty
  EXPECT_GE(more_queries.first_key(0), more_queries.last_key(0));
  EXPECT_GE(more_queries.first_key(1), more_queries.last_key(1));
  EXPECT_EQ(more_queries.last_key(2), 1);
  EXPECT_EQ(more_queries.last_key(4), 3);
}

TEST(ScoreMod, WindowThatEmptiesRows) {
  // sq = 6, sk = 2, window (0, 0): row i keeps only key i - 4, so rows 0..3 are empty.
  const ScoreMod<double> mod = mask_only(6, 2, 0, 0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_GE(mod.first_key(i), mod.last_key(i)) << i;
  EXPECT_EQ(mod.first_key(4), 0);
  EXPECT_EQ(mod.last_key(4), 1);
  EXPECT_EQ(mod.first_key(5), 1);
  EXPECT_EQ(mod.last_key(5), 2);
  // sq = 6, sk = 2, causal with one key of look-ahead: rows 0..2 see nothing.
  const ScoreMod<double> causal_ahead = mask_only(6, 2, -1, 1);
  for (int64_t i = 0; i < 3; ++i) EXPECT_GE(causal_ahead.first_key(i), causal_ahead.last_key(i));
  EXPECT_EQ(causal_ahead.last_key(3), 1);
  const ScoreMod<double> left_only = mask_only(2, 8, 1, -1);  // off 6: row 0 keeps 5..7
  EXPECT_EQ(left_only.first_key(0), 5);
  EXPECT_EQ(left_only.last_key(0), 8);
}

TEST(ScoreMod, ScoreAppliesScaleSoftcapAlibiInOrder) {
  const double scale = 0.3, cap = 2.0, slope = 0.25;
  const ScoreMod<double> mod{scale, cap, slope, 3, 10, -1, -1};
  const double dot = 7.0;
  const int64_t i = 1, j = 6;  // distance |1 + 3 - 6| = 2
  EXPECT_DOUBLE_EQ(mod.score(dot, i, j), cap * std::tanh(scale * dot / cap) - slope * 2);
  const ScoreMod<double> plain{scale, 0.0, 0.0, 0, 10, -1, -1};
  EXPECT_DOUBLE_EQ(plain.score(dot, i, j), scale * dot);
  EXPECT_DOUBLE_EQ(plain.capped_derivative(1.5), 1.0);
}

TEST(ScoreMod, CappedDerivativeIsTheTanhDerivative) {
  constexpr double kStep = 1e-6, kTolerance = 1e-8;
  const ScoreMod<double> mod{1.0, 1.5, 0.0, 0, 4, -1, -1};
  for (double x : {-3.0, -0.4, 0.0, 0.7, 2.5}) {
    const double numeric = (mod.score(x + kStep, 0, 0) - mod.score(x - kStep, 0, 0)) / (2 * kStep);
    EXPECT_NEAR(mod.capped_derivative(mod.score(x, 0, 0)), numeric, kTolerance) << x;
  }
}

// ---- the reference's dropout mask ----------------------------------------------------------

// Forward of one dense f32 case by hand, with the keep bits of make_dropout_rng.
std::vector<double> dropout_forward_by_hand(const testing::AttnData& data) {
  const testing::AttnCase& c = data.c;
  const int64_t group = c.heads_q / c.heads_kv, dv = c.head_dim_v();
  const double scale = 1.0 / std::sqrt(double(c.d)), keep_scale = 1.0 / (1.0 - c.dropout_p);
  std::vector<double> out(size_t(c.batch * c.seqlen_q * c.heads_q * dv));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const DropoutRng rng = make_dropout_rng(c.dropout_seed, c.dropout_offset,
                                              dropout_threshold(c.dropout_p), b, c.heads_q, h);
      const int64_t hk = h / group;
      for (int64_t i = 0; i < c.seqlen_q; ++i) {
        std::vector<double> s(size_t(c.seqlen_k));
        double total = 0;
        for (int64_t j = 0; j < c.seqlen_k; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e) {
            dot += data.q.get(((b * c.seqlen_q + i) * c.heads_q + h) * c.d + e) *
                   data.k.get(((b * c.seqlen_k + j) * c.heads_kv + hk) * c.d + e);
          }
          total += (s[j] = std::exp(scale * dot));
        }
        for (int64_t e = 0; e < dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < c.seqlen_k; ++j) {
            if (!rng.keep(i, j)) continue;
            acc += s[j] / total * keep_scale *
                   data.v.get(((b * c.seqlen_k + j) * c.heads_kv + hk) * dv + e);
          }
          out[size_t(((b * c.seqlen_q + i) * c.heads_q + h) * dv + e)] = acc;
        }
      }
    }
  }
  return out;
}

TEST(ReferenceDropout, UsesTheDocumentedKeepMask) {
  constexpr double kTolerance = 1e-6;  // f32 output rounding of O(1) values
  testing::AttnCase c;
  c.dtype = FLASHATTN_F32;
  c.batch = 2, c.seqlen_q = 7, c.seqlen_k = 11, c.heads_q = 6, c.heads_kv = 2, c.d = 16;
  c.dropout_p = 0.3f, c.dropout_seed = 0x9e3779b97f4a7c15ull, c.dropout_offset = (7ull << 32) | 3;
  testing::AttnData data = testing::make_attn_data(c);
  testing::run_fwd(data, FLASHATTN_BACKEND_CPU_REFERENCE);
  const std::vector<double> expected = dropout_forward_by_hand(data);
  for (size_t n = 0; n < expected.size(); ++n) {
    ASSERT_NEAR(data.out.get(int64_t(n)), expected[n], kTolerance) << n;
  }
}

// The sm90a forward's schedule (schedule_fwd_sm90.h): every position takes a different item, so
// that every item runs once; below the tail the items' own order; in the tail the query tiles
// longest first under a causal mask (the item's tile within its head never grows from one position
// to the next), at least one wave of the workers' items unless every head is in it; no tail
// without a right edge alone, or with one head.
TEST(ScheduleFwdSm90, TailIsAPermutationOfTheLastHeadsLongestFirst) {
  for (int num_m = 1; num_m <= 40; ++num_m) {
    for (int heads = 1; heads <= 30; ++heads) {
      for (int workers : {1, 5, 66, 132}) {
        const int items = num_m * heads;
        EXPECT_EQ(cuda::fwd_tail(heads, num_m, workers, false).start, items);
        const cuda::FwdTail tail = cuda::fwd_tail(heads, num_m, std::min(workers, items), true);
        ASSERT_TRUE(tail.heads == 0 || (tail.heads >= 2 && tail.heads <= heads)) << tail.heads;
        ASSERT_EQ(tail.start, (heads - tail.heads) * num_m);
        if (tail.heads > 0 && tail.heads < heads) {
          EXPECT_GE(tail.heads * num_m, std::min(workers, items));
        }
        std::vector<int> taken(items, 0);
        int previous_tile = num_m;
        for (int t = 0; t < items; ++t) {
          const int item = cuda::schedule_item(t, tail, num_m);
          ASSERT_TRUE(item >= 0 && item < items) << "num_m " << num_m << " heads " << heads << " t " << t;
          ++taken[item];
          if (t < tail.start) {
            EXPECT_EQ(item, t);
          } else {
            const int tile = num_m - 1 - item % num_m;  // fwd_tile's query tile: the last first
            EXPECT_LE(tile, previous_tile) << "num_m " << num_m << " heads " << heads << " t " << t;
            previous_tile = tile;
          }
        }
        for (int item = 0; item < items; ++item) ASSERT_EQ(taken[item], 1) << item;
      }
    }
  }
}

}  // namespace
}  // namespace flashattn
