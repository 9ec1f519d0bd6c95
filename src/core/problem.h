// The validated, backend-neutral description of one attention call (forward, backward or merge),
// built from the C params by validate.cpp. Backends read only this, never the C structs.
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "core/score_mod.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// A validated tensor view. Absent optional tensors have data == nullptr.
struct View {
  void* data = nullptr;
  flashattn_dtype dtype = FLASHATTN_DTYPE_INVALID;
  int rank = 0;
  int64_t shape[FLASHATTN_MAX_RANK] = {};
  int64_t stride[FLASHATTN_MAX_RANK] = {};

  bool present() const { return data != nullptr; }
  template <class T>
  T* as() const { return static_cast<T*>(data); }
  // Element offset of index (i0, i1, ...) for the leading dims given.
  int64_t offset(int64_t i0) const { return i0 * stride[0]; }
  int64_t offset(int64_t i0, int64_t i1) const { return i0 * stride[0] + i1 * stride[1]; }
  int64_t offset(int64_t i0, int64_t i1, int64_t i2) const {
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
  }
  int64_t offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
  }
};

enum class KvLayout {
  Dense,  // k [batch, seqlen_k, heads_kv, d]; with cache_seqlens: a dense KV cache
  Varlen, // k [total_k, heads_kv, d] + cu_seqlens_k (+ seqused_k)
  Paged   // k [num_blocks, block_size, heads_kv, d] + block_table + cache_seqlens
};

// Options resolved from flashattn_attn_options (causal folded into the window, default scale).
struct ResolvedOptions {
  float scale = 0.f;
  float softcap = 0.f;
  int64_t window_left = -1;
  int64_t window_right = -1;
  View alibi_slopes;  // f32 [heads_q] or [batch, heads_q]
  float dropout_p = 0.f;
  uint32_t dropout_threshold = 0;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
};

struct AttnProblem {
  int64_t batch = 0, heads_q = 0, heads_kv = 0, d = 0, d_v = 0;
  bool varlen_q = false;
  KvLayout kv_layout = KvLayout::Dense;
  int64_t seqlen_q = 0;  // dense: q.shape[1]; varlen: max_seqlen_q (an upper bound)
  int64_t seqlen_k = 0;  // dense without cache: k.shape[1]; varlen: max_seqlen_k; cache: capacity
  int64_t seqlen_new = 0;  // append: k_new.shape[1]
  int64_t block_size = 0;  // paged
  int64_t rotary_dim = 0;  // append with rotary: 2 * rotary_cos.shape[1]
  bool rotary_interleaved = false;
  bool deterministic = false;
  int64_t num_splits = 0;  // forward: CUDA split-KV request (0 = heuristic, 1 = off)

  View q, k, v, out, lse;             // forward (lse optional) and backward inputs
  View dout, dq, dk, dv;              // backward
  View cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, block_table;
  View k_new, v_new, rotary_cos, rotary_sin;
  ResolvedOptions opts;
  flashattn_exec exec{};

  bool has_append() const { return k_new.present(); }

  // ---- host-side accessors (the index arrays must be host memory) ----
  int64_t q_start(int64_t b) const { return varlen_q ? cu_seqlens_q.as<const int32_t>()[b] : 0; }
  int64_t seqlen_q_of(int64_t b) const {
    if (!varlen_q) return seqlen_q;
    const int32_t* cu = cu_seqlens_q.as<const int32_t>();
    return cu[b + 1] - cu[b];
  }
  // Keys attended by sequence b (after the append, when there is one).
  int64_t seqlen_k_of(int64_t b) const {
    switch (kv_layout) {
      case KvLayout::Varlen: {
        if (seqused_k.present()) return seqused_k.as<const int32_t>()[b];
        const int32_t* cu = cu_seqlens_k.as<const int32_t>();
        return cu[b + 1] - cu[b];
      }
      case KvLayout::Dense:
        if (!cache_seqlens.present()) return seqlen_k;
        return cache_seqlens.as<const int32_t>()[b] + seqlen_new;
      case KvLayout::Paged: return cache_seqlens.as<const int32_t>()[b] + seqlen_new;
    }
    return 0;
  }
  // Key rows stored for sequence b (the backward's dk/dv rows): with seqused_k, rows past the
  // used ones exist too (and get zero gradients).
  int64_t stored_keys_of(int64_t b) const {
    if (kv_layout != KvLayout::Varlen) return seqlen_k;
    const int32_t* cu = cu_seqlens_k.as<const int32_t>();
    return cu[b + 1] - cu[b];
  }
  // Position of the first appended key (and of query row 0, for rotary) in sequence b.
  int64_t cache_position_of(int64_t b) const {
    return cache_seqlens.present() ? cache_seqlens.as<const int32_t>()[b] : 0;
  }

  // Element offsets of the start of a row (head dim index 0).
  int64_t q_row(const View& t, int64_t b, int64_t i, int64_t h) const {  // q, out, dout, dq
    return varlen_q ? t.offset(q_start(b) + i, h) : t.offset(b, i, h);
  }
  int64_t kv_row(const View& t, int64_t b, int64_t j, int64_t h) const {  // k, v, dk, dv
    switch (kv_layout) {
      case KvLayout::Dense: return t.offset(b, j, h);
      case KvLayout::Varlen: return t.offset(cu_seqlens_k.as<const int32_t>()[b] + j, h);
      case KvLayout::Paged: {
        int64_t page = block_table.as<const int32_t>()[block_table.offset(b, j / block_size)];
        return t.offset(page, j % block_size, h);
      }
    }
    return 0;
  }
  int64_t lse_index(int64_t b, int64_t i, int64_t h) const {  // into lse (forward/backward)
    return varlen_q ? lse.offset(h, q_start(b) + i) : lse.offset(b, h, i);
  }

  // The score functor of (b, h) in precision T.
  template <class T>
  ScoreMod<T> score_mod(int64_t b, int64_t h) const {
    int64_t sq = seqlen_q_of(b), sk = seqlen_k_of(b);
    T slope = T(0);
    if (opts.alibi_slopes.present()) {
      const float* slopes = opts.alibi_slopes.as<const float>();
      slope = T(opts.alibi_slopes.rank == 1 ? slopes[opts.alibi_slopes.offset(h)]
                                            : slopes[opts.alibi_slopes.offset(b, h)]);
    }
    return ScoreMod<T>{T(opts.scale), T(opts.softcap), slope, sk - sq, sk,
                       opts.window_left, opts.window_right};
  }
  DropoutRng dropout_rng(int64_t b, int64_t h) const {
    return make_dropout_rng(opts.dropout_seed, opts.dropout_offset, opts.dropout_threshold, b,
                            heads_q, h);
  }
  int64_t kv_head(int64_t h) const { return h / (heads_q / heads_kv); }
};

// flashattn_merge, validated.
struct MergeProblem {
  int64_t splits = 0, batch = 0, seqlen_q = 0, heads = 0, d_v = 0;
  bool varlen = false;  // out [total_q, heads, d_v], lse [heads, total_q]
  View out_partial, lse_partial, out, lse;
  flashattn_exec exec{};
};

}  // namespace flashattn
