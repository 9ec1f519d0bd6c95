// Semantics tests of the CPU reference backend through the public C API: against a brute-force
// attention written here, across layouts (varlen, KV cache, paged, append), and its gradients
// against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "attn_case.h"
#include "flashattn/flashattn.h"

namespace flashattn::testing {
namespace {

constexpr flashattn_backend kReference = FLASHATTN_BACKEND_CPU_REFERENCE;
constexpr flashattn_backend kLowPrecision = FLASHATTN_BACKEND_CPU_REFERENCE_LOWP;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// f32 outputs of O(1) values carry a rounding error below 2^-24 * 8 < 1e-6; the brute force and the
// reference differ only by it and by double summation order (~1e-15). Real errors are >> 1e-5.
constexpr double kF32Tolerance = 1e-5;

AttnCase f32_case(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                  int64_t heads_kv, int64_t d) {
  AttnCase c;
  c.dtype = FLASHATTN_F32;
  c.batch = batch, c.seqlen_q = seqlen_q, c.seqlen_k = seqlen_k;
  c.heads_q = heads_q, c.heads_kv = heads_kv, c.d = d;
  return c;
}

// ---- logical indexing of an AttnData (strides are the Buffer's business) ---------------------

int64_t query_row(const AttnData& data, int64_t b, int64_t i) {
  return data.c.varlen ? data.cu_seqlens_q.get_i32(b) + i : b * data.c.seqlen_q + i;
}

// Row of k / v (leading dims flattened) holding key j of sequence b, in the case's layout.
int64_t key_row(const AttnData& data, int64_t b, int64_t j) {
  if (data.block_table.present()) {
    const int64_t page = data.c.page_size, blocks = data.block_table.shape()[1];
    return data.block_table.get_i32(b * blocks + j / page) * page + j % page;
  }
  if (data.cu_seqlens_k.present()) return data.cu_seqlens_k.get_i32(b) + j;
  return b * data.k.shape()[1] + j;
}

int64_t lse_at(const AttnData& data, int64_t b, int64_t i, int64_t h) {
  if (data.c.varlen) return h * data.q.shape()[0] + query_row(data, b, i);
  return (b * data.c.heads_q + h) * data.c.seqlen_q + i;
}

// Element e of head h of a row of a [rows, heads, width] buffer (dense ones flatten the same way).
int64_t at(int64_t row, int64_t h, int64_t heads, int64_t e, int64_t width) {
  return (row * heads + h) * width + e;
}

// ---- an independent attention, written from docs/semantics.md ------------------------------

struct Expected {
  std::vector<double> out, lse;  // logical layouts of data.out and data.lse
};

double alibi_slope(const AttnData& data, int64_t b, int64_t h) {
  if (!data.c.alibi) return 0;
  return data.alibi_slopes.get(data.c.alibi_per_batch ? b * data.c.heads_q + h : h);
}

bool kept(const AttnCase& c, int64_t i, int64_t j, int64_t sq, int64_t sk) {
  const int64_t off = sk - sq, right = c.causal ? 0 : c.window_right;
  return (c.window_left < 0 || j >= i + off - c.window_left) && (right < 0 || j <= i + off + right);
}

double brute_score(const AttnData& data, int64_t b, int64_t h, int64_t i, int64_t j) {
  const AttnCase& c = data.c;
  const int64_t hk = h / (c.heads_q / c.heads_kv), sq = data.seqlens_q[b], sk = data.seqlens_k[b];
  double dot = 0;
  for (int64_t e = 0; e < c.d; ++e) {
    dot += data.q.get(at(query_row(data, b, i), h, c.heads_q, e, c.d)) *
           data.k.get(at(key_row(data, b, j), hk, c.heads_kv, e, c.d));
  }
  double s = (c.softmax_scale > 0 ? c.softmax_scale : 1.0 / std::sqrt(double(c.d))) * dot;
  if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
  return s - alibi_slope(data, b, h) * std::fabs(double(i + sk - sq - j));
}

void brute_row(const AttnData& data, int64_t b, int64_t h, int64_t i, Expected& e) {
  const AttnCase& c = data.c;
  const int64_t hk = h / (c.heads_q / c.heads_kv), sq = data.seqlens_q[b], sk = data.seqlens_k[b];
  const int64_t dv = c.head_dim_v(), row = query_row(data, b, i);
  std::vector<double> s(size_t(sk), kNegInf);
  double m = kNegInf, total = 0;
  for (int64_t j = 0; j < sk; ++j) {
    if (!kept(c, i, j, sq, sk)) continue;
    s[j] = brute_score(data, b, h, i, j);
    m = std::max(m, s[j]);
  }
  for (int64_t j = 0; j < sk; ++j) total += m == kNegInf ? 0 : std::exp(s[j] - m);
  for (int64_t x = 0; x < dv; ++x) {
    double acc = 0;
    for (int64_t j = 0; j < sk; ++j) {
      if (s[j] != kNegInf)
        acc +=
            std::exp(s[j] - m) / total * data.v.get(at(key_row(data, b, j), hk, c.heads_kv, x, dv));
    }
    e.out[size_t(at(row, h, c.heads_q, x, dv))] = acc;
  }
  if (!e.lse.empty())
    e.lse[size_t(lse_at(data, b, i, h))] = m == kNegInf ? kNegInf : m + std::log(total);
}

// No dropout, no append: those are checked through other identities.
Expected brute_force(const AttnData& data) {
  Expected e;
  e.out.assign(size_t(data.out.numel()), kNaN);
  if (data.lse.present()) e.lse.assign(size_t(data.lse.numel()), kNaN);
  for (int64_t b = 0; b < data.c.batch; ++b) {
    for (int64_t h = 0; h < data.c.heads_q; ++h) {
      for (int64_t i = 0; i < data.seqlens_q[b]; ++i) brute_row(data, b, h, i, e);
    }
  }
  return e;
}

// Every element within `tolerance` (equal infinities match; NaN never does).
void expect_matches(const Buffer& got, const std::vector<double>& want, double tolerance,
                    const char* name) {
  ASSERT_EQ(got.numel(), int64_t(want.size())) << name;
  int64_t bad = 0, first_bad = -1;
  for (int64_t n = 0; n < got.numel(); ++n) {
    const double x = got.get(n);
    if (x == want[n] || std::fabs(x - want[n]) <= tolerance) continue;
    if (bad++ == 0) first_bad = n;
  }
  EXPECT_EQ(bad, 0) << name << ": first mismatch at " << first_bad << ": got "
                    << (first_bad >= 0 ? got.get(first_bad) : 0) << ", want "
                    << (first_bad >= 0 ? want[first_bad] : 0);
}

void expect_reference_matches_brute_force(const AttnCase& c) {
  SCOPED_TRACE(c.describe());
  AttnData data = make_attn_data(c);
  run_fwd(data, kReference);
  const Expected want = brute_force(data);
  expect_matches(data.out, want.out, kF32Tolerance, "out");
  if (c.lse) expect_matches(data.lse, want.lse, kF32Tolerance, "lse");
  EXPECT_TRUE(data.out.guards_intact() && data.lse.guards_intact());
}

// ---- (a) each feature against the brute force --------------------------------------------

// A deque: add() hands out pointers that later additions must not invalidate.
std::deque<AttnCase> feature_cases() {
  std::deque<AttnCase> cases;
  auto add = [&](AttnCase c) {
    cases.push_back(c);
    return &cases.back();
  };
  add(f32_case(2, 13, 17, 4, 4, 16));
  add(f32_case(2, 17, 9, 2, 2, 16))->causal = true;  // sq > sk: the first rows are empty
  add(f32_case(2, 5, 23, 2, 2, 16))->causal = true;  // sq < sk
  AttnCase* window = add(f32_case(2, 19, 14, 2, 2, 8));
  window->window_left = 3, window->window_right = 2;
  AttnCase* sliding = add(f32_case(1, 11, 16, 2, 2, 8));
  sliding->causal = true, sliding->window_left = 4;
  AttnCase* left_only = add(f32_case(1, 7, 12, 2, 1, 8));
  left_only->window_left = 2;
  AttnCase* softcap = add(f32_case(2, 9, 12, 2, 2, 16));
  softcap->softcap = 0.7f, softcap->softmax_scale = 0.9f;  // large scores so the cap bends them
  add(f32_case(2, 9, 12, 4, 4, 16))->alibi = true;
  AttnCase* alibi_batch = add(f32_case(2, 12, 9, 4, 4, 16));
  alibi_batch->alibi = alibi_batch->alibi_per_batch = true;
  add(f32_case(2, 7, 10, 6, 2, 16));  // GQA 3
  add(f32_case(2, 7, 10, 8, 1, 16));  // MQA, ratio 8
  AttnCase* dv = add(f32_case(2, 6, 11, 3, 3, 8));
  dv->dv = 24, dv->softmax_scale = 0.3f;
  AttnCase* all = add(f32_case(3, 14, 10, 6, 2, 16));
  all->causal = true, all->softcap = 1.5f, all->alibi = true, all->strided = true;
  return cases;
}

TEST(Reference, MatchesBruteForceForEachFeature) {
  for (const AttnCase& c : feature_cases()) expect_reference_matches_brute_force(c);
}

TEST(Reference, WithoutLseWritesOut) {
  AttnCase c = f32_case(2, 6, 9, 2, 2, 8);
  c.lse = false;
  expect_reference_matches_brute_force(c);
}

// ---- (b) empty rows, empty problems, NaN that must not leak --------------------------------

void expect_row_empty(const AttnData& data, int64_t b, int64_t i) {
  const AttnCase& c = data.c;
  for (int64_t h = 0; h < c.heads_q; ++h) {
    for (int64_t e = 0; e < c.head_dim_v(); ++e) {
      EXPECT_EQ(data.out.get(at(query_row(data, b, i), h, c.heads_q, e, c.head_dim_v())), 0.0);
    }
    EXPECT_EQ(data.lse.get(lse_at(data, b, i, h)), kNegInf);
  }
}

TEST(Reference, WindowThatEmptiesRowsGivesZeroAndMinusInf) {
  AttnCase c = f32_case(2, 9, 3, 2, 2, 8);
  c.window_left = 0, c.window_right = 0;  // row i keeps key i - 6 only: rows 0..5 are empty
  AttnData data = make_attn_data(c);
  run_fwd(data, kReference);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < 6; ++i) expect_row_empty(data, b, i);
  }
  EXPECT_FALSE(has_nan(data.out));
  expect_reference_matches_brute_force(c);
}

