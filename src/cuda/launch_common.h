// What the CUDA entry points (launch_fwd.cu, launch_bwd.cu) and launchers share: the checks of
// what the kernels support, the kernel params filled from a validated problem, the launch of a
// tiled kernel, the device guard and the scratch memory of a call. (Compiled by nvcc only.)
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/problem.h"
#include "cuda/fwd_params.h"

namespace flashattn::cuda {

// A CUDA grid's y and z dimensions hold at most this many CTAs (x: 2^31 - 1).
constexpr int64_t kMaxGridYZ = 65535;

// The kernels move rows in 16-byte pieces: base pointer and every stride but the last must keep
// each row 16-byte aligned.
void check_aligned(const View& t, const char* name);
// The kernels index rows, heads and lengths with 32-bit integers (offsets are 64-bit).
void check_int32(int64_t value, const char* what);
// The checks every forward and backward call shares: f16/bf16, head dims, grid limits, the
// device ordinal, the alignment of q, k, v and out, and an instantiation for the head dim.
void check_attention_supported(const AttnProblem& p, bool backward);

FwdParams make_fwd_params(const AttnProblem& p);

// Sub-buffers of a workspace start at multiples of kWorkspaceAlign bytes (what cudaMalloc gives;
// the kernels' records need 16), and a caller's workspace must be aligned so.
constexpr size_t kWorkspaceAlign = 256;
inline size_t align_workspace(size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// An attribute of `device` (-1: the current device); a failed query is a FLASHATTN_CUDA_ERROR
// naming `what`.
int device_attribute(cudaDeviceAttr attribute, int device, const char* what);

// Opts a kernel into smem_bytes of dynamic shared memory (above 48 KB each kernel must ask); a
// refusal is a FLASHATTN_CUDA_ERROR.
template <class Kernel>
void opt_in_shared_memory(Kernel kernel, int smem_bytes) {
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // the caller's next check must not find this call's error
    fail(FLASHATTN_CUDA_ERROR, "cudaFuncSetAttribute: ", cudaGetErrorString(err));
  }
}

// Launches a tiled kernel with smem_bytes of dynamic shared memory; a refused opt-in or launch is a
// FLASHATTN_CUDA_ERROR naming `what`.
template <class Kernel, class Args>
void launch_tiled_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, const Args& args,
                         cudaStream_t stream, const char* what) {
  opt_in_shared_memory(kernel, smem_bytes);
  kernel<<<grid, threads, smem_bytes, stream>>>(args);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, what, " launch: ", cudaGetErrorString(err));
}

// What ask() (a value >= 0) gives for the current device, asked once per device: `known` holds
// the value plus one per device ordinal (0: not asked yet), for the first kCachedDevices devices.
constexpr int kCachedDevices = 64;
template <class Ask>
int ask_once_per_device(std::atomic<int> (&known)[kCachedDevices], Ask ask) {
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, "cudaGetDevice: ", cudaGetErrorString(err));
  if (device < kCachedDevices && known[device].load(std::memory_order_relaxed) > 0) {
    return known[device].load(std::memory_order_relaxed) - 1;
  }
  const int value = ask();
  if (device < kCachedDevices) known[device].store(value + 1, std::memory_order_relaxed);
  return value;
}

// Whether the code the current device runs for kKernel was compiled for sm_90 or later
// (griddepcontrol compiled in): the PTX version it came from, since the binary version of code
// compiled at load time from an older arch's PTX is the device's. Asked once per device.
template <auto kKernel>
bool kernel_has_sm90_code() {
  static std::atomic<int> known[kCachedDevices] = {};
  return ask_once_per_device(known, [] {
           cudaFuncAttributes attributes{};
           if (cudaFuncGetAttributes(&attributes, kKernel) != cudaSuccess) {
             cudaGetLastError();
             return 0;
           }
           return attributes.ptxVersion >= 90 ? 1 : 0;
         }) != 0;
}

