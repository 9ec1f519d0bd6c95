// flashattn_merge through the public C API: attention over disjoint key sets, each computed by the
// reference backend with its lse, merges into attention over their union.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "attn_case.h"
#include "flashattn/flashattn.h"

namespace flashattn::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int64_t kRowPad = 3;  // strided partials exercise the merge's offsets
// The merge is a convex combination in double of f32-rounded partials and lse values of O(1):
// its error against the union is a few f32 roundings (< 1e-6). A bf16 partial adds at most its
// own rounding, 2^-9 of a value in [-1, 1].
constexpr double kF32Tolerance = 1e-6;
constexpr double kBf16Rounding = 1.0 / 512;

// The full problem: causal with more queries than keys, so the first rows have no key at all.
AttnCase union_case() {
  AttnCase c;
  c.dtype = FLASHATTN_F32;
  c.batch = 2, c.seqlen_q = 15, c.seqlen_k = 13, c.heads_q = c.heads_kv = 3, c.d = 8, c.dv = 12;
  c.causal = true;  // off = -2: rows 0 and 1 keep no key
  return c;
}

// Split boundaries 0 = cut[0] <= ... <= cut[splits] = seqlen_k; equal neighbours make a split with
// no key at all.
std::vector<int64_t> random_cuts(int64_t splits, int64_t seqlen_k, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, seqlen_k};
  std::uniform_int_distribution<int64_t> pick(0, seqlen_k);
  for (int64_t s = 1; s < splits; ++s) cuts.push_back(pick(rng));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// Attention of `full` over its keys [first, last): the same queries, keys sliced, and the causal
// mask of the union rewritten for the slice. With off = sk - sq of the union and off_s = last -
// first - sq of the slice, key j' of the slice is key first + j' of the union, and
// first + j' <= i + off  <=>  j' <= i + off_s + (sk - last): a window (-1, sk - last).
AttnData attend_to_slice(const AttnData& full, int64_t first, int64_t last) {
  const AttnCase& c = full.c;
  AttnData part = full;
  part.c.causal = false;
  part.c.window_left = -1, part.c.window_right = c.seqlen_k - last;
  part.c.seqlen_k = last - first;
  part.k = Buffer(c.dtype, {c.batch, last - first, c.heads_kv, c.d});
  part.v = Buffer(c.dtype, {c.batch, last - first, c.heads_kv, c.head_dim_v()});
  for (Buffer AttnData::*t : {&AttnData::k, &AttnData::v}) {
    const int64_t row = c.heads_kv * (t == &AttnData::k ? c.d : c.head_dim_v());
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t n = 0; n < (last - first) * row; ++n) {
        (part.*t).set(b * (last - first) * row + n,
                      (full.*t).get((b * c.seqlen_k + first) * row + n));
      }
    }
  }
  part.out.fill(kNaN);
  part.lse.fill(kNaN);
  run_fwd(part, FLASHATTN_BACKEND_CPU_REFERENCE);
  return part;
}

// Index of lse element (b, h, i) of the dense [batch, heads, seqlen_q] layout, or of the varlen
// [heads, total_q] one with the sequences laid end to end.
int64_t lse_index(const AttnCase& c, bool varlen, int64_t b, int64_t h, int64_t i) {
  if (varlen) return h * c.batch * c.seqlen_q + b * c.seqlen_q + i;
  return (b * c.heads_q + h) * c.seqlen_q + i;
}

struct Partials {
  Buffer out, lse;
};

// Stacks the split results; a split row with lse -inf gets NaN garbage, which must not be read.
Partials stack(const std::vector<AttnData>& parts, flashattn_dtype dtype, bool varlen) {
  const AttnCase& c = parts.front().c;
  const int64_t splits = int64_t(parts.size()), dv = c.head_dim_v(), rows = c.batch * c.seqlen_q;
  Partials p;
  p.out = varlen ? Buffer(dtype, {splits, rows, c.heads_q, dv}, kRowPad)
                 : Buffer(dtype, {splits, c.batch, c.seqlen_q, c.heads_q, dv}, kRowPad);
  p.lse = varlen ? Buffer(FLASHATTN_F32, {splits, c.heads_q, rows})
                 : Buffer(FLASHATTN_F32, {splits, c.batch, c.heads_q, c.seqlen_q});
  const int64_t out_size = rows * c.heads_q * dv, lse_size = rows * c.heads_q;
  for (int64_t s = 0; s < splits; ++s) {
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t i = 0; i < c.seqlen_q; ++i) {
        for (int64_t h = 0; h < c.heads_q; ++h) {
          const double lse = parts[s].lse.get(lse_index(c, false, b, h, i));
          p.lse.set(s * lse_size + lse_index(c, varlen, b, h, i), lse);
          const int64_t row = ((b * c.seqlen_q + i) * c.heads_q + h) * dv;
          for (int64_t e = 0; e < dv; ++e) {
            p.out.set(s * out_size + row + e, lse == kNegInf ? kNaN : parts[s].out.get(row + e));
          }
        }
      }
    }
  }
  return p;
}