TEST(Reference, NoKeysGivesTheEmptyRowResult) {
  AttnData data = make_attn_data(f32_case(2, 5, 0, 3, 3, 8));
  run_fwd(data, kReference);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 5; ++i) expect_row_empty(data, b, i);
  }
}

TEST(Reference, EmptyBatchOrNoQueriesIsANoOp) {
  AttnData no_queries = make_attn_data(f32_case(2, 0, 6, 2, 2, 8));
  run_fwd(no_queries, kReference);
  EXPECT_TRUE(no_queries.out.guards_intact() && no_queries.lse.guards_intact());

  Buffer q(FLASHATTN_F32, {0, 4, 2, 8}), k(FLASHATTN_F32, {0, 6, 2, 8}), v = k, out = q;
  Buffer lse(FLASHATTN_F32, {0, 2, 4});
  flashattn_fwd_params params;
  flashattn_fwd_params_init(&params);
  params.q = q.tensor(), params.k = k.tensor(), params.v = v.tensor();
  params.out = out.tensor(), params.lse = lse.tensor();
  params.exec.backend = kReference;
  EXPECT_EQ(flashattn_fwd(&params), FLASHATTN_SUCCESS) << flashattn_last_error();
  EXPECT_TRUE(out.guards_intact() && lse.guards_intact());

  AttnCase varlen = f32_case(3, 0, 6, 2, 2, 8);
  varlen.varlen = true;  // total_q = 0
  AttnData data = make_attn_data(varlen);
  run_fwd(data, kReference);
  EXPECT_TRUE(data.out.guards_intact() && data.lse.guards_intact());
}

