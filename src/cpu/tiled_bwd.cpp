// Tiled CPU backward (dense and varlen), deterministic and race-free by construction: pass 1
// owns query tiles and writes dq (and each row's D = dot(dout, out)); pass 2 owns key tiles of a
// kv head and writes dk, dv, summing over the group's query heads in a fixed order. Both passes
// recompute the scores and P = exp(s - lse) from the forward's lse, in float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "cpu/tile_loader.h"
#include "cpu/tile_math.h"

namespace flashattn::cpu {
namespace {

// Tile sizes, measured best among 64, 128 and 256 (d = 128, bf16, causal and not):
constexpr int64_t kBlockM = 128;        // pass 1: query rows per item
constexpr int64_t kBlockN = 128;        // pass 1: keys per step
constexpr int64_t kBlockKeys = 128;     // pass 2: keys per item (rows of its dk/dv accumulators)
constexpr int64_t kBlockQueries = 128;  // pass 2: queries per step
constexpr float kPosInf = std::numeric_limits<float>::infinity();
static_assert(kBlockM % kMr == 0 && kBlockN % kNr == 0, "pass 1 tiles hold whole register tiles");
static_assert(kBlockKeys % kNr == 0 && kBlockQueries % kNr == 0, "pass 2 tiles likewise");

// Per query row and head, from pass 1 for pass 2: lse in log2 units (+inf for a row without
// kept keys, so that 2^(s - lse) is exactly 0) and D = dot(dout, out) (0 for such a row).
struct RowStats {
  float lse2, delta;
};

// Indexing of the RowStats of (head h, row i of sequence b).
struct RowIndex {
  int64_t rows_per_head;
  const AttnProblem* p;
  explicit RowIndex(const AttnProblem& problem)
      : rows_per_head(problem.varlen_q ? problem.cu_seqlens_q.as<const int32_t>()[problem.batch]
                                       : problem.batch * problem.seqlen_q),
        p(&problem) {}
  int64_t operator()(int64_t b, int64_t i, int64_t h) const {
    return h * rows_per_head + (p->varlen_q ? p->q_start(b) : b * p->seqlen_q) + i;
  }
};

// The tanh derivative of the softcap at every (r, jj) of a raw dot-product tile laid out as in
// score_tile: d capped / d (scale * dot).
void softcap_derivatives(const ScoreMod<float>& mod, const float* s, int64_t ld_row, int64_t ld_key,
                         int64_t rows, int64_t cols, int64_t i0, int64_t j0, float* derivative) {
  ScoreMod<float> capped = mod;  // the capped score before ALiBi
  capped.alibi_slope = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t jj = 0; jj < cols; ++jj) {
      const int64_t at = r * ld_row + jj * ld_key;
      derivative[at] = capped.capped_derivative(capped.score(s[at], i0 + r, j0 + jj));
    }
  }
}

// dS = P * (Z * dP - D) over n elements, from log2 scores x (left holding P Z), the rows' lse2
// and D (one value or one per element), the dropout factors z and softcap derivatives (or null).
void probabilities_and_ds(float* x, float* dp, int64_t n, const float* lse2, const float* delta,
                          bool per_element, const float* z, const float* derivative) {
  for (int64_t e = 0; e < n; e += kVec) {
    const Vec4 l = per_element ? load4(lse2 + e) : splat4(*lse2);
    const Vec4 dd = per_element ? load4(delta + e) : splat4(*delta);
    const Vec4 prob = exp2_4(load4(x + e) - l);
    const Vec4 zz = z ? load4(z + e) : splat4(1.f);
    Vec4 ds = prob * (zz * load4(dp + e) - dd);
    if (derivative) ds *= load4(derivative + e);
    store4(x + e, prob * zz);
    store4(dp + e, ds);
  }
}

// ---- pass 1: dq and the row statistics --------------------------------------------------------

