// The sm80 forward's score pipeline on the S accumulators of one warp (m16n8 C-fragment layout:
// thread (g = lane / 4, t = lane % 4) holds rows g and g + 8, columns 2t and 2t + 1 of each n8
// tile): score modifiers, the mask, the online softmax in base 2, and dropout.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include <cutlass/numeric_types.h>

#include "core/math_constants.h"
#include "core/philox.h"
#include "core/score_mod.h"
#include "cuda/sm80_primitives.h"

namespace flashattn::cuda {

// Max and sum over the 4 threads of a quad, which together hold one accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// v[0] op v[1] op ... op v[n - 1] as a balanced tree: log2(n) dependent steps instead of the n - 1
// of a running accumulator, whose latency (not its instruction count) set the sm90a softmax's
// span (docs/performance.md, sm90a v10). v is overwritten.
template <int kN, class Op>
__device__ __forceinline__ float tree_reduce(float (&v)[kN], Op op) {
#pragma unroll
  for (int stride = 1; stride < kN; stride *= 2) {
#pragma unroll
    for (int i = 0; i + stride < kN; i += 2 * stride) v[i] = op(v[i], v[i + stride]);
  }
  return v[0];
}

// The tiles of block_n keys [min, max) that some query row in [first_row, last_row] keeps
// (first_key and last_key grow with the row); min == max when no row keeps a key.
struct KeyTiles {
  int min, max;
};
template <class Index>
__device__ __forceinline__ KeyTiles key_tiles(const ScoreMod<float, Index>& mod, int first_row, int last_row,
                                              int block_n) {
  const int key_lo = int(mod.first_key(first_row)), key_hi = int(mod.last_key(last_row));
  const int lo = key_lo / block_n;
  return {lo, key_hi > key_lo ? (key_hi + block_n - 1) / block_n : lo};
}

// The tiles of block_n keys that every query row in [first_row, last_row] keeps whole: only the
// tiles outside [min, max) (a window edge, the end of the keys) need the per-element mask. Unbounded
// window sides need no test: first_key is then 0 and last_key seqlen_k.
template <class Index>
__device__ __forceinline__ KeyTiles unmasked_key_tiles(const ScoreMod<float, Index>& mod, int first_row,
                                                       int last_row, int block_n) {
  return {int((mod.first_key(last_row) + block_n - 1) / block_n), int(mod.last_key(first_row) / block_n)};
}

// Where a warp's S fragment sits in the (query, key) plane of its sequence.
struct FragmentOrigin {
  int row0;  // query row of fragment row 0 (m-tile 0, g = 0)
  int col0;  // key of fragment column 0 (n-tile 0, t = 0)
  int g, t;  // the thread's lane / 4 and lane % 4
  int pack = 1;  // rows per query (GQA packing): the mask's query index is row / pack
};

// The kernels' softcap, tanh(scale * dot / softcap) of ScoreMod::score, with `in` = scale / softcap
// taken once per call (FwdParams::softcap_in) and fast_tanh. tanhf and a division per score held
// softcap at d 256 to 40% of the plain kernel's rate (sm90a v62). A capped score s is then off by at
// most |s| 2^-11 by the PTX ISA's bound, where the low-precision reference rounds s to 16 bits (the
// correctness rule, docs/semantics.md): 2^-8 |s| in bf16, 2^-11 |s| in f16; measured, the
// instruction's error is 1.1e-5 at most (fast_tanh), and the f16 softcap tests check it. The forward
// and the backward take the same `in` and instruction, so that their tanh agree where their dot
// products do.
__device__ __forceinline__ float softcap_tanh(float dot, float in) { return fast_tanh(dot * in); }

// s <- softcap / ALiBi-modified scores, in log2 units (ScoreMod::score times log2(e)): one pass, its
// softcap or scale chosen by a uniform branch outside it. cap_in: FwdParams::softcap_in.
template <int kM, int kNTiles, class Index>
__device__ __forceinline__ void apply_score_mods(float (&s)[kM][kNTiles][4], const ScoreMod<float, Index>& mod,
                                                 float cap_in, const FragmentOrigin& o) {
  // Held finite, so that the diagonal's distance 0 gives 0, not inf x 0 (a slope past FLT_MAX /
  // log2(e) caps every other score at -FLT_MAX x distance instead of -inf: the same weights).
  const float slope_log2 = fmaxf(fminf(mod.alibi_slope * kLog2e, FLT_MAX), -FLT_MAX);
  auto each = [&](auto scaled) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = scaled(s[mt][nt][e]);
          if (mod.alibi_slope != 0.f) {
            const int i = o.row0 + mt * 16 + o.g + 8 * (e / 2), j = o.col0 + nt * 8 + 2 * o.t + e % 2;
            const Index distance = i + mod.off - j;
            x -= slope_log2 * float(distance < 0 ? -distance : distance);
          }
          s[mt][nt][e] = x;
        }
  };
  if (cap_in > 0.f) {
    const float out = mod.softcap * kLog2e;
    each([&](float dot) { return softcap_tanh(dot, cap_in) * out; });
  } else {
    const float scale_log2 = mod.scale * kLog2e;
    each([&](float dot) { return dot * scale_log2; });
  }
}

