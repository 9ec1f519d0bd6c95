// Tiled CPU forward, FlashAttention-2's algorithm: one work item per (batch, query head, query
// tile); the item visits only the key tiles its rows keep, with an online softmax in float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "cpu/rotary.h"
#include "cpu/tile_loader.h"
#include "cpu/tile_math.h"

namespace flashattn::cpu {
namespace {

// Tile sizes, measured best among 64, 128 and 256 for each (d = 128, bf16, causal and not):
constexpr int64_t kBlockM = 128;  // query rows per item: one K/V tile conversion serves 128 rows
constexpr int64_t kBlockN = 128;  // keys per tile: fewer online-softmax rescales of the output;
                                  // larger tiles waste more of the diagonal under a causal mask
static_assert(kBlockM % kMr == 0 && kBlockN % kNr == 0, "tiles hold whole register tiles");

// Per-thread tiles, allocated once per thread per call.
struct FwdScratch {
  int64_t d, dv, dv_pad;
  std::vector<float> q;         // [kBlockM, d] queries (rotated), row-major: A of S = Q K^T
  std::vector<float> k;         // K^T as kBlockN / kNr column panels of d rows: B of S
  std::vector<float> v;         // V as dv_pad / kNr column panels of kBlockN rows: B of O += P V
  std::vector<float> s;         // [kBlockM, kBlockN] scores, then probabilities
  std::vector<float> o;         // [kBlockM, dv_pad] unnormalised output accumulator
  std::vector<float> row;       // one converted K or V row
  std::vector<float> z;         // dropout keep factors of one score row
  std::vector<float> m, l;      // running max (log2 units) and sum per query row
  std::vector<int64_t> lo, hi;  // kept key range per query row

  explicit FwdScratch(const AttnProblem& p)
      : d(p.d), dv(p.d_v), dv_pad(round_up(p.d_v, kNr)), q(size_t(kBlockM * d)),
        k(size_t(kBlockN * d)), v(size_t(dv_pad * kBlockN)), s(size_t(kBlockM * kBlockN)),
        o(size_t(kBlockM * dv_pad)), row(size_t(std::max(d, dv))), z(size_t(kBlockN)),
        m(size_t(kBlockM)), l(size_t(kBlockM)), lo(size_t(kBlockM)), hi(size_t(kBlockM)) {}
};

// Loads keys [j0, j0 + cols) of (b, kv head hk) into the K and V panels; keys outside
// [load_lo, load_hi) are zeros and never read from memory (unused cache slots may hold NaN).
void load_kv_tile(const AttnProblem& p, FwdScratch& w, int64_t b, int64_t hk, int64_t j0,
                  int64_t cols, int64_t load_lo, int64_t load_hi) {
  visit_key_tile(
      p, b, hk, j0, cols, load_lo, load_hi, w.row.data(),
      [&](int64_t jj, const float* row) { pack_column(row, w.d, jj, w.k.data()); },
      [&](int64_t jj, const float* row) { pack_row(row, w.dv, jj, w.v.data(), kBlockN); },
      [&](int64_t jj) {
        zero_column(w.d, jj, w.k.data());
        zero_row(w.dv, jj, w.v.data(), kBlockN);
      });
}

// Online softmax of one row of log2-domain scores x[0, cols): updates the running max m and sum
// l, rescales the output row o when the max grows, and leaves the weights 2^(x - m) in x.
void softmax_row(float* x, int64_t cols, float* m, float* l, float* o, int64_t dv_pad) {
  const float m_new = std::max(*m, max_of(x, cols));
  if (m_new == kNegInf) {  // nothing kept yet: the weights are zero, o and l stay zero
    std::fill(x, x + cols, 0.f);
    return;
  }
  if (*m != kNegInf && m_new > *m) {
    const float alpha = std::exp2(*m - m_new);
    *l *= alpha;
    for (int64_t c = 0; c < dv_pad; ++c) o[c] *= alpha;
  }
  *m = m_new;
  *l += exp2_shifted_sum(x, cols, m_new);
}

void fwd_item(const AttnProblem& p, FwdScratch& w, int64_t b, int64_t h, int64_t tile) {
  const int64_t i0 = tile * kBlockM, rows = std::min(kBlockM, p.seqlen_q_of(b) - i0);
  const ScoreMod<float> mod = p.score_mod<float>(b, h);
  const int64_t hk = p.kv_head(h);

  int64_t key_lo, key_hi;  // keys any row of the tile keeps
  key_ranges(mod, i0, rows, w.lo.data(), w.hi.data(), &key_lo, &key_hi);

  const int64_t rows_pad = round_up(rows, kMr);
  const int64_t d = w.d, dv_pad = w.dv_pad;
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), 0.f);
  std::fill(w.o.begin(), w.o.begin() + rows_pad * dv_pad, 0.f);
  if (key_lo < key_hi) {
    for (int64_t r = 0; r < rows_pad; ++r) {
      float* q = w.q.data() + r * d;
      if (r >= rows) {
        std::fill(q, q + d, 0.f);
        continue;
      }
      load_row(p.q, p.q_row(p.q, b, i0 + r, h), d, q);
      if (p.rotary_dim > 0) apply_rotary(q, p, p.cache_position_of(b) + i0 + r);
    }
  }