void poison_key(AttnData& data, int64_t b, int64_t j) {
  const AttnCase& c = data.c;
  for (int64_t h = 0; h < c.heads_kv; ++h) {
    for (int64_t e = 0; e < c.d; ++e)
      data.k.set(at(key_row(data, b, j), h, c.heads_kv, e, c.d), kNaN);
    for (int64_t e = 0; e < c.head_dim_v(); ++e) {
      data.v.set(at(key_row(data, b, j), h, c.heads_kv, e, c.head_dim_v()), kNaN);
    }
  }
}

// Rows that do not keep a NaN key give exactly the clean result: the reference never reads keys
// it does not keep (stronger than the contract, which asks only for slots past seqlen_k).
void expect_rows_unaffected(AttnCase c, int64_t poisoned_key, int64_t first_row, int64_t last_row) {
  SCOPED_TRACE(c.describe());
  AttnData clean = make_attn_data(c);
  AttnData dirty = clean;
  for (int64_t b = 0; b < c.batch; ++b) poison_key(dirty, b, poisoned_key);
  run_fwd(clean, kReference);
  run_fwd(dirty, kReference);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = first_row; i < last_row; ++i) {
      for (int64_t h = 0; h < c.heads_q; ++h) {
        for (int64_t e = 0; e < c.head_dim_v(); ++e) {
          const int64_t n = at(query_row(clean, b, i), h, c.heads_q, e, c.head_dim_v());
          ASSERT_EQ(dirty.out.get(n), clean.out.get(n)) << b << " " << i;
        }
        ASSERT_EQ(dirty.lse.get(lse_at(clean, b, i, h)), clean.lse.get(lse_at(clean, b, i, h)));
      }
    }
  }
}

TEST(Reference, NaNInMaskedKeysDoesNotLeak) {
  AttnCase causal = f32_case(2, 8, 8, 2, 2, 8);
  causal.causal = true;
  expect_rows_unaffected(causal, 7, 0, 7);  // only row 7 keeps key 7
  AttnCase sliding = f32_case(2, 8, 8, 2, 2, 8);
  sliding.window_left = 2, sliding.window_right = 0;
  expect_rows_unaffected(sliding, 0, 3, 8);  // rows >= 3 start past key 0
}

