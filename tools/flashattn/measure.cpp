// Timing of attention calls (see measure.h). On a CPU backend a call is synchronous, so a
// steady_clock interval around it is its run time; on CUDA the case is mirrored to device memory
// and CUDA events time the calls.
#include "measure.h"

#ifdef FLASHATTN_CLI_CUDA
#include "device_mirror.h"
#endif

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace flashattn::cli {
namespace {

constexpr double kBwdFlopRatio = 2.5;  // the standard grid's convention: backward FLOPs per forward FLOP
constexpr double kFlopsPerMac = 2.0;

template <class Call>
double median_ms(const Call& call, const ExecOptions& exec) {
  for (int i = 0; i < exec.warmup; ++i) call();
  std::vector<double> samples;
  for (int i = 0; i < exec.repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    const auto stop = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  return samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
}

}  // namespace

flashattn_backend resolve_backend(flashattn_backend requested) {
  if (requested != FLASHATTN_BACKEND_AUTO) return requested;
  return testing::cuda_device_available() ? FLASHATTN_BACKEND_CUDA : FLASHATTN_BACKEND_CPU;
}

bool is_cpu_backend(flashattn_backend backend) {
  return backend != FLASHATTN_BACKEND_CUDA && backend != FLASHATTN_BACKEND_CUDA_SM80;
}

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

std::string threads_text(int requested) {
  const int threads = requested > 0 ? requested : hardware_threads();
  return std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

double fwd_flops(const testing::AttnData& data) {
  return kFlopsPerMac * data.kept_pairs() * double(data.c.d + data.c.head_dim_v());
}

double bwd_flops(const testing::AttnData& data) { return kBwdFlopRatio * fwd_flops(data); }

Timing time_fwd(const testing::AttnData& data, const ExecOptions& exec) {
  const flashattn_backend backend = resolve_backend(exec.backend);
  testing::AttnData work = data;
  flashattn_fwd_params params = work.fwd_params(backend, exec.threads);
  Timing timing;
  timing.flops = fwd_flops(data);
  auto call = [&] { check_status(flashattn_fwd(&params), "flashattn_fwd"); };
  if (is_cpu_backend(backend)) {
    timing.ms = median_ms(call, exec);
    return timing;
  }
#ifdef FLASHATTN_CLI_CUDA
  testing::DeviceMirror mirror(work);
  mirror.translate(&params);
  size_t workspace_bytes = 0;  // split-KV partials; passed in, as an engine would
  check_status(flashattn_fwd_workspace_size(&params, &workspace_bytes), "flashattn_fwd_workspace_size");
  testing::DeviceAllocation workspace(workspace_bytes);
  params.exec.workspace = workspace.get();
  params.exec.workspace_size = workspace_bytes;
  timing.ms = testing::median_device_ms(call, exec.warmup, exec.repeat);
  return timing;
#else
  throw std::runtime_error("this flashattn program was built without CUDA");
#endif
}

Timing time_bwd(const testing::AttnData& data, const ExecOptions& exec, bool deterministic) {
  const flashattn_backend backend = resolve_backend(exec.backend);
  testing::AttnData work = data;
  work.prepare_backward();
  flashattn_fwd_params fwd = work.fwd_params(backend, exec.threads);
  flashattn_bwd_params bwd = work.bwd_params(backend, deterministic, exec.threads);
  Timing timing;
  timing.flops = bwd_flops(data);
  auto call = [&] { check_status(flashattn_bwd(&bwd), "flashattn_bwd"); };
  if (is_cpu_backend(backend)) {
    check_status(flashattn_fwd(&fwd), "flashattn_fwd");  // out and lse for the backward
    timing.ms = median_ms(call, exec);
    return timing;
  }
#ifdef FLASHATTN_CLI_CUDA
  testing::DeviceMirror mirror(work);
  mirror.translate(&fwd);
  mirror.translate(&bwd);
  size_t workspace_bytes = 0;  // passed in, as an engine would, so that no call allocates
  check_status(flashattn_bwd_workspace_size(&bwd, &workspace_bytes), "flashattn_bwd_workspace_size");
  testing::DeviceAllocation workspace(workspace_bytes);
  bwd.exec.workspace = workspace.get();
  bwd.exec.workspace_size = workspace_bytes;
  check_status(flashattn_fwd(&fwd), "flashattn_fwd");
  timing.ms = testing::median_device_ms(call, exec.warmup, exec.repeat);
  return timing;
#else
  throw std::runtime_error("this flashattn program was built without CUDA");
#endif
}

void check_status(flashattn_status status, const char* call) {
  if (status != FLASHATTN_SUCCESS) {
    throw CallError(status, std::string(call) + ": " + flashattn_status_string(status) + ": " +
                                flashattn_last_error());
  }
}

}  // namespace flashattn::cli
