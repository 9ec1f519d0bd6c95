// KV-cache append on the CPU: copies k_new / v_new into the dense or paged cache at
// cache_seqlens, rotating the new keys at their absolute positions when rotary tables are given.
#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_backend.h"
#include "cpu/rotary.h"

namespace flashattn::cpu {
namespace {

constexpr int64_t kNoRotation = -1;

// Copies `width` elements from src[src_base] to dst[dst_base]; with a rotary position, the first
// rotary_dim of them are rotated there (in double, rounded once on store).
void copy_row(const AttnProblem& p, const View& src, int64_t src_base, const View& dst,
              int64_t dst_base, int64_t width, int64_t rotary_position) {
  std::vector<double> row(static_cast<size_t>(width));
  for (int64_t c = 0; c < width; ++c) row[c] = load_as_double(src.data, src.dtype, src_base + c);
  if (rotary_position != kNoRotation) apply_rotary(row.data(), p, rotary_position);
  for (int64_t c = 0; c < width; ++c) store_from_double(dst.data, dst.dtype, dst_base + c, row[c]);
}

}  // namespace

void kv_append(const AttnProblem& p) {
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.seqlen_new; ++t) {
      const int64_t j = p.cache_position_of(b) + t;  // the new key's index, and its position
      const int64_t rotary_position = p.rotary_dim > 0 ? j : kNoRotation;
      for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
        copy_row(p, p.k_new, p.k_new.offset(b, t, hk), p.k, p.kv_row(p.k, b, j, hk), p.d,
                 rotary_position);
        copy_row(p, p.v_new, p.v_new.offset(b, t, hk), p.v, p.kv_row(p.v, b, j, hk), p.d_v,
                 kNoRotation);
      }
    }
  }
}

}  // namespace flashattn::cpu
