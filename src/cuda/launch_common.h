// What the CUDA entry points (launch_fwd.cu, launch_bwd.cu) share: the checks of what the kernels
// support, the kernel params filled from a validated problem, the device guard and the scratch
// memory of a call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

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
