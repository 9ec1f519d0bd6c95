// `flashattn bench`: the standard grid (tokens fixed, batch = tokens / seqlen, heads * d
// fixed; every seqlen and head dim, causal and not, forward and backward), one table at the end.
// The defaults depend on the backend: the full standard grid on a GPU, a small one on the CPU.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "attn_case.h"
#include "commands.h"
#include "measure.h"

namespace flashattn::cli {
namespace {

constexpr int64_t kHiddenDim = 2048;  // heads * d of every problem (the standard grid's)
constexpr int64_t kMaxTokens = 1 << 24;

// The standard grid, for a GPU.
constexpr int64_t kGpuTokens = 16384;
const std::vector<int64_t> kGpuSeqlens{512, 1024, 2048, 4096, 8192, 16384};
const std::vector<int64_t> kGpuDims{64, 128, 256};
constexpr RepeatCounts kGpuRepeats{5, 30};
// A small grid for the CPU, which is ~1000x slower: about 1.5 minutes on 2 cores.
constexpr int64_t kCpuTokens = 2048;
const std::vector<int64_t> kCpuSeqlens{256, 512, 1024};
const std::vector<int64_t> kCpuDims{64, 128};
constexpr RepeatCounts kCpuRepeats{1, 3};

const CommandSpec kBench{
    "bench",
    "Times the standard grid: batch = tokens / seqlen, heads = 2048 / d, every seqlen and d,\n"
    "causal and not, forward and backward. Defaults: on a GPU 16384 tokens, seqlens 512..16384,\n"
    "d 64,128,256; on the CPU 2048 tokens, seqlens 256,512,1024, d 64,128.",
    {{"tokens", "N", "tokens per problem (batch * seqlen)"},
     {"seqlens", "L,...", "sequence lengths"},
     {"dims", "D,...", "head dims"},
     {"dtype", "T", "f32, f16 or bf16 (default bf16)"},
     {"layout", "L", "tensors stored bshd, or bhsd as PyTorch's contiguous tensors (default bshd)"},
     {"data", "D", "inputs normal (N(0, 1), as torch.randn) or uniform in [-1, 1] (default normal)"},
     kBackendFlag,
     kThreadsFlag,
     {"fwd-only", nullptr, "skip the backward"},
     {"deterministic", nullptr, "time the backward in its bitwise-reproducible form"},
     {"warmup", "N", "untimed calls before each measurement (default 1 CPU, 5 GPU)"},
     {"repeat", "N", "timed calls per measurement, median reported (default 3 CPU, 30 GPU)"},
     {"csv", nullptr, "print the table as CSV"}}};

struct Row {
  int64_t seqlen, d, batch, heads;
  bool causal;
  Timing fwd;
  std::optional<Timing> bwd;
};

// One line on stderr per step, rewritten in place on a terminal (and erased if an error ends the
// run, so that the message starts on a clean line).
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(STDERR_FILENO)) {}
  ~Progress() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }
  void step(size_t index, const Row& row, const char* direction) const {
    std::fprintf(stderr, "%s[%zu/%zu] seqlen %lld d %lld %s %s...%s", tty_ ? "\r\033[K" : "",
                 index + 1, total_, (long long)row.seqlen, (long long)row.d,
                 row.causal ? "causal" : "non-causal", direction, tty_ ? "" : "\n");
  }
  void done(double seconds) {
    std::fprintf(stderr, "%s%zu problems in %.1f s\n", tty_ ? "\r\033[K" : "", total_, seconds);
    tty_ = false;  // the line is final
  }

 private:
  size_t total_;
  bool tty_;
};

void print_table(const std::vector<Row>& rows) {
  std::printf("%7s %5s %7s %10s %12s %10s %12s\n", "seqlen", "d", "causal", "fwd ms", "fwd TFLOP/s",
              "bwd ms", "bwd TFLOP/s");
  for (const Row& r : rows) {
    std::printf("%7lld %5lld %7s %10.3f %12.3f", (long long)r.seqlen, (long long)r.d,
                r.causal ? "yes" : "no", r.fwd.ms, r.fwd.tflops());
    if (r.bwd) std::printf(" %10.3f %12.3f\n", r.bwd->ms, r.bwd->tflops());
    else std::printf(" %10s %12s\n", "-", "-");
  }
}

