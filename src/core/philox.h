// Philox-4x32-10 counter-based RNG and the dropout keep rule. The CPU backends and the CUDA
// kernels call exactly this code, so a GPU dropout mask can be checked bit for bit.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace flashattn {

struct Philox4 {
  uint32_t x[4];
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // multipliers and Weyl increments of Salmon et al.
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

FA_HD void mul_hi_lo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t product = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(product >> 32);
  *lo = uint32_t(product);
}

FA_HD Philox4 philox4x32_10(Philox4 counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kPhiloxM0, counter.x[0], &hi0, &lo0);
    mul_hi_lo(kPhiloxM1, counter.x[2], &hi1, &lo1);
    counter = Philox4{{hi1 ^ counter.x[1] ^ key0, lo1, hi0 ^ counter.x[3] ^ key1, lo0}};
    key0 += kPhiloxW0;
    key1 += kPhiloxW1;
  }
  return counter;
}

// Dropout for one (batch, query head) of one call. One Philox call yields the keep bits of four
// adjacent key columns: counter = (j / 4, i, batch * heads_q + head, low 32 bits of offset),
// key = (low 32 bits of seed, high 32 bits of seed XOR high 32 bits of offset).
// Element (i, j) is kept iff word j % 4 >= threshold, threshold = floor(p * 2^32).
struct DropoutRng {
  uint32_t key0, key1, offset_lo, stream;
  uint32_t threshold;

  FA_HD Philox4 block(int64_t i, int64_t j_div_4) const {
    return philox4x32_10(Philox4{{uint32_t(j_div_4), uint32_t(i), stream, offset_lo}}, key0, key1);
  }
  FA_HD bool keep(int64_t i, int64_t j) const { return block(i, j >> 2).x[j & 3] >= threshold; }
};

// threshold = floor(p * 2^32) for p in [0, 1), computed on the host once per call.
inline uint32_t dropout_threshold(float p) {
  return uint32_t(double(p) * 4294967296.0);
}

FA_HD DropoutRng make_dropout_rng(uint64_t seed, uint64_t offset, uint32_t threshold, int64_t batch,
                                 int64_t heads_q, int64_t head) {
  return DropoutRng{uint32_t(seed), uint32_t(seed >> 32) ^ uint32_t(offset >> 32), uint32_t(offset),
                    uint32_t(batch * heads_q + head), threshold};
}

}  // namespace flashattn
