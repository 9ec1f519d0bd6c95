// Argument validation through the public C API: every argument of every entry point is rejected
// with the right status and a message naming it, and a rejected call touches no tensor memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "flashattn/flashattn.h"

// Every suite or instantiation name starts with "validation" so that `ctest -R validation`
// selects this file's tests.

namespace {

// The valid baseline problems: GQA (4 query heads over 2), d != d_v, seqlen_q != seqlen_k.
constexpr int64_t kBatch = 2, kSeqQ = 3, kSeqK = 5, kHeadsQ = 4, kHeadsKv = 2, kD = 8, kDv = 6;
// Varlen: query lengths {3, 2}; key lengths {5, 2}, of which seqused_k uses {4, 2}.
constexpr int64_t kTotalQ = 5, kTotalK = 7, kMaxSeqQ = 3, kMaxSeqK = 5;
// Dense KV cache of capacity 8 holding {3, 5} keys, 2 appended, rotary tables for 8 positions.
constexpr int64_t kCapacity = 8, kSeqNew = 2, kRotaryHalf = 2, kSeqRo = 8;
// Paged KV cache: 5 blocks of 4 keys, 2 blocks per sequence (capacity 8).
constexpr int64_t kNumBlocks = 5, kBlockSize = 4, kMaxBlocks = 2;
constexpr int64_t kSplits = 3;  // merge

constexpr flashattn_status kOk = FLASHATTN_SUCCESS;
constexpr flashattn_status kInvalid = FLASHATTN_INVALID_ARGUMENT;
constexpr flashattn_status kUnsupported = FLASHATTN_NOT_SUPPORTED;
constexpr uint32_t kSentinel = 0x7fc0deadu;      // a NaN payload no backend writes
constexpr size_t kUntouchedBytes = 0xdeadbeefu;  // a workspace query must not write on failure
constexpr int kBadEnum = 99;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- host memory ------------------------------------------------------------------------------

// Tensor memory in 32-bit words whatever the dtype, so tests can relabel dtypes freely. Every
// buffer can be snapshot to prove that a rejected call touched nothing.
class Arena {
 public:
  flashattn_tensor input(const std::vector<int64_t>& shape, flashattn_dtype dtype = FLASHATTN_F32) {
    std::vector<uint32_t>& words = allocate(shape);
    for (size_t i = 0; i < words.size(); ++i) {
      float value = 0.5f * std::sin(0.37f * float(i));
      std::memcpy(&words[i], &value, sizeof value);
    }
    return make(words, dtype, shape);
  }
  flashattn_tensor output(const std::vector<int64_t>& shape,
                          flashattn_dtype dtype = FLASHATTN_F32) {
    std::vector<uint32_t>& words = allocate(shape);
    std::fill(words.begin(), words.end(), kSentinel);
    return make(words, dtype, shape);
  }
  // i32 values; shape defaults to [values.size()].
  flashattn_tensor indices(const std::vector<int32_t>& values, std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {int64_t(values.size())};
    std::vector<uint32_t>& words = allocate(shape);
    std::memcpy(words.data(), values.data(), values.size() * sizeof(int32_t));
    return make(words, FLASHATTN_I32, shape);
  }
  std::deque<std::vector<uint32_t>> snapshot() const { return buffers_; }

 private:
  std::vector<uint32_t>& allocate(const std::vector<int64_t>& shape) {
    int64_t numel = 1;
    for (int64_t size : shape) numel *= size;
    buffers_.emplace_back(size_t(std::max<int64_t>(numel, 1)));  // non-NULL even when empty
    return buffers_.back();
  }
  static flashattn_tensor make(std::vector<uint32_t>& words, flashattn_dtype dtype,
                               const std::vector<int64_t>& shape) {
    return flashattn_make_tensor(words.data(), dtype, int32_t(shape.size()), shape.data());
  }
  std::deque<std::vector<uint32_t>> buffers_;
};

int32_t* ints(const flashattn_tensor& t) { return static_cast<int32_t*>(t.data); }

// A contiguous descriptor of another shape over the same memory.
void reshape(flashattn_tensor& t, std::vector<int64_t> shape) {
  t = flashattn_make_tensor(t.data, t.dtype, int32_t(shape.size()), shape.data());
}

// ---- valid baseline problems ------------------------------------------------------------------

enum class Layout { kDense, kVarlen, kCache, kPaged };  // kCache: dense cache + append + rotary

struct FwdSetup {
  Arena a;
  flashattn_fwd_params p;

  explicit FwdSetup(Layout layout) {
    flashattn_fwd_params_init(&p);
    p.exec.backend = FLASHATTN_BACKEND_CPU_REFERENCE;
    if (layout == Layout::kVarlen) {
      varlen_q();
      varlen_kv();
      return;
    }
    dense_q();
    if (layout == Layout::kDense) dense_kv(kSeqK);
    if (layout == Layout::kCache) cache_with_append();
    if (layout == Layout::kPaged) paged_kv();
  }
  void dense_q() {
    p.q = a.input({kBatch, kSeqQ, kHeadsQ, kD});
    p.out = a.output({kBatch, kSeqQ, kHeadsQ, kDv});
    p.lse = a.output({kBatch, kHeadsQ, kSeqQ});
  }
  void varlen_q() {
    p.q = a.input({kTotalQ, kHeadsQ, kD});
    p.out = a.output({kTotalQ, kHeadsQ, kDv});
    p.lse = a.output({kHeadsQ, kTotalQ});
    p.cu_seqlens_q = a.indices({0, 3, 5});
    p.max_seqlen_q = kMaxSeqQ;
  }
  void dense_kv(int64_t seqlen_k) {
    p.k = a.input({kBatch, seqlen_k, kHeadsKv, kD});
    p.v = a.input({kBatch, seqlen_k, kHeadsKv, kDv});
  }
  void varlen_kv() {
    p.k = a.input({kTotalK, kHeadsKv, kD});
    p.v = a.input({kTotalK, kHeadsKv, kDv});
    p.cu_seqlens_k = a.indices({0, 5, 7});
    p.seqused_k = a.indices({4, 2});
    p.max_seqlen_k = kMaxSeqK;
  }
  void append() {
    p.k_new = a.input({kBatch, kSeqNew, kHeadsKv, kD});
    p.v_new = a.input({kBatch, kSeqNew, kHeadsKv, kDv});
  }
  void cache_with_append() {
    dense_kv(kCapacity);
    p.cache_seqlens = a.indices({3, 5});
    append();
    p.rotary_cos = a.input({kSeqRo, kRotaryHalf});
    p.rotary_sin = a.input({kSeqRo, kRotaryHalf});
  }
  void paged_kv() {
    p.k = a.input({kNumBlocks, kBlockSize, kHeadsKv, kD});
    p.v = a.input({kNumBlocks, kBlockSize, kHeadsKv, kDv});
    p.block_table = a.indices({0, 3, 1, 4}, {kBatch, kMaxBlocks});
    p.cache_seqlens = a.indices({3, 5});
  }
};

struct BwdSetup {
  Arena a;
  flashattn_bwd_params p;

  explicit BwdSetup(Layout layout) {
    flashattn_bwd_params_init(&p);
    p.exec.backend = FLASHATTN_BACKEND_CPU_REFERENCE;
    if (layout == Layout::kVarlen) {
      p.q = a.input({kTotalQ, kHeadsQ, kD});
      p.out = a.input({kTotalQ, kHeadsQ, kDv});
      p.lse = a.input({kHeadsQ, kTotalQ});
      p.k = a.input({kTotalK, kHeadsKv, kD});
      p.v = a.input({kTotalK, kHeadsKv, kDv});
      p.cu_seqlens_q = a.indices({0, 3, 5});
      p.cu_seqlens_k = a.indices({0, 5, 7});
      p.seqused_k = a.indices({4, 2});
      p.max_seqlen_q = kMaxSeqQ;
      p.max_seqlen_k = kMaxSeqK;
    } else {
      p.q = a.input({kBatch, kSeqQ, kHeadsQ, kD});
      p.out = a.input({kBatch, kSeqQ, kHeadsQ, kDv});
      p.lse = a.input({kBatch, kHeadsQ, kSeqQ});
      p.k = a.input({kBatch, kSeqK, kHeadsKv, kD});
      p.v = a.input({kBatch, kSeqK, kHeadsKv, kDv});
    }
    p.dout = a.input(shape_of(p.out));
    p.dq = a.output(shape_of(p.q));
    p.dk = a.output(shape_of(p.k));
    p.dv = a.output(shape_of(p.v));
  }
  static std::vector<int64_t> shape_of(const flashattn_tensor& t) {
    return std::vector<int64_t>(t.shape, t.shape + t.rank);
  }
};

struct MergeSetup {
  Arena a;
  flashattn_merge_params p;

