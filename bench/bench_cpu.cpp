// Benchmarks of the CPU backends through the public C API: the tiled backend's forward and
// backward over a few shapes, and the f64 reference on a small one. Each reports FLOP/s as
// GUIDE section 4 counts them (4 * kept pairs * d forward, 2.5x that backward).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>

#include "attn_case.h"
#include "flashattn/flashattn.h"

namespace {

using flashattn::testing::AttnCase;
using flashattn::testing::AttnData;

constexpr int64_t kHiddenDim = 512;    // heads * d: small enough for a 2-core machine
constexpr int64_t kTokens = 2048;      // batch * seqlen
constexpr double kBwdFlopRatio = 2.5;  // GUIDE section 4
constexpr double kFlopsPerMac = 2.0;

// Arguments of every benchmark: seqlen, head dim, causal, dtype (a flashattn_dtype value).
AttnCase case_from(const benchmark::State& state) {
  AttnCase c;
  c.seqlen_q = c.seqlen_k = state.range(0);
  c.batch = std::max<int64_t>(1, kTokens / c.seqlen_q);
  c.d = state.range(1);
  c.heads_q = c.heads_kv = std::max<int64_t>(1, kHiddenDim / c.d);
  c.causal = state.range(2) != 0;
  c.dtype = flashattn_dtype(state.range(3));
  return c;
}

double fwd_flops(const AttnData& data) {
  return kFlopsPerMac * data.kept_pairs() * double(data.c.d + data.c.head_dim_v());
}

void report(benchmark::State& state, const AttnData& data, double flops_per_call) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops_per_call * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(data.c.describe());
}

void fwd(benchmark::State& state, flashattn_backend backend) {
  AttnData data = flashattn::testing::make_attn_data(case_from(state));
  const flashattn_fwd_params params = data.fwd_params(backend);
  for (auto _ : state) {
    if (flashattn_fwd(&params) != FLASHATTN_SUCCESS) {
      state.SkipWithError(flashattn_last_error());
      return;
    }
  }
  report(state, data, fwd_flops(data));
}

void bwd(benchmark::State& state, flashattn_backend backend) {
  AttnData data = flashattn::testing::make_attn_data(case_from(state));
  data.prepare_backward();
  const flashattn_fwd_params fwd_params = data.fwd_params(backend);
  if (flashattn_fwd(&fwd_params) != FLASHATTN_SUCCESS) {  // out and lse for the backward
    state.SkipWithError(flashattn_last_error());
    return;
  }
  const flashattn_bwd_params params = data.bwd_params(backend);
  for (auto _ : state) {
    if (flashattn_bwd(&params) != FLASHATTN_SUCCESS) {
      state.SkipWithError(flashattn_last_error());
      return;
    }
  }
  report(state, data, kBwdFlopRatio * fwd_flops(data));
}

void BM_TiledFwd(benchmark::State& state) { fwd(state, FLASHATTN_BACKEND_CPU); }
void BM_TiledBwd(benchmark::State& state) { bwd(state, FLASHATTN_BACKEND_CPU); }
void BM_ReferenceFwd(benchmark::State& state) { fwd(state, FLASHATTN_BACKEND_CPU_REFERENCE); }
void BM_ReferenceBwd(benchmark::State& state) { bwd(state, FLASHATTN_BACKEND_CPU_REFERENCE); }

// The tiled shapes: bf16 over seqlen x d x causal, plus f32 on one shape. Real time, because the
// work runs on the library's threads, not on the benchmark's.
void tiled_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"seqlen", "d", "causal", "dtype"});
  b->ArgsProduct({{512, 1024}, {64, 128}, {0, 1}, {FLASHATTN_BF16}});
  b->Args({1024, 128, 0, FLASHATTN_F32});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

// The reference is naive and f64: one small shape shows its cost relative to the tiled backend.
void reference_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"seqlen", "d", "causal", "dtype"});
  b->Args({256, 64, 0, FLASHATTN_BF16});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_TiledFwd)->Apply(tiled_shapes);
BENCHMARK(BM_TiledBwd)->Apply(tiled_shapes);
BENCHMARK(BM_ReferenceFwd)->Apply(reference_shapes);
BENCHMARK(BM_ReferenceBwd)->Apply(reference_shapes);
