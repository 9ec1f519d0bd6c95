// The CUDA backward against the CPU float64 reference under the correctness rule (gradients: 3x
// the low-precision baseline), over awkward shapes and every feature the kernels serve; plus
// bitwise reproducibility, streams and graph capture, and the workspace contract. Skipped, with
// the reason, when no GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attn_case.h"
#include "device_mirror.h"
#include "gpu_test_util.h"

namespace flashattn::testing {
namespace {

// 23 key blocks x 12 (kv head, sequence) pairs = 2 waves and 12 CTAs on an H100 / H200 (132 SMs):
// the wave model moves each pair's last key block (blocks of 128 keys up to d 128, 64 above; the
// last one partial) to the tail launch as half tiles, which run as the main launch's two whole
// waves drain (on other SM counts the model may pick other counts, or none).
AttnCase tail_case(int64_t d) {
  AttnCase c = shape(70, d <= 128 ? 2900 : 1450, d);
  c.batch = 3, c.heads_q = 8, c.heads_kv = 4;
  return c;
}

std::vector<AttnCase> backward_cases() {
  std::vector<AttnCase> cases;
  // Awkward lengths at every instantiated head dim and two that are not (80: predicated loads;
  // 200: whole n8 tiles of dq past d, which the unguarded atomics above d 128 add to the padding).
  const std::vector<std::pair<int64_t, int64_t>> lengths = {{113, 203}, {1023, 1024}, {1024, 1023},
                                                           {1, 239}, {5, 2}, {128, 128}};
  for (int64_t d : {32, 64, 80, 96, 128, 160, 192, 200, 224, 256}) {
    for (auto [sq, sk] : lengths) {
      if (d != 64 && d != 128 && sq >= 1023) continue;  // keep the reference's cost in bounds
      AttnCase c = shape(sq, sk, d);
      cases.push_back(c);
      c.causal = true;
      cases.push_back(c);
    }
  }
  for (flashattn_dtype dtype : {FLASHATTN_F16, FLASHATTN_BF16}) {
    AttnCase c = shape(333, 517, 128, dtype);
    c.causal = true;
    cases.push_back(c);
  }
  AttnCase c = shape(257, 300, 64);
  c.window_left = 40, c.window_right = 7;
  cases.push_back(c);
  c = shape(200, 100, 64);  // rows 0..99 keep no key: zero gradients from them
  c.window_left = 0, c.window_right = -1, c.causal = true;
  cases.push_back(c);
  c = shape(150, 400, 128);
  c.window_left = 5, c.window_right = 0;
  cases.push_back(c);
  c = shape(203, 113, 64);
  c.window_left = 0, c.window_right = 0;
  cases.push_back(c);
  c = shape(190, 190, 128);
  c.softcap = 2.f, c.softmax_scale = 1.f;
  cases.push_back(c);
  for (const AttnCase& edge : softcap_edge_cases()) cases.push_back(edge);
  c = shape(190, 230, 64);
  c.alibi = true, c.causal = true;
  cases.push_back(c);
  c.alibi_per_batch = true;
  cases.push_back(c);
  // Negative slopes over long distances: rows past the queries in a step's tile must not turn
  // 2^x into inf (their lse is +inf, not 0).
  c = shape(100, 1500, 64);
  c.alibi = true, c.alibi_negative = true;
  cases.push_back(c);
  for (int64_t ratio : {1, 3, 8}) {
    c = shape(160, 250, 128);
    c.heads_q = 8 * (ratio == 3 ? 3 : 1), c.heads_kv = c.heads_q / ratio;
    c.causal = ratio == 8;
    cases.push_back(c);
  }
  c = shape(300, 280, 128);  // zero-length sequences among them (batch >= 3)
  c.batch = 5, c.varlen = true, c.causal = true, c.heads_q = 6, c.heads_kv = 2;
  cases.push_back(c);
  c.seqused_k = true, c.causal = false;
  cases.push_back(c);
  c.dropout_p = 0.25f, c.softcap = 3.f, c.seqused_k = false;
  cases.push_back(c);
  // Above d 128 the single pass adds dq without testing for a sequence's end: a step's rows past
  // it add zeros into the next sequence's tiles, past the last head's into padding.
  c = shape(150, 170, 256);
  c.batch = 4, c.varlen = true, c.heads_q = 4, c.heads_kv = 2;
  cases.push_back(c);
  // Causal with a head's key tiles at least half the SMs of an H100 / H200 (66 of 132): the single
  // pass's grid stays tiles first (launch_bwd_sm80.h, single_pass_heads_first); 68 and 67 key tiles
  // of 64 / 128 keys.
  for (auto [d, sk] : {std::pair<int64_t, int64_t>{256, 4300}, {64, 8500}}) {
    c = shape(100, sk, d);
    c.causal = true;
    cases.push_back(c);
  }
  for (int64_t d : {64, 128, 256}) cases.push_back(tail_case(d));
  c = tail_case(64);
  c.softcap = 3.f, c.alibi = true, c.dropout_p = 0.2f;  // the tail's score-modifier kernel
  cases.push_back(c);
  c = shape(211, 211, 64);
  c.dropout_p = 0.17f;
  cases.push_back(c);
  c.causal = true, c.dropout_offset = 12345, c.strided = true;
  cases.push_back(c);
  c = shape(177, 133, 128);
  c.strided = true;
  cases.push_back(c);
  for (int64_t d : {64, 128, 256}) {  // heads stored before positions, as PyTorch's contiguous tensors
    c = shape(300, 700, d);
    c.heads_major = true, c.causal = d == 64;
    cases.push_back(c);
  }
  c = shape(0, 50, 64);  // no queries: dk = dv = 0
  cases.push_back(c);
  c = shape(40, 0, 64);  // no keys: dq = 0
  cases.push_back(c);
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{64, 128}, {128, 64}, {96, 40}, {192, 128}}) {
    c = shape(150, 260, d);
    c.dv = dv, c.causal = d > dv;
    cases.push_back(c);
  }
  // d 16 on d 256's kernel (chosen by d_v): dq's n8 tiles past d go to the accumulator's padding
  // at the farthest offsets there are (8 key blocks: every padding row a CTA may pick).
  c = shape(150, 450, 16);
  c.dv = 256;
  cases.push_back(c);
  return cases;
}