struct DqScratch {
  int64_t d, dv, d_pad;
  std::vector<float> q, dout;               // [kBlockM, d], [kBlockM, dv] row-major: A operands
  std::vector<float> k_t, v_t, k_r;         // K^T, V^T panels (B of S, dP); K row panels (B of dq)
  std::vector<float> s, dp, z, derivative;  // [kBlockM, kBlockN] tiles
  std::vector<float> dq;                    // [kBlockM, d_pad] accumulator
  std::vector<float> row;
  std::vector<int64_t> lo, hi;
  std::vector<RowStats> stats;

  explicit DqScratch(const AttnProblem& p)
      : d(p.d), dv(p.d_v), d_pad(round_up(p.d, kNr)), q(size_t(kBlockM * d)),
        dout(size_t(kBlockM * dv)), k_t(size_t(kBlockN * d)), v_t(size_t(kBlockN * dv)),
        k_r(size_t(d_pad * kBlockN)), s(size_t(kBlockM * kBlockN)), dp(s.size()), z(s.size()),
        derivative(s.size()), dq(size_t(kBlockM * d_pad)), row(size_t(std::max(d, dv))),
        lo(size_t(kBlockM)), hi(size_t(kBlockM)), stats(size_t(kBlockM)) {}
};

// Loads keys [j0, j0 + cols) of (b, kv head hk) as K^T, V^T and K panels; keys outside
// [load_lo, load_hi) are zeros and never read.
void load_key_tile(const AttnProblem& p, DqScratch& w, int64_t b, int64_t hk, int64_t j0,
                   int64_t cols, int64_t load_lo, int64_t load_hi) {
  visit_key_tile(
      p, b, hk, j0, cols, load_lo, load_hi, w.row.data(),
      [&](int64_t jj, const float* row) {
        pack_column(row, w.d, jj, w.k_t.data());
        pack_row(row, w.d, jj, w.k_r.data(), kBlockN);
      },
      [&](int64_t jj, const float* row) { pack_column(row, w.dv, jj, w.v_t.data()); },
      [&](int64_t jj) {
        zero_column(w.d, jj, w.k_t.data());
        zero_column(w.dv, jj, w.v_t.data());
        zero_row(w.d, jj, w.k_r.data(), kBlockN);
      });
}

