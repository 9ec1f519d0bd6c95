// The CUDA forward entry: checks what the kernels support, fills the kernel params from the
// validated problem, plans GQA packing and split-KV, and picks the instantiation (the run-time ->
// template dispatch point).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/fwd_params.h"
#include "cuda/kv_append_sm80.h"
#include "cuda/launch_common.h"
#include "cuda/merge_params.h"
#include "cuda/tile_size.h"
#include "kernel_registry.h"

namespace flashattn::cuda {
namespace {

constexpr int kMinKeyTilesPerSplit = 4;  // below this a split's fixed cost outweighs its share
constexpr int kMaxAutoSplits = 64;
// Of the split counts whose last wave of CTAs is nearly as full as the best one's, the smallest
// wins: each split adds partials to write and merge.
constexpr double kWaveFillSlack = 0.85;
// How one forward call runs: the kernel family, packed GQA rows, the number of key splits and
// their workspace.
struct FwdPlan {
  bool sm90 = false;   // the Hopper kernel (launch_fwd_sm90.h) instead of the sm80 ones
  int pack = 1;        // query heads per tile row group (1: off)
  bool few_rows = false;  // the few-rows tile variant (tile_size.h)
  int splits = 1;
  int64_t rows = 0;    // query rows per (sequence, grid head)
  int64_t heads = 0;   // heads of the grid
  size_t out_accum_bytes = 0, lse_accum_bytes = 0;
  size_t tile_counter_bytes = 0;  // the sm90a kernel's work-item counter
  size_t workspace_bytes() const { return out_accum_bytes + lse_accum_bytes + tile_counter_bytes; }
};

// The fraction of the CTA slots that `ctas` CTAs keep busy over their waves.
double wave_fill(int64_t ctas, int64_t slots) {
  const int64_t waves = (ctas + slots - 1) / slots;
  return double(ctas) / double(waves * slots);
}

// Whether TMA can address a dense [batch, rows, heads, d] tensor: every dim longer than 1 needs a
// positive stride below 2^40 bytes (the tensor map's limit). Dims of length 1 are never stepped
// over; the launcher gives them a valid stride whatever the caller's.
bool tma_addressable(const View& t) {
  constexpr int64_t kMaxStrideBytes = int64_t(1) << 40;
  const int64_t element = int64_t(flashattn_dtype_size(t.dtype));
  for (int dim = 0; dim + 1 < t.rank; ++dim) {
    if (t.shape[dim] > 1 && (t.stride[dim] <= 0 || t.stride[dim] >= kMaxStrideBytes / element)) return false;
  }
  return true;
}

// Whether the Hopper kernel can take a call the sm80 plan serves with plain tiles: dense q / k / v
// (no KV cache, append, varlen or paging) and out that TMA can address, no dropout, d_v == d, keys
// present, on a compute capability 9.0 device, unless the caller asked for the sm80 kernels.
// Decoding-shaped calls (packed GQA heads, split keys, the few-rows tile) stay on the sm80 plan,
// which is built for them.
bool sm90_serves(const AttnProblem& p, const FwdPlan& sm80_plan) {
  if (p.exec.backend == FLASHATTN_BACKEND_CUDA_SM80) return false;
  if (p.varlen_q || p.kv_layout != KvLayout::Dense || p.cache_seqlens.present() || p.has_append() ||
      p.opts.dropout_p > 0.f || p.d != p.d_v || p.seqlen_k == 0 || p.seqlen_q > kFwdSm90MaxLength ||
      p.seqlen_k > kFwdSm90MaxLength) {
    return false;
  }
  if (!tma_addressable(p.q) || !tma_addressable(p.k) || !tma_addressable(p.v) || !tma_addressable(p.out)) {
    return false;
  }
  if (sm80_plan.pack > 1 || sm80_plan.splits > 1 || sm80_plan.few_rows) return false;
  return device_attribute(cudaDevAttrComputeCapabilityMajor, p.exec.device, "compute capability") == 9 &&
         device_attribute(cudaDevAttrComputeCapabilityMinor, p.exec.device, "compute capability") == 0;
}

FwdPlan plan_sm80(const AttnProblem& p) {
  FwdPlan plan;
  const int64_t group = p.heads_q / p.heads_kv;
  // One query per sequence (decoding): the group's heads share K/V, so one tile serves them all
  // and K/V stream once per kv head. ALiBi and dropout key on the head and stay unpacked.
  if (!p.varlen_q && p.seqlen_q == 1 && group > 1 && !p.opts.alibi_slopes.present() &&
      p.opts.dropout_p == 0.f) {
    plan.pack = int(group);
  }
  plan.rows = p.seqlen_q * plan.pack;
  plan.heads = p.heads_q / plan.pack;
  FA_CHECK_SUPPORTED(!p.varlen_q || p.num_splits <= 1,
                     "num_splits: the CUDA split-KV forward takes a dense q, got varlen q with num_splits=",
                     p.num_splits);
  const int head_dim = int(std::max(p.d, p.d_v));
  const bool score_mods = p.opts.softcap > 0.f || p.opts.alibi_slopes.present() || p.opts.dropout_p > 0.f;
  plan.few_rows = !p.varlen_q && plan.rows <= kFwdFewRowsBlockM && head_dim <= kFwdFewRowsMaxHeadDim &&
                  !score_mods;
  if (p.varlen_q || p.num_splits == 1 || p.seqlen_q == 0) return plan;
  const int block_m = fwd_block_m_sm80(head_dim, plan.few_rows);
  const int64_t ctas = p.batch * plan.heads * ((plan.rows + block_m - 1) / block_m);
  if (p.num_splits > 1) {
    plan.splits = int(p.num_splits);
  } else {  // split only when the CTAs leave slots idle; then fill the waves, with a few key tiles per split
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, p.exec.device, "SM count");
    const int64_t slots = int64_t(sms) * (plan.few_rows ? kFwdFewRowsCtasPerSm : kFwdCtasPerSm);
    const int64_t key_tiles = (p.seqlen_k + fwd_block_n_sm80(head_dim) - 1) / fwd_block_n_sm80(head_dim);
    const int64_t most = std::min<int64_t>(key_tiles / kMinKeyTilesPerSplit, kMaxAutoSplits);
    if (ctas < slots && most > 1) {
      double best = 0.0;
      for (int64_t s = 1; s <= most; ++s) best = std::max(best, wave_fill(ctas * s, slots));
      for (int64_t s = 1; s <= most; ++s) {
        if (wave_fill(ctas * s, slots) >= kWaveFillSlack * best) {
          plan.splits = int(s);
          break;
        }
      }
    }
  }
  if (plan.splits > 1) {
    const size_t rows = size_t(plan.splits * plan.heads * p.batch * plan.rows);
    plan.out_accum_bytes = align_workspace(rows * size_t(p.d_v) * sizeof(float));
    plan.lse_accum_bytes = align_workspace(rows * sizeof(float));
  }
  return plan;
}

FwdPlan plan_fwd(const AttnProblem& p) {
  FwdPlan plan = plan_sm80(p);
  plan.sm90 = sm90_serves(p, plan);
  if (plan.sm90) plan.tile_counter_bytes = align_workspace(sizeof(int));
  return plan;
}

// Rewrites the params so that the kernel sees plan.pack rows per query of one kv head: row r of
// kv head h is query head h * pack + r (dense q with one query per sequence).
void pack_gqa_rows(FwdParams& k, int pack) {
  k.pack_gqa = pack;
  if (pack == 1) return;
  k.seqlen_q *= pack;
  k.heads_q /= pack;
  k.group = 1;
  k.q_row_stride = k.q_head_stride, k.q_head_stride *= pack;
  k.out_row_stride = k.out_head_stride, k.out_head_stride *= pack;
  k.lse_row_stride = k.lse_head_stride, k.lse_head_stride *= pack;
}

// The merge of the split partials into out and lse (the kernel's grid heads and rows).
MergeParams combine_params(const FwdParams& k, const FwdPlan& plan, flashattn_dtype dtype) {
  MergeParams m{};
  m.splits = plan.splits, m.batch = k.batch, m.rows = k.seqlen_q, m.heads = k.heads_q, m.d_v = k.d_v;
  m.out_partial = k.out_accum;
  m.partial_dtype = FLASHATTN_F32;
  m.op_row = k.d_v, m.op_batch = int64_t(k.seqlen_q) * k.d_v, m.op_head = k.accum_rows * k.d_v;
  m.op_split = m.op_head * k.heads_q;
  m.lse_partial = k.lse_accum;
  m.lp_row = 1, m.lp_batch = k.seqlen_q, m.lp_head = k.accum_rows, m.lp_split = k.accum_rows * k.heads_q;
  m.out = k.out;
  m.out_dtype = dtype;
  m.o_batch = k.out_batch_stride, m.o_row = k.out_row_stride, m.o_head = k.out_head_stride;
  m.lse = k.lse;
  m.l_batch = k.lse_batch_stride, m.l_row = k.lse_row_stride, m.l_head = k.lse_head_stride;
  return m;
}

}  // namespace

