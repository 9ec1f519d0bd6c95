// The CUDA forward entry: checks what the kernels support, fills the kernel params from the
// validated problem and picks the instantiation (the run-time -> template dispatch point).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/fwd_params.h"
#include "cuda/kv_append_sm80.h"
#include "cuda/launch_common.h"
#include "kernel_registry.h"

namespace flashattn::cuda {

void fwd(const AttnProblem& p) {
  check_attention_supported(p, /*backward=*/false);
  if (p.batch == 0) return;
  DeviceGuard device(p.exec.device);
  const FwdParams params = make_fwd_params(p);
  const cudaStream_t stream = static_cast<cudaStream_t>(p.exec.stream);
  if (p.has_append() && p.seqlen_new > 0) kv_append(params, p.q.dtype, stream);
  if (p.seqlen_q == 0) return;
  launch_fwd_sm80(int(std::max(p.d, p.d_v)), p.q.dtype, params, stream);
}

size_t fwd_workspace_size(const AttnProblem&) { return 0; }

}  // namespace flashattn::cuda