// CSV rows go out one at a time as they are measured (flushed), so that a run cut short by a time
// limit still leaves the points it finished.
void print_csv_header() {
  std::printf("seqlen,d,causal,batch,heads,dtype,backend,fwd_ms,fwd_tflops,bwd_ms,bwd_tflops\n");
  std::fflush(stdout);
}
void print_csv_row(const Row& r, flashattn_dtype dtype, flashattn_backend backend) {
  std::printf("%lld,%lld,%d,%lld,%lld,%s,%s,%.4f,%.4f,", (long long)r.seqlen, (long long)r.d,
              int(r.causal), (long long)r.batch, (long long)r.heads, flashattn_dtype_string(dtype),
              backend_name(backend), r.fwd.ms, r.fwd.tflops());
  if (r.bwd) std::printf("%.4f,%.4f\n", r.bwd->ms, r.bwd->tflops());
  else std::printf(",\n");
  std::fflush(stdout);
}

}  // namespace

int bench_command(int argc, char** argv) {
  Flags flags(kBench, argc, argv);
  if (flags.help()) {
    print_usage(kBench);
    return 0;
  }
  const ExecOptions exec = parse_exec(flags, kCpuRepeats, kGpuRepeats);
  const bool cpu = is_cpu_backend(resolve_backend(exec.backend));
  const int64_t tokens = flags.get_int("tokens", cpu ? kCpuTokens : kGpuTokens, 1, kMaxTokens);
  const std::vector<int64_t> seqlens =
      flags.get_int_list("seqlens", cpu ? kCpuSeqlens : kGpuSeqlens, 1, tokens);
  const std::vector<int64_t> dims =
      flags.get_int_list("dims", cpu ? kCpuDims : kGpuDims, 1, kHiddenDim);
  const flashattn_dtype dtype = parse_dtype("dtype", flags.get_string("dtype", "bf16"));
  const std::string layout = flags.get_string("layout", "bshd");
  if (layout != "bshd" && layout != "bhsd") throw UsageError("--layout: expected bshd or bhsd, got '" + layout + "'");
  const std::string inputs = flags.get_string("data", "normal");
  if (inputs != "normal" && inputs != "uniform") {
    throw UsageError("--data: expected normal or uniform, got '" + inputs + "'");
  }
  const bool bwd = !flags.has("fwd-only");
  if (!bwd && flags.has("deterministic")) throw UsageError("--deterministic times the backward: drop --fwd-only");
  const bool deterministic = flags.has("deterministic");

  std::vector<Row> rows;
  for (bool causal : {false, true}) {
    for (int64_t d : dims) {
      for (int64_t seqlen : seqlens) {
        rows.push_back({seqlen, d, tokens / seqlen, kHiddenDim / d, causal, {}, {}});
      }
    }
  }
  const flashattn_backend used = resolve_backend(exec.backend);
  const bool csv = flags.has("csv");
  if (csv) print_csv_header();
  Progress progress(rows.size());
  const auto start = std::chrono::steady_clock::now();
  // The non-causal rows come first; the causal row of the same shape, half the list later, times
  // the same inputs (drawing them costs more than timing them on a GPU).
  const size_t shapes = rows.size() / 2;
  size_t step = 0;
  for (size_t i = 0; i < shapes; ++i) {
    testing::AttnCase c;
    c.batch = rows[i].batch;
    c.seqlen_q = c.seqlen_k = rows[i].seqlen;
    c.heads_q = c.heads_kv = rows[i].heads;
    c.d = rows[i].d;
    c.dtype = dtype;
    c.heads_major = layout == "bhsd";
    c.normal_inputs = inputs == "normal";
    testing::AttnData data = testing::make_attn_data(c);
    for (Row* row : {&rows[i], &rows[i + shapes]}) {
      data.c.causal = row->causal;
      progress.step(step, *row, "fwd");
      row->fwd = time_fwd(data, exec);
      if (bwd) {
        progress.step(step, *row, "bwd");
        row->bwd = time_bwd(data, exec, deterministic);
      }
      ++step;
      if (csv) print_csv_row(*row, dtype, used);
    }
  }
  progress.done(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

  if (csv) return 0;
  std::printf("%s, %s, inputs %s, backend %s", flashattn_dtype_string(dtype), layout.c_str(),
              inputs == "normal" ? "N(0, 1)" : "uniform in [-1, 1]", backend_name(used));
  if (cpu) std::printf(", %s", threads_text(exec.threads).c_str());
  std::printf(", %lld tokens (batch = tokens / seqlen), heads * d = %lld, median of %d\n",
              (long long)tokens, (long long)kHiddenDim, exec.repeat);
  print_table(rows);
  return 0;
}

}  // namespace flashattn::cli
