// The naive CPU backend: full score rows, one (batch, query head) at a time, the heads spread over
// exec.num_threads threads (each writes only its own rows, so the result does not depend on the
// thread count). It defines the semantics of docs/semantics.md; run with the low-precision policy
// it is the error baseline.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "cpu/rotary.h"

namespace flashattn::cpu {
namespace {

// Every intermediate in double, nothing rounded: the reference.
struct ExactMath {
  using Acc = double;
  static double round(double x, flashattn_dtype) { return x; }
};

// An unfused framework in f16/bf16: float accumulation inside each op, and every intermediate
// tensor (scores, probabilities, dP, dS, per-head gradients) stored in the input dtype.
struct LowPrecisionMath {
  using Acc = float;
  static float round(float x, flashattn_dtype dtype) { return round_to_dtype(x, dtype); }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A row-major [rows, cols] block in the accumulator type (the keys or values of one head).
template <class Acc>
class Rows {
 public:
  Rows(int64_t rows, int64_t cols) : cols_(cols), data_(size_t(rows * cols), Acc(0)) {}
  Acc* operator[](int64_t r) { return data_.data() + r * cols_; }
  const Acc* operator[](int64_t r) const { return data_.data() + r * cols_; }

 private:
  int64_t cols_;
  std::vector<Acc> data_;
};

template <class Acc>
Acc dot(const Acc* a, const Acc* b, int64_t n) {
  Acc sum = Acc(0);
  for (int64_t c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

template <class Acc>
void load_row(const View& t, int64_t base, int64_t n, Acc* dst) {
  for (int64_t c = 0; c < n; ++c) dst[c] = Acc(load_as_double(t.data, t.dtype, base + c));
}

template <class Acc>
void store_row(const View& t, int64_t base, int64_t n, const Acc* src) {
  for (int64_t c = 0; c < n; ++c) store_from_double(t.data, t.dtype, base + c, double(src[c]));
}

// Rows [0, keys) of kv head hk of sequence b, from k/v (dense, varlen, dense cache or paged).
template <class Acc>
Rows<Acc> load_kv(const AttnProblem& p, const View& t, int64_t b, int64_t hk, int64_t keys,
                  int64_t width) {
  Rows<Acc> rows(keys, width);
  for (int64_t j = 0; j < keys; ++j) load_row(t, p.kv_row(t, b, j, hk), width, rows[j]);
  return rows;
}

// What one (batch, query head) needs to score and drop its (i, j) pairs.
template <class Math>
struct Head {
  using Acc = typename Math::Acc;
  int64_t b, h, seqlen_q, seqlen_k;
  flashattn_dtype dtype;  // of the inputs: what the low-precision policy rounds to
  ScoreMod<Acc> mod;
  DropoutRng rng;
  bool dropout;
  Acc keep_scale;  // 1 / (1 - p)

  Head(const AttnProblem& p, int64_t b_, int64_t h_)
      : b(b_),
        h(h_),
        seqlen_q(p.seqlen_q_of(b_)),
        seqlen_k(p.seqlen_k_of(b_)),
        dtype(p.q.dtype),
        mod(p.score_mod<Acc>(b_, h_)),
        rng(p.dropout_rng(b_, h_)),
        dropout(p.opts.dropout_p > 0.f),
        keep_scale(Acc(1.0 / (1.0 - double(p.opts.dropout_p)))) {}

  bool empty_row(int64_t i) const { return mod.first_key(i) >= mod.last_key(i); }
  // The final score S_ij from dot(q_i, k_j): a tensor of its own in a framework, hence rounded.
  Acc score(Acc qk, int64_t i, int64_t j) const { return Math::round(mod.score(qk, i, j), dtype); }
  // Z_ij: the factor dropout applies to P_ij (0 or 1 / (1 - p)).
  Acc dropout_factor(int64_t i, int64_t j) const {
    if (!dropout) return Acc(1);
    return rng.keep(i, j) ? keep_scale : Acc(0);
  }
};

// ---- forward --------------------------------------------------------------------------------

// Query row i of the head, rotated at its absolute position when the call appends with rotary
// (the rotated q is an intermediate tensor of the framework, hence rounded by the policy).
template <class Math>
void load_query(const AttnProblem& p, const Head<Math>& head, int64_t i, typename Math::Acc* q) {
  load_row(p.q, p.q_row(p.q, head.b, i, head.h), p.d, q);
  if (p.rotary_dim <= 0) return;
  apply_rotary(q, p, p.cache_position_of(head.b) + i);
  for (int64_t c = 0; c < p.rotary_dim; ++c) q[c] = Math::round(q[c], head.dtype);
}

template <class Math>
void forward_row(const AttnProblem& p, const Head<Math>& head, const Rows<typename Math::Acc>& k,
                 const Rows<typename Math::Acc>& v, int64_t i) {
  using Acc = typename Math::Acc;
  const int64_t out_base = p.q_row(p.out, head.b, i, head.h);
  std::vector<Acc> acc(size_t(p.d_v), Acc(0));
  float lse = kNegInf;
  if (!head.empty_row(i)) {
    const int64_t first = head.mod.first_key(i), last = head.mod.last_key(i);
    std::vector<Acc> q(size_t(p.d));
    load_query(p, head, i, q.data());
    std::vector<Acc> s(size_t(last - first));
    Acc m = -std::numeric_limits<Acc>::infinity();
    for (int64_t j = first; j < last; ++j) {
      s[j - first] = head.score(dot(q.data(), k[j], p.d), i, j);
      m = std::max(m, s[j - first]);
    }
    Acc l = Acc(0);
    for (Acc& x : s) l += (x = std::exp(x - m));
    for (int64_t j = first; j < last; ++j) {
      Acc prob = Math::round(s[j - first] / l * head.dropout_factor(i, j), head.dtype);
      if (prob == Acc(0)) continue;  // a dropped key's value is never read
      for (int64_t c = 0; c < p.d_v; ++c) acc[c] += prob * v[j][c];
    }
    lse = float(m + std::log(l));
  }
  store_row(p.out, out_base, p.d_v, acc.data());
  if (p.lse.present()) p.lse.as<float>()[p.lse_index(head.b, i, head.h)] = lse;
}

template <class Math>
void forward(const AttnProblem& p) {
  using Acc = typename Math::Acc;
  parallel_run(p.batch * p.heads_q, p.exec.num_threads, [&](WorkQueue& queue) {
    for (int64_t item; queue.next(&item);) {
      const int64_t b = item / p.heads_q, h = item % p.heads_q;
      Head<Math> head(p, b, h);
      if (head.seqlen_q == 0) continue;
      // Only keys below seqlen_k exist: unused cache slots are never read.
      Rows<Acc> k = load_kv<Acc>(p, p.k, b, p.kv_head(h), head.seqlen_k, p.d);
      Rows<Acc> v = load_kv<Acc>(p, p.v, b, p.kv_head(h), head.seqlen_k, p.d_v);
      for (int64_t i = 0; i < head.seqlen_q; ++i) forward_row(p, head, k, v, i);
    }
  });
}

// ---- backward -------------------------------------------------------------------------------

// Gradients of one kv head over the query heads of its group.
template <class Acc>
struct KvGrads {
  Rows<Acc> dk, dv;
  KvGrads(int64_t keys, int64_t d, int64_t d_v) : dk(keys, d), dv(keys, d_v) {}
};

// Query row i in the backward: its inputs, D_i = dot(dout_i, out_i) = sum_j P_ij dP_ij, and its
// dq accumulator.
template <class Acc>
struct BackwardRow {
  std::vector<Acc> q, dout, dq;
  Acc lse, delta;
};

// The (i, j) term: adds to dq_i and to the head's dk_j (unscaled) and dv_j.
template <class Math>
void backward_pair(const Head<Math>& head, const Rows<typename Math::Acc>& k,
                   const Rows<typename Math::Acc>& v, BackwardRow<typename Math::Acc>& row,
                   KvGrads<typename Math::Acc>& grads, int64_t i, int64_t j) {
  using Acc = typename Math::Acc;
  const int64_t d = int64_t(row.q.size()), d_v = int64_t(row.dout.size());
  const auto round = [&](Acc x) { return Math::round(x, head.dtype); };
  const Acc qk = dot(row.q.data(), k[j], d);
  const Acc prob = round(std::exp(head.score(qk, i, j) - row.lse));
  const Acc z = head.dropout_factor(i, j);
  const Acc dropped = round(prob * z);
  for (int64_t c = 0; c < d_v; ++c) grads.dv[j][c] += dropped * row.dout[c];
  const Acc dp = round(z * round(dot(row.dout.data(), v[j], d_v)));
  Acc ds = round(prob * (dp - row.delta));
  if (head.mod.softcap > Acc(0)) {
    ScoreMod<Acc> capped = head.mod;  // the softcapped score before ALiBi, for its derivative
    capped.alibi_slope = Acc(0);
    ds = round(ds * capped.capped_derivative(capped.score(qk, i, j)));
  }
  for (int64_t c = 0; c < d; ++c) row.dq[c] += ds * k[j][c];
  for (int64_t c = 0; c < d; ++c) grads.dk[j][c] += ds * row.q[c];
}

// Row i of one query head: writes dq_i and adds its terms to the head's dk/dv. A row with no kept
// key, or whose lse is -inf, contributes nothing and gets dq_i = 0.
template <class Math>
void backward_row(const AttnProblem& p, const Head<Math>& head, const Rows<typename Math::Acc>& k,
                  const Rows<typename Math::Acc>& v, KvGrads<typename Math::Acc>& grads,
                  int64_t i) {
  using Acc = typename Math::Acc;
  const float lse = p.lse.as<const float>()[p.lse_index(head.b, i, head.h)];
  BackwardRow<Acc> row{std::vector<Acc>(size_t(p.d)), std::vector<Acc>(size_t(p.d_v)),
                       std::vector<Acc>(size_t(p.d), Acc(0)), Acc(lse), Acc(0)};
  if (!head.empty_row(i) && lse != kNegInf) {
    std::vector<Acc> out(size_t(p.d_v));
    load_row(p.q, p.q_row(p.q, head.b, i, head.h), p.d, row.q.data());
    load_row(p.out, p.q_row(p.out, head.b, i, head.h), p.d_v, out.data());
    load_row(p.dout, p.q_row(p.dout, head.b, i, head.h), p.d_v, row.dout.data());
    row.delta = dot(row.dout.data(), out.data(), p.d_v);
    for (int64_t j = head.mod.first_key(i); j < head.mod.last_key(i); ++j) {
      backward_pair(head, k, v, row, grads, i, j);
    }
  }
  for (Acc& x : row.dq) x *= head.mod.scale;
  store_row(p.dq, p.q_row(p.dq, head.b, i, head.h), p.d, row.dq.data());
}

// dk/dv of kv head hk of sequence b: each query head's gradient is rounded (it is its own tensor
// in a framework) and then summed over the group.
template <class Math>
void backward_kv_head(const AttnProblem& p, int64_t b, int64_t hk) {
  using Acc = typename Math::Acc;
  const int64_t rows = p.stored_keys_of(b), group = p.heads_q / p.heads_kv;
  const int64_t keys = p.seqlen_k_of(b);
  const Rows<Acc> k = load_kv<Acc>(p, p.k, b, hk, keys, p.d);
  const Rows<Acc> v = load_kv<Acc>(p, p.v, b, hk, keys, p.d_v);
  KvGrads<Acc> total(rows, p.d, p.d_v);
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    Head<Math> head(p, b, h);
    KvGrads<Acc> grads(keys, p.d, p.d_v);
    for (int64_t i = 0; i < head.seqlen_q; ++i) backward_row(p, head, k, v, grads, i);
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t c = 0; c < p.d; ++c) {
        total.dk[j][c] += Math::round(head.mod.scale * grads.dk[j][c], head.dtype);
      }
      for (int64_t c = 0; c < p.d_v; ++c) total.dv[j][c] += Math::round(grads.dv[j][c], head.dtype);
    }
  }
  for (int64_t j = 0; j < rows; ++j) {
    store_row(p.dk, p.kv_row(p.dk, b, j, hk), p.d, total.dk[j]);
    store_row(p.dv, p.kv_row(p.dv, b, j, hk), p.d_v, total.dv[j]);
  }
}

template <class Math>
void backward(const AttnProblem& p) {
  // A kv head's group of query heads is one item: its dk / dv sum runs in a fixed order.
  parallel_run(p.batch * p.heads_kv, p.exec.num_threads, [&](WorkQueue& queue) {
    for (int64_t item; queue.next(&item);) {
      backward_kv_head<Math>(p, item / p.heads_kv, item % p.heads_kv);
    }
  });
}

}  // namespace

void reference_fwd(const AttnProblem& p, bool emulate_low_precision) {
  if (emulate_low_precision) {
    forward<LowPrecisionMath>(p);
  } else {
    forward<ExactMath>(p);
  }
}

void reference_bwd(const AttnProblem& p, bool emulate_low_precision) {
  if (emulate_low_precision) {
    backward<LowPrecisionMath>(p);
  } else {
    backward<ExactMath>(p);
  }
}

}  // namespace flashattn::cpu