class GpuBackward : public ::testing::TestWithParam<AttnCase> {};

TEST_P(GpuBackward, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const AttnCase& c = GetParam();
  SKIP_WITHOUT_KERNEL(c, /*backward=*/true);
  AttnData data = make_attn_data(c);
  data.prepare_backward();
  expect_pass(check_bwd(data, FLASHATTN_BACKEND_CUDA), c);  // the single pass, dq by atomics
}

// The deterministic path (a dq pass, then the dk/dv pass) over the same grid, its longest
// sequences left out to keep the reference's cost in bounds.
TEST_P(GpuBackward, DeterministicMatchesReference) {
  SKIP_WITHOUT_GPU();
  const AttnCase& c = GetParam();
  SKIP_WITHOUT_KERNEL(c, /*backward=*/true);
  if (c.seqlen_q >= 1023) GTEST_SKIP() << "the single-pass test covers this length";
  AttnData data = make_attn_data(c);
  data.prepare_backward();
  expect_pass(check_bwd(data, FLASHATTN_BACKEND_CUDA, /*deterministic=*/true), c);
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuBackward, ::testing::ValuesIn(backward_cases()),
                         [](const auto& info) { return info.param.describe(); });

// With the deterministic flag, gradients are bitwise equal run after run (GQA, dropout, varlen:
// every path that sums over heads or tiles).
TEST(GpuBackwardDeterminism, FiftyRunsBitwiseEqual) {
  SKIP_WITHOUT_GPU();
  AttnCase c = shape(700, 650, 128);
  c.batch = 3, c.varlen = true, c.causal = true, c.heads_q = 8, c.heads_kv = 2, c.dropout_p = 0.1f;
  SKIP_WITHOUT_KERNEL(c, /*backward=*/true);
  AttnData data = make_attn_data(c);
  run_fwd(data, FLASHATTN_BACKEND_CUDA);
  data.prepare_backward();
  AttnData first = data;
  run_bwd(first, FLASHATTN_BACKEND_CUDA, /*deterministic=*/true);
  for (int run = 1; run < 50; ++run) {
    AttnData again = data;
    run_bwd(again, FLASHATTN_BACKEND_CUDA, true);
    ASSERT_EQ(max_abs_diff(first.dq, again.dq), 0.0) << "run " << run;
    ASSERT_EQ(max_abs_diff(first.dk, again.dk), 0.0) << "run " << run;
    ASSERT_EQ(max_abs_diff(first.dv, again.dv), 0.0) << "run " << run;
  }
}

