// Where sequence b of a call lives: its query and key counts and the addresses of its rows, for
// the dense, varlen, dense-cache and paged layouts. Shared by the CUDA kernels.
#pragma once

#include <cstdint>

#include "cuda/fwd_params.h"

namespace flashattn::cuda {

struct SeqInfo {
  int seqlen_q, seqlen_k;
  int64_t q_start;  // first row of the sequence in a varlen q (0 for dense)
  int64_t k_start;  // first row of the sequence in a varlen k (0 otherwise)
};

__device__ __forceinline__ SeqInfo seq_info(const FwdParams& p, int b) {
  SeqInfo s;
  s.q_start = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
  s.seqlen_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seqlen_q;
  s.k_start = 0;
  if (p.cu_seqlens_k) {
    s.k_start = p.cu_seqlens_k[b];
    s.seqlen_k = p.seqused_k ? p.seqused_k[b] : p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  } else if (p.cache_seqlens) {
    s.seqlen_k = p.cache_seqlens[b] + p.seqlen_new;
  } else {
    s.seqlen_k = p.seqlen_k;
  }
  return s;
}

// Element offset of query row i (within the sequence) of head h, for q-shaped tensors.
__device__ __forceinline__ int64_t q_row_offset(const SeqInfo& s, bool varlen, int b, int i, int h,
                                                int64_t batch_stride, int64_t row_stride,
                                                int64_t head_stride) {
  int64_t row = varlen ? s.q_start + i : i;
  return (varlen ? 0 : int64_t(b) * batch_stride) + row * row_stride + int64_t(h) * head_stride;
}

// Row of query i of sequence b in the backward's statistics workspace: b * seqlen_q + i for a
// dense q, the token for a varlen one.
__device__ __forceinline__ int64_t workspace_row(const FwdParams& p, const SeqInfo& s, int b, int i) {
  return (p.cu_seqlens_q ? s.q_start : int64_t(b) * p.seqlen_q) + i;
}

// Element offset of key row j (within the sequence) of kv head hk, for k- and v-shaped tensors.
__device__ __forceinline__ int64_t k_row_offset(const FwdParams& p, const SeqInfo& s, int b, int j,
                                                int hk, int64_t batch_stride, int64_t row_stride,
                                                int64_t head_stride) {
  int64_t head = int64_t(hk) * head_stride;
  if (p.block_table) {
    int64_t page = p.block_table[int64_t(b) * p.block_table_stride + j / p.block_size];
    return page * batch_stride + int64_t(j % p.block_size) * row_stride + head;
  }
  if (p.cu_seqlens_k) return (s.k_start + j) * row_stride + head;
  return int64_t(b) * batch_stride + int64_t(j) * row_stride + head;
}

}  // namespace flashattn::cuda