// s <- -inf outside each row's kept keys; each row's range is computed once, in 32 bits.
// kRelativeRange: the range is taken relative to the thread's first column, so that each element
// compares a constant (its column's offset) with it and no column is held in a register (the sm90a
// wide tile spilled in this block otherwise); the sm80 kernels' register allocation is tuned to
// the plain form (the relative one moves their spills by -28 to +16 bytes). kLeftEdge: rows may
// drop keys at their start (a window's left edge); without one (no window, causal, a right window
// alone) every row's first kept key is 0, and each element takes one compare instead of two.
template <bool kRelativeRange = false, bool kLeftEdge = true, int kM, int kNTiles, class Index>
__device__ __forceinline__ void apply_mask(float (&s)[kM][kNTiles][4], const ScoreMod<float, Index>& mod,
                                           const FragmentOrigin& o) {
  // The column the ranges are taken from, and the thread's column offset left in each element's.
  const int col0 = kRelativeRange ? o.col0 + 2 * o.t : o.col0, thread_col = kRelativeRange ? 0 : 2 * o.t;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = (o.row0 + mt * 16 + o.g + 8 * half) / o.pack;
      const int lo = int(mod.first_key(i)) - col0, hi = int(mod.last_key(i)) - col0;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int jj = nt * 8 + thread_col + e;
          if ((kLeftEdge && jj < lo) || jj >= hi) s[mt][nt][2 * half + e] = -INFINITY;
        }
    }
}

// Running max and sum of each of the thread's rows. The scores arrive in the units of s; times
// score_scale they are log2 units (on the plain path s holds raw dots and score_scale folds the
// softmax scale into one FFMA per element: p = 2^(dot * c - max * c), c = scale * log2(e)).
// kSlack > 0 (kMaxSlack, for f16 at most 3: below): a row keeps its max while a tile's exceeds it
// by at most kSlack in log2 units, so that O's correction is exactly 1 and the kernel may skip the
// rescale (the same softmax, taken relative to a smaller base). The weights are then taken against
// max + kSlack, p = 2^(dot * c - max * c - kSlack), so that they stay at most 1: above 1 they cost
// the O product cycles (about 5% of a d 128 call with N(0, 1) inputs on an H200;
// docs/performance.md, sm90a v79).
// Weight: the weights' 16-bit type (the O product's operand). bf16 has f32's exponent range: its
// slack is the whole kMaxSlack, its weights losing only those under 2^-126, at most 2^-118 of the
// row's largest. f16's subnormals start at 2^-14, and the shift brings them kSlack binades closer
// to the largest weight: with the whole slack of 8 and 4k / 16k equal weights 2^-15 under the
// largest, out erred four / ten times the correctness rule's limit on an H200
// (tests/test_gpu_fwd.cpp, GpuForwardWideScores). So f16's slack is at most kF16MaxSlack = 3, which
// a model of the kernel puts at a quarter / 40% of the limit there (f16 at d 128 from 2k keys:
// 1.02-1.035x against the unshifted weights, sm90a v81; a slack of 2 rescales O more often and
// gained less).
template <int kM, int kMaxSlack, class Weight>
struct OnlineSoftmax {
  static constexpr int kF16MaxSlack = 3;
  static constexpr int kSlack =
      std::is_same_v<Weight, cutlass::bfloat16_t> ? kMaxSlack : std::min(kMaxSlack, kF16MaxSlack);
  float row_max[kM][2];  // in the units of s
  float row_sum[kM][2];  // this thread's partial sum (the quad's lanes complete it at the end)
  float score_scale;