// NaN past seqlen_k: unused cache slots (make_attn_data fills them with NaN) and varlen keys past
// seqused_k (poisoned here).
TEST(Reference, NaNPastTheKeyCountDoesNotLeak) {
  AttnCase cache = f32_case(3, 4, 40, 4, 2, 8);
  cache.kv_cache = true;
  AttnData cached = make_attn_data(cache);
  run_fwd(cached, kReference);
  EXPECT_FALSE(has_nan(cached.out) || has_nan(cached.lse));

  AttnCase used = f32_case(4, 6, 9, 2, 2, 8);
  used.varlen = used.seqused_k = true;
  AttnData data = make_attn_data(used);
  for (int64_t b = 0; b < used.batch; ++b) {
    const int64_t stored = data.cu_seqlens_k.get_i32(b + 1) - data.cu_seqlens_k.get_i32(b);
    for (int64_t j = data.seqlens_k[b]; j < stored; ++j) poison_key(data, b, j);
  }
  run_fwd(data, kReference);
  EXPECT_FALSE(has_nan(data.out) || has_nan(data.lse));
  const Expected want = brute_force(data);
  expect_matches(data.out, want.out, kF32Tolerance, "out");
}

// ---- (c)-(e) layouts: each sequence equals a dense call on its own -------------------------

void rotate(std::vector<double>& x, const AttnData& data, int64_t position) {
  const int64_t half = data.c.rotary_dim / 2;
  for (int64_t r = 0; r < half; ++r) {
    const double cos = data.rotary_cos.get(position * half + r);
    const double sin = data.rotary_sin.get(position * half + r);
    const int64_t first = data.c.rotary_interleaved ? 2 * r : r;
    const int64_t second = data.c.rotary_interleaved ? 2 * r + 1 : r + half;
    const double a = x[first], b = x[second];
    x[first] = a * cos - b * sin;
    x[second] = a * sin + b * cos;
  }
}

void copy_query_rows(const AttnData& from, int64_t b, AttnData& to) {
  const AttnCase& c = from.c;
  for (int64_t i = 0; i < from.seqlens_q[b]; ++i) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      std::vector<double> row(size_t(c.d));
      for (int64_t e = 0; e < c.d; ++e)
        row[e] = from.q.get(at(query_row(from, b, i), h, c.heads_q, e, c.d));
      if (c.rotary_dim > 0) rotate(row, from, from.cache_seqlens.get_i32(b) + i);
      for (int64_t e = 0; e < c.d; ++e) to.q.set(at(i, h, c.heads_q, e, c.d), row[e]);
    }
  }
}

void copy_key_rows(const AttnData& from, int64_t b, AttnData& to) {
  const AttnCase& c = from.c;
  const int64_t dv = c.head_dim_v();
  for (int64_t j = 0; j < from.seqlens_k[b]; ++j) {
    for (int64_t h = 0; h < c.heads_kv; ++h) {
      for (int64_t e = 0; e < c.d; ++e) {
        to.k.set(at(j, h, c.heads_kv, e, c.d),
                 from.k.get(at(key_row(from, b, j), h, c.heads_kv, e, c.d)));
      }
      for (int64_t e = 0; e < dv; ++e) {
        to.v.set(at(j, h, c.heads_kv, e, dv),
                 from.v.get(at(key_row(from, b, j), h, c.heads_kv, e, dv)));
      }
    }
  }
}

// Sequence b of a varlen / KV-cache / paged case (after its append) as a dense batch-1 case, with
// its queries rotated when the case rotates them.
AttnData dense_slice(const AttnData& from, int64_t b) {
  AttnCase c = from.c;
  c.batch = 1, c.seqlen_q = from.seqlens_q[b], c.seqlen_k = from.seqlens_k[b];
  c.varlen = c.seqused_k = c.kv_cache = c.alibi_per_batch = c.rotary_interleaved = false;
  c.page_size = c.seqlen_new = c.rotary_dim = 0;
  AttnData slice = make_attn_data(c);
  copy_query_rows(from, b, slice);
  copy_key_rows(from, b, slice);
  if (c.alibi) {
    for (int64_t h = 0; h < c.heads_q; ++h) slice.alibi_slopes.set(h, alibi_slope(from, b, h));
  }
  return slice;
}

// Runs each sequence of `data` (already run) as its own dense call and compares its rows.
void expect_sequences_match_dense_calls(const AttnData& data, double tolerance) {
  const AttnCase& c = data.c;
  const int64_t dv = c.head_dim_v();
  for (int64_t b = 0; b < c.batch; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    AttnData slice = dense_slice(data, b);
    run_fwd(slice, kReference);
    for (int64_t i = 0; i < data.seqlens_q[b]; ++i) {
      for (int64_t h = 0; h < c.heads_q; ++h) {
        for (int64_t e = 0; e < dv; ++e) {
          ASSERT_NEAR(data.out.get(at(query_row(data, b, i), h, c.heads_q, e, dv)),
                      slice.out.get(at(i, h, c.heads_q, e, dv)), tolerance)
              << i << " " << h;
        }
        const double lse = data.lse.get(lse_at(data, b, i, h)),
                     want = slice.lse.get(lse_at(slice, 0, i, h));
        if (lse != want) {  // equal infinities of empty rows match
          ASSERT_NEAR(lse, want, tolerance) << i << " " << h;
        }
      }
    }
  }
}

