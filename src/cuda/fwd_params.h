// The forward kernels' parameters: plain pointers, int64 strides (elements) and sizes, filled on
// the host from a validated AttnProblem by make_fwd_params (launch_fwd.cu).
#pragma once

#include <cstdint>

#include "cuda/schedule_fwd_sm90.h"

namespace flashattn::cuda {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // nullptr: not requested
  // Strides in elements. Varlen tensors have no batch dim (batch stride 0, rows from cu_seqlens);
  // paged k/v use the batch stride as the block stride.
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t out_batch_stride, out_row_stride, out_head_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  const int32_t* cu_seqlens_q;  // varlen q
  const int32_t* cu_seqlens_k;  // varlen k
  const int32_t* seqused_k;
  const int32_t* cache_seqlens;  // KV cache (dense or paged)
  const int32_t* block_table;    // paged
  int64_t block_table_stride;
  int block_size;

  int batch, heads_q, group;  // group = heads_q / heads_kv
  int d, d_v;
  int seqlen_q;    // dense: the q length; varlen: an upper bound (sizes the grid)
  int seqlen_k;    // dense without cache: the k length
  int seqlen_new;  // appended keys (KV cache)

  float scale;    // softmax scale
  float softcap;  // 0: off
  int window_left, window_right;  // -1: unbounded
  float softcap_in;  // scale / softcap for softcap_tanh (softmax_sm80.h); 0: no cap (softcap_factor)
  const float* alibi_slopes;      // nullptr: off
  int64_t alibi_batch_stride;     // 0 when the slopes are per head only

  // KV-cache append: k_new / v_new [batch, seqlen_new, heads_kv, d] go to the cache at
  // cache_seqlens; with rotary tables [seqlen_ro, rotary_dim / 2] the new keys and the queries
  // rotate (queries at cache_seqlens[b] + i).
  const void* k_new;
  const void* v_new;
  int64_t k_new_batch_stride, k_new_row_stride, k_new_head_stride;
  int64_t v_new_batch_stride, v_new_row_stride, v_new_head_stride;
  const void* rotary_cos;  // nullptr: no rotary
  const void* rotary_sin;
  int64_t rotary_row_stride;
  int rotary_dim;
  bool rotary_interleaved;
  bool rotary_f32;  // tables in f32, else in the element type

  // GQA packing (one query per sequence): the group's query heads are the rows of one tile,
  // pack_gqa rows per query (1: off). The host rewrote the q / out / lse strides so that row r of
  // kv head h is query head h * pack_gqa + r, and set heads_q = heads_kv, group = 1.
  int pack_gqa;
  // The host chose the few-rows tile variant (tile_size.h): every query tile's rows fit in it.
  bool few_rows;
  // Split-KV: num_splits CTAs share a query tile's keys and write their normalised partial out
  // and lse (f32, workspace) for the merge kernel instead of out and lse. Dense q only.
  int num_splits;   // 1: off
  float* out_accum;  // [num_splits, heads (of the grid), accum_rows, d_v]
  float* lse_accum;  // [num_splits, heads (of the grid), accum_rows]
  int64_t accum_rows;  // batch * seqlen_q

  // sm90a persistent scheduler: work items handed out past each CTA's first (workspace; the
  // kernel zeroes it as it starts, produce_fwd_sm90).
  int* tile_counter;
  // The schedule's tail (schedule_fwd_sm90.h).
  FwdTail tail;

  uint32_t dropout_threshold;  // 0: no dropout
  float dropout_scale;         // 1 / (1 - p)
  uint64_t dropout_seed, dropout_offset;
};

}  // namespace flashattn::cuda
