// Tests of the tiled CPU backend through the public C API: forward and backward against the f64
// reference under the correctness rule (tools/testing/attn_case.h), over the awkward shapes and
// every feature, plus bitwise reproducibility across thread counts and runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attn_case.h"
#include "flashattn/flashattn.h"

namespace flashattn::testing {
namespace {

constexpr flashattn_backend kTiled = FLASHATTN_BACKEND_CPU;
constexpr int kThreads = 2;  // CI's core count; items then really run concurrently

AttnCase make_case(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q,
                   int64_t heads_kv, int64_t d, flashattn_dtype dtype = FLASHATTN_BF16) {
  AttnCase c;
  c.batch = batch, c.seqlen_q = seqlen_q, c.seqlen_k = seqlen_k;
  c.heads_q = heads_q, c.heads_kv = heads_kv, c.d = d, c.dtype = dtype;
  return c;
}

template <class Edit>
AttnCase with(AttnCase c, Edit&& edit) {
  edit(c);
  return c;
}

std::string case_name(const ::testing::TestParamInfo<AttnCase>& info) {
  return info.param.describe();
}

void expect_pass(const std::vector<Check>& checks) {
  for (const Check& check : checks) EXPECT_TRUE(check.pass) << check.to_string();
}

// Bitwise equality, NaN patterns included (max_abs_diff is infinite where only one is NaN).
void expect_identical(const Buffer& a, const Buffer& b, const char* name) {
  EXPECT_EQ(max_abs_diff(a, b), 0.0) << name << " differs";
}

// ---- forward ---------------------------------------------------------------------------------

std::vector<AttnCase> forward_cases() {
  std::vector<AttnCase> cases;
  // Head dims (powers of two, 80, an odd-sized 40) in every dtype on a shape that is no tile size.
  for (flashattn_dtype dtype : {FLASHATTN_F32, FLASHATTN_F16, FLASHATTN_BF16}) {
    for (int64_t d : {32, 40, 64, 80, 128}) cases.push_back(make_case(2, 113, 203, 2, 2, d, dtype));
  }
  // Sequence-length pairs: near a tile multiple, single row, fewer keys than queries, equal.
  cases.push_back(make_case(1, 1023, 1024, 1, 1, 32));
  cases.push_back(with(make_case(1, 1024, 1023, 1, 1, 32), [](AttnCase& c) { c.causal = true; }));
  cases.push_back(make_case(3, 1, 239, 4, 2, 64));
  cases.push_back(make_case(2, 5, 2, 2, 1, 64, FLASHATTN_F16));
  cases.push_back(make_case(1, 128, 128, 2, 2, 128));
  cases.push_back(
      with(make_case(2, 64, 64, 2, 2, 64, FLASHATTN_F32), [](AttnCase& c) { c.dv = 40; }));
  cases.push_back(with(make_case(2, 17, 0, 2, 2, 64), [](AttnCase& c) { c.seed = 2; }));
  // Masks: causal both ways round, windows, one window that leaves rows with no key.
  const AttnCase base = make_case(2, 203, 113, 4, 2, 64);
  cases.push_back(with(base, [](AttnCase& c) { c.causal = true; }));
  cases.push_back(
      with(base, [](AttnCase& c) { c.seqlen_q = 113, c.seqlen_k = 203, c.causal = true; }));
  cases.push_back(with(base, [](AttnCase& c) { c.window_left = 32, c.window_right = 16; }));
  cases.push_back(with(base, [](AttnCase& c) { c.window_left = -1, c.window_right = 8; }));
  cases.push_back(with(base, [](AttnCase& c) { c.causal = true, c.window_left = 20; }));
  cases.push_back(with(base, [](AttnCase& c) { c.window_left = 0, c.window_right = 0; }));
  // Score modifiers: softcap (with a scale large enough that tanh bends), ALiBi both layouts.
  cases.push_back(with(base, [](AttnCase& c) { c.softcap = 2.f, c.softmax_scale = 1.f; }));
  cases.push_back(with(base, [](AttnCase& c) { c.alibi = true, c.causal = true; }));
  cases.push_back(with(base, [](AttnCase& c) { c.alibi = c.alibi_per_batch = true; }));
  // GQA ratios 1, 3, 8.
  cases.push_back(make_case(2, 150, 97, 3, 3, 64));
  cases.push_back(with(make_case(2, 150, 97, 6, 2, 64), [](AttnCase& c) { c.causal = true; }));
  cases.push_back(make_case(1, 150, 97, 8, 1, 64, FLASHATTN_F16));
  // Varlen with zero-length sequences, with seqused_k, causal.
  const AttnCase varlen =
      with(make_case(5, 140, 180, 4, 2, 64), [](AttnCase& c) { c.varlen = true; });
  cases.push_back(varlen);
  cases.push_back(with(varlen, [](AttnCase& c) { c.seqused_k = true, c.causal = true; }));
  cases.push_back(
      with(varlen, [](AttnCase& c) { c.window_left = 40, c.window_right = 3, c.lse = false; }));
  // KV cache: dense, paged (1, 16, 256), append with rotary (interleaved and not).
  const AttnCase cache =
      with(make_case(3, 37, 300, 4, 2, 64), [](AttnCase& c) { c.kv_cache = true; });
  cases.push_back(cache);
  cases.push_back(with(cache, [](AttnCase& c) { c.causal = true, c.seqlen_q = 1; }));
  for (int64_t page : {1, 16, 256}) {
    cases.push_back(with(cache, [&](AttnCase& c) { c.page_size = page, c.causal = true; }));
  }
  cases.push_back(
      with(cache, [](AttnCase& c) { c.seqlen_new = 9, c.rotary_dim = 32, c.causal = true; }));
  cases.push_back(with(cache, [](AttnCase& c) {
    c.page_size = 16, c.seqlen_new = 9, c.rotary_dim = 64, c.rotary_interleaved = true;
  }));
  // Dropout, strided tensors.
  cases.push_back(with(base, [](AttnCase& c) { c.dropout_p = 0.17f; }));
  cases.push_back(with(
      varlen, [](AttnCase& c) { c.dropout_p = 0.3f, c.causal = true, c.dropout_offset = 77; }));
  cases.push_back(with(base, [](AttnCase& c) { c.strided = true, c.causal = true; }));
  cases.push_back(with(varlen, [](AttnCase& c) { c.strided = true, c.dtype = FLASHATTN_F16; }));
  // Heads stored before positions (PyTorch's contiguous (batch, heads, seqlen, d)), dense and packed.
  cases.push_back(with(base, [](AttnCase& c) { c.heads_major = true, c.causal = true; }));
  cases.push_back(with(varlen, [](AttnCase& c) { c.heads_major = true, c.strided = true; }));
  return cases;
}

class TiledFwd : public ::testing::TestWithParam<AttnCase> {};

TEST_P(TiledFwd, MatchesReference) {
  expect_pass(check_fwd(make_attn_data(GetParam()), kTiled, kThreads));
}

INSTANTIATE_TEST_SUITE_P(Grid, TiledFwd, ::testing::ValuesIn(forward_cases()), case_name);

// ---- backward --------------------------------------------------------------------------------

std::vector<AttnCase> backward_cases() {
  std::vector<AttnCase> cases;
  for (flashattn_dtype dtype : {FLASHATTN_F32, FLASHATTN_F16, FLASHATTN_BF16}) {
    cases.push_back(make_case(2, 113, 203, 2, 2, 64, dtype));
  }
  cases.push_back(make_case(1, 97, 150, 2, 2, 80));
  cases.push_back(make_case(1, 97, 150, 2, 2, 40, FLASHATTN_F16));
  cases.push_back(make_case(1, 64, 64, 1, 1, 128));
  cases.push_back(
      with(make_case(1, 70, 90, 2, 2, 64, FLASHATTN_F32), [](AttnCase& c) { c.dv = 40; }));
  cases.push_back(make_case(3, 1, 239, 2, 1, 64));
  cases.push_back(make_case(2, 5, 2, 2, 1, 64, FLASHATTN_F16));
  cases.push_back(with(make_case(1, 1023, 1024, 1, 1, 32), [](AttnCase& c) { c.causal = true; }));
  const AttnCase base = make_case(2, 203, 113, 4, 2, 64);
  cases.push_back(with(base, [](AttnCase& c) { c.causal = true; }));
  cases.push_back(
      with(base, [](AttnCase& c) { c.seqlen_q = 113, c.seqlen_k = 203, c.causal = true; }));
  cases.push_back(with(base, [](AttnCase& c) { c.window_left = 32, c.window_right = 16; }));
  cases.push_back(with(base, [](AttnCase& c) { c.window_left = 0, c.window_right = 0; }));
  cases.push_back(with(base, [](AttnCase& c) { c.softcap = 2.f, c.softmax_scale = 1.f; }));
  cases.push_back(with(base, [](AttnCase& c) { c.alibi = true, c.causal = true; }));
  cases.push_back(with(base, [](AttnCase& c) { c.alibi = c.alibi_per_batch = true; }));
  cases.push_back(with(base, [](AttnCase& c) { c.dropout_p = 0.17f; }));
  cases.push_back(
      with(base, [](AttnCase& c) { c.strided = true, c.dropout_p = 0.1f, c.causal = true; }));
  cases.push_back(make_case(2, 150, 97, 6, 2, 64));
  cases.push_back(with(make_case(1, 150, 97, 8, 1, 64), [](AttnCase& c) { c.causal = true; }));
  const AttnCase varlen =
      with(make_case(5, 140, 180, 4, 2, 64), [](AttnCase& c) { c.varlen = true; });
  cases.push_back(varlen);
  cases.push_back(with(varlen, [](AttnCase& c) { c.seqused_k = true, c.causal = true; }));
  cases.push_back(with(varlen, [](AttnCase& c) { c.dropout_p = 0.25f, c.softcap = 3.f; }));
  cases.push_back(with(base, [](AttnCase& c) { c.heads_major = true, c.causal = true; }));
  cases.push_back(with(varlen, [](AttnCase& c) { c.heads_major = true; }));
  return cases;
}

class TiledBwd : public ::testing::TestWithParam<AttnCase> {};

TEST_P(TiledBwd, MatchesReference) {
  AttnData data = make_attn_data(GetParam());
  data.prepare_backward();
  expect_pass(check_bwd(data, kTiled, false, kThreads));
}

INSTANTIATE_TEST_SUITE_P(Grid, TiledBwd, ::testing::ValuesIn(backward_cases()), case_name);

// ---- reproducibility -------------------------------------------------------------------------

// Long enough for several query and key tiles per head, with every per-element feature on.
AttnCase reproducibility_case() {
  AttnCase c = make_case(3, 300, 280, 6, 2, 64);
  c.varlen = true, c.causal = true, c.window_left = 150, c.dropout_p = 0.2f, c.alibi = true;
  return c;
}

TEST(TiledReproducibility, ForwardIdenticalAcrossThreadCounts) {
  const AttnData data = make_attn_data(reproducibility_case());
  AttnData one = data, two = data, three = data;
  run_fwd(one, kTiled, 1);
  run_fwd(two, kTiled, 2);
  run_fwd(three, kTiled, 3);
  expect_identical(one.out, two.out, "out (1 vs 2 threads)");
  expect_identical(one.lse, two.lse, "lse (1 vs 2 threads)");
  expect_identical(one.out, three.out, "out (1 vs 3 threads)");
}

TEST(TiledReproducibility, BackwardIdenticalAcrossThreadCounts) {
  AttnData data = make_attn_data(reproducibility_case());
  run_fwd(data, kTiled, kThreads);
  data.prepare_backward();
  AttnData one = data, two = data;
  run_bwd(one, kTiled, false, 1);
  run_bwd(two, kTiled, false, 2);
  expect_identical(one.dq, two.dq, "dq");
  expect_identical(one.dk, two.dk, "dk");
  expect_identical(one.dv, two.dv, "dv");
}

TEST(TiledReproducibility, DeterministicBackwardRunsAreBitwiseEqual) {
  AttnData data = make_attn_data(reproducibility_case());
  run_fwd(data, kTiled, kThreads);
  data.prepare_backward();
  AttnData first = data, second = data;
  run_bwd(first, kTiled, true, kThreads);
  run_bwd(second, kTiled, true, kThreads);
  expect_identical(first.dq, second.dq, "dq");
  expect_identical(first.dk, second.dk, "dk");
  expect_identical(first.dv, second.dv, "dv");
}

}  // namespace
}  // namespace flashattn::testing