// The launch configuration of a grid of CTAs with `threads` threads and smem_bytes of dynamic shared
// memory each, and one launch attribute.
struct AttributedLaunch {
  cudaLaunchAttribute attribute;
  cudaLaunchConfig_t config{};
  AttributedLaunch(dim3 grid, int threads, int smem_bytes, cudaStream_t stream, cudaLaunchAttribute attribute_)
      : attribute(attribute_) {
    config.gridDim = grid, config.blockDim = dim3(unsigned(threads));
    config.dynamicSmemBytes = size_t(smem_bytes), config.stream = stream;
    config.attrs = &attribute, config.numAttrs = 1;
  }
  AttributedLaunch(const AttributedLaunch&) = delete;  // config points at attribute
};

// Launches a tiled kernel as the programmatic dependent of the stream's previous kernel (sm_90): it
// may start while that one still runs, once every CTA of that one has called launch_dependents().
// Where the launch with that attribute fails, a plain launch after the previous kernel, which the
// dependent must also be correct under.
template <class Kernel, class Args>
void launch_dependent_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, const Args& args,
                             cudaStream_t stream, const char* what) {
  opt_in_shared_memory(kernel, smem_bytes);
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  const AttributedLaunch launch(grid, threads, smem_bytes, stream, dependent);
  if (cudaLaunchKernelEx(&launch.config, kernel, args) != cudaSuccess) {
    cudaGetLastError();
    launch_tiled_kernel(kernel, grid, threads, smem_bytes, args, stream, what);
  }
}

// The launch configuration of `clusters` clusters of kCluster CTAs along x.
template <int kCluster>
struct ClusterLaunch : AttributedLaunch {
  ClusterLaunch(int64_t clusters, int threads, int smem_bytes, cudaStream_t stream)
      : AttributedLaunch(dim3(unsigned(clusters * kCluster)), threads, smem_bytes, stream, cluster_dim()) {}
  static cudaLaunchAttribute cluster_dim() {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = kCluster, attribute.val.clusterDim.y = 1, attribute.val.clusterDim.z = 1;
    return attribute;
  }
};

// How many clusters of kCluster CTAs of kKernel the current device runs at once (0: none fits, as
// on a partition of the GPU with too few SMs), asked once per device (up to kCachedDevices).
template <auto kKernel, int kCluster>
int active_clusters(int threads, int smem_bytes, const char* what) {
  static std::atomic<int> known[kCachedDevices] = {};
  return ask_once_per_device(known, [&] {
    opt_in_shared_memory(kKernel, smem_bytes);
    const ClusterLaunch<kCluster> launch(1, threads, smem_bytes, nullptr);
    int clusters = 0;
    const cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kKernel, &launch.config);
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail(FLASHATTN_CUDA_ERROR, what, ": cudaOccupancyMaxActiveClusters: ", cudaGetErrorString(err));
    }
    return std::max(clusters, 0);
  });
}

// Launches the persistent kernel kKernel as `clusters` clusters of kCluster CTAs: the caller has
// taken at most as many as the device runs at once (active_clusters), and planned its schedule for
// that count. A refused launch is a FLASHATTN_CUDA_ERROR naming `what`.
template <auto kKernel, int kCluster, class Args>
void launch_cluster_kernel(int64_t clusters, int threads, int smem_bytes, const Args& args, cudaStream_t stream,
                           const char* what) {
  opt_in_shared_memory(kKernel, smem_bytes);
  const ClusterLaunch<kCluster> launch(clusters, threads, smem_bytes, stream);
  const cudaError_t err = cudaLaunchKernelEx(&launch.config, kKernel, args);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(FLASHATTN_CUDA_ERROR, what, " launch: ", cudaGetErrorString(err));
  }
}

// Makes exec.device current for the call and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Scratch memory of one call: the caller's workspace when given (it must hold `bytes`), else a
// stream-ordered allocation freed on the stream after the kernels (capturable in a CUDA graph).
class Scratch {
 public:
  Scratch(const flashattn_exec& exec, size_t bytes, cudaStream_t stream);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  bool owned_ = false;
  cudaStream_t stream_;
};

}  // namespace flashattn::cuda