TEST(Reference, VarlenEqualsPerSequenceDenseCalls) {
  AttnCase plain = f32_case(4, 9, 12, 4, 2, 8);
  plain.varlen = true;  // sequence 1 has no query, sequence 2 no key
  AttnCase causal = plain;
  causal.causal = true, causal.strided = true, causal.alibi = causal.alibi_per_batch = true;
  AttnCase used = plain;
  used.seqused_k = true, used.window_left = 2, used.window_right = 1, used.seed = 5;
  for (const AttnCase& c : {plain, causal, used}) {
    SCOPED_TRACE(c.describe());
    AttnData data = make_attn_data(c);
    run_fwd(data, kReference);
    expect_sequences_match_dense_calls(data, 0.0);  // the same arithmetic, bit for bit
  }
}

TEST(Reference, DenseCacheEqualsPerSequenceDenseCalls) {
  AttnCase c = f32_case(3, 5, 30, 4, 2, 8);
  c.kv_cache = true, c.causal = true;
  AttnData data = make_attn_data(c);
  run_fwd(data, kReference);
  expect_sequences_match_dense_calls(data, 0.0);
}

// The paged case with its pages copied into a dense cache of the same capacity.
AttnData as_dense_cache(const AttnData& paged) {
  AttnData dense = paged;
  const AttnCase& c = paged.c;
  dense.c.page_size = 0, dense.c.kv_cache = true;
  dense.block_table = Buffer();
  dense.k = Buffer(c.dtype, {c.batch, c.seqlen_k, c.heads_kv, c.d});
  dense.v = Buffer(c.dtype, {c.batch, c.seqlen_k, c.heads_kv, c.head_dim_v()});
  dense.k.fill(kNaN);
  dense.v.fill(kNaN);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t stored = paged.cache_seqlens.get_i32(b), row = c.heads_kv;
    for (int64_t j = 0; j < stored; ++j) {
      for (int64_t e = 0; e < row * c.d; ++e) {
        dense.k.set((b * c.seqlen_k + j) * row * c.d + e,
                    paged.k.get(key_row(paged, b, j) * row * c.d + e));
      }
      const int64_t dv = c.head_dim_v();
      for (int64_t e = 0; e < row * dv; ++e) {
        dense.v.set((b * c.seqlen_k + j) * row * dv + e,
                    paged.v.get(key_row(paged, b, j) * row * dv + e));
      }
    }
  }
  return dense;
}

TEST(Reference, PagedCacheEqualsDenseCache) {
  struct Paging {
    int64_t page_size, capacity, seqlen_new;
  };
  for (const Paging& paging :
       {Paging{1, 37, 0}, Paging{16, 70, 3}, Paging{256, 300, 0}, Paging{256, 520, 2}}) {
    AttnCase c = f32_case(3, 4, paging.capacity, 4, 2, 8);
    c.page_size = paging.page_size, c.seqlen_new = paging.seqlen_new, c.causal = true;
    SCOPED_TRACE(c.describe());
    AttnData paged = make_attn_data(c);
    AttnData dense = as_dense_cache(paged);
    run_fwd(paged, kReference);
    run_fwd(dense, kReference);
    EXPECT_EQ(max_abs_diff(paged.out, dense.out), 0.0);
    EXPECT_EQ(max_abs_diff(paged.lse, dense.lse), 0.0);
    expect_sequences_match_dense_calls(paged, 0.0);
  }
}

// Max |a - b| where NaN matches NaN (unused cache slots hold NaN before and after).
double max_diff_nan_equal(const Buffer& a, const Buffer& b) {
  double worst = 0;
  for (int64_t n = 0; n < a.numel(); ++n) {
    const double x = a.get(n), y = b.get(n);
    if (std::isnan(x) && std::isnan(y)) continue;
    const double diff = std::fabs(x - y);
    worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
  }
  return worst;
}

