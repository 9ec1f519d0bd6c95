// The CUDA backward entry: checks what the kernels support, fills the kernel params, sets up the
// workspace (the rows' statistics, and for the single pass the f32 dq accumulator) and picks the
// instantiation (the run-time -> template dispatch point of the backward).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/bwd_params.h"
#include "cuda/cuda_backend.h"
#include "cuda/launch_common.h"
#include "kernel_registry.h"

namespace flashattn::cuda {
namespace {

// Query rows per head that the statistics workspace indexes: every row of q.
int64_t stats_rows_per_head(const AttnProblem& p) {
  return p.varlen_q ? p.q.shape[0] : p.batch * p.seqlen_q;
}

size_t stats_bytes(const AttnProblem& p) {
  return align_workspace(size_t(p.heads_q * stats_rows_per_head(p)) * sizeof(RowStats));
}

int64_t dq_tiles_per_head(const AttnProblem& p) {
  return dq_accum_tiles_per_head(p.varlen_q, p.q.shape[0], p.batch, p.seqlen_q);
}

// The single pass (dq by atomics, whose order varies run to run) unless the call asks for
// bitwise-reproducible gradients (or the device's shared memory cannot hold the single pass's
// tile: launch_bwd_sm80.h; the accumulator then goes unused).
size_t dq_accum_size(const AttnProblem& p) {
  return p.deterministic ? 0 : dq_accum_bytes(p.heads_q, dq_tiles_per_head(p), p.d);
}

BwdParams make_bwd_params(const AttnProblem& p, void* workspace) {
  BwdParams k{};
  static_cast<FwdParams&>(k) = make_fwd_params(p);
  auto strides3 = [](const View& t, int64_t* batch, int64_t* row, int64_t* head) {
    if (t.rank == 4) {
      *batch = t.stride[0], *row = t.stride[1], *head = t.stride[2];
    } else {  // varlen: [total, heads, d]
      *batch = 0, *row = t.stride[0], *head = t.stride[1];
    }
  };
  k.dout = p.dout.data;
  k.dq = p.dq.data;
  k.dk = p.dk.data;
  k.dv = p.dv.data;
  strides3(p.dout, &k.dout_batch_stride, &k.dout_row_stride, &k.dout_head_stride);
  strides3(p.dq, &k.dq_batch_stride, &k.dq_row_stride, &k.dq_head_stride);
  strides3(p.dk, &k.dk_batch_stride, &k.dk_row_stride, &k.dk_head_stride);
  strides3(p.dv, &k.dv_batch_stride, &k.dv_row_stride, &k.dv_head_stride);
  k.heads_kv = int(p.heads_kv);
  // The dk/dv grid covers every stored key row (rows past seqused_k get zero gradients); with
  // seqused_k, or no max_seqlen_k, only the total bounds a sequence's stored rows.
  const bool bound_by_total =
      p.kv_layout == KvLayout::Varlen && (p.seqused_k.present() || p.seqlen_k == 0);
  k.max_stored_k = int(bound_by_total ? p.k.shape[0] : p.seqlen_k);
  k.stats = static_cast<RowStats*>(workspace);
  k.stats_rows_per_head = stats_rows_per_head(p);
  k.dq_accum_tiles_per_head = dq_tiles_per_head(p);
  k.dq_accum = p.deterministic ? nullptr
                               : reinterpret_cast<float*>(static_cast<char*>(workspace) + stats_bytes(p));
  return k;
}

}  // namespace

size_t bwd_workspace_size(const AttnProblem& p) { return stats_bytes(p) + dq_accum_size(p); }

void bwd(const AttnProblem& p) {
  check_attention_supported(p, /*backward=*/true);
  check_aligned(p.dout, "dout");
  check_aligned(p.dq, "dq");
  check_aligned(p.dk, "dk");
  check_aligned(p.dv, "dv");
  if (p.batch == 0) return;
  DeviceGuard device(p.exec.device);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.exec.stream);
  Scratch workspace(p.exec, bwd_workspace_size(p), stream);
  const BwdParams params = make_bwd_params(p, workspace.data());
  launch_bwd_sm80(int(std::max(p.d, p.d_v)), p.q.dtype, params, stream);
}

}  // namespace flashattn::cuda
