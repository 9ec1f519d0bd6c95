// `flashattn run`: one attention problem in host memory, timed on the chosen backend and, with
// --check, compared with the f64 reference under the correctness rule of attn_case.h.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "attn_case.h"
#include "commands.h"
#include "measure.h"

namespace flashattn::cli {
namespace {

// The default problem (what `make run` checks): big enough to time, small enough that the f64
// reference of --check --bwd finishes in seconds on a 2-core CPU.
constexpr int64_t kDefaultBatch = 2;
constexpr int64_t kDefaultSeqlen = 1024;
constexpr int64_t kDefaultHeads = 8;
constexpr int64_t kDefaultDim = 64;
constexpr const char* kDefaultDtype = "bf16";

// Bounds that catch typos before they become huge allocations.
constexpr int64_t kMaxBatch = 1 << 16;
constexpr int64_t kMaxSeqlen = 1 << 20;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxDim = 512;

// Warm-up and repeats: the CPU is slow and steady; a GPU needs many calls to settle its clocks.
constexpr RepeatCounts kCpuRepeats{1, 5};
constexpr RepeatCounts kGpuRepeats{10, 50};

const CommandSpec kRun{
    "run",
    "Runs one attention problem (random data in host memory) and prints its time and TFLOP/s;\n"
    "--check compares every output with the f64 reference (exit status 1 on FAIL).",
    {{"batch", "N", "sequences (default 2)"},
     {"seqlen", "N", "query and key length (default 1024)"},
     {"seqlen-q", "N", "query length"},
     {"seqlen-k", "N", "key length (the cache capacity with a KV cache)"},
     {"heads", "N", "query heads (default 8)"},
     {"heads-kv", "N", "key/value heads, dividing --heads (default: --heads)"},
     {"dim", "N", "head dim of q and k (default 64)"},
     {"dim-v", "N", "head dim of v (default: --dim)"},
     {"dtype", "T", "f32, f16 or bf16 (default bf16)"},
     {"causal", nullptr, "causal mask (bottom-right aligned)"},
     {"window", "L,R", "local attention window, -1 = unbounded side"},
     {"softcap", "X", "soft-cap the scores at X (0 = off)"},
     {"alibi", nullptr, "random ALiBi slopes per head"},
     {"dropout", "P", "dropout probability in [0, 1)"},
     {"varlen", nullptr, "variable sequence lengths (packed, cu_seqlens)"},
     {"kv-cache", nullptr, "attend to a KV cache with random fill levels"},
     {"page-size", "N", "paged KV cache with pages of N keys (implies --kv-cache)"},
     {"seqlen-new", "N", "append N new keys to the cache first (implies --kv-cache)"},
     {"rotary-dim", "N", "rotary embedding of q and the new keys over N dims (with --seqlen-new)"},
     kBackendFlag,
     kThreadsFlag,
     {"bwd", nullptr, "also time the backward"},
     {"check", nullptr, "compare with the reference: one line per output, then PASS or FAIL"},
     {"warmup", "N", "untimed calls first (default 1 CPU, 10 GPU)"},
     {"repeat", "N", "timed calls; the median is reported (default 5 CPU, 50 GPU)"},
     {"seed", "N", "seed of the random inputs (default 1)"}}};

testing::AttnCase parse_case(const Flags& flags) {
  testing::AttnCase c;
  const int64_t seqlen = flags.get_int("seqlen", kDefaultSeqlen, 1, kMaxSeqlen);
  c.batch = flags.get_int("batch", kDefaultBatch, 1, kMaxBatch);
  c.seqlen_q = flags.get_int("seqlen-q", seqlen, 1, kMaxSeqlen);
  c.seqlen_k = flags.get_int("seqlen-k", seqlen, 1, kMaxSeqlen);
  c.heads_q = flags.get_int("heads", kDefaultHeads, 1, kMaxHeads);
  c.heads_kv = flags.get_int("heads-kv", c.heads_q, 1, kMaxHeads);
  c.d = flags.get_int("dim", kDefaultDim, 1, kMaxDim);
  c.dv = flags.get_int("dim-v", c.d, 1, kMaxDim);
  c.dtype = parse_dtype("dtype", flags.get_string("dtype", kDefaultDtype));
  c.causal = flags.has("causal");
  const std::vector<int64_t> window = flags.get_int_list("window", {-1, -1}, -1, kMaxSeqlen, 2);
  c.window_left = window[0];
  c.window_right = window[1];
  c.softcap = float(flags.get_real("softcap", 0, 0, 1e6));
  c.alibi = flags.has("alibi");
  c.dropout_p = float(flags.get_real("dropout", 0, 0, 1));
  if (c.dropout_p >= 1) throw UsageError("--dropout: expected a probability below 1, got 1");
  c.varlen = flags.has("varlen");
  c.kv_cache = flags.has("kv-cache");
  c.page_size = flags.get_int("page-size", 0, 1, kMaxSeqlen);
  c.seqlen_new = flags.get_int("seqlen-new", 0, 0, kMaxSeqlen);
  c.rotary_dim = flags.get_int("rotary-dim", 0, 0, kMaxDim);
  c.seed = uint64_t(flags.get_int("seed", 1, 0, INT64_MAX));
  // The problem builder cannot express these; the library validates everything else.
  if (c.seqlen_new > c.seqlen_k) {
    throw UsageError("--seqlen-new " + std::to_string(c.seqlen_new) +
                     " exceeds the KV cache capacity --seqlen-k " + std::to_string(c.seqlen_k));
  }
  if (c.rotary_dim > 0 && c.seqlen_new == 0) {
    throw UsageError("--rotary-dim rotates the appended keys: give --seqlen-new too");
  }
  if (flags.has("bwd") && c.has_cache()) {
    throw UsageError("--bwd takes no KV cache (--kv-cache, --page-size, --seqlen-new)");
  }
  return c;
}

std::string backend_line(const ExecOptions& exec) {
  const flashattn_backend used = resolve_backend(exec.backend);
  std::string line = backend_name(used);
  if (exec.backend == FLASHATTN_BACKEND_AUTO) line += " (auto: the best device present)";
  if (is_cpu_backend(used)) line += ", " + threads_text(exec.threads);
  return line;
}

void print_timing(const char* label, const Timing& t, const ExecOptions& exec) {
  std::printf("%-9s %10.3f ms  %8.3f TFLOP/s  (median of %d, %.2f GFLOP)\n", label, t.ms,
              t.tflops(), exec.repeat, t.flops * 1e-9);
  std::fflush(stdout);  // each line as soon as it is known: the next step may take a while
}

// Prints one line per compared output; true if all pass.
bool print_checks(const std::vector<testing::Check>& checks) {
  bool pass = true;
  for (const testing::Check& check : checks) {
    std::printf("%-9s %s\n", "check", check.to_string().c_str());
    pass = pass && check.pass;
  }
  return pass;
}

}  // namespace

int run_command(int argc, char** argv) {
  Flags flags(kRun, argc, argv);
  if (flags.help()) {
    print_usage(kRun);
    return 0;
  }
  const testing::AttnCase c = parse_case(flags);
  const ExecOptions exec = parse_exec(flags, kCpuRepeats, kGpuRepeats);
  const testing::AttnData data = testing::make_attn_data(c);

  std::printf("%-9s %s\n", "problem", c.describe().c_str());
  std::printf("%-9s %s\n", "backend", backend_line(exec).c_str());
  std::fflush(stdout);
  print_timing("forward", time_fwd(data, exec), exec);
  bool bwd = flags.has("bwd");
  if (bwd) {
    try {
      print_timing("backward", time_bwd(data, exec), exec);
    } catch (const CallError& e) {
      if (e.status != FLASHATTN_NOT_SUPPORTED) throw;
      std::printf("%-9s not run: %s\n", "backward", e.what());  // e.g. no CUDA backward yet
      bwd = false;
    }
  }
  if (!flags.has("check")) return 0;

  const flashattn_backend backend = resolve_backend(exec.backend);
  bool pass = print_checks(testing::check_fwd(data, backend, exec.threads));
  if (bwd) {
    testing::AttnData bwd_data = data;
    bwd_data.prepare_backward();
    pass = print_checks(testing::check_bwd(bwd_data, backend, false, exec.threads)) && pass;
  }
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : kExitFail;
}

}  // namespace flashattn::cli
