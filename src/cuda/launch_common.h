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

// Devices whose per-kernel launch facts the launchers keep (higher ordinals ask every time).
constexpr int kMaxCachedDevices = 64;

// Launches a tiled kernel with smem_bytes of dynamic shared memory (tiles above 48 KB must be
// opted into, per kernel); a refused opt-in or launch is a FLASHATTN_CUDA_ERROR naming `what`.
template <class Kernel, class Args>
void launch_tiled_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, const Args& args,
                         cudaStream_t stream, const char* what) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, "cudaFuncSetAttribute: ", cudaGetErrorString(err));
  kernel<<<grid, threads, smem_bytes, stream>>>(args);
  err = cudaGetLastError();
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, what, " launch: ", cudaGetErrorString(err));
}

// Launches the persistent kernel kKernel in clusters of `cluster` CTAs along x: as many clusters
// as the device runs at once (asked once per device), at most `units` (the clusters' work units),
// each CTA with smem_bytes of dynamic shared memory. A refused launch is a FLASHATTN_CUDA_ERROR
// naming `what`.
template <auto kKernel, class Args>
void launch_cluster_kernel(int cluster, int64_t units, int threads, int smem_bytes, const Args& args,
                           cudaStream_t stream, const char* what) {
  cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, "cudaFuncSetAttribute: ", cudaGetErrorString(err));
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = unsigned(cluster), attribute.val.clusterDim.y = 1, attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(cluster)), config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = size_t(smem_bytes), config.stream = stream;
  config.attrs = &attribute, config.numAttrs = 1;
  int device = 0;
  err = cudaGetDevice(&device);
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, "cudaGetDevice: ", cudaGetErrorString(err));
  static std::atomic<int> clusters_of_device[kMaxCachedDevices] = {};  // 0: not asked yet
  int clusters = device < kMaxCachedDevices ? clusters_of_device[device].load(std::memory_order_relaxed) : 0;
  if (clusters == 0) {
    err = cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config);
    if (err != cudaSuccess) {
      fail(FLASHATTN_CUDA_ERROR, what, ": cudaOccupancyMaxActiveClusters: ", cudaGetErrorString(err));
    }
    if (clusters < 1) fail(FLASHATTN_CUDA_ERROR, what, ": no cluster of ", cluster, " CTAs fits the device");
    if (device < kMaxCachedDevices) clusters_of_device[device].store(clusters, std::memory_order_relaxed);
  }
  config.gridDim = dim3(unsigned(std::min<int64_t>(units, clusters) * cluster));
  err = cudaLaunchKernelEx(&config, kKernel, args);
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, what, " launch: ", cudaGetErrorString(err));
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