  const bool dropout = p.opts.dropout_p > 0.f;
  const DropoutRng rng = p.dropout_rng(b, h);
  // Tiles start at the multiple of kNr at or below key_lo: whole Philox blocks, < kNr idle keys.
  for (int64_t j0 = key_lo / kNr * kNr; j0 < key_hi; j0 += kBlockN) {
    const int64_t keys = std::min(kBlockN, key_hi - j0), cols = round_up(keys, kNr);
    load_kv_tile(p, w, b, hk, j0, cols, key_lo, key_hi);
    gemm_panels(rows_pad, cols / kNr, d, w.q.data(), d, w.k.data(), d * kNr, w.s.data(), kBlockN,
                false);
    score_tile(mod, w.s.data(), kBlockN, 1, rows, cols, i0, j0, w.lo.data(), w.hi.data());
    for (int64_t r = 0; r < rows_pad; ++r) {
      float* x = w.s.data() + r * kBlockN;
      if (r >= rows) {
        std::fill(x, x + cols, 0.f);
        continue;
      }
      softmax_row(x, cols, &w.m[size_t(r)], &w.l[size_t(r)], w.o.data() + r * dv_pad, dv_pad);
      if (dropout) {  // l keeps the undropped weights; 1 / (1 - p) is applied at the end
        dropout_factors(rng, 1.f, i0 + r, j0, cols, w.z.data(), 1);
        for (int64_t jj = 0; jj < cols; ++jj) x[jj] *= w.z[size_t(jj)];
      }
    }
    gemm_panels(rows_pad, dv_pad / kNr, keys, w.s.data(), kBlockN, w.v.data(), kBlockN * kNr,
                w.o.data(), dv_pad, true);
  }

  const double keep_scale = 1.0 / (1.0 - double(p.opts.dropout_p));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const float l = w.l[size_t(r)];
    const int64_t out_row = p.q_row(p.out, b, i, h);
    float lse = kNegInf;
    if (l > 0.f) {  // l >= 1 once a key is kept: the max contributes 2^0
      store_row(p.out, out_row, w.o.data() + r * dv_pad, w.dv, float(keep_scale / double(l)));
      lse = float(double(w.m[size_t(r)]) * double(kLn2) + std::log(double(l)));
    } else {
      store_zeros(p.out, out_row, w.dv);
    }
    if (p.lse.present()) p.lse.as<float>()[p.lse_index(b, i, h)] = lse;
  }
}

}  // namespace

void tiled_fwd(const AttnProblem& p) {
  const TileGrid grid(p.batch, p.heads_q,
                      [&](int64_t b) { return (p.seqlen_q_of(b) + kBlockM - 1) / kBlockM; });
  parallel_run(grid.size(), p.exec.num_threads, [&](WorkQueue& queue) {
    FwdScratch scratch(p);
    for (int64_t index; queue.next(&index);) {
      const TileGrid::Item item = grid.item(index);
      fwd_item(p, scratch, item.batch, item.head, item.tile);
    }
  });
}

}  // namespace flashattn::cpu