// The cache after an append: the new keys (rotated) at cache_seqlens[b] + t, every other slot as
// it was (NaN in unused slots stays NaN).
void expect_appended(const AttnData& before, const AttnData& after) {
  const AttnCase& c = before.c;
  Buffer k = before.k, v = before.v;
  const int64_t dv = c.head_dim_v();
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.seqlen_new; ++t) {
      const int64_t j = before.cache_seqlens.get_i32(b) + t;
      for (int64_t h = 0; h < c.heads_kv; ++h) {
        std::vector<double> row(size_t(c.d));
        for (int64_t e = 0; e < c.d; ++e)
          row[e] = before.k_new.get(at(b * c.seqlen_new + t, h, c.heads_kv, e, c.d));
        if (c.rotary_dim > 0) rotate(row, before, j);
        for (int64_t e = 0; e < c.d; ++e)
          k.set(at(key_row(before, b, j), h, c.heads_kv, e, c.d), row[e]);
        for (int64_t e = 0; e < dv; ++e) {
          v.set(at(key_row(before, b, j), h, c.heads_kv, e, dv),
                before.v_new.get(at(b * c.seqlen_new + t, h, c.heads_kv, e, dv)));
        }
      }
    }
  }
  constexpr double kRotationTolerance = 1e-6;  // f32 rounding of a rotated O(1) value
  EXPECT_LE(max_diff_nan_equal(after.k, k), kRotationTolerance);
  EXPECT_EQ(max_diff_nan_equal(after.v, v), 0.0);
}

TEST(Reference, AppendWritesRotatedKeysAndAttendsToThem) {
  struct Rotary {
    int64_t dim;
    bool interleaved;
    int64_t page_size;
  };
  for (const Rotary& rotary : {Rotary{0, false, 0}, Rotary{16, false, 0}, Rotary{8, true, 0},
                               Rotary{8, false, 16}, Rotary{16, true, 4}}) {
    AttnCase c = f32_case(3, 3, 24, 4, 2, 16);
    c.kv_cache = true, c.seqlen_new = 3, c.causal = true;
    c.rotary_dim = rotary.dim, c.rotary_interleaved = rotary.interleaved;
    c.page_size = rotary.page_size;
    SCOPED_TRACE(c.describe());
    AttnData data = make_attn_data(c);
    const AttnData before = data;
    run_fwd(data, kReference);
    expect_appended(before, data);
    EXPECT_EQ(max_abs_diff(data.q, before.q), 0.0) << "q must not be rotated in memory";
    // The slice holds the rotated q rounded to f32: a 6e-8 relative input change.
    expect_sequences_match_dense_calls(data, kF32Tolerance);
  }
}

// ---- dropout: identities that hold without knowing the mask (its bits: test_internal) --------

TEST(Reference, DropoutZeroEqualsNoDropout) {
  AttnCase c = f32_case(2, 7, 9, 2, 2, 8);
  AttnData plain = make_attn_data(c);
  AttnData zero = plain;
  zero.c.dropout_p = 0.f, zero.c.dropout_seed = 99;
  run_fwd(plain, kReference);
  run_fwd(zero, kReference);
  EXPECT_EQ(max_abs_diff(plain.out, zero.out), 0.0);
}

// With v the identity (d_v = seqlen_k), out_i = P_i * Z_i: every element is either 0 or the
// undropped probability scaled by 1/(1-p); lse is that of the undropped scores; the keep rate is
// about 1 - p.
TEST(Reference, DropoutZeroesOrScalesNormalisedProbabilities) {
  constexpr int64_t kKeys = 64;
  constexpr float kP = 0.25f;
  AttnCase c = f32_case(2, 32, kKeys, 2, 2, 8);
  c.dv = kKeys;
  AttnData plain = make_attn_data(c);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < kKeys; ++j) {
      for (int64_t h = 0; h < c.heads_kv; ++h) {
        for (int64_t e = 0; e < kKeys; ++e)
          plain.v.set(at(b * kKeys + j, h, c.heads_kv, e, kKeys), e == j);
      }
    }
  }
  AttnData dropped = plain;
  dropped.c.dropout_p = kP;
  run_fwd(plain, kReference);
  run_fwd(dropped, kReference);
  EXPECT_EQ(max_abs_diff(plain.lse, dropped.lse), 0.0);
  int64_t kept_count = 0;
  for (int64_t n = 0; n < plain.out.numel(); ++n) {
    const double p = plain.out.get(n), z = dropped.out.get(n);
    if (z == 0) continue;
    ++kept_count;
    ASSERT_NEAR(z, p / (1.0 - kP), 1e-6) << n;  // both rounded to f32
  }
  const double rate = double(kept_count) / double(plain.out.numel());
  EXPECT_NEAR(rate, 1.0 - kP, 0.03);  // 8192 Bernoulli draws: sigma 0.005
}

// ---- (f) gradients against central finite differences --------------------------------------

// Perturbation of O(1) inputs: the central difference's truncation error is ~eps^2 |L'''| / 6.
constexpr double kFdStep = 1e-2;
// Allowance for that truncation error (|L'''| / 6 stays below ~1 for these shapes and options).
constexpr double kTruncationTolerance = 1e-4;
constexpr double kF32UnitRoundoff = 1.0 / (1 << 24);