// Every element within `tolerance` of the union's (equal infinities match, NaN never does).
void expect_close(const Buffer& got, const std::vector<double>& want, double tolerance,
                  const char* name) {
  ASSERT_EQ(got.numel(), int64_t(want.size()));
  for (int64_t n = 0; n < got.numel(); ++n) {
    const double x = got.get(n);
    if (x == want[n]) continue;
    ASSERT_LE(std::fabs(x - want[n]), tolerance)
        << name << "[" << n << "]: " << x << " vs " << want[n];
  }
}

struct MergeRun {
  int64_t splits;
  flashattn_dtype partial_dtype;
  bool varlen;
  bool lse;
};

void expect_merge_equals_union(const MergeRun& run, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << run.splits << " splits, " << flashattn_dtype_string(run.partial_dtype)
               << (run.varlen ? ", varlen" : ", dense") << ", seed " << seed);
  AttnCase c = union_case();
  c.seed = seed;
  AttnData full = make_attn_data(c);
  run_fwd(full, FLASHATTN_BACKEND_CPU_REFERENCE);

  std::mt19937_64 rng(seed);
  const std::vector<int64_t> cuts = random_cuts(run.splits, c.seqlen_k, rng);
  std::vector<AttnData> parts;
  for (int64_t s = 0; s < run.splits; ++s)
    parts.push_back(attend_to_slice(full, cuts[s], cuts[s + 1]));
  const Partials partials = stack(parts, run.partial_dtype, run.varlen);

  const int64_t rows = c.batch * c.seqlen_q, dv = c.head_dim_v();
  Buffer out = run.varlen ? Buffer(FLASHATTN_F32, {rows, c.heads_q, dv})
                          : Buffer(FLASHATTN_F32, {c.batch, c.seqlen_q, c.heads_q, dv});
  Buffer lse = run.varlen ? Buffer(FLASHATTN_F32, {c.heads_q, rows})
                          : Buffer(FLASHATTN_F32, {c.batch, c.heads_q, c.seqlen_q});
  out.fill(kNaN);
  lse.fill(kNaN);
  flashattn_merge_params params;
  flashattn_merge_params_init(&params);
  params.out_partial = partials.out.tensor();
  params.lse_partial = partials.lse.tensor();
  params.out = out.tensor();
  if (run.lse) params.lse = lse.tensor();
  params.exec.backend = FLASHATTN_BACKEND_CPU;
  ASSERT_EQ(flashattn_merge(&params), FLASHATTN_SUCCESS) << flashattn_last_error();

  const double tolerance =
      kF32Tolerance + (run.partial_dtype == FLASHATTN_BF16 ? kBf16Rounding : 0);
  std::vector<double> want_out(size_t(full.out.numel())), want_lse(size_t(full.lse.numel()));
  for (int64_t n = 0; n < full.out.numel(); ++n) want_out[n] = full.out.get(n);
  expect_close(out, want_out, tolerance, "out");
  EXPECT_TRUE(out.guards_intact() && lse.guards_intact());
  if (!run.lse) {
    EXPECT_TRUE(has_nan(lse)) << "an absent lse output must not be written";
    return;
  }
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      for (int64_t i = 0; i < c.seqlen_q; ++i) {
        want_lse[lse_index(c, run.varlen, b, h, i)] = full.lse.get(lse_index(c, false, b, h, i));
      }
    }
  }
  expect_close(lse, want_lse, kF32Tolerance, "lse");
}

TEST(Merge, EqualsAttentionOverTheUnion) {
  uint64_t seed = 1;
  for (bool varlen : {false, true}) {
    for (flashattn_dtype dtype : {FLASHATTN_F32, FLASHATTN_BF16}) {
      for (int64_t splits = 1; splits <= 4; ++splits) {
        expect_merge_equals_union(MergeRun{splits, dtype, varlen, true}, seed++);
      }
    }
  }
}

TEST(Merge, WithoutLseWritesOnlyOut) {
  expect_merge_equals_union(MergeRun{3, FLASHATTN_F32, false, false}, 77);
  expect_merge_equals_union(MergeRun{2, FLASHATTN_BF16, true, false}, 78);
}

// Rows whose every split is empty give out 0 and lse -inf, whatever garbage the partials hold.
TEST(Merge, AllEmptyRowsGiveZeroAndMinusInf) {
  constexpr int64_t kSplits = 3, kRows = 5, kHeads = 2, kDv = 4;
  Buffer out_partial(FLASHATTN_F32, {kSplits, kRows, kHeads, kDv});
  Buffer lse_partial(FLASHATTN_F32, {kSplits, kHeads, kRows});
  out_partial.fill(kNaN);
  lse_partial.fill(kNegInf);
  Buffer out(FLASHATTN_F32, {kRows, kHeads, kDv}), lse(FLASHATTN_F32, {kHeads, kRows});
  out.fill(kNaN);
  lse.fill(kNaN);
  flashattn_merge_params params;
  flashattn_merge_params_init(&params);
  params.out_partial = out_partial.tensor();
  params.lse_partial = lse_partial.tensor();
  params.out = out.tensor();
  params.lse = lse.tensor();
  ASSERT_EQ(flashattn_merge(&params), FLASHATTN_SUCCESS) << flashattn_last_error();
  for (int64_t n = 0; n < out.numel(); ++n) EXPECT_EQ(out.get(n), 0.0);
  for (int64_t n = 0; n < lse.numel(); ++n) EXPECT_EQ(lse.get(n), kNegInf);
}

}  // namespace
}  // namespace flashattn::testing
