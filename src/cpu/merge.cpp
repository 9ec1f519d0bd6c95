// flashattn_merge on the CPU: combines partial attention over disjoint key sets through their
// log-sum-exps, in double. A split whose lse is -inf saw no key: its out is never read.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_backend.h"

namespace flashattn::cpu {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Element offsets of row (b, i, h) in the dense or varlen (b == 0, i indexes total_q) layouts.
int64_t out_partial_row(const MergeProblem& p, int64_t s, int64_t b, int64_t i, int64_t h) {
  return p.varlen ? p.out_partial.offset(s, i, h) : p.out_partial.offset(s, b, i, h);
}
int64_t lse_partial_index(const MergeProblem& p, int64_t s, int64_t b, int64_t i, int64_t h) {
  return p.varlen ? p.lse_partial.offset(s, h, i) : p.lse_partial.offset(s, b, h, i);
}
int64_t out_row(const MergeProblem& p, int64_t b, int64_t i, int64_t h) {
  return p.varlen ? p.out.offset(i, h) : p.out.offset(b, i, h);
}
int64_t lse_index(const MergeProblem& p, int64_t b, int64_t i, int64_t h) {
  return p.varlen ? p.lse.offset(h, i) : p.lse.offset(b, h, i);
}

// `lse` and `acc` are scratch of sizes splits and d_v.
void merge_row(const MergeProblem& p, int64_t b, int64_t i, int64_t h, std::vector<double>& lse,
               std::vector<double>& acc) {
  double m = kNegInf;
  for (int64_t s = 0; s < p.splits; ++s) {
    lse[s] = p.lse_partial.as<const float>()[lse_partial_index(p, s, b, i, h)];
    m = std::fmax(m, lse[s]);
  }
  std::fill(acc.begin(), acc.end(), 0.0);
  double merged_lse = kNegInf;
  if (m != kNegInf) {
    double total = 0;
    for (int64_t s = 0; s < p.splits; ++s) total += std::exp(lse[s] - m);
    for (int64_t s = 0; s < p.splits; ++s) {
      if (lse[s] == kNegInf) continue;
      const double weight = std::exp(lse[s] - m) / total;
      const int64_t base = out_partial_row(p, s, b, i, h);
      for (int64_t c = 0; c < p.d_v; ++c) {
        acc[c] += weight * load_as_double(p.out_partial.data, p.out_partial.dtype, base + c);
      }
    }
    merged_lse = m + std::log(total);
  }
  const int64_t base = out_row(p, b, i, h);
  for (int64_t c = 0; c < p.d_v; ++c) store_from_double(p.out.data, p.out.dtype, base + c, acc[c]);
  if (p.lse.present()) p.lse.as<float>()[lse_index(p, b, i, h)] = float(merged_lse);
}

}  // namespace

void merge(const MergeProblem& p) {
  std::vector<double> lse(size_t(p.splits)), acc(size_t(p.d_v));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.seqlen_q; ++i) {
      for (int64_t h = 0; h < p.heads; ++h) merge_row(p, b, i, h, lse, acc);
    }
  }
}

}  // namespace flashattn::cpu