// sum over out of (out - base.out) * dout: the loss difference L(x) - L(base), taken element by
// element so that rows the perturbation does not reach cancel exactly. Also returns the bound of
// the f32 rounding of the outputs that changed.
double loss_change(const AttnData& run, const AttnData& base, double* rounding) {
  double change = 0;
  for (int64_t n = 0; n < run.out.numel(); ++n) {
    const double now = run.out.get(n), was = base.out.get(n);
    if (now == was) continue;
    change += (now - was) * base.dout.get(n);
    *rounding += kF32UnitRoundoff * (std::fabs(now) + std::fabs(was)) * std::fabs(base.dout.get(n));
  }
  return change;
}

// Compares every element of one gradient with (L(x + eps) - L(x - eps)) / (2 eps), with eps the
// step actually representable in f32.
void expect_gradient(const AttnData& base, Buffer AttnData::*input, Buffer AttnData::*gradient,
                     const char* name) {
  AttnData work = base;
  int64_t bad = 0;
  double worst = 0;
  for (int64_t n = 0; n < (base.*input).numel(); ++n) {
    const double x = (base.*input).get(n);
    double rounding = 0;
    (work.*input).set(n, x + kFdStep);
    const double up = (work.*input).get(n);
    run_fwd(work, kReference);
    const double loss_up = loss_change(work, base, &rounding);
    (work.*input).set(n, x - kFdStep);
    const double down = (work.*input).get(n);
    run_fwd(work, kReference);
    const double loss_down = loss_change(work, base, &rounding);
    (work.*input).set(n, x);
    const double numeric = (loss_up - loss_down) / (up - down);
    const double error = std::fabs(numeric - (base.*gradient).get(n));
    worst = std::max(worst, error);
    // NaN (an unwritten gradient) fails too.
    if (!(error <= kTruncationTolerance + rounding / (up - down))) ++bad;
  }
  EXPECT_EQ(bad, 0) << name << ": worst error " << worst;
}

void expect_gradients_match_finite_differences(const AttnCase& c) {
  SCOPED_TRACE(c.describe());
  AttnData data = make_attn_data(c);
  run_fwd(data, kReference);
  data.prepare_backward();
  run_bwd(data, kReference);
  expect_gradient(data, &AttnData::q, &AttnData::dq, "dq");
  expect_gradient(data, &AttnData::k, &AttnData::dk, "dk");
  expect_gradient(data, &AttnData::v, &AttnData::dv, "dv");
}

TEST(ReferenceBackward, MatchesFiniteDifferences) {
  std::deque<AttnCase> cases;
  auto add = [&](AttnCase c) {
    cases.push_back(c);
    return &cases.back();
  };
  add(f32_case(2, 5, 7, 2, 2, 8));
  add(f32_case(2, 7, 4, 2, 2, 8))->causal = true;  // rows 0..2 empty: zero dq
  add(f32_case(2, 4, 7, 2, 2, 8))->causal = true;
  AttnCase* window = add(f32_case(2, 6, 8, 2, 2, 8));
  window->window_left = 1, window->window_right = 2;
  AttnCase* softcap = add(f32_case(2, 5, 7, 2, 2, 8));
  softcap->softcap = 0.8f, softcap->softmax_scale = 1.0f;
  add(f32_case(2, 5, 7, 2, 2, 8))->alibi = true;
  AttnCase* capped_alibi = add(f32_case(1, 5, 7, 2, 2, 8));  // the cap's derivative excludes ALiBi
  capped_alibi->softcap = 0.8f, capped_alibi->softmax_scale = 1.0f, capped_alibi->alibi = true;
  add(f32_case(2, 5, 7, 3, 1, 8));  // GQA 3: dk, dv sum over the group
  AttnCase* varlen = add(f32_case(3, 5, 6, 2, 1, 8));
  varlen->varlen = varlen->seqused_k = true, varlen->causal = true;  // unused keys: zero dk, dv
  AttnCase* dropout = add(f32_case(2, 5, 7, 2, 2, 8));
  dropout->dropout_p = 0.3f;  // a fixed mask: the loss stays smooth in the inputs
  AttnCase* dv = add(f32_case(1, 4, 6, 2, 2, 8));
  dv->dv = 12, dv->strided = true;
  for (const AttnCase& c : cases) expect_gradients_match_finite_differences(c);
}

// ---- (g) the low-precision emulation rounds, and only by a little ----------------------------