  explicit MergeSetup(Layout layout) {
    flashattn_merge_params_init(&p);
    p.exec.backend = FLASHATTN_BACKEND_CPU_REFERENCE;
    if (layout == Layout::kVarlen) {
      p.out_partial = a.input({kSplits, kTotalQ, kHeadsQ, kDv});
      p.lse_partial = a.input({kSplits, kHeadsQ, kTotalQ});
      p.out = a.output({kTotalQ, kHeadsQ, kDv});
      p.lse = a.output({kHeadsQ, kTotalQ});
    } else {
      p.out_partial = a.input({kSplits, kBatch, kSeqQ, kHeadsQ, kDv});
      p.lse_partial = a.input({kSplits, kBatch, kHeadsQ, kSeqQ});
      p.out = a.output({kBatch, kSeqQ, kHeadsQ, kDv});
      p.lse = a.output({kBatch, kHeadsQ, kSeqQ});
    }
  }
};

flashattn_status call(FwdSetup& s) { return flashattn_fwd(&s.p); }
flashattn_status call(BwdSetup& s) { return flashattn_bwd(&s.p); }
flashattn_status call(MergeSetup& s) { return flashattn_merge(&s.p); }
flashattn_status query(FwdSetup& s, size_t* bytes) {
  return flashattn_fwd_workspace_size(&s.p, bytes);
}
flashattn_status query(BwdSetup& s, size_t* bytes) {
  return flashattn_bwd_workspace_size(&s.p, bytes);
}

// ---- expectations -----------------------------------------------------------------------------

// One call on a modified baseline: the status it must return and, on failure, the argument its
// message must start with ("k: ...") and a fragment saying what was wrong.
template <class Setup>
struct Case {
  std::string name;
  Layout layout;
  std::function<void(Setup&)> mutate;
  flashattn_status status;
  std::string arg;
  std::string detail;
};

template <class Setup>
std::string case_name(const testing::TestParamInfo<Case<Setup>>& info) {
  return info.param.name;
}

// gtest prints parameters into the names ctest lists: print the case name, not its bytes.
template <class Setup>
void PrintTo(const Case<Setup>& c, std::ostream* os) {
  *os << c.name;
}

void expect_status(flashattn_status got, flashattn_status want, const std::string& arg,
                   const std::string& detail) {
  const std::string message = flashattn_last_error();
  EXPECT_EQ(got, want) << flashattn_status_string(got) << ": " << message;
  if (want == kOk) {
    EXPECT_EQ(message, "") << "a successful call must clear the last error";
    return;
  }
  EXPECT_EQ(message.rfind(arg + ": ", 0), 0u) << "the message does not name " << arg << ": "
                                               << message;
  EXPECT_NE(message.find(detail), std::string::npos) << "the message lacks \"" << detail
                                                     << "\": " << message;
}

// Leaves a message in the last-error slot, so that a valid call is seen to clear it.
void leave_an_error() {
  ASSERT_EQ(flashattn_fwd(nullptr), kInvalid);
  ASSERT_STRNE(flashattn_last_error(), "");
}

// Runs a case through the entry point (and its workspace query when `query_too`), checking the
// status, the message and, for a rejected call, that no tensor memory and no output changed.
template <class Setup>
void run_case(const Case<Setup>& c, bool query_too) {
  Setup s(c.layout);
  c.mutate(s);
  const auto before = s.a.snapshot();
  if (c.status == kOk) leave_an_error();
  expect_status(call(s), c.status, c.arg, c.detail);
  if (c.status != kOk) {
    EXPECT_TRUE(s.a.snapshot() == before) << "a rejected call modified tensor memory";
  }
  if constexpr (!std::is_same_v<Setup, MergeSetup>) {
    if (!query_too) return;
    size_t bytes = kUntouchedBytes;
    expect_status(query(s, &bytes), c.status, c.arg, c.detail);
    EXPECT_EQ(bytes, c.status == kOk ? 0u : kUntouchedBytes)
        << "the CPU backends need no workspace";
  }
}

// ---- descriptor rules, generated for every tensor argument -----------------------------------

template <class Setup>
using Accessor = std::function<flashattn_tensor&(Setup&)>;

template <class Setup>
struct Field {
  std::string name;
  Layout layout;  // a baseline where the tensor is present
  Accessor<Setup> get;
  bool required;
};

template <class Setup, class Params>
Accessor<Setup> member(flashattn_tensor Params::*field) {
  return [field](Setup& s) -> flashattn_tensor& { return s.p.*field; };
}

struct DescriptorDefect {
  std::string name;
  std::function<void(flashattn_tensor&)> apply;
  std::string detail;
};

const std::vector<DescriptorDefect>& descriptor_defects() {
  static const std::vector<DescriptorDefect> defects = {
      {"rank_above_max", [](flashattn_tensor& t) { t.rank = FLASHATTN_MAX_RANK + 1; },
       "got rank 6"},
      {"rank_negative", [](flashattn_tensor& t) { t.rank = -1; }, "got rank -1"},
      {"rank_zero_with_data", [](flashattn_tensor& t) { t.rank = 0; }, "got rank 0"},
      {"data_null", [](flashattn_tensor& t) { t.data = nullptr; }, "got NULL"},
      {"dtype_invalid", [](flashattn_tensor& t) { t.dtype = FLASHATTN_DTYPE_INVALID; },
       "unknown dtype 0"},
      {"dtype_unknown", [](flashattn_tensor& t) { t.dtype = flashattn_dtype(kBadEnum); },
       "unknown dtype 99"},
      {"shape_negative", [](flashattn_tensor& t) { t.shape[0] = -1; }, "shape[0] >= 0"},
      {"last_stride_2", [](flashattn_tensor& t) { t.stride[t.rank - 1] = 2; }, "stride 1"},
      {"last_stride_0", [](flashattn_tensor& t) { t.stride[t.rank - 1] = 0; }, "=0"},
  };
  return defects;
}

std::string identifier(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

template <class Setup>
std::vector<Case<Setup>> descriptor_cases(const std::vector<Field<Setup>>& fields) {
  std::vector<Case<Setup>> cases;
  for (const Field<Setup>& f : fields) {
    for (const DescriptorDefect& d : descriptor_defects()) {
      cases.push_back({identifier(f.name) + "_" + d.name, f.layout,
                       [f, d](Setup& s) { d.apply(f.get(s)); }, kInvalid, f.name, d.detail});
    }
    if (!f.required) continue;
    cases.push_back({identifier(f.name) + "_absent", f.layout,
                     [f](Setup& s) { f.get(s) = flashattn_tensor{}; }, kInvalid, f.name,
                     "required"});
  }
  return cases;
}

// ---- forward ----------------------------------------------------------------------------------

using Fwd = Case<FwdSetup>;
using FwdParams = flashattn_fwd_params;

std::vector<Fwd> fwd_descriptor_cases() {
  auto alibi = [](FwdSetup& s) -> flashattn_tensor& {
    s.p.opts.alibi_slopes = s.a.input({kHeadsQ});
    return s.p.opts.alibi_slopes;
  };
  return descriptor_cases<FwdSetup>({
      {"q", Layout::kDense, member<FwdSetup>(&FwdParams::q), true},
      {"k", Layout::kDense, member<FwdSetup>(&FwdParams::k), true},
      {"v", Layout::kDense, member<FwdSetup>(&FwdParams::v), true},
      {"out", Layout::kDense, member<FwdSetup>(&FwdParams::out), true},
      {"lse", Layout::kDense, member<FwdSetup>(&FwdParams::lse), false},
      {"cu_seqlens_q", Layout::kVarlen, member<FwdSetup>(&FwdParams::cu_seqlens_q), false},
      {"cu_seqlens_k", Layout::kVarlen, member<FwdSetup>(&FwdParams::cu_seqlens_k), false},
      {"seqused_k", Layout::kVarlen, member<FwdSetup>(&FwdParams::seqused_k), false},
      {"cache_seqlens", Layout::kCache, member<FwdSetup>(&FwdParams::cache_seqlens), false},
      {"block_table", Layout::kPaged, member<FwdSetup>(&FwdParams::block_table), false},
      {"k_new", Layout::kCache, member<FwdSetup>(&FwdParams::k_new), false},
      {"v_new", Layout::kCache, member<FwdSetup>(&FwdParams::v_new), false},
      {"rotary_cos", Layout::kCache, member<FwdSetup>(&FwdParams::rotary_cos), false},
      {"rotary_sin", Layout::kCache, member<FwdSetup>(&FwdParams::rotary_sin), false},
      {"opts.alibi_slopes", Layout::kDense, alibi, false},
  });
}

void relabel_qkvo(FwdSetup& s, flashattn_dtype dtype) {
  for (flashattn_tensor* t : {&s.p.q, &s.p.k, &s.p.v, &s.p.out}) t->dtype = dtype;
}

// Rules on layouts, shapes and dtypes: rejected by flashattn_fwd and its workspace query alike.
std::vector<Fwd> fwd_layout_cases() {
  using L = Layout;
  using S = FwdSetup;
  return {
      // dtypes
      {"qkvo_i32", L::kDense, [](S& s) { relabel_qkvo(s, FLASHATTN_I32); }, kInvalid, "q",
       "expected dtype f32, f16 or bf16, got i32"},
      {"qkvo_e4m3", L::kDense, [](S& s) { relabel_qkvo(s, FLASHATTN_E4M3); }, kUnsupported, "q",
       "got e4m3"},
      {"q_e4m3_k_f32", L::kDense, [](S& s) { s.p.q.dtype = FLASHATTN_E4M3; }, kInvalid, "k",
       "expected dtype e4m3 (the dtype of q), got f32"},
      {"k_f16", L::kDense, [](S& s) { s.p.k.dtype = FLASHATTN_F16; }, kInvalid, "k",
       "expected dtype f32 (the dtype of q), got f16"},
      {"v_bf16", L::kDense, [](S& s) { s.p.v.dtype = FLASHATTN_BF16; }, kInvalid, "v",
       "got bf16"},
      {"out_f16", L::kDense, [](S& s) { s.p.out.dtype = FLASHATTN_F16; }, kInvalid, "out",
       "got f16"},
      {"lse_f16", L::kDense, [](S& s) { s.p.lse.dtype = FLASHATTN_F16; }, kInvalid, "lse",
       "expected dtype f32, got f16"},
      // q
      {"q_rank2", L::kDense, [](S& s) { reshape(s.p.q, {6, 32}); }, kInvalid, "q",
       "expected rank 4 (dense) or 3 (varlen, with cu_seqlens_q), got rank 2"},
      {"q_rank3_without_cu_seqlens_q", L::kDense, [](S& s) { reshape(s.p.q, {6, 4, 8}); },
       kInvalid, "q", "without cu_seqlens_q"},
      {"q_rank4_with_cu_seqlens_q", L::kVarlen, [](S& s) { reshape(s.p.q, {1, 5, 4, 8}); },
       kInvalid, "q", "expected rank 3 [total_q, heads_q, d]"},
      {"q_heads_zero", L::kDense, [](S& s) { reshape(s.p.q, {2, 3, 0, 8}); }, kInvalid, "q",
       "expected heads_q >= 1, got heads_q=0"},
      {"q_head_dim_zero", L::kDense, [](S& s) { reshape(s.p.q, {2, 3, 4, 0}); }, kInvalid, "q",
       "d >= 1, got d=0"},
      // k, v
      {"k_heads_not_dividing", L::kDense, [](S& s) { reshape(s.p.k, {2, 5, 3, 8}); }, kInvalid,
       "k", "heads_kv=3 does not divide heads_q=4"},
      {"k_heads_zero", L::kDense, [](S& s) { reshape(s.p.k, {2, 5, 0, 8}); }, kInvalid, "k",
       "expected heads_kv >= 1, got heads_kv=0"},
      {"k_head_dim_differs", L::kDense, [](S& s) { reshape(s.p.k, {2, 5, 2, 7}); }, kInvalid,
       "k", "expected head dim d=8"},
      {"k_batch_differs", L::kDense, [](S& s) { reshape(s.p.k, {1, 5, 2, 8}); }, kInvalid, "k",
       "batch=2, got [1, 5, 2, 8]"},
      {"k_rank3_without_cu_seqlens_k", L::kDense, [](S& s) { reshape(s.p.k, {10, 2, 8}); },
       kInvalid, "k", "without cu_seqlens_k"},
      {"k_rank4_with_cu_seqlens_k", L::kVarlen, [](S& s) { reshape(s.p.k, {1, 7, 2, 8}); },
       kInvalid, "k", "expected rank 3 [total_k, heads_kv, d]"},
      {"v_seqlen_differs", L::kDense, [](S& s) { reshape(s.p.v, {2, 4, 2, 6}); }, kInvalid, "v",
       "got [2, 4, 2, 6]"},
      {"v_heads_differ", L::kDense, [](S& s) { reshape(s.p.v, {2, 5, 1, 6}); }, kInvalid, "v",
       "expected the shape of k [2, 5, 2, 8]"},
      {"v_rank3_dense", L::kDense, [](S& s) { reshape(s.p.v, {10, 2, 6}); }, kInvalid, "v",
       "got [10, 2, 6]"},
      {"v_head_dim_zero", L::kDense, [](S& s) { reshape(s.p.v, {2, 5, 2, 0}); }, kInvalid, "v",
       "d_v >= 1, got d_v=0"},
      // out, lse
      {"out_head_dim_is_d_not_d_v", L::kDense, [](S& s) { reshape(s.p.out, {2, 3, 4, 5}); },
       kInvalid, "out", "d_v=6], got [2, 3, 4, 5]"},
      {"out_seqlen_differs", L::kDense, [](S& s) { reshape(s.p.out, {2, 2, 4, 6}); }, kInvalid,
       "out", "seqlen_q=3"},
      {"out_varlen_rows_differ", L::kVarlen, [](S& s) { reshape(s.p.out, {4, 4, 6}); },
       kInvalid, "out", "[total_q=5, heads_q=4, d_v=6], got [4, 4, 6]"},
      {"lse_transposed", L::kDense, [](S& s) { reshape(s.p.lse, {2, 3, 4}); }, kInvalid, "lse",
       "[batch=2, heads_q=4, seqlen_q=3], got [2, 3, 4]"},
      {"lse_dense_layout_with_varlen_q", L::kVarlen, [](S& s) { reshape(s.p.lse, {1, 4, 5}); },
       kInvalid, "lse", "[heads_q=4, total_q=5]"},
      // varlen index arrays
      {"cu_seqlens_q_f32", L::kVarlen, [](S& s) { s.p.cu_seqlens_q.dtype = FLASHATTN_F32; },
       kInvalid, "cu_seqlens_q", "expected dtype i32, got f32"},
      {"cu_seqlens_q_rank2", L::kVarlen, [](S& s) { reshape(s.p.cu_seqlens_q, {1, 3}); },
       kInvalid, "cu_seqlens_q", "expected shape [batch+1]"},
      {"cu_seqlens_q_empty", L::kVarlen, [](S& s) { reshape(s.p.cu_seqlens_q, {0}); }, kInvalid,
       "cu_seqlens_q", "got [0]"},
      {"cu_seqlens_k_batch_differs", L::kVarlen, [](S& s) { reshape(s.p.cu_seqlens_k, {4}); },
       kInvalid, "cu_seqlens_k", "[batch+1=3], got [4]"},
      {"cu_seqlens_k_f32", L::kVarlen, [](S& s) { s.p.cu_seqlens_k.dtype = FLASHATTN_F32; },
       kInvalid, "cu_seqlens_k", "expected dtype i32, got f32"},
      {"seqused_k_without_cu_seqlens_k", L::kDense,
       [](S& s) { s.p.seqused_k = s.a.indices({5, 5}); }, kInvalid, "seqused_k",
       "only with cu_seqlens_k"},
      {"seqused_k_batch_differs", L::kVarlen, [](S& s) { reshape(s.p.seqused_k, {1}); },
       kInvalid, "seqused_k", "[batch=2], got [1]"},
      {"seqused_k_f32", L::kVarlen, [](S& s) { s.p.seqused_k.dtype = FLASHATTN_F32; }, kInvalid,
       "seqused_k", "expected dtype i32, got f32"},
      {"max_seqlen_q_negative", L::kVarlen, [](S& s) { s.p.max_seqlen_q = -1; }, kInvalid,
       "max_seqlen_q", "expected >= 0 with cu_seqlens_q (0 = unknown), got -1"},
      {"max_seqlen_k_negative", L::kVarlen, [](S& s) { s.p.max_seqlen_k = -3; }, kInvalid,
       "max_seqlen_k", "got -3"},
      // KV cache
      {"cache_seqlens_with_cu_seqlens_k", L::kVarlen,
       [](S& s) { s.p.cache_seqlens = s.a.indices({0, 0}); }, kInvalid, "cache_seqlens",
       "without cu_seqlens_k"},
      {"block_table_without_cache_seqlens", L::kPaged,
       [](S& s) { s.p.cache_seqlens = flashattn_tensor{}; }, kInvalid, "block_table",
       "got no cache_seqlens"},
      {"cache_seqlens_batch_differs", L::kCache, [](S& s) { reshape(s.p.cache_seqlens, {1}); },
       kInvalid, "cache_seqlens", "[batch=2], got [1]"},
      {"cache_seqlens_f32", L::kCache, [](S& s) { s.p.cache_seqlens.dtype = FLASHATTN_F32; },
       kInvalid, "cache_seqlens", "expected dtype i32, got f32"},
      {"cache_k_batch_differs", L::kCache, [](S& s) { reshape(s.p.k, {1, 8, 2, 8}); }, kInvalid,
       "k", "batch=2"},
      {"block_table_rank1", L::kPaged, [](S& s) { reshape(s.p.block_table, {4}); }, kInvalid,
       "block_table", "[batch=2, max_blocks], got [4]"},
      {"block_table_batch_differs", L::kPaged, [](S& s) { reshape(s.p.block_table, {1, 4}); },
       kInvalid, "block_table", "got [1, 4]"},
      {"block_table_f32", L::kPaged, [](S& s) { s.p.block_table.dtype = FLASHATTN_F32; },
       kInvalid, "block_table", "expected dtype i32, got f32"},
      {"paged_k_rank3", L::kPaged, [](S& s) { reshape(s.p.k, {20, 2, 8}); }, kInvalid, "k",
       "[num_blocks, block_size, heads_kv, d]"},
      {"paged_block_size_zero", L::kPaged,
       [](S& s) {
         reshape(s.p.k, {kNumBlocks, 0, kHeadsKv, kD});
         reshape(s.p.v, {kNumBlocks, 0, kHeadsKv, kDv});
       },
       kInvalid, "k", "block_size = shape[1] >= 1"},
      {"paged_v_blocks_differ", L::kPaged, [](S& s) { reshape(s.p.v, {4, 4, 2, 6}); }, kInvalid,
       "v", "got [4, 4, 2, 6]"},
      // append
      {"k_new_without_v_new", L::kCache, [](S& s) { s.p.v_new = flashattn_tensor{}; }, kInvalid,
       "v_new", "required with k_new"},
      {"v_new_without_k_new", L::kCache, [](S& s) { s.p.k_new = flashattn_tensor{}; }, kInvalid,
       "k_new", "required with v_new"},
      {"append_without_cache", L::kDense, [](S& s) { s.append(); }, kInvalid, "k_new",
       "got no cache_seqlens"},
      {"append_with_varlen_q", L::kCache,
       [](S& s) {
         s.varlen_q();
         s.p.rotary_cos = s.p.rotary_sin = flashattn_tensor{};
       },
       kInvalid, "k_new", "expected a dense q"},
      {"k_new_f16", L::kCache, [](S& s) { s.p.k_new.dtype = FLASHATTN_F16; }, kInvalid, "k_new",
       "(the dtype of k), got f16"},
      {"v_new_bf16", L::kCache, [](S& s) { s.p.v_new.dtype = FLASHATTN_BF16; }, kInvalid,
       "v_new", "(the dtype of v), got bf16"},
      {"k_new_heads_differ", L::kCache, [](S& s) { reshape(s.p.k_new, {2, 2, 1, 8}); }, kInvalid,
       "k_new", "heads_kv=2"},
      {"k_new_batch_differs", L::kCache, [](S& s) { reshape(s.p.k_new, {1, 2, 2, 8}); },
       kInvalid, "k_new", "batch=2"},
      {"v_new_seqlen_differs", L::kCache, [](S& s) { reshape(s.p.v_new, {2, 1, 2, 6}); },
       kInvalid, "v_new", "seqlen_new=2"},
      {"v_new_head_dim_is_d", L::kCache, [](S& s) { reshape(s.p.v_new, {2, 2, 2, 4}); },
       kInvalid, "v_new", "d_v=6"},
      // rotary
      {"rotary_cos_without_sin", L::kCache, [](S& s) { s.p.rotary_sin = flashattn_tensor{}; },
       kInvalid, "rotary_sin", "required with rotary_cos"},
      {"rotary_sin_without_cos", L::kCache, [](S& s) { s.p.rotary_cos = flashattn_tensor{}; },
       kInvalid, "rotary_cos", "required with rotary_sin"},
      {"rotary_without_append", L::kCache,
       [](S& s) { s.p.k_new = s.p.v_new = flashattn_tensor{}; }, kInvalid, "rotary_cos",
       "got no k_new"},
      {"rotary_i32", L::kCache,
       [](S& s) { s.p.rotary_cos.dtype = s.p.rotary_sin.dtype = FLASHATTN_I32; }, kInvalid,
       "rotary_cos", "expected dtype f32 or the dtype of q (f32), got i32"},
      {"rotary_f16_with_f32_q", L::kCache,
       [](S& s) { s.p.rotary_cos.dtype = s.p.rotary_sin.dtype = FLASHATTN_F16; }, kInvalid,
       "rotary_cos", "got f16"},
      {"rotary_sin_dtype_differs", L::kCache, [](S& s) { s.p.rotary_sin.dtype = FLASHATTN_F16; },
       kInvalid, "rotary_sin", "(the dtype of rotary_cos), got f16"},
      {"rotary_sin_shape_differs", L::kCache, [](S& s) { reshape(s.p.rotary_sin, {8, 1}); },
       kInvalid, "rotary_sin", "[seqlen_ro=8, rotary_dim/2=2], got [8, 1]"},
      {"rotary_rank1", L::kCache, [](S& s) { reshape(s.p.rotary_cos, {16}); }, kInvalid,
       "rotary_cos", "[seqlen_ro, rotary_dim/2], got [16]"},
      {"rotary_dim_above_d", L::kCache,
       [](S& s) {
         reshape(s.p.rotary_cos, {3, 5});
         reshape(s.p.rotary_sin, {3, 5});
       },
       kInvalid, "rotary_cos", "in 2..d=8, got rotary_dim=10"},
      {"rotary_dim_zero", L::kCache,
       [](S& s) {
         reshape(s.p.rotary_cos, {8, 0});
         reshape(s.p.rotary_sin, {8, 0});
       },
       kInvalid, "rotary_cos", "got rotary_dim=0"},
  };
}

// Rules on the contents of the index arrays: checked when the call reaches a CPU backend.
// Overwrites the leading elements of an i32 tensor.
void set_ints(const flashattn_tensor& t, const std::vector<int32_t>& values) {
  std::copy(values.begin(), values.end(), ints(t));
}

// Rules on the contents of the index arrays: checked when the call reaches a CPU backend.
std::vector<Fwd> fwd_content_cases() {
  using L = Layout;
  using S = FwdSetup;
  return {
      {"cu_seqlens_q_not_starting_at_0", L::kVarlen,
       [](S& s) { set_ints(s.p.cu_seqlens_q, {1, 3, 5}); }, kInvalid, "cu_seqlens_q",
       "expected cu_seqlens_q[0] = 0, got 1"},
      {"cu_seqlens_q_decreasing", L::kVarlen, [](S& s) { set_ints(s.p.cu_seqlens_q, {0, 3, 2}); },
       kInvalid, "cu_seqlens_q", "non-decreasing prefix sums, got cu_seqlens_q[2]=2"},
      {"cu_seqlens_q_past_total_q", L::kVarlen,
       [](S& s) { set_ints(s.p.cu_seqlens_q, {0, 3, 6}); }, kInvalid, "cu_seqlens_q",
       "<= total_q (rows of q)=5, got 6"},
      {"cu_seqlens_k_decreasing", L::kVarlen, [](S& s) { set_ints(s.p.cu_seqlens_k, {0, 5, 4}); },
       kInvalid, "cu_seqlens_k", "non-decreasing"},
      {"cu_seqlens_k_past_total_k", L::kVarlen,
       [](S& s) { set_ints(s.p.cu_seqlens_k, {0, 5, 8}); }, kInvalid, "cu_seqlens_k",
       "<= total_k (rows of k)=7, got 8"},
      {"max_seqlen_q_too_small", L::kVarlen, [](S& s) { s.p.max_seqlen_q = 2; }, kInvalid,
       "max_seqlen_q", "got 2 < 3 = length of sequence 0"},
      {"max_seqlen_k_too_small", L::kVarlen, [](S& s) { s.p.max_seqlen_k = 3; }, kInvalid,
       "max_seqlen_k", "got 3 < 4 = length of sequence 0 (from seqused_k)"},
      {"seqused_k_too_large", L::kVarlen, [](S& s) { set_ints(s.p.seqused_k, {6, 2}); },
       kInvalid, "seqused_k", "expected seqused_k[0] in [0, 5]"},
      {"seqused_k_negative", L::kVarlen, [](S& s) { set_ints(s.p.seqused_k, {4, -1}); },
       kInvalid, "seqused_k", "got -1"},
      {"cache_seqlens_negative", L::kCache, [](S& s) { set_ints(s.p.cache_seqlens, {-1, 5}); },
       kInvalid, "cache_seqlens", "expected cache_seqlens[0] >= 0, got -1"},
      {"cache_too_small_for_append", L::kCache,
       [](S& s) { set_ints(s.p.cache_seqlens, {3, 7}); }, kInvalid, "cache_seqlens",
       "cache too small for the append"},
      {"paged_cache_seqlens_past_capacity", L::kPaged,
       [](S& s) { set_ints(s.p.cache_seqlens, {3, 9}); }, kInvalid, "cache_seqlens",
       "capacity 8 (max_blocks=2 * block_size=4), got 9"},
      {"paged_cache_too_small_for_append", L::kPaged,
       [](S& s) {
         s.append();
         set_ints(s.p.cache_seqlens, {7, 5});
       },
       kInvalid, "cache_seqlens", "cache too small for the append"},
      {"block_table_entry_past_num_blocks", L::kPaged,
       [](S& s) { set_ints(s.p.block_table, {0, 3, 1, 5}); }, kInvalid, "block_table",
       "num_blocks=5) for the 2 blocks sequence 1 uses, got block_table[1][1]=5"},
      {"block_table_entry_negative", L::kPaged,
       [](S& s) { set_ints(s.p.block_table, {-1, 3, 1, 4}); }, kInvalid, "block_table",
       "got block_table[0][0]=-1"},
      {"rotary_table_too_short", L::kCache,
       [](S& s) {
         reshape(s.p.rotary_cos, {kSeqRo - 1, kRotaryHalf});
         reshape(s.p.rotary_sin, {kSeqRo - 1, kRotaryHalf});
       },
       kInvalid, "rotary_cos", "table too short"},
  };
}

std::vector<Fwd> fwd_valid_cases() {
  using L = Layout;
  using S = FwdSetup;
  auto none = [](S&) {};
  return {
      {"dense", L::kDense, none, kOk, "", ""},
      {"varlen", L::kVarlen, none, kOk, "", ""},
      {"dense_cache_append_rotary", L::kCache, none, kOk, "", ""},
      {"paged", L::kPaged, none, kOk, "", ""},
      {"struct_size_larger", L::kDense, [](S& s) { s.p.struct_size += 16; }, kOk, "", ""},
      {"no_lse", L::kDense, [](S& s) { s.p.lse = flashattn_tensor{}; }, kOk, "", ""},
      {"mqa", L::kDense,
       [](S& s) {
         s.p.k = s.a.input({kBatch, kSeqK, 1, kD});
         s.p.v = s.a.input({kBatch, kSeqK, 1, kDv});
       },
       kOk, "", ""},
      {"head_dim_not_instantiated", L::kDense,
       [](S& s) {
         s.p.q = s.a.input({kBatch, kSeqQ, kHeadsQ, 300});
         s.p.k = s.a.input({kBatch, kSeqK, kHeadsKv, 300});
       },
       kOk, "", ""},
      {"padded_rows", L::kDense,
       [](S& s) {
         flashattn_tensor wide = s.a.input({kBatch, kSeqQ, kHeadsQ, 2 * kD});
         s.p.q = wide;
         s.p.q.shape[3] = kD;  // strides of the wide buffer: rows padded by kD elements
       },
       kOk, "", ""},
      {"f16", L::kDense, [](S& s) { relabel_qkvo(s, FLASHATTN_F16); }, kOk, "", ""},
      {"bf16", L::kDense, [](S& s) { relabel_qkvo(s, FLASHATTN_BF16); }, kOk, "", ""},
      {"batch_zero", L::kDense,
       [](S& s) {
         reshape(s.p.q, {0, kSeqQ, kHeadsQ, kD});
         reshape(s.p.k, {0, kSeqK, kHeadsKv, kD});
         reshape(s.p.v, {0, kSeqK, kHeadsKv, kDv});
         reshape(s.p.out, {0, kSeqQ, kHeadsQ, kDv});
         reshape(s.p.lse, {0, kHeadsQ, kSeqQ});
       },
       kOk, "", ""},
      {"seqlen_q_zero", L::kDense,
       [](S& s) {
         reshape(s.p.q, {kBatch, 0, kHeadsQ, kD});
         reshape(s.p.out, {kBatch, 0, kHeadsQ, kDv});
         reshape(s.p.lse, {kBatch, kHeadsQ, 0});
       },
       kOk, "", ""},
      {"seqlen_k_zero", L::kDense,
       [](S& s) {
         reshape(s.p.k, {kBatch, 0, kHeadsKv, kD});
         reshape(s.p.v, {kBatch, 0, kHeadsKv, kDv});
       },
       kOk, "", ""},
      {"varlen_total_q_zero", L::kVarlen,
       [](S& s) {
         reshape(s.p.q, {0, kHeadsQ, kD});
         reshape(s.p.out, {0, kHeadsQ, kDv});
         reshape(s.p.lse, {kHeadsQ, 0});
         std::fill(ints(s.p.cu_seqlens_q), ints(s.p.cu_seqlens_q) + 3, 0);
       },
       kOk, "", ""},
      {"varlen_batch_zero", L::kVarlen,
       [](S& s) {
         reshape(s.p.cu_seqlens_q, {1});
         reshape(s.p.cu_seqlens_k, {1});
         reshape(s.p.seqused_k, {0});
       },
       kOk, "", ""},
      {"varlen_max_seqlens_unknown", L::kVarlen,
       [](S& s) { s.p.max_seqlen_q = s.p.max_seqlen_k = 0; }, kOk, "", ""},
      {"varlen_rows_past_last_sequence", L::kVarlen,
       [](S& s) { ints(s.p.cu_seqlens_q)[2] = 3; }, kOk, "", ""},
      {"varlen_without_seqused_k", L::kVarlen, [](S& s) { s.p.seqused_k = flashattn_tensor{}; },
       kOk, "", ""},
      {"varlen_q_dense_kv", L::kVarlen,
       [](S& s) {
         s.p.cu_seqlens_k = s.p.seqused_k = flashattn_tensor{};
         s.dense_kv(kSeqK);
       },
       kOk, "", ""},
      {"varlen_q_paged_kv", L::kPaged, [](S& s) { s.varlen_q(); }, kOk, "", ""},
      {"dense_cache_without_append", L::kCache,
       [](S& s) { s.p.k_new = s.p.v_new = s.p.rotary_cos = s.p.rotary_sin = flashattn_tensor{}; },
       kOk, "", ""},
      {"append_without_rotary", L::kCache,
       [](S& s) { s.p.rotary_cos = s.p.rotary_sin = flashattn_tensor{}; }, kOk, "", ""},
      {"append_rotary_interleaved", L::kCache, [](S& s) { s.p.rotary_interleaved = 1; }, kOk, "",
       ""},
      {"paged_append", L::kPaged, [](S& s) { s.append(); }, kOk, "", ""},
      {"num_splits_negative", L::kDense, [](S& s) { s.p.num_splits = -1; }, kInvalid, "num_splits",
       "expected 0 (automatic) .. 128, got -1"},
      {"num_splits_above_128", L::kDense, [](S& s) { s.p.num_splits = 129; }, kInvalid,
       "num_splits", "got 129"},
      {"num_splits_ignored_by_the_cpu", L::kDense, [](S& s) { s.p.num_splits = 128; }, kOk, "", ""},
      {"paged_unused_block_entries_unchecked", L::kPaged,
       [](S& s) { ints(s.p.block_table)[1] = -7; }, kOk, "", ""},
      {"causal_sliding_window", L::kDense,
       [](S& s) {
         s.p.opts.causal = 1;
         s.p.opts.window_left = 2;
       },
       kOk, "", ""},
      {"causal_window_right_0", L::kDense,
       [](S& s) {
         s.p.opts.causal = 1;
         s.p.opts.window_right = 0;
       },
       kOk, "", ""},
      {"all_score_options", L::kDense,
       [](S& s) {
         s.p.opts.softmax_scale = 0.25f;
         s.p.opts.window_left = 1;
         s.p.opts.window_right = 1;
         s.p.opts.softcap = 30.f;
         s.p.opts.dropout_p = 0.5f;
         s.p.opts.alibi_slopes = s.a.input({kBatch, kHeadsQ});
       },
       kOk, "", ""},
      {"alibi_per_head", L::kDense, [](S& s) { s.p.opts.alibi_slopes = s.a.input({kHeadsQ}); },
       kOk, "", ""},
      {"exec_fields", L::kDense,
       [](S& s) {
         s.p.exec.num_threads = 2;
         s.p.exec.device = 0;
         s.p.exec.workspace = &s.p;  // unused by the CPU backends
         s.p.exec.workspace_size = sizeof s.p;
       },
       kOk, "", ""},
  };
}

class FwdRejects : public testing::TestWithParam<Fwd> {};
TEST_P(FwdRejects, NamesTheArgumentAndTouchesNothing) { run_case(GetParam(), true); }
INSTANTIATE_TEST_SUITE_P(validation_descriptors, FwdRejects,
                         testing::ValuesIn(fwd_descriptor_cases()), case_name<FwdSetup>);
INSTANTIATE_TEST_SUITE_P(validation_layouts, FwdRejects, testing::ValuesIn(fwd_layout_cases()),
                         case_name<FwdSetup>);

class FwdContentRejects : public testing::TestWithParam<Fwd> {};
TEST_P(FwdContentRejects, NamesTheArgumentAndTouchesNothing) { run_case(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(validation_index_arrays, FwdContentRejects,
                         testing::ValuesIn(fwd_content_cases()), case_name<FwdSetup>);

class FwdAccepts : public testing::TestWithParam<Fwd> {};
TEST_P(FwdAccepts, SucceedsAndClearsTheLastError) { run_case(GetParam(), true); }
INSTANTIATE_TEST_SUITE_P(validation_valid, FwdAccepts, testing::ValuesIn(fwd_valid_cases()),
                         case_name<FwdSetup>);

// ---- backward ---------------------------------------------------------------------------------

using Bwd = Case<BwdSetup>;
using BwdParams = flashattn_bwd_params;

std::vector<Bwd> bwd_descriptor_cases() {
  auto field = [](const char* name, Layout layout, flashattn_tensor BwdParams::*m, bool required) {
    return Field<BwdSetup>{name, layout, member<BwdSetup>(m), required};
  };
  return descriptor_cases<BwdSetup>({
      field("q", Layout::kDense, &BwdParams::q, true),
      field("k", Layout::kDense, &BwdParams::k, true),
      field("v", Layout::kDense, &BwdParams::v, true),
      field("out", Layout::kDense, &BwdParams::out, true),
      field("dout", Layout::kDense, &BwdParams::dout, true),
      field("lse", Layout::kDense, &BwdParams::lse, true),
      field("dq", Layout::kDense, &BwdParams::dq, true),
      field("dk", Layout::kDense, &BwdParams::dk, true),
      field("dv", Layout::kDense, &BwdParams::dv, true),
      field("cu_seqlens_q", Layout::kVarlen, &BwdParams::cu_seqlens_q, false),
      field("cu_seqlens_k", Layout::kVarlen, &BwdParams::cu_seqlens_k, false),
      field("seqused_k", Layout::kVarlen, &BwdParams::seqused_k, false),
  });
}

std::vector<Bwd> bwd_layout_cases() {
  using L = Layout;
  using S = BwdSetup;
  auto relabel_all = [](S& s, flashattn_dtype dtype) {
    for (flashattn_tensor* t : {&s.p.q, &s.p.k, &s.p.v, &s.p.out, &s.p.dout, &s.p.dq, &s.p.dk,
                                &s.p.dv}) {
      t->dtype = dtype;
    }
  };
  return {
      {"all_e4m3", L::kDense, [relabel_all](S& s) { relabel_all(s, FLASHATTN_E4M3); },
       kUnsupported, "q", "got e4m3"},
      {"all_i32", L::kDense, [relabel_all](S& s) { relabel_all(s, FLASHATTN_I32); }, kInvalid,
       "q", "got i32"},
      {"q_rank2", L::kDense, [](S& s) { reshape(s.p.q, {6, 32}); }, kInvalid, "q", "got rank 2"},
      {"k_heads_not_dividing", L::kDense, [](S& s) { reshape(s.p.k, {2, 5, 3, 8}); }, kInvalid,
       "k", "heads_kv=3 does not divide heads_q=4"},
      {"v_seqlen_differs", L::kVarlen, [](S& s) { reshape(s.p.v, {6, 2, 6}); }, kInvalid, "v",
       "got [6, 2, 6]"},
      {"out_head_dim_differs", L::kDense, [](S& s) { reshape(s.p.out, {2, 3, 4, 5}); },
       kInvalid, "out", "d_v=6"},
      {"lse_f16", L::kDense, [](S& s) { s.p.lse.dtype = FLASHATTN_F16; }, kInvalid, "lse",
       "expected dtype f32, got f16"},
      {"lse_varlen_transposed", L::kVarlen, [](S& s) { reshape(s.p.lse, {5, 4}); }, kInvalid,
       "lse", "[heads_q=4, total_q=5], got [5, 4]"},
      {"dout_f16", L::kDense, [](S& s) { s.p.dout.dtype = FLASHATTN_F16; }, kInvalid, "dout",
       "(the dtype of q), got f16"},
      {"dout_shape_differs", L::kDense, [](S& s) { reshape(s.p.dout, {2, 3, 4, 5}); }, kInvalid,
       "dout", "expected the shape of out [2, 3, 4, 6], got [2, 3, 4, 5]"},
      {"dq_bf16", L::kDense, [](S& s) { s.p.dq.dtype = FLASHATTN_BF16; }, kInvalid, "dq",
       "got bf16"},
      {"dq_shape_differs", L::kVarlen, [](S& s) { reshape(s.p.dq, {4, 4, 8}); }, kInvalid, "dq",
       "expected the shape of q [5, 4, 8], got [4, 4, 8]"},
      {"dk_f16", L::kDense, [](S& s) { s.p.dk.dtype = FLASHATTN_F16; }, kInvalid, "dk",
       "got f16"},
      {"dk_shape_differs", L::kDense, [](S& s) { reshape(s.p.dk, {2, 5, 4, 8}); }, kInvalid,
       "dk", "expected the shape of k"},
      {"dv_f16", L::kDense, [](S& s) { s.p.dv.dtype = FLASHATTN_F16; }, kInvalid, "dv",
       "got f16"},
      {"dv_shape_differs", L::kDense, [](S& s) { reshape(s.p.dv, {2, 5, 2, 8}); }, kInvalid,
       "dv", "expected the shape of v [2, 5, 2, 6], got [2, 5, 2, 8]"},
      {"seqused_k_without_cu_seqlens_k", L::kDense,
       [](S& s) { s.p.seqused_k = s.a.indices({5, 5}); }, kInvalid, "seqused_k",
       "only with cu_seqlens_k"},
      {"max_seqlen_q_negative", L::kVarlen, [](S& s) { s.p.max_seqlen_q = -1; }, kInvalid,
       "max_seqlen_q", "got -1"},
  };
}

std::vector<Bwd> bwd_content_cases() {
  using L = Layout;
  using S = BwdSetup;
  return {
      {"cu_seqlens_q_decreasing", L::kVarlen, [](S& s) { ints(s.p.cu_seqlens_q)[2] = 2; },
       kInvalid, "cu_seqlens_q", "non-decreasing"},
      {"cu_seqlens_k_past_total_k", L::kVarlen, [](S& s) { ints(s.p.cu_seqlens_k)[2] = 9; },
       kInvalid, "cu_seqlens_k", "got 9"},
      {"seqused_k_too_large", L::kVarlen, [](S& s) { ints(s.p.seqused_k)[1] = 3; }, kInvalid,
       "seqused_k", "expected seqused_k[1] in [0, 2]"},
      {"max_seqlen_k_too_small", L::kVarlen, [](S& s) { s.p.max_seqlen_k = 1; }, kInvalid,
       "max_seqlen_k", "got 1 < 4"},
  };
}

std::vector<Bwd> bwd_valid_cases() {
  using L = Layout;
  using S = BwdSetup;
  return {
      {"dense", L::kDense, [](S&) {}, kOk, "", ""},
      {"varlen", L::kVarlen, [](S&) {}, kOk, "", ""},
      {"deterministic_causal", L::kDense,
       [](S& s) {
         s.p.deterministic = 1;
         s.p.opts.causal = 1;
       },
       kOk, "", ""},
      {"varlen_max_seqlens_unknown", L::kVarlen,
       [](S& s) { s.p.max_seqlen_q = s.p.max_seqlen_k = 0; }, kOk, "", ""},
      {"dropout_softcap_alibi", L::kVarlen,
       [](S& s) {
         s.p.opts.dropout_p = 0.25f;
         s.p.opts.softcap = 5.f;
         s.p.opts.alibi_slopes = s.a.input({kBatch, kHeadsQ});
       },
       kOk, "", ""},
  };
}

class BwdRejects : public testing::TestWithParam<Bwd> {};
TEST_P(BwdRejects, NamesTheArgumentAndTouchesNothing) { run_case(GetParam(), true); }
INSTANTIATE_TEST_SUITE_P(validation_descriptors, BwdRejects,
                         testing::ValuesIn(bwd_descriptor_cases()), case_name<BwdSetup>);
INSTANTIATE_TEST_SUITE_P(validation_layouts, BwdRejects, testing::ValuesIn(bwd_layout_cases()),
                         case_name<BwdSetup>);

class BwdContentRejects : public testing::TestWithParam<Bwd> {};
TEST_P(BwdContentRejects, NamesTheArgumentAndTouchesNothing) { run_case(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(validation_index_arrays, BwdContentRejects,
                         testing::ValuesIn(bwd_content_cases()), case_name<BwdSetup>);

class BwdAccepts : public testing::TestWithParam<Bwd> {};
TEST_P(BwdAccepts, SucceedsAndClearsTheLastError) { run_case(GetParam(), true); }
INSTANTIATE_TEST_SUITE_P(validation_valid, BwdAccepts, testing::ValuesIn(bwd_valid_cases()),
                         case_name<BwdSetup>);

// ---- merge ------------------------------------------------------------------------------------

using Merge = Case<MergeSetup>;
using MergeParams = flashattn_merge_params;

std::vector<Merge> merge_descriptor_cases() {
  auto field = [](const char* name, flashattn_tensor MergeParams::*m, bool required) {
    return Field<MergeSetup>{name, Layout::kDense, member<MergeSetup>(m), required};
  };
  return descriptor_cases<MergeSetup>({
      field("out_partial", &MergeParams::out_partial, true),
      field("lse_partial", &MergeParams::lse_partial, true),
      field("out", &MergeParams::out, true),
      field("lse", &MergeParams::lse, false),
  });
}

std::vector<Merge> merge_cases() {
  using L = Layout;
  using S = MergeSetup;
  auto none = [](S&) {};
  return {
      {"dense", L::kDense, none, kOk, "", ""},
      {"varlen", L::kVarlen, none, kOk, "", ""},
      {"no_lse", L::kDense, [](S& s) { s.p.lse = flashattn_tensor{}; }, kOk, "", ""},
      {"f32_partials_into_f16_out", L::kDense, [](S& s) { s.p.out.dtype = FLASHATTN_F16; }, kOk,
       "", ""},
      {"bf16_partials_into_f32_out", L::kVarlen,
       [](S& s) { s.p.out_partial.dtype = FLASHATTN_BF16; }, kOk, "", ""},
      {"one_split", L::kDense,
       [](S& s) {
         reshape(s.p.out_partial, {1, kBatch, kSeqQ, kHeadsQ, kDv});
         reshape(s.p.lse_partial, {1, kBatch, kHeadsQ, kSeqQ});
       },
       kOk, "", ""},
      {"out_rank2", L::kDense,
       [](S& s) { reshape(s.p.out, {6, 24}); }, kInvalid, "out", "got rank 2"},
      {"out_i32", L::kDense, [](S& s) { s.p.out.dtype = FLASHATTN_I32; }, kInvalid, "out",
       "expected dtype f32, f16 or bf16, got i32"},
      {"out_e4m3", L::kDense, [](S& s) { s.p.out.dtype = FLASHATTN_E4M3; }, kUnsupported, "out",
       "got e4m3"},
      {"out_partial_i32", L::kDense, [](S& s) { s.p.out_partial.dtype = FLASHATTN_I32; }, kInvalid,
       "out_partial", "got i32"},
      {"out_partial_e4m3", L::kDense, [](S& s) { s.p.out_partial.dtype = FLASHATTN_E4M3; },
       kUnsupported, "out_partial", "got e4m3"},
      {"out_partial_rank_of_out", L::kDense,
       [](S& s) { reshape(s.p.out_partial, {6, 3, 4, 6}); },
       kInvalid, "out_partial", "expected rank 5 [splits, *out.shape], got rank 4"},
      {"out_partial_zero_splits", L::kDense,
       [](S& s) { reshape(s.p.out_partial, {0, kBatch, kSeqQ, kHeadsQ, kDv}); },
       kInvalid, "out_partial", "splits = shape[0] >= 1"},
      {"out_partial_shape_differs", L::kVarlen,
       [](S& s) { reshape(s.p.out_partial, {3, 5, 4, 5}); },
       kInvalid, "out_partial", "with out [5, 4, 6], got [3, 5, 4, 5]"},
      {"lse_partial_f16", L::kDense, [](S& s) { s.p.lse_partial.dtype = FLASHATTN_F16; }, kInvalid,
       "lse_partial", "expected dtype f32, got f16"},
      {"lse_partial_splits_differ", L::kDense,
       [](S& s) { reshape(s.p.lse_partial, {2, kBatch, kHeadsQ, kSeqQ}); },
       kInvalid, "lse_partial", "[splits=3, batch=2, heads=4, seqlen_q=3], got [2, 2, 4, 3]"},
      {"lse_partial_varlen_transposed", L::kVarlen,
       [](S& s) { reshape(s.p.lse_partial, {kSplits, kTotalQ, kHeadsQ}); },
       kInvalid, "lse_partial", "[splits=3, heads=4, total_q=5]"},
      {"lse_shape_differs", L::kDense,
       [](S& s) { reshape(s.p.lse, {2, 3, 4}); },
       kInvalid, "lse", "[batch=2, heads=4, seqlen_q=3], got [2, 3, 4]"},
      {"lse_f16", L::kVarlen, [](S& s) { s.p.lse.dtype = FLASHATTN_F16; }, kInvalid, "lse",
       "expected dtype f32, got f16"},
  };
}

class MergeChecks : public testing::TestWithParam<Merge> {};
TEST_P(MergeChecks, StatusMessageAndUntouchedMemory) { run_case(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(validation_descriptors, MergeChecks,
                         testing::ValuesIn(merge_descriptor_cases()), case_name<MergeSetup>);
INSTANTIATE_TEST_SUITE_P(validation_shapes, MergeChecks, testing::ValuesIn(merge_cases()),
                         case_name<MergeSetup>);

// ---- what every entry point shares: params pointer, struct_size, exec, options ----------------

enum class Entry { kFwd, kFwdWorkspace, kBwd, kBwdWorkspace, kMerge };

// One valid call of an entry point, with access to the fields the params structs share.
struct EntryCall {
  Entry entry;
  FwdSetup fwd{Layout::kDense};
  BwdSetup bwd{Layout::kDense};
  MergeSetup merge{Layout::kDense};
  size_t bytes = kUntouchedBytes;

  bool is_fwd() const { return entry == Entry::kFwd || entry == Entry::kFwdWorkspace; }
  bool is_bwd() const { return entry == Entry::kBwd || entry == Entry::kBwdWorkspace; }
  size_t& struct_size() {
    return is_fwd() ? fwd.p.struct_size : is_bwd() ? bwd.p.struct_size : merge.p.struct_size;
  }
  flashattn_exec& exec() { return is_fwd() ? fwd.p.exec : is_bwd() ? bwd.p.exec : merge.p.exec; }
  flashattn_attn_options& opts() { return is_fwd() ? fwd.p.opts : bwd.p.opts; }
  Arena& arena() { return is_fwd() ? fwd.a : is_bwd() ? bwd.a : merge.a; }

  flashattn_status run(bool null_params = false) {
    switch (entry) {
      case Entry::kFwd: return flashattn_fwd(null_params ? nullptr : &fwd.p);
      case Entry::kFwdWorkspace:
        return flashattn_fwd_workspace_size(null_params ? nullptr : &fwd.p, &bytes);
      case Entry::kBwd: return flashattn_bwd(null_params ? nullptr : &bwd.p);
      case Entry::kBwdWorkspace:
        return flashattn_bwd_workspace_size(null_params ? nullptr : &bwd.p, &bytes);
      case Entry::kMerge: return flashattn_merge(null_params ? nullptr : &merge.p);
    }
    return FLASHATTN_INTERNAL_ERROR;
  }
};

std::string entry_name(Entry entry) {
  switch (entry) {
    case Entry::kFwd: return "fwd";
    case Entry::kFwdWorkspace: return "fwd_workspace_size";
    case Entry::kBwd: return "bwd";
    case Entry::kBwdWorkspace: return "bwd_workspace_size";
    case Entry::kMerge: return "merge";
  }
  return "unknown";
}

const Entry kAllEntries[] = {Entry::kFwd, Entry::kFwdWorkspace, Entry::kBwd, Entry::kBwdWorkspace,
                             Entry::kMerge};
const Entry kAttentionEntries[] = {Entry::kFwd, Entry::kFwdWorkspace, Entry::kBwd,
                                   Entry::kBwdWorkspace};

struct SharedCase {
  std::string name;
  std::function<void(EntryCall&)> mutate;
  std::string arg;
  std::string detail;
};

void PrintTo(const SharedCase& c, std::ostream* os) { *os << c.name; }
void PrintTo(Entry entry, std::ostream* os) { *os << entry_name(entry); }

using SharedParam = std::tuple<Entry, SharedCase>;

std::string shared_name(const testing::TestParamInfo<SharedParam>& info) {
  return entry_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
}

void run_shared(const SharedParam& param) {
  EntryCall c{std::get<0>(param)};
  const SharedCase& s = std::get<1>(param);
  s.mutate(c);
  const auto before = c.arena().snapshot();
  expect_status(c.run(), kInvalid, s.arg, s.detail);
  EXPECT_TRUE(c.arena().snapshot() == before) << "a rejected call modified tensor memory";
  EXPECT_EQ(c.bytes, kUntouchedBytes);
}

std::vector<SharedCase> header_cases() {
  using C = EntryCall;
  return {
      {"struct_size_too_small", [](C& c) { c.struct_size() -= 1; }, "struct_size",
       "expected at least sizeof(flashattn_"},
      {"struct_size_zero", [](C& c) { c.struct_size() = 0; }, "struct_size", "got 0"},
      {"backend_unknown", [](C& c) { c.exec().backend = flashattn_backend(kBadEnum); },
       "exec.backend", "got 99"},
      {"backend_negative", [](C& c) { c.exec().backend = flashattn_backend(-1); }, "exec.backend",
       "got -1"},
      {"num_threads_negative", [](C& c) { c.exec().num_threads = -1; }, "exec.num_threads",
       "expected >= 0 (0 = all hardware threads), got -1"},
      {"device_below_current", [](C& c) { c.exec().device = -2; }, "exec.device", "got -2"},
      {"workspace_null_with_size", [](C& c) { c.exec().workspace_size = 64; }, "exec.workspace",
       "exec.workspace_size=64 bytes, got NULL"},
  };
}

std::vector<SharedCase> options_cases() {
  using C = EntryCall;
  return {
      {"scale_nan", [](C& c) { c.opts().softmax_scale = kNaN; }, "opts.softmax_scale", "got nan"},
      {"scale_inf", [](C& c) { c.opts().softmax_scale = kInf; }, "opts.softmax_scale", "got inf"},
      {"scale_negative", [](C& c) { c.opts().softmax_scale = -1.f; }, "opts.softmax_scale",
       "expected a finite value >= 0 (0 = 1/sqrt(d)), got -1"},
      {"scale_overflows_base_2", [](C& c) { c.opts().softmax_scale = 3e38f; }, "opts.softmax_scale",
       "expected at most FLT_MAX / log2(e) = 2.35866e+38, got 3e+38"},
      {"window_left_below_minus_1", [](C& c) { c.opts().window_left = -2; }, "opts.window_left",
       "expected >= -1 (-1 = unbounded), got -2"},
      {"window_right_below_minus_1", [](C& c) { c.opts().window_right = -5; },
       "opts.window_right", "got -5"},
      {"causal_with_window_right", [](C& c) {
         c.opts().causal = 1;
         c.opts().window_right = 3;
       },
       "opts.window_right", "expected -1 or 0 with opts.causal"},
      {"softcap_negative", [](C& c) { c.opts().softcap = -1.f; }, "opts.softcap", "got -1"},
      {"softcap_nan", [](C& c) { c.opts().softcap = kNaN; }, "opts.softcap", "got nan"},
      {"dropout_one", [](C& c) { c.opts().dropout_p = 1.f; }, "opts.dropout_p",
       "expected a probability in [0, 1), got 1"},
      {"dropout_negative", [](C& c) { c.opts().dropout_p = -0.1f; }, "opts.dropout_p",
       "got -0.1"},
      {"dropout_nan", [](C& c) { c.opts().dropout_p = kNaN; }, "opts.dropout_p", "got nan"},
      {"alibi_f16", [](C& c) { c.opts().alibi_slopes = c.arena().input({kHeadsQ}, FLASHATTN_F16); },
       "opts.alibi_slopes", "expected dtype f32, got f16"},
      {"alibi_heads_differ", [](C& c) { c.opts().alibi_slopes = c.arena().input({kHeadsKv}); },
       "opts.alibi_slopes", "expected shape [heads_q=4] or [batch=2, heads_q=4], got [2]"},
      {"alibi_batch_differs", [](C& c) { c.opts().alibi_slopes = c.arena().input({3, kHeadsQ}); },
       "opts.alibi_slopes", "got [3, 4]"},
      {"alibi_rank3", [](C& c) { c.opts().alibi_slopes = c.arena().input({1, kBatch, kHeadsQ}); },
       "opts.alibi_slopes", "got [1, 2, 4]"},
      {"alibi_data_null",
       [](C& c) {
         c.opts().alibi_slopes = c.arena().input({kHeadsQ});
         c.opts().alibi_slopes.data = nullptr;
       },
       "opts.alibi_slopes", "got NULL"},
  };
}

class SharedRejects : public testing::TestWithParam<SharedParam> {};
TEST_P(SharedRejects, NamesTheArgumentAndTouchesNothing) { run_shared(GetParam()); }
INSTANTIATE_TEST_SUITE_P(validation_header, SharedRejects,
                         testing::Combine(testing::ValuesIn(kAllEntries),
                                          testing::ValuesIn(header_cases())),
                         shared_name);
INSTANTIATE_TEST_SUITE_P(validation_options, SharedRejects,
                         testing::Combine(testing::ValuesIn(kAttentionEntries),
                                          testing::ValuesIn(options_cases())),
                         shared_name);

class EntryPoints : public testing::TestWithParam<Entry> {};
TEST_P(EntryPoints, RejectNullParams) {
  EntryCall c{GetParam()};
  expect_status(c.run(true), kInvalid, "params", "expected a non-null pointer, got NULL");
  EXPECT_EQ(c.bytes, kUntouchedBytes);
}
TEST_P(EntryPoints, ValidCallSucceedsAndClearsTheLastError) {
  EntryCall c{GetParam()};
  leave_an_error();
  expect_status(c.run(), kOk, "", "");
}
INSTANTIATE_TEST_SUITE_P(validation_all, EntryPoints, testing::ValuesIn(kAllEntries),
                         [](const testing::TestParamInfo<Entry>& info) {
                           return entry_name(info.param);
                         });

TEST(validation_workspace_queries, RejectNullBytes) {
  FwdSetup fwd(Layout::kDense);
  expect_status(flashattn_fwd_workspace_size(&fwd.p, nullptr), kInvalid, "bytes", "got NULL");
  BwdSetup bwd(Layout::kDense);
  expect_status(flashattn_bwd_workspace_size(&bwd.p, nullptr), kInvalid, "bytes", "got NULL");
}

// ---- capabilities and small helpers -----------------------------------------------------------

TEST(validation_capabilities, ReportTheCpuBackendsAndTheVersion) {
  flashattn_capabilities caps{};
  caps.struct_size = sizeof caps;
  leave_an_error();
  expect_status(flashattn_get_capabilities(&caps), kOk, "", "");
  for (flashattn_backend backend : {FLASHATTN_BACKEND_CPU, FLASHATTN_BACKEND_CPU_REFERENCE,
                                    FLASHATTN_BACKEND_CPU_REFERENCE_LOWP}) {
    EXPECT_TRUE(caps.backends & (1u << backend)) << "backend " << backend;
  }
  EXPECT_FALSE(caps.backends & (1u << FLASHATTN_BACKEND_AUTO)) << "AUTO is not a backend";
  EXPECT_EQ(caps.struct_size, sizeof caps);
  EXPECT_EQ(caps.version_major, FLASHATTN_VERSION_MAJOR);
  EXPECT_EQ(caps.version_minor, FLASHATTN_VERSION_MINOR);
  EXPECT_EQ(caps.version_patch, FLASHATTN_VERSION_PATCH);
  EXPECT_LE(caps.num_cuda_archs, FLASHATTN_MAX_LIST);
  EXPECT_LE(caps.num_head_dims, FLASHATTN_MAX_LIST);
  EXPECT_GE(caps.cuda_device_count, 0);
  // The Hopper forward needs the CUDA backend and its sm_90a target (reported as 90).
  if (caps.cuda_hopper_forward) {
    EXPECT_TRUE(caps.backends & (1u << FLASHATTN_BACKEND_CUDA));
    EXPECT_NE(std::find(caps.cuda_archs, caps.cuda_archs + caps.num_cuda_archs, 90),
              caps.cuda_archs + caps.num_cuda_archs);
  }
}

TEST(validation_capabilities, RejectNullAndSmallStruct) {
  expect_status(flashattn_get_capabilities(nullptr), kInvalid, "caps", "got NULL");
  flashattn_capabilities caps;
  std::memset(&caps, 0x5a, sizeof caps);
  caps.struct_size = sizeof caps - 1;
  const flashattn_capabilities before = caps;
  expect_status(flashattn_get_capabilities(&caps), kInvalid, "caps->struct_size",
                std::to_string(sizeof caps - 1));
  EXPECT_EQ(std::memcmp(&caps, &before, sizeof caps), 0) << "a rejected call modified caps";
}

TEST(validation_helpers, StatusStrings) {
  const std::pair<flashattn_status, const char*> expected[] = {
      {FLASHATTN_SUCCESS, "SUCCESS"},
      {FLASHATTN_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {FLASHATTN_NOT_SUPPORTED, "NOT_SUPPORTED"},
      {FLASHATTN_CUDA_ERROR, "CUDA_ERROR"},
      {FLASHATTN_OUT_OF_MEMORY, "OUT_OF_MEMORY"},
      {FLASHATTN_INTERNAL_ERROR, "INTERNAL_ERROR"},
  };
  for (const auto& [status, name] : expected) EXPECT_STREQ(flashattn_status_string(status), name);
  const char* unknown = flashattn_status_string(flashattn_status(kBadEnum));
  ASSERT_NE(unknown, nullptr);
  EXPECT_STRNE(unknown, "");
}

TEST(validation_helpers, DtypeSizesAndNames) {
  struct Expected {
    flashattn_dtype dtype;
    size_t size;
    const char* name;
  };
  const Expected expected[] = {
      {FLASHATTN_F32, 4, "f32"},   {FLASHATTN_F16, 2, "f16"},
      {FLASHATTN_BF16, 2, "bf16"}, {FLASHATTN_E4M3, 1, "e4m3"},
      {FLASHATTN_I32, 4, "i32"},   {FLASHATTN_DTYPE_INVALID, 0, "invalid"},
  };
  for (const Expected& e : expected) {
    EXPECT_EQ(flashattn_dtype_size(e.dtype), e.size) << e.name;
    EXPECT_STREQ(flashattn_dtype_string(e.dtype), e.name);
  }
  EXPECT_EQ(flashattn_dtype_size(flashattn_dtype(kBadEnum)), 0u);
  EXPECT_NE(flashattn_dtype_string(flashattn_dtype(kBadEnum)), nullptr);
}

TEST(validation_helpers, MakeTensorIsContiguousRowMajor) {
  float storage[24];
  const int64_t shape[] = {2, 3, 4};
  flashattn_tensor t = flashattn_make_tensor(storage, FLASHATTN_F32, 3, shape);
  EXPECT_EQ(t.data, storage);
  EXPECT_EQ(t.dtype, FLASHATTN_F32);
  EXPECT_EQ(t.rank, 3);
  const int64_t strides[] = {12, 4, 1};
  for (int dim = 0; dim < 3; ++dim) {
    EXPECT_EQ(t.shape[dim], shape[dim]);
    EXPECT_EQ(t.stride[dim], strides[dim]);
  }
  for (int dim = 3; dim < FLASHATTN_MAX_RANK; ++dim) {
    EXPECT_EQ(t.shape[dim], 0);
    EXPECT_EQ(t.stride[dim], 0);
  }
  flashattn_tensor absent = flashattn_make_tensor(nullptr, FLASHATTN_F32, 0, nullptr);
  EXPECT_EQ(absent.data, nullptr);
  EXPECT_EQ(absent.rank, 0);
}

TEST(validation_helpers, VersionString) {
  const std::string expected = std::to_string(FLASHATTN_VERSION_MAJOR) + "." +
                               std::to_string(FLASHATTN_VERSION_MINOR) + "." +
                               std::to_string(FLASHATTN_VERSION_PATCH);
  EXPECT_EQ(flashattn_version_string(), expected);
}

}  // namespace
