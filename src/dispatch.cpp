// The one run-time dispatch point: backend choice (explicit or automatic) and the call into it.
#include "dispatch.h"

#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "core/validate.h"
#include "cpu/cpu_backend.h"
#ifdef FLASHATTN_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace flashattn {
namespace {

bool is_cuda(flashattn_backend backend) {
  return backend == FLASHATTN_BACKEND_CUDA || backend == FLASHATTN_BACKEND_CUDA_SM80;
}

// AUTO: CUDA when q (or the merge input) lives in device memory and CUDA is built in, else CPU.
flashattn_backend resolve(const flashattn_exec& exec, [[maybe_unused]] const void* probe) {
  if (exec.backend != FLASHATTN_BACKEND_AUTO) return exec.backend;
#ifdef FLASHATTN_WITH_CUDA
  if (cuda::is_device_pointer(probe)) return FLASHATTN_BACKEND_CUDA;
#endif
  return FLASHATTN_BACKEND_CPU;
}

#ifdef FLASHATTN_WITH_CUDA
// Every tensor must live where its backend runs: the CPU backends read host (or managed) memory,
// the kernels device (or managed) memory. Checked before any memory is touched.
void check_memory(std::initializer_list<std::pair<const char*, const View*>> views, bool on_device) {
  for (const auto& [name, view] : views) {
    if (!view->present()) continue;
    const bool ok = on_device ? cuda::is_device_pointer(view->data)
                              : !cuda::is_device_only_pointer(view->data);
    FA_CHECK_ARG(ok, name, ": expected ", on_device ? "device" : "host", " memory for the ",
                 on_device ? "CUDA" : "CPU", " backend, got ", on_device ? "host" : "device",
                 " memory");
  }
}

void check_memory(const AttnProblem& p, bool on_device) {
  check_memory({{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"out", &p.out}, {"lse", &p.lse},
                {"dout", &p.dout}, {"dq", &p.dq}, {"dk", &p.dk}, {"dv", &p.dv},
                {"cu_seqlens_q", &p.cu_seqlens_q}, {"cu_seqlens_k", &p.cu_seqlens_k},
                {"seqused_k", &p.seqused_k}, {"cache_seqlens", &p.cache_seqlens},
                {"block_table", &p.block_table}, {"k_new", &p.k_new}, {"v_new", &p.v_new},
                {"rotary_cos", &p.rotary_cos}, {"rotary_sin", &p.rotary_sin},
                {"opts.alibi_slopes", &p.opts.alibi_slopes}},
               on_device);
}

void check_memory(const MergeProblem& p, bool on_device) {
  check_memory({{"out_partial", &p.out_partial}, {"lse_partial", &p.lse_partial}, {"out", &p.out},
                {"lse", &p.lse}},
               on_device);
}
#else
void check_memory(const AttnProblem&, bool) {}  // without CUDA every pointer is host memory
void check_memory(const MergeProblem&, bool) {}

[[noreturn]] void no_cuda() {
  fail(FLASHATTN_NOT_SUPPORTED, "exec.backend: CUDA was requested but this build of flashattn has no "
                                "CUDA backend (rebuild with nvcc available)");
}
#endif

}  // namespace

void dispatch_fwd(const AttnProblem& p) {
  flashattn_backend backend = resolve(p.exec, p.q.data);
  check_memory(p, is_cuda(backend));
  if (is_cuda(backend)) {
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
  check_memory(p, is_cuda(backend));
  if (is_cuda(backend)) {
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
  flashattn_backend backend = resolve(p.exec, p.out_partial.data);
  check_memory(p, is_cuda(backend));
  if (is_cuda(backend)) {
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
  if (is_cuda(resolve(p.exec, p.q.data))) return cuda::fwd_workspace_size(p);
#endif
  return 0;  // the CPU backends allocate their per-thread tiles themselves
}

size_t bwd_workspace_size([[maybe_unused]] const AttnProblem& p) {
#ifdef FLASHATTN_WITH_CUDA
  if (is_cuda(resolve(p.exec, p.q.data))) return cuda::bwd_workspace_size(p);
#endif
  return 0;
}

}  // namespace flashattn