TEST(ReferenceLowPrecision, ErrsByAFewUnitsOfTheDtype) {
  for (flashattn_dtype dtype : {FLASHATTN_BF16, FLASHATTN_F16}) {
    AttnCase c = f32_case(2, 33, 47, 4, 2, 32);
    c.dtype = dtype, c.causal = true;
    SCOPED_TRACE(c.describe());
    AttnData data = make_attn_data(c);
    AttnData exact = data, lowp = data;
    run_fwd(exact, kReference);
    run_fwd(lowp, kLowPrecision);
    // Outputs are averages of values in [-1, 1]; a few roundings of a unit roundoff u each.
    const double unit = dtype == FLASHATTN_BF16 ? 1.0 / 256 : 1.0 / 2048;
    const double out_error = max_abs_diff(lowp.out, exact.out);
    EXPECT_GT(out_error, 0.0);
    EXPECT_LT(out_error, 2 * unit);
    // lse is stored in f32: float accumulation alone moves it by ~1e-7; rounded scores by ~u/10.
    const double lse_error = max_abs_diff(lowp.lse, exact.lse);
    EXPECT_GT(lse_error, unit / 100) << "the scores were not rounded to the dtype";
    EXPECT_LT(lse_error, 2 * unit);

    exact.prepare_backward();
    AttnData exact_bwd = exact, lowp_bwd = exact;
    run_bwd(exact_bwd, kReference);
    run_bwd(lowp_bwd, kLowPrecision);
    for (Buffer AttnData::*grad : {&AttnData::dq, &AttnData::dk, &AttnData::dv}) {
      const double error = max_abs_diff(lowp_bwd.*grad, exact_bwd.*grad);
      EXPECT_GT(error, 0.0);
      EXPECT_LT(error, 4 * unit);  // gradients reach ~0.6 here
    }
  }
}

// A window edge of 2^31 keys or more is unbounded: no overflow may empty the rows (a window of
// INT64_MAX once did, through i + off + right + 1).
TEST(ReferenceSemantics, HugeWindowsAreUnbounded) {
  for (flashattn_backend backend : {FLASHATTN_BACKEND_CPU_REFERENCE, FLASHATTN_BACKEND_CPU}) {
    AttnCase c;
    c.seqlen_q = 40, c.seqlen_k = 25, c.d = 32, c.dtype = FLASHATTN_F32;
    AttnData unbounded = make_attn_data(c);
    c.window_left = INT64_MAX, c.window_right = int64_t(1) << 31;
    AttnData huge = make_attn_data(c);
    run_fwd(unbounded, backend);
    run_fwd(huge, backend);
    EXPECT_EQ(max_abs_diff(huge.out, unbounded.out), 0.0);
    EXPECT_EQ(max_abs_diff(huge.lse, unbounded.lse), 0.0);
    EXPECT_FALSE(has_nan(huge.out));
  }
}

// The benchmark's inputs (AttnCase::normal_inputs, as torch.randn): q, k, v and dout drawn N(0, 1),
// where the tests' uniform draws in [-1, 1] have variance 1/3 and nothing beyond 1.
TEST(TestData, NormalInputsHaveUnitVariance) {
  AttnCase c;
  c.batch = 2, c.seqlen_q = c.seqlen_k = 256, c.heads_q = c.heads_kv = 4, c.d = 64, c.dtype = FLASHATTN_F32;
  c.normal_inputs = true;
  AttnData data = make_attn_data(c);
  data.prepare_backward();
  for (const Buffer* b : {&data.q, &data.k, &data.v, &data.dout}) {
    double sum = 0, squares = 0, beyond_one = 0;
    for (int64_t i = 0; i < b->numel(); ++i) {
      const double x = b->get(i);
      sum += x, squares += x * x, beyond_one += std::abs(x) > 1.0;
    }
    const double n = double(b->numel()), mean = sum / n;  // 131,072 draws: bounds of about 7 sigma
    EXPECT_NEAR(mean, 0.0, 0.02);
    EXPECT_NEAR(squares / n - mean * mean, 1.0, 0.03);
    EXPECT_NEAR(beyond_one / n, 0.3173, 0.01);  // P(|x| > 1) for N(0, 1)
  }
}

// The heads run on several threads, each writing only its own rows: the thread count changes no
// bit (dropout, GQA and varlen on, so that every per-head input is in play).
TEST(ReferenceThreads, ResultsIdenticalAcrossThreadCounts) {
  for (flashattn_backend backend : {kReference, kLowPrecision}) {
    AttnCase c;
    c.batch = 3, c.seqlen_q = 37, c.seqlen_k = 45, c.heads_q = 6, c.heads_kv = 2, c.d = 32;
    c.dtype = FLASHATTN_BF16, c.varlen = true, c.causal = true, c.dropout_p = 0.2f;
    AttnData one = make_attn_data(c), three = make_attn_data(c);
    run_fwd(one, backend, 1);
    run_fwd(three, backend, 3);
    EXPECT_EQ(max_abs_diff(one.out, three.out), 0.0);
    EXPECT_EQ(max_abs_diff(one.lse, three.lse), 0.0);
    one.prepare_backward(), three.prepare_backward();
    run_bwd(one, backend, false, 1);
    run_bwd(three, backend, false, 3);
    EXPECT_EQ(max_abs_diff(one.dq, three.dq), 0.0);
    EXPECT_EQ(max_abs_diff(one.dk, three.dk), 0.0);
    EXPECT_EQ(max_abs_diff(one.dv, three.dv), 0.0);
  }
}

}  // namespace
}  // namespace flashattn::testing