  __device__ __forceinline__ explicit OnlineSoftmax(float scale) : score_scale(scale) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      row_max[mt][0] = row_max[mt][1] = -INFINITY;
      row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }
  }

  // s <- unnormalised weights 2^(s * c - max * c - kSlack) of this tile; acc_o rescaled to the
  // new max.
  // after_sum(x0, x1, mt, half, nt) sees each pair of weights once the row sum has taken them (the
  // place for dropout, fused here so that the weights are visited once). With kSlack a row of O
  // is rescaled only where some lane of the warp has a correction.
  template <int kNTiles, int kDTiles, class AfterSum>
  __device__ __forceinline__ void update(float (&s)[kM][kNTiles][4], float (&acc_o)[kM][kDTiles][4],
                                         AfterSum after_sum) {
    // Each row of O rescaled as soon as its correction is known, before the row's weights: the
    // order the sm80 kernels' register allocation is tuned for (rescaling after all weights made
    // the few-rows tile spill 412 bytes at d 128 instead of 84).
    update_scores<false>(
        s,
        [&](int mt, int half, float correction) {
          if (kSlack == 0 || __any_sync(0xffffffffu, correction != 1.f)) rescale_row(acc_o, mt, half, correction);
        },
        after_sum);
  }

  // update() without touching O, for a kernel whose O accumulators are still being written when
  // the next tile's scores arrive (the sm90a forward): the weights and the running max and sum;
  // on_correction(mt, half, c) receives each row's O correction, for rescale() once O is free.
  // kTreeReduce: the row's max and sum over the tile as balanced trees (tree_reduce) rather than
  // running accumulators, for a kernel whose softmax span is its limit (the sm90a forward's tiles).
  template <bool kTreeReduce = false, int kNTiles, class OnCorrection, class AfterSum>
  __device__ __forceinline__ void update_scores(float (&s)[kM][kNTiles][4], OnCorrection on_correction,
                                                AfterSum after_sum) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float part[kNTiles];  // per column tile: its pair's max, then its pair's sum (kTreeReduce)
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          const float pair_max = fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
          if constexpr (kTreeReduce) part[nt] = pair_max;
          else tile_max = fmaxf(tile_max, pair_max);
        }
        if constexpr (kTreeReduce) tile_max = tree_reduce(part, [](float a, float b) { return fmaxf(a, b); });
        float new_max = fmaxf(row_max[mt][half], quad_max(tile_max));
        // A row's first max (from -inf: the difference is +inf) is always taken.
        if (kSlack > 0 && (new_max - row_max[mt][half]) * score_scale <= float(kSlack)) {
          new_max = row_max[mt][half];
        }
        // A row with no key yet keeps max -inf; its weights are 0 and must not become NaN. Without
        // a shift the plain expressions: + 0.f is no identity and would cost the correction an FADD.
        float base, correction;
        if constexpr (kSlack == 0) {
          base = new_max == -INFINITY ? 0.f : new_max * score_scale;
          correction = fast_exp2(row_max[mt][half] * score_scale - base);
        } else {
          base = new_max == -INFINITY ? 0.f : new_max * score_scale + float(kSlack);
          correction = fast_exp2(row_max[mt][half] * score_scale + float(kSlack) - base);
        }
        row_max[mt][half] = new_max;
        row_sum[mt][half] *= correction;
        on_correction(mt, half, correction);
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          float& x0 = s[mt][nt][2 * half];
          float& x1 = s[mt][nt][2 * half + 1];
          x0 = fast_exp2(fmaf(x0, score_scale, -base));
          x1 = fast_exp2(fmaf(x1, score_scale, -base));
          if constexpr (kTreeReduce) part[nt] = x0 + x1;
          else row_sum[mt][half] += x0 + x1;
          after_sum(x0, x1, mt, half, nt);
        }
        if constexpr (kTreeReduce) row_sum[mt][half] += tree_reduce(part, [](float a, float b) { return a + b; });
      }
    }
  }

  // One row of O (m-tile mt, fragment row g + 8 * half) times its correction.
  template <int kDTiles>
  __device__ __forceinline__ static void rescale_row(float (&acc_o)[kM][kDTiles][4], int mt, int half,
                                                     float correction) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      acc_o[mt][dt][2 * half] *= correction;
      acc_o[mt][dt][2 * half + 1] *= correction;
    }
  }

  template <int kDTiles>
  __device__ __forceinline__ static void rescale(float (&acc_o)[kM][kDTiles][4], const float (&correction)[kM][2]) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) rescale_row(acc_o, mt, half, correction[mt][half]);
  }

  // The full row sum (0 for a row with no kept key) and its lse (-inf then; __logf: MUFU.LG2, an
  // absolute error near 1e-6 where logf took a 25-instruction polynomial, sm90a v55).
  __device__ __forceinline__ float sum(int mt, int half) const { return quad_sum(row_sum[mt][half]); }
  __device__ __forceinline__ float lse(int mt, int half, float sum) const {
    if constexpr (kSlack == 0) {
      return sum > 0.f ? row_max[mt][half] * score_scale * kLn2 + __logf(sum) : -INFINITY;
    } else {
      return sum > 0.f ? (row_max[mt][half] * score_scale + float(kSlack)) * kLn2 + __logf(sum) : -INFINITY;
    }
  }
};

// Dropout of one pair of weights (columns j, j + 1 of row i, j even): kept ones scaled by
// 1 / (1 - p). Runs after the row sum took them, as the semantics ask (lse is undropped).
__device__ __forceinline__ void dropout_pair(float& x0, float& x1, const DropoutRng& rng,
                                             float keep_scale, int i, int j) {
  const Philox4 bits = rng.block(i, j >> 2);  // j even: j and j + 1 share one Philox block
  const bool upper = (j & 2) != 0;            // a constant index keeps bits in registers
  const uint32_t w0 = upper ? bits.x[2] : bits.x[0], w1 = upper ? bits.x[3] : bits.x[1];
  x0 = w0 >= rng.threshold ? x0 * keep_scale : 0.f;
  x1 = w1 >= rng.threshold ? x1 * keep_scale : 0.f;
}

}  // namespace flashattn::cuda