void dq_item(const AttnProblem& p, const RowIndex& index, RowStats* stats, DqScratch& w, int64_t b,
             int64_t h, int64_t tile) {
  const int64_t i0 = tile * kBlockM, rows = std::min(kBlockM, p.seqlen_q_of(b) - i0);
  const int64_t rows_pad = round_up(rows, kMr), d = w.d, dv = w.dv;
  const ScoreMod<float> mod = p.score_mod<float>(b, h);
  int64_t key_lo, key_hi;
  key_ranges(mod, i0, rows, w.lo.data(), w.hi.data(), &key_lo, &key_hi);

  for (int64_t r = 0; r < rows_pad; ++r) {
    float* q = w.q.data() + r * d;
    float* dout = w.dout.data() + r * dv;
    RowStats& st = w.stats[size_t(r)];
    const float lse = r < rows ? p.lse.as<const float>()[p.lse_index(b, i0 + r, h)] : kNegInf;
    const bool alive = lse != kNegInf && w.lo[size_t(r)] < w.hi[size_t(r)];
    if (!alive) {  // contributes nothing (and padding rows past `rows`)
      std::fill(q, q + d, 0.f);
      std::fill(dout, dout + dv, 0.f);
      st = RowStats{kPosInf, 0.f};
    } else {
      load_row(p.q, p.q_row(p.q, b, i0 + r, h), d, q);
      load_row(p.dout, p.q_row(p.dout, b, i0 + r, h), dv, dout);
      load_row(p.out, p.q_row(p.out, b, i0 + r, h), dv, w.row.data());
      float delta = 0.f;
      for (int64_t c = 0; c < dv; ++c) delta += dout[c] * w.row[size_t(c)];
      st = RowStats{lse * kLog2e, delta};
    }
    if (r < rows) stats[index(b, i0 + r, h)] = st;
  }

  std::fill(w.dq.begin(), w.dq.begin() + rows_pad * w.d_pad, 0.f);
  const bool dropout = p.opts.dropout_p > 0.f, softcap = mod.softcap > 0.f;
  const float keep_scale = float(1.0 / (1.0 - double(p.opts.dropout_p)));
  const DropoutRng rng = p.dropout_rng(b, h);
  const int64_t hk = p.kv_head(h);
  for (int64_t j0 = key_lo / kNr * kNr; j0 < key_hi; j0 += kBlockN) {
    const int64_t keys = std::min(kBlockN, key_hi - j0), cols = round_up(keys, kNr);
    load_key_tile(p, w, b, hk, j0, cols, key_lo, key_hi);
    gemm_panels(rows_pad, cols / kNr, d, w.q.data(), d, w.k_t.data(), d * kNr, w.s.data(), kBlockN,
                false);
    gemm_panels(rows_pad, cols / kNr, dv, w.dout.data(), dv, w.v_t.data(), dv * kNr, w.dp.data(),
                kBlockN, false);
    if (softcap) {
      softcap_derivatives(mod, w.s.data(), kBlockN, 1, rows, cols, i0, j0, w.derivative.data());
    }
    score_tile(mod, w.s.data(), kBlockN, 1, rows, cols, i0, j0, w.lo.data(), w.hi.data());
    for (int64_t r = 0; r < rows_pad; ++r) {
      const int64_t at = r * kBlockN;
      if (r >= rows) {
        std::fill(w.dp.begin() + at, w.dp.begin() + at + cols, 0.f);
        continue;
      }
      if (dropout) dropout_factors(rng, keep_scale, i0 + r, j0, cols, w.z.data() + at, 1);
      probabilities_and_ds(w.s.data() + at, w.dp.data() + at, cols, &w.stats[size_t(r)].lse2,
                           &w.stats[size_t(r)].delta, false, dropout ? w.z.data() + at : nullptr,
                           softcap ? w.derivative.data() + at : nullptr);
    }
    gemm_panels(rows_pad, w.d_pad / kNr, keys, w.dp.data(), kBlockN, w.k_r.data(), kBlockN * kNr,
                w.dq.data(), w.d_pad, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    store_row(p.dq, p.q_row(p.dq, b, i0 + r, h), w.dq.data() + r * w.d_pad, d, mod.scale);
  }
}

// ---- pass 2: dk, dv ----------------------------------------------------------------------------

struct DkvScratch {
  int64_t d, dv, d_pad, dv_pad;
  std::vector<float> k, v;                      // [kBlockKeys, d], [kBlockKeys, dv]: A operands
  std::vector<float> q_t, dout_t, q_r, dout_r;  // Q^T, dout^T panels; Q, dout row panels
  std::vector<float> st, dpt, z, derivative;    // [kBlockKeys, kBlockQueries] tiles
  std::vector<float> dk, dv_acc;                // [kBlockKeys, d_pad], [kBlockKeys, dv_pad]
  std::vector<float> row, lse2, delta;
  std::vector<int64_t> lo, hi;

  explicit DkvScratch(const AttnProblem& p)
      : d(p.d), dv(p.d_v), d_pad(round_up(p.d, kNr)), dv_pad(round_up(p.d_v, kNr)),
        k(size_t(kBlockKeys * d)), v(size_t(kBlockKeys * dv)), q_t(size_t(kBlockQueries * d)),
        dout_t(size_t(kBlockQueries * dv)), q_r(size_t(d_pad * kBlockQueries)),
        dout_r(size_t(dv_pad * kBlockQueries)), st(size_t(kBlockKeys * kBlockQueries)),
        dpt(st.size()), z(st.size()), derivative(st.size()), dk(size_t(kBlockKeys * d_pad)),
        dv_acc(size_t(kBlockKeys * dv_pad)), row(size_t(std::max(d, dv))),
        lse2(size_t(kBlockQueries)), delta(size_t(kBlockQueries)), lo(size_t(kBlockQueries)),
        hi(size_t(kBlockQueries)) {}
};

// Adds the contributions of queries [i0, i0 + rows) of head h to the key tile's dk/dv.
void dkv_step(const AttnProblem& p, const RowIndex& index, const RowStats* stats, DkvScratch& w,
              int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t keys_pad) {
  const ScoreMod<float> mod = p.score_mod<float>(b, h);
  const int64_t d = w.d, dv = w.dv, rows_pad = round_up(rows, kNr);
  int64_t unused_lo, unused_hi;
  key_ranges(mod, i0, rows, w.lo.data(), w.hi.data(), &unused_lo, &unused_hi);
  for (int64_t r = 0; r < rows_pad; ++r) {
    if (r + kPrefetchRows < rows) {
      prefetch_row(p.q, p.q_row(p.q, b, i0 + r + kPrefetchRows, h), d);
      prefetch_row(p.dout, p.q_row(p.dout, b, i0 + r + kPrefetchRows, h), dv);
    }
    const RowStats st = r < rows ? stats[index(b, i0 + r, h)] : RowStats{kPosInf, 0.f};
    w.lse2[size_t(r)] = st.lse2;
    w.delta[size_t(r)] = st.delta;
    if (st.lse2 == kPosInf) {  // contributes nothing; its memory is not read
      zero_column(d, r, w.q_t.data());
      zero_row(d, r, w.q_r.data(), kBlockQueries);
      zero_column(dv, r, w.dout_t.data());
      zero_row(dv, r, w.dout_r.data(), kBlockQueries);
      continue;
    }
    load_row(p.q, p.q_row(p.q, b, i0 + r, h), d, w.row.data());
    pack_column(w.row.data(), d, r, w.q_t.data());
    pack_row(w.row.data(), d, r, w.q_r.data(), kBlockQueries);
    load_row(p.dout, p.q_row(p.dout, b, i0 + r, h), dv, w.row.data());
    pack_column(w.row.data(), dv, r, w.dout_t.data());
    pack_row(w.row.data(), dv, r, w.dout_r.data(), kBlockQueries);
  }
  gemm_panels(keys_pad, rows_pad / kNr, d, w.k.data(), d, w.q_t.data(), d * kNr, w.st.data(),
              kBlockQueries, false);
  gemm_panels(keys_pad, rows_pad / kNr, dv, w.v.data(), dv, w.dout_t.data(), dv * kNr, w.dpt.data(),
              kBlockQueries, false);
  const bool dropout = p.opts.dropout_p > 0.f, softcap = mod.softcap > 0.f;
  if (softcap) {
    softcap_derivatives(mod, w.st.data(), 1, kBlockQueries, rows, keys_pad, i0, j0,
                        w.derivative.data());
  }
  score_tile(mod, w.st.data(), 1, kBlockQueries, rows, keys_pad, i0, j0, w.lo.data(), w.hi.data());
  if (dropout) {
    const float keep_scale = float(1.0 / (1.0 - double(p.opts.dropout_p)));
    const DropoutRng rng = p.dropout_rng(b, h);
    for (int64_t r = 0; r < rows; ++r) {
      dropout_factors(rng, keep_scale, i0 + r, j0, keys_pad, w.z.data() + r, kBlockQueries);
    }
  }
  for (int64_t jr = 0; jr < keys_pad; ++jr) {
    const int64_t at = jr * kBlockQueries;
    if (dropout) std::fill(w.z.begin() + at + rows, w.z.begin() + at + rows_pad, 0.f);
    probabilities_and_ds(w.st.data() + at, w.dpt.data() + at, rows_pad, w.lse2.data(),
                         w.delta.data(), true, dropout ? w.z.data() + at : nullptr,
                         softcap ? w.derivative.data() + at : nullptr);
  }
  gemm_panels(keys_pad, w.dv_pad / kNr, rows, w.st.data(), kBlockQueries, w.dout_r.data(),
              kBlockQueries * kNr, w.dv_acc.data(), w.dv_pad, true);
  gemm_panels(keys_pad, w.d_pad / kNr, rows, w.dpt.data(), kBlockQueries, w.q_r.data(),
              kBlockQueries * kNr, w.dk.data(), w.d_pad, true);
}

void dkv_item(const AttnProblem& p, const RowIndex& index, const RowStats* stats, DkvScratch& w,
              int64_t b, int64_t hk, int64_t tile) {
  const int64_t j0 = tile * kBlockKeys;
  const int64_t stored = std::min(kBlockKeys, p.stored_keys_of(b) - j0);
  const int64_t keys = std::clamp<int64_t>(p.seqlen_k_of(b) - j0, 0, stored);
  const int64_t keys_pad = round_up(keys, kNr), d = w.d, dv = w.dv;
  std::fill(w.dk.begin(), w.dk.begin() + keys_pad * w.d_pad, 0.f);
  std::fill(w.dv_acc.begin(), w.dv_acc.begin() + keys_pad * w.dv_pad, 0.f);
  for (int64_t jr = 0; jr < keys_pad; ++jr) {
    float* k = w.k.data() + jr * d;
    float* v = w.v.data() + jr * dv;
    if (jr < keys) {
      load_row(p.k, p.kv_row(p.k, b, j0 + jr, hk), d, k);
      load_row(p.v, p.kv_row(p.v, b, j0 + jr, hk), dv, v);
    } else {
      std::fill(k, k + d, 0.f);
      std::fill(v, v + dv, 0.f);
    }
  }
  const int64_t group = p.heads_q / p.heads_kv, seqlen_q = p.seqlen_q_of(b);
  for (int64_t h = hk * group; keys > 0 && h < (hk + 1) * group; ++h) {
    const ScoreMod<float> mod = p.score_mod<float>(b, h);
    for (int64_t i0 = 0; i0 < seqlen_q; i0 += kBlockQueries) {
      const int64_t rows = std::min(kBlockQueries, seqlen_q - i0);
      // Every kept (i, j) of these rows lies in [first_key(i0), last_key(last row)).
      if (mod.first_key(i0) >= j0 + keys || mod.last_key(i0 + rows - 1) <= j0) continue;
      dkv_step(p, index, stats, w, b, h, i0, rows, j0, keys_pad);
    }
  }
  const float scale = p.opts.scale;
  for (int64_t jr = 0; jr < stored; ++jr) {
    const int64_t dk_row = p.kv_row(p.dk, b, j0 + jr, hk), dv_row = p.kv_row(p.dv, b, j0 + jr, hk);
    if (jr < keys) {
      store_row(p.dk, dk_row, w.dk.data() + jr * w.d_pad, d, scale);
      store_row(p.dv, dv_row, w.dv_acc.data() + jr * w.dv_pad, dv, 1.f);
    } else {
      store_zeros(p.dk, dk_row, d);
      store_zeros(p.dv, dv_row, dv);
    }
  }
}

}  // namespace