// Offsets past 2^31 elements: k, v, dk and dv with their rows 2^22 elements apart, so that each
// spans more than 2^31 elements (600 rows), the other tensors compact. The gradients must be those
// of the compact problem: bitwise with the deterministic flag; by default dk and dv bitwise (summed
// without atomics) and dq under the reference rule (its atomics' order varies).
TEST(GpuBackwardLarge, KeyRowsBeyondInt32Elements) {
  SKIP_WITHOUT_GPU();
  AttnCase c = shape(300, 600, 64);
  c.batch = 1, c.heads_q = 2, c.heads_kv = 1, c.causal = true;
  SKIP_WITHOUT_KERNEL(c, /*backward=*/true);
  const int64_t row_stride = int64_t(1) << 22;
  const size_t elem = flashattn_dtype_size(c.dtype);
  const size_t bytes = size_t(c.seqlen_k * row_stride) * elem;
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < 4 * bytes + (size_t(1) << 30)) GTEST_SKIP() << "needs 4 x " << bytes << " bytes of device memory";
  AttnData data = make_attn_data(c);
  run_fwd(data, FLASHATTN_BACKEND_CUDA);
  data.prepare_backward();
  for (bool deterministic : {true, false}) {
    AttnData compact = data, wide = data;
    run_bwd(compact, FLASHATTN_BACKEND_CUDA, deterministic);
    DeviceMirror mirror(wide);
    flashattn_bwd_params p = wide.bwd_params(FLASHATTN_BACKEND_CUDA, deterministic);
    mirror.translate(&p);
    DeviceAllocation k(bytes), v(bytes), dk(bytes), dv(bytes);
    // Row i of the host buffer's compact layout to row i * row_stride of the wide device tensor.
    auto widen = [&](flashattn_tensor& t, void* device, const Buffer& host) {
      ASSERT_EQ(cudaMemcpy2D(device, row_stride * elem, host.tensor().data, host.tensor().stride[1] * elem,
                             c.d * elem, c.seqlen_k, cudaMemcpyHostToDevice),
                cudaSuccess);
      t.data = device;
      t.stride[0] = c.seqlen_k * row_stride, t.stride[1] = row_stride;
    };
    widen(p.k, k.get(), wide.k);
    widen(p.v, v.get(), wide.v);
    widen(p.dk, dk.get(), wide.dk);  // NaN: the kernels must write every element
    widen(p.dv, dv.get(), wide.dv);
    ASSERT_EQ(flashattn_bwd(&p), FLASHATTN_SUCCESS) << flashattn_last_error();
    mirror.download();
    for (auto [host, device] : {std::pair{&wide.dk, dk.get()}, std::pair{&wide.dv, dv.get()}}) {
      ASSERT_EQ(cudaMemcpy2D(host->tensor().data, host->tensor().stride[1] * elem, device, row_stride * elem,
                             c.d * elem, c.seqlen_k, cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    EXPECT_EQ(max_abs_diff(wide.dk, compact.dk), 0.0) << "deterministic " << deterministic;
    EXPECT_EQ(max_abs_diff(wide.dv, compact.dv), 0.0) << "deterministic " << deterministic;
    if (deterministic) {
      EXPECT_EQ(max_abs_diff(wide.dq, compact.dq), 0.0);
    } else {
      expect_pass(check_bwd_result(data, wide), c);
    }
  }
}

// Device-memory calls made directly through the C API: streams, graphs and the workspace.
class GpuBackwardApi : public ::testing::Test {
 protected:
  void SetUp() override {
    AttnCase c = shape(300, 400, 128);
    c.causal = true, c.batch = 3, c.varlen = true;
    prepare(c);
  }
  // The case's inputs with its forward run on the GPU, and an eager CUDA backward to compare with.
  void prepare(const AttnCase& c) {
    SKIP_WITHOUT_GPU();
    c_ = c;
    SKIP_WITHOUT_KERNEL(c_, /*backward=*/true);
    data_ = make_attn_data(c_);
    run_fwd(data_, FLASHATTN_BACKEND_CUDA);
    data_.prepare_backward();
    inputs_ = data_;
    eager_ = data_;
    run_bwd(eager_, FLASHATTN_BACKEND_CUDA);
  }
  // dq against the reference (the default single pass adds it by atomics, so it is not bitwise
  // reproducible); dk and dv, summed without atomics, bitwise against an eager CUDA run.
  void expect_correct_gradients() {
    expect_pass(check_bwd_result(inputs_, data_), c_);
    EXPECT_EQ(max_abs_diff(data_.dk, eager_.dk), 0.0);
    EXPECT_EQ(max_abs_diff(data_.dv, eager_.dv), 0.0);
  }
  AttnCase c_;
  AttnData data_, inputs_, eager_;
};

TEST_F(GpuBackwardApi, NonDefaultStreamGraphCaptureAndCallerWorkspace) {
  OwnedStream stream;
  ASSERT_TRUE(stream.created());
  DeviceMirror mirror(data_);
  flashattn_bwd_params p = data_.bwd_params(FLASHATTN_BACKEND_CUDA);
  mirror.translate(&p);
  p.exec.stream = stream.get();
  size_t bytes = 0;
  ASSERT_EQ(flashattn_bwd_workspace_size(&p, &bytes), FLASHATTN_SUCCESS) << flashattn_last_error();
  EXPECT_GT(bytes, 0u);
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, bytes), cudaSuccess);
  // NaN in every byte: the call must write its statistics and clear its dq accumulator (in the
  // row-statistics kernel) before anything reads them.
  ASSERT_EQ(cudaMemset(workspace, 0xff, bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  p.exec.workspace = workspace;
  p.exec.workspace_size = bytes;
  ASSERT_NO_FATAL_FAILURE(run_captured(stream.get(), [&] { return flashattn_bwd(&p); }));
  mirror.download();
  expect_correct_gradients();
  cudaFree(workspace);
}

TEST_F(GpuBackwardApi, GraphCaptureWithoutWorkspaceAllocatesOnTheStream) {
  ASSERT_NO_FATAL_FAILURE(
      run_captured_on_device(data_, data_.bwd_params(FLASHATTN_BACKEND_CUDA), flashattn_bwd));
  expect_correct_gradients();
}

// A captured call whose single pass hands its last key block to the tail launch (tail_case, on
// 132 SMs): the programmatic dependency becomes a graph edge, and the dq conversion after it still
// sees both launches' atomics.
class GpuBackwardTail : public GpuBackwardApi {
 protected:
  void SetUp() override { prepare(tail_case(64)); }
};

TEST_F(GpuBackwardTail, UnderGraphCapture) {
  ASSERT_NO_FATAL_FAILURE(
      run_captured_on_device(data_, data_.bwd_params(FLASHATTN_BACKEND_CUDA), flashattn_bwd));
  expect_correct_gradients();
}

TEST_F(GpuBackwardApi, TooSmallWorkspaceIsRejectedBeforeAnyWork) {
  DeviceMirror mirror(data_);
  flashattn_bwd_params p = data_.bwd_params(FLASHATTN_BACKEND_CUDA);
  mirror.translate(&p);
  size_t bytes = 0;
  ASSERT_EQ(flashattn_bwd_workspace_size(&p, &bytes), FLASHATTN_SUCCESS);
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, bytes), cudaSuccess);
  p.exec.workspace = workspace;
  p.exec.workspace_size = bytes - 1;
  EXPECT_EQ(flashattn_bwd(&p), FLASHATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashattn_last_error()).find("exec.workspace_size"), std::string::npos)
      << flashattn_last_error();
  mirror.download();
  for (int64_t i = 0; i < data_.dq.numel(); ++i) ASSERT_TRUE(std::isnan(data_.dq.get(i)));
  cudaFree(workspace);
}

}  // namespace
}  // namespace flashattn::testing
