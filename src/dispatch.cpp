// The one run-time dispatch point: backend choice (explicit or automatic) and the call into it.
#include "dispatch.h"

#include "core/error.h"
#include "core/validate.h"
#include "cpu/cpu_backend.h"
#ifdef FLASHATTN_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace flashattn {
namespace {

// AUTO: CUDA when q (or the merge input) lives in device memory and CUDA is built in, else CPU.
flashattn_backend resolve(const flashattn_exec& exec, [[maybe_unused]] const void* probe) {
  if (exec.backend != FLASHATTN_BACKEND_AUTO) return exec.backend;
#ifdef FLASHATTN_WITH_CUDA
  if (cuda::is_device_pointer(probe)) return FLASHATTN_BACKEND_CUDA;
#endif
  return FLASHATTN_BACKEND_CPU;
}

#ifndef FLASHATTN_WITH_CUDA
[[noreturn]] void no_cuda() {
  fail(FLASHATTN_NOT_SUPPORTED, "exec.backend: CUDA was requested but this build of flashattn has no "
                                "CUDA backend (rebuild with nvcc available)");
}
#endif

}  // namespace

void dispatch_fwd(const AttnProblem& p) {
  flashattn_backend backend = resolve(p.exec, p.q.data);
  if (backend == FLASHATTN_BACKEND_CUDA) {
#ifdef FLASHATTN_WITH_CUDA
    cuda::fwd(p);
    return;
#else
    no_cuda();
#endif
  }
  validate_host_contents(p);
  if (p.has_append()) cpu::kv_append(p);
  if (backend == FLASHATTN_BACKEND_CPU) {
    cpu::tiled_fwd(p);
  } else {
    cpu::reference_fwd(p, backend == FLASHATTN_BACKEND_CPU_REFERENCE_LOWP);
  }
}

void dispatch_bwd(const AttnProblem& p) {
  flashattn_backend backend = resolve(p.exec, p.q.data);
  if (backend == FLASHATTN_BACKEND_CUDA) {
#ifdef FLASHATTN_WITH_CUDA
    cuda::bwd(p);
    return;
#else
    no_cuda();
#endif
  }
  validate_host_contents(p);
  if (backend == FLASHATTN_BACKEND_CPU) {
    cpu::tiled_bwd(p);
  } else {
    cpu::reference_bwd(p, backend == FLASHATTN_BACKEND_CPU_REFERENCE_LOWP);
  }
}

void dispatch_merge(const MergeProblem& p) {
  if (resolve(p.exec, p.out_partial.data) == FLASHATTN_BACKEND_CUDA) {
#ifdef FLASHATTN_WITH_CUDA
    cuda::merge(p);
    return;
#else
    no_cuda();
#endif
  }
  cpu::merge(p);
}

size_t fwd_workspace_size([[maybe_unused]] const AttnProblem& p) {
#ifdef FLASHATTN_WITH_CUDA
  if (resolve(p.exec, p.q.data) == FLASHATTN_BACKEND_CUDA) return cuda::fwd_workspace_size(p);
#endif
  return 0;  // the CPU backends allocate their per-thread tiles themselves
}

size_t bwd_workspace_size([[maybe_unused]] const AttnProblem& p) {
#ifdef FLASHATTN_WITH_CUDA
  if (resolve(p.exec, p.q.data) == FLASHATTN_BACKEND_CUDA) return cuda::bwd_workspace_size(p);
#endif
  return 0;
}

}  // namespace flashattn