void tiled_bwd(const AttnProblem& p) {
  const RowIndex index(p);
  std::vector<RowStats> stats(size_t(index.rows_per_head * p.heads_q));
  const TileGrid query_tiles(p.batch, p.heads_q,
                             [&](int64_t b) { return (p.seqlen_q_of(b) + kBlockM - 1) / kBlockM; });
  parallel_run(query_tiles.size(), p.exec.num_threads, [&](WorkQueue& queue) {
    DqScratch scratch(p);
    for (int64_t n; queue.next(&n);) {
      const TileGrid::Item item = query_tiles.item(n);
      dq_item(p, index, stats.data(), scratch, item.batch, item.head, item.tile);
    }
  });
  const TileGrid key_tiles(p.batch, p.heads_kv, [&](int64_t b) {
    return (p.stored_keys_of(b) + kBlockKeys - 1) / kBlockKeys;
  });
  parallel_run(key_tiles.size(), p.exec.num_threads, [&](WorkQueue& queue) {
    DkvScratch scratch(p);
    for (int64_t n; queue.next(&n);) {
      const TileGrid::Item item = key_tiles.item(n);
      dkv_item(p, index, stats.data(), scratch, item.batch, item.head, item.tile);
    }
  });
}

}  // namespace flashattn::cpu