void fwd(const AttnProblem& p) {
  check_attention_supported(p, /*backward=*/false);
  if (p.batch == 0) return;
  DeviceGuard device(p.exec.device);
  const FwdPlan plan = plan_fwd(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.exec.stream);
  Scratch workspace(p.exec, plan.workspace_bytes(), stream);
  FwdParams params = make_fwd_params(p);
  if (p.has_append() && p.seqlen_new > 0) kv_append(params, p.q.dtype, stream);
  if (p.seqlen_q == 0) return;
  pack_gqa_rows(params, plan.pack);
  params.few_rows = plan.few_rows;
  params.num_splits = plan.splits;
  if (plan.splits > 1) {
    params.out_accum = static_cast<float*>(workspace.data());
    params.lse_accum = reinterpret_cast<float*>(static_cast<char*>(workspace.data()) + plan.out_accum_bytes);
    params.accum_rows = int64_t(params.batch) * params.seqlen_q;
  }
  const int head_dim = int(std::max(p.d, p.d_v));
  if (plan.sm90) {
    params.tile_counter = reinterpret_cast<int*>(static_cast<char*>(workspace.data()) + plan.out_accum_bytes +
                                                 plan.lse_accum_bytes);
    // A build without the sm90a kernels (FLASHATTN_CUDA_ARCHS) leaves every call to the sm80 ones.
    if (launch_fwd_sm90(head_dim, p.q.dtype, params, stream)) return;
  }
  launch_fwd_sm80(head_dim, p.q.dtype, params, stream);
  if (plan.splits > 1) launch_merge(combine_params(params, plan, p.q.dtype), stream);
}

size_t fwd_workspace_size(const AttnProblem& p) {
  check_attention_supported(p, /*backward=*/false);
  DeviceGuard device(p.exec.device);
  return plan_fwd(p).workspace_bytes();
}

}  // namespace flashattn::cuda
