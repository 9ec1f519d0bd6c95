// Row loading and storing for the tiled CPU kernels: converts tensor rows of any float dtype to
// float32 and places them in the layouts the microkernel of tile_math.h reads.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/problem.h"
#include "cpu/tile_math.h"

namespace flashattn::cpu {

// Converts n elements of t, starting at element offset `offset`, to float. The dtype switch sits
// outside the loops so that each loop vectorises (bf16 is a shift; f16 is scalar).
inline void load_row(const View& t, int64_t offset, int64_t n, float* dst) {
  switch (t.dtype) {
    case FLASHATTN_F32:
      std::memcpy(dst, t.as<const float>() + offset, size_t(n) * sizeof(float));
      break;
    case FLASHATTN_BF16: {
      const uint16_t* src = t.as<const uint16_t>() + offset;
      for (int64_t c = 0; c < n; ++c) {  // written as a copy of the bits, this loop vectorises
        const uint32_t bits = uint32_t(src[c]) << 16;
        std::memcpy(dst + c, &bits, sizeof bits);
      }
      break;
    }
    case FLASHATTN_F16: {
      const uint16_t* src = t.as<const uint16_t>() + offset;
      for (int64_t c = 0; c < n; ++c) dst[c] = f16_to_float(src[c]);
      break;
    }
    default:
      break;
  }
}

constexpr int64_t kPrefetchRows = 8;  // rows requested ahead of the one being converted

// Asks for the cache lines of n elements of t at element offset `offset`. Rows of one head sit
// heads * d elements apart (pages apart for d = 128), which hardware prefetchers do not follow.
inline void prefetch_row(const View& t, int64_t offset, int64_t n) {
  constexpr int64_t kCacheLine = 64;
  const char* begin =
      static_cast<const char*>(t.data) + offset * int64_t(flashattn_dtype_size(t.dtype));
  const int64_t bytes = n * int64_t(flashattn_dtype_size(t.dtype));
  for (int64_t at = 0; at < bytes; at += kCacheLine) __builtin_prefetch(begin + at);
}

// Writes scale * src[0, n) to t at element offset `offset`, rounded to t's dtype.
inline void store_row(const View& t, int64_t offset, const float* src, int64_t n, float scale) {
  switch (t.dtype) {
    case FLASHATTN_F32: {
      float* dst = t.as<float>() + offset;
      for (int64_t c = 0; c < n; ++c) dst[c] = src[c] * scale;
      break;
    }
    case FLASHATTN_BF16: {
      uint16_t* dst = t.as<uint16_t>() + offset;
      for (int64_t c = 0; c < n; ++c) dst[c] = float_to_bf16(src[c] * scale);
      break;
    }
    case FLASHATTN_F16: {
      uint16_t* dst = t.as<uint16_t>() + offset;
      for (int64_t c = 0; c < n; ++c) dst[c] = float_to_f16(src[c] * scale);
      break;
    }
    default:
      break;
  }
}

// Writes zeros to n elements of t at element offset `offset`.
inline void store_zeros(const View& t, int64_t offset, int64_t n) {
  std::memset(static_cast<char*>(t.data) + offset * int64_t(flashattn_dtype_size(t.dtype)), 0,
              size_t(n) * flashattn_dtype_size(t.dtype));
}

// ---- B-operand layouts of gemm_panels (see tile_math.h) ----
// "Transposed": the row becomes column `col` of B, whose k dimension is the row's length, e.g.
// key j of K^T in S = Q K^T. Panels are len * kNr floats apart.
inline void pack_column(const float* row, int64_t len, int64_t col, float* b) {
  float* dst = b + (col / kNr) * len * kNr + col % kNr;
  for (int64_t c = 0; c < len; ++c) dst[c * kNr] = row[c];
}

inline void zero_column(int64_t len, int64_t col, float* b) {
  float* dst = b + (col / kNr) * len * kNr + col % kNr;
  for (int64_t c = 0; c < len; ++c) dst[c * kNr] = 0.f;
}

// "Row-major": the row becomes row `r` of B (its k index), e.g. key j of V in O += P V. B holds
// up to `capacity` rows; its columns run to round_up(len, kNr), the padding set to zero.
inline void pack_row(const float* row, int64_t len, int64_t r, float* b, int64_t capacity) {
  for (int64_t c0 = 0; c0 < len; c0 += kNr) {
    float* dst = b + (c0 / kNr) * capacity * kNr + r * kNr;
    if (c0 + kNr <= len) {  // a fixed-size copy: inlined vector moves
      std::memcpy(dst, row + c0, kNr * sizeof(float));
      continue;
    }
    for (int64_t c = 0; c < kNr; ++c) dst[c] = c0 + c < len ? row[c0 + c] : 0.f;
  }
}

inline void zero_row(int64_t len, int64_t r, float* b, int64_t capacity) {
  for (int64_t c0 = 0; c0 < len; c0 += kNr) {
    std::memset(b + (c0 / kNr) * capacity * kNr + r * kNr, 0, kNr * sizeof(float));
  }
}

// Visits keys [j0, j0 + cols) of sequence b, kv head hk. A key in [load_lo, load_hi) is converted
// to float into `row` twice, K then V, and handed to on_k(jj, row) and on_v(jj, row); any other
// key goes to on_skip(jj) and is never read (unused cache slots may hold NaN). Rows kPrefetchRows
// ahead are prefetched.
template <class OnK, class OnV, class OnSkip>
void visit_key_tile(const AttnProblem& p, int64_t b, int64_t hk, int64_t j0, int64_t cols,
                    int64_t load_lo, int64_t load_hi, float* row, OnK on_k, OnV on_v,
                    OnSkip on_skip) {
  for (int64_t jj = 0; jj < cols; ++jj) {
    const int64_t j = j0 + jj;
    if (j + kPrefetchRows >= load_lo && j + kPrefetchRows < load_hi) {
      prefetch_row(p.k, p.kv_row(p.k, b, j + kPrefetchRows, hk), p.d);
      prefetch_row(p.v, p.kv_row(p.v, b, j + kPrefetchRows, hk), p.d_v);
    }
    if (j < load_lo || j >= load_hi) {
      on_skip(jj);
      continue;
    }
    load_row(p.k, p.kv_row(p.k, b, j, hk), p.d, row);
    on_k(jj, row);
    load_row(p.v, p.kv_row(p.v, b, j, hk), p.d_v, row);
    on_v(jj, row);
  }
}

}  // namespace flashattn::cpu
