// `flashattn bench-decode`: one decoding step per problem (one query per sequence, GQA, a paged
// KV cache filled to seqlen_k), for each cache length and page size: time and the memory
// bandwidth it achieves (K and V of every kept key, plus q and out, read or written once per
// call), beside the device's copy bandwidth measured in the same run.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "attn_case.h"
#include "commands.h"
#include "measure.h"
#ifdef FLASHATTN_CLI_CUDA
#include "device_mirror.h"
#endif

namespace flashattn::cli {
namespace {

const std::vector<int64_t> kGpuKeys{1024, 2048, 4096, 8192, 16384, 32768};
const std::vector<int64_t> kCpuKeys{1024, 2048};  // the CPU streams K/V ~100x slower
constexpr RepeatCounts kGpuRepeats{10, 50};
constexpr RepeatCounts kCpuRepeats{1, 3};
constexpr size_t kCopyBytes = size_t(1) << 30;  // far beyond L2

const CommandSpec kBenchDecode{
    "bench-decode",
    "Times one decoding step: batch sequences of one query each against a paged KV cache that\n"
    "holds seqlen_k keys, heads_q / heads_kv GQA heads. Prints the time and the bandwidth the\n"
    "step achieves (bytes of K, V, q and out over the time) and, on a GPU, the device's copy\n"
    "bandwidth measured in the same run. Defaults: batch 32, 32 / 8 heads, d 128, bf16, keys\n"
    "1k..32k (1k, 2k on the CPU), pages of 16 and 256.",
    {{"batch", "N", "sequences (default 32)"},
     {"heads", "H", "query heads (default 32)"},
     {"heads-kv", "H", "kv heads (default 8)"},
     {"d", "D", "head dim (default 128)"},
     {"keys", "K,...", "cache lengths"},
     {"page-sizes", "P,...", "page sizes (default 16,256)"},
     {"dtype", "T", "f32, f16 or bf16 (default bf16)"},
     kBackendFlag,
     kThreadsFlag,
     {"warmup", "N", "untimed calls before each measurement"},
     {"repeat", "N", "timed calls per measurement, median reported"}}};

// A tensor filled by repeating one random block: the step's time depends on the lengths, not the
// values, and drawing 2^30 values one by one would take minutes.
testing::Buffer repeating_random(flashattn_dtype dtype, std::vector<int64_t> shape, uint64_t seed) {
  testing::Buffer out(dtype, std::move(shape));
  testing::Buffer block(dtype, {int64_t(1) << 16});
  block.fill_random(seed);
  const size_t total = size_t(out.numel()) * flashattn_dtype_size(dtype);
  const size_t block_bytes = size_t(block.numel()) * flashattn_dtype_size(dtype);
  auto* dst = static_cast<unsigned char*>(out.data());
  for (size_t at = 0; at < total; at += block_bytes) {
    std::memcpy(dst + at, block.data(), std::min(block_bytes, total - at));
  }
  return out;
}

// The case's data with a paged cache of `capacity` keys per sequence in shuffled pages. The
// builder of the test library fills caches value by value; this one does not.
testing::AttnData make_decode_data(testing::AttnCase c, int64_t capacity) {
  const int64_t page = c.page_size;
  c.seqlen_k = page;  // the library builds q, out and lse; the cache is replaced below
  testing::AttnData data = testing::make_attn_data(c);
  const int64_t blocks_per_seq = (capacity + page - 1) / page, num_blocks = c.batch * blocks_per_seq;
  std::vector<int32_t> pages(static_cast<size_t>(num_blocks));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937_64(c.seed));
  data.block_table = testing::Buffer(FLASHATTN_I32, {c.batch, blocks_per_seq});
  for (int64_t i = 0; i < num_blocks; ++i) data.block_table.set_i32(i, pages[size_t(i)]);
  data.k = repeating_random(c.dtype, {num_blocks, page, c.heads_kv, c.d}, c.seed + 1);
  data.v = repeating_random(c.dtype, {num_blocks, page, c.heads_kv, c.d}, c.seed + 2);
  data.c.seqlen_k = blocks_per_seq * page;
  return data;
}

// Every sequence holds `keys` keys.
void set_cache_length(testing::AttnData& data, int64_t keys) {
  for (int64_t b = 0; b < data.c.batch; ++b) {
    data.cache_seqlens.set_i32(b, int32_t(keys));
    data.seqlens_k[size_t(b)] = keys;
  }
  data.max_seqlen_k = keys;
}

}  // namespace

int bench_decode_command(int argc, char** argv) {
  Flags flags(kBenchDecode, argc, argv);
  if (flags.help()) {
    print_usage(kBenchDecode);
    return 0;
  }
  const ExecOptions exec = parse_exec(flags, kCpuRepeats, kGpuRepeats);
  const flashattn_backend used = resolve_backend(exec.backend);
  const bool cpu = is_cpu_backend(used);
  testing::AttnCase c;
  c.batch = flags.get_int("batch", 32, 1, 4096);
  c.heads_q = flags.get_int("heads", 32, 1, 1024);
  c.heads_kv = flags.get_int("heads-kv", 8, 1, c.heads_q);
  if (c.heads_q % c.heads_kv != 0) throw UsageError("--heads-kv must divide --heads");
  c.d = flags.get_int("d", 128, 8, 256);
  c.dtype = parse_dtype("dtype", flags.get_string("dtype", "bf16"));
  c.seqlen_q = 1;
  const std::vector<int64_t> keys = flags.get_int_list("keys", cpu ? kCpuKeys : kGpuKeys, 1, 1 << 20);
  const std::vector<int64_t> pages = flags.get_int_list("page-sizes", {16, 256}, 1, 1 << 16);

  std::printf("decoding: batch %lld, heads %lld / %lld, d %lld, %s, backend %s, median of %d\n",
              (long long)c.batch, (long long)c.heads_q, (long long)c.heads_kv, (long long)c.d,
              flashattn_dtype_string(c.dtype), backend_name(used), exec.repeat);
#ifdef FLASHATTN_CLI_CUDA
  if (!cpu) std::printf("device copy bandwidth: %.3f TB/s\n", testing::device_copy_tbps(kCopyBytes, exec.repeat));
#endif
  std::printf("%8s %6s %10s %10s\n", "keys", "page", "us", "TB/s");
  const int64_t capacity = *std::max_element(keys.begin(), keys.end());
  for (int64_t page : pages) {
    c.page_size = page;
    testing::AttnData data = make_decode_data(c, capacity);
    for (int64_t n : keys) {
      set_cache_length(data, n);
      const Timing t = time_fwd(data, exec);
      const double element = double(flashattn_dtype_size(c.dtype));
      const double bytes = element * double(c.batch) *
                           (double(n) * double(c.heads_kv) * 2.0 * double(c.d) + 2.0 * double(c.heads_q) * double(c.d));
      std::printf("%8lld %6lld %10.1f %10.3f\n", (long long)n, (long long)page, t.ms * 1e3,
                  bytes / (t.ms * 1e-3) * 1e-12);
      std::fflush(stdout);  // a long run shows its progress through a pipe
    }
  }
  return 0;
}

}  // namespace flashattn::cli
