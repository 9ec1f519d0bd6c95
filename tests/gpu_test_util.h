// What the GPU test suites share: the skip when no device is visible, whether this build has a
// kernel for a case, and the case builder of their grids.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attn_case.h"
#include "device_mirror.h"

namespace flashattn::testing {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device visible (or a build without CUDA)"

// Whether this build instantiated a kernel for the case (narrow builds leave some out).
inline bool kernel_built(const AttnCase& c, bool backward) {
  flashattn_capabilities caps{};
  caps.struct_size = sizeof caps;
  if (flashattn_get_capabilities(&caps) != FLASHATTN_SUCCESS) return false;
  if ((caps.cuda_dtypes & (1u << c.dtype)) == 0) return false;
  if (backward && !caps.cuda_backward) return false;
  for (int i = 0; i < caps.num_head_dims; ++i) {
    if (caps.head_dims[i] >= std::max(c.d, c.head_dim_v())) return true;
  }
  return false;
}

// A case whose kernel this build left out is skipped, with the reason.
#define SKIP_WITHOUT_KERNEL(c, backward) \
  if (!kernel_built(c, backward))        \
  GTEST_SKIP() << "no " << ((backward) ? "backward" : "forward") << " kernel for this case in this build"

// Whether the CUDA backend has faster kernels than its sm80 ones for the current device (the
// sm90a forward on a compute capability 9.0 GPU), so that FLASHATTN_BACKEND_CUDA_SM80 tests other
// code.
inline bool device_has_sm90_kernels() {
  flashattn_capabilities caps{};
  caps.struct_size = sizeof caps;
  if (flashattn_get_capabilities(&caps) != FLASHATTN_SUCCESS || !caps.cuda_hopper_forward) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

// A non-blocking stream, destroyed with the test's scope (also when an assertion ends it early).
// Assert created() before use.
class OwnedStream {
 public:
  OwnedStream() : created_(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess) {}
  ~OwnedStream() {
    if (created_) cudaStreamDestroy(stream_);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  bool created() const { return created_; }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
  bool created_;
};

// Captures `call` (a flashattn entry point working on `stream`) into a CUDA graph in the strictest
// capture mode, then replays the graph once and waits for it. Use under ASSERT_NO_FATAL_FAILURE.
template <class Call>
void run_captured(cudaStream_t stream, Call call) {
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(call(), FLASHATTN_SUCCESS) << flashattn_last_error();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Runs entry(&p) (flashattn_fwd or flashattn_bwd; p from data, on host pointers) on data's tensors
// mirrored to the device, on a fresh non-blocking stream, captured and replayed as run_captured
// does; data then holds the results. Use under ASSERT_NO_FATAL_FAILURE.
template <class Params, class Entry>
void run_captured_on_device(AttnData& data, Params p, Entry entry) {
  OwnedStream stream;
  ASSERT_TRUE(stream.created());
  DeviceMirror mirror(data);
  mirror.translate(&p);
  p.exec.stream = stream.get();
  ASSERT_NO_FATAL_FAILURE(run_captured(stream.get(), [&] { return entry(&p); }));
  mirror.download();
}

inline void expect_pass(const std::vector<Check>& checks, const AttnCase& c) {
  for (const Check& check : checks) EXPECT_TRUE(check.pass) << c.describe() << ": " << check.to_string();
}

inline AttnCase shape(int64_t sq, int64_t sk, int64_t d, flashattn_dtype dtype = FLASHATTN_BF16) {
  AttnCase c;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  c.d = d;
  c.dtype = dtype;
  c.seed = uint64_t(sq * 131 + sk * 17 + d);
  return c;
}

// The CUDA kernels' softcap, for the forward's and the backward's cases alike: tanh.approx in f16,
// whose rounding of the scores is as fine as its error bound (softcap_tanh, softmax_sm80.h), with
// scores that reach the cap; and caps far past the scores, one past FLT_MAX / log2(e) (held at
// 2^126 and taken as off, launch_common.cu) and one whose tanh takes arguments near 1e-27
// (softcap_factor, launch_common.cu).
inline std::vector<AttnCase> softcap_edge_cases() {
  AttnCase f16 = shape(190, 190, 128, FLASHATTN_F16);
  f16.softcap = 2.f, f16.softmax_scale = 1.f;
  AttnCase huge = shape(100, 150, 64);
  huge.softcap = 3e38f;
  AttnCase far = huge;
  far.softcap = 1e28f, far.softmax_scale = 1.f;
  return {f16, huge, far};
}

}  // namespace flashattn::testing
