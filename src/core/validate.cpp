// Argument validation: checks the C params of every entry point and builds the backend-neutral
// AttnProblem / MergeProblem. Every message reads "<argument>: <expected>, got <given>".
#include "core/validate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/math_constants.h"

namespace flashattn {
namespace {

constexpr int64_t kUnboundedWindow = int64_t(1) << 31;  // no int32 sequence spans this many keys
constexpr int64_t kMaxSplits = 128;  // split-KV: more splits than this only add merge work
constexpr int64_t kAny = -1;  // a dimension of an expected shape that any size satisfies

// The stored value of an enum that came through the C ABI, as the C int it is. Read as raw
// bytes: the caller may have stored a value outside the enumerators (a negative one included),
// and the check must see it as it is.
template <class Enum>
int raw_value(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

bool known_dtype(flashattn_dtype dtype) {
  int raw = raw_value(dtype);
  return raw >= FLASHATTN_F32 && raw <= FLASHATTN_I32;
}

// E4M3 counts as a float dtype here so that a well-formed fp8 request reaches the NOT_SUPPORTED
// check at the end of validation instead of being reported as malformed.
bool float_dtype(flashattn_dtype dtype) {
  return dtype == FLASHATTN_F32 || dtype == FLASHATTN_F16 || dtype == FLASHATTN_BF16 ||
         dtype == FLASHATTN_E4M3;
}

std::string dtype_name(flashattn_dtype dtype) {
  if (!known_dtype(dtype)) return cat("unknown dtype ", raw_value(dtype));
  return flashattn_dtype_string(dtype);
}

template <class Tensor>
std::string shape_string(const Tensor& t) {
  std::string s = "[";
  for (int dim = 0; dim < t.rank; ++dim) s += cat(dim > 0 ? ", " : "", t.shape[dim]);
  return s + "]";
}

// One dimension of an expected shape: its name in the docs and its size (kAny: unconstrained).
struct Dim {
  const char* name;
  int64_t size;
};

std::string dims_string(const std::vector<Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    s += cat(i > 0 ? ", " : "", dims[i].name);
    if (dims[i].size != kAny) s += cat("=", dims[i].size);
  }
  return s + "]";
}

bool absent(const flashattn_tensor& t) { return t.data == nullptr && t.rank == 0; }

View view_of(const flashattn_tensor& t) {
  View v;
  if (absent(t)) return v;
  v.data = t.data;
  v.dtype = t.dtype;
  v.rank = t.rank;
  std::copy(t.shape, t.shape + t.rank, v.shape);
  std::copy(t.stride, t.stride + t.rank, v.stride);
  return v;
}

// ---- descriptor checks: what every tensor must satisfy, whatever its role -------------------

// One tensor field of a params struct: where it comes from, where its view goes, its name in
// messages and whether it must be present.
template <class Params, class Problem>
struct TensorField {
  flashattn_tensor Params::*source;
  View Problem::*target;
  const char* name;
  bool required;
};

void check_descriptor(const flashattn_tensor& t, const char* arg, bool required) {
  if (absent(t)) {
    FA_CHECK_ARG(!required, arg, ": required, got an absent tensor (data NULL, rank 0)");
    return;
  }
  FA_CHECK_ARG(t.rank >= 0 && t.rank <= FLASHATTN_MAX_RANK, arg, ": expected rank in 0..",
               FLASHATTN_MAX_RANK, ", got rank ", t.rank);
  FA_CHECK_ARG(t.data != nullptr, arg, ": expected non-NULL data for rank ", t.rank,
               " (absent: data NULL, rank 0), got NULL");
  FA_CHECK_ARG(t.rank > 0, arg,
               ": expected rank >= 1 for non-NULL data (absent: data NULL, rank 0), got rank 0");
  FA_CHECK_ARG(known_dtype(t.dtype), arg, ": expected a flashattn_dtype, got ",
               dtype_name(t.dtype));
  for (int dim = 0; dim < t.rank; ++dim) {
    FA_CHECK_ARG(t.shape[dim] >= 0, arg, ": expected shape[", dim, "] >= 0, got ", shape_string(t));
  }
  FA_CHECK_ARG(t.stride[t.rank - 1] == 1, arg,
               ": expected stride 1 in the last dimension, got stride[", t.rank - 1,
               "]=", t.stride[t.rank - 1]);
}

// Checks every descriptor of `fields` (in order, so the first bad one is reported) and copies
// them into the problem.
template <class Params, class Problem, size_t N>
void take_tensors(const Params& params, const TensorField<Params, Problem> (&fields)[N],
                  Problem& problem) {
  for (const auto& field : fields) {
    check_descriptor(params.*field.source, field.name, field.required);
    problem.*field.target = view_of(params.*field.source);
  }
}

// ---- role checks on validated views ---------------------------------------------------------

void expect_shape(const View& t, const char* arg, const std::vector<Dim>& dims) {
  bool ok = t.rank == int(dims.size());
  for (size_t i = 0; ok && i < dims.size(); ++i) {
    ok = dims[i].size == kAny || t.shape[i] == dims[i].size;
  }
  FA_CHECK_ARG(ok, arg, ": expected shape ", dims_string(dims), ", got ", shape_string(t));
}

// `like` names the tensor the dtype comes from ("q"), or is empty.
void expect_dtype(const View& t, const char* arg, flashattn_dtype dtype, const char* like = "") {
  FA_CHECK_ARG(t.dtype == dtype, arg, ": expected dtype ", dtype_name(dtype),
               *like ? cat(" (the dtype of ", like, ")") : "", ", got ", dtype_name(t.dtype));
}

void expect_float(const View& t, const char* arg) {
  FA_CHECK_ARG(float_dtype(t.dtype), arg, ": expected dtype f32, f16 or bf16, got ",
               dtype_name(t.dtype));
}

void expect_same_shape(const View& t, const char* arg, const View& like, const char* like_name) {
  bool ok = t.rank == like.rank && std::equal(t.shape, t.shape + t.rank, like.shape);
  FA_CHECK_ARG(ok, arg, ": expected the shape of ", like_name, " ", shape_string(like), ", got ",
               shape_string(t));
}

void check_supported(const View& t, const char* arg) {
  FA_CHECK_SUPPORTED(
      t.dtype != FLASHATTN_E4M3, arg,
      ": expected dtype f32, f16 or bf16 (e4m3 is reserved for later kernels), got e4m3");
}

template <class Params>
void check_header(const Params* params, const char* type_name) {
  FA_CHECK_ARG(params != nullptr, "params: expected a non-null pointer, got NULL");
  FA_CHECK_ARG(params->struct_size >= sizeof(Params), "struct_size: expected at least sizeof(",
               type_name, ")=", sizeof(Params), " (call ", type_name, "_init first), got ",
               params->struct_size);
}

void check_exec(const flashattn_exec& exec) {
  int backend = raw_value(exec.backend);
  FA_CHECK_ARG(backend >= FLASHATTN_BACKEND_AUTO && backend <= FLASHATTN_BACKEND_CUDA_SM80,
               "exec.backend: expected a flashattn_backend (", FLASHATTN_BACKEND_AUTO, "..",
               FLASHATTN_BACKEND_CUDA_SM80, "), got ", backend);
  FA_CHECK_ARG(exec.num_threads >= 0,
               "exec.num_threads: expected >= 0 (0 = all hardware threads), got ",
               exec.num_threads);
  FA_CHECK_ARG(exec.device >= -1,
               "exec.device: expected a device ordinal >= 0 or -1 (current device), got ",
               exec.device);
  FA_CHECK_ARG(exec.workspace != nullptr || exec.workspace_size == 0,
               "exec.workspace: expected a pointer to exec.workspace_size=", exec.workspace_size,
               " bytes, got NULL");
}

// ---- attention layouts (shared by forward and backward) -------------------------------------

// q: dense [batch, seqlen_q, heads_q, d], or varlen [total_q, heads_q, d] with cu_seqlens_q.
void resolve_q(AttnProblem& p, int64_t max_seqlen_q) {
  expect_float(p.q, "q");
  p.varlen_q = p.cu_seqlens_q.present();
  if (p.varlen_q) {
    FA_CHECK_ARG(
        p.q.rank == 3,
        "q: expected rank 3 [total_q, heads_q, d] (varlen: cu_seqlens_q is given), got rank ",
        p.q.rank);
    expect_dtype(p.cu_seqlens_q, "cu_seqlens_q", FLASHATTN_I32);
    FA_CHECK_ARG(p.cu_seqlens_q.rank == 1 && p.cu_seqlens_q.shape[0] >= 1,
                 "cu_seqlens_q: expected shape [batch+1] with batch+1 >= 1, got ",
                 shape_string(p.cu_seqlens_q));
    FA_CHECK_ARG(max_seqlen_q >= 0,
                 "max_seqlen_q: expected >= 0 with cu_seqlens_q (0 = unknown), got ", max_seqlen_q);
    p.batch = p.cu_seqlens_q.shape[0] - 1;
    p.seqlen_q = max_seqlen_q;
  } else {
    FA_CHECK_ARG(p.q.rank == 4,
                 "q: expected rank 4 (dense) or 3 (varlen, with cu_seqlens_q), got rank ", p.q.rank,
                 p.q.rank == 3 ? " without cu_seqlens_q" : "");
    p.batch = p.q.shape[0];
    p.seqlen_q = p.q.shape[1];
  }
  p.heads_q = p.q.shape[p.q.rank - 2];
  p.d = p.q.shape[p.q.rank - 1];
  FA_CHECK_ARG(p.heads_q >= 1, "q: expected heads_q >= 1, got heads_q=", p.heads_q);
  FA_CHECK_ARG(p.d >= 1, "q: expected head dim d >= 1, got d=", p.d);
}

// Which KV layout the optional tensors select, and the combinations that make no sense.
KvLayout kv_layout_of(const AttnProblem& p) {
  const bool varlen = p.cu_seqlens_k.present(), cache = p.cache_seqlens.present();
  FA_CHECK_ARG(varlen || !p.seqused_k.present(),
               "seqused_k: expected only with cu_seqlens_k (varlen k), got it without");
  FA_CHECK_ARG(
      !(varlen && cache),
      "cache_seqlens: expected a KV cache without cu_seqlens_k (a cache is not varlen), got both");
  FA_CHECK_ARG(cache || !p.block_table.present(),
               "block_table: expected cache_seqlens with a paged KV cache, got no cache_seqlens");
  if (varlen) return KvLayout::Varlen;
  return p.block_table.present() ? KvLayout::Paged : KvLayout::Dense;
}

// Sets seqlen_k (and block_size) from k's leading dims and the index arrays of its layout.
void resolve_kv_extent(AttnProblem& p, int64_t max_seqlen_k) {
  const int64_t batch = p.batch;
  switch (p.kv_layout) {
    case KvLayout::Varlen:
      FA_CHECK_ARG(
          p.k.rank == 3,
          "k: expected rank 3 [total_k, heads_kv, d] (varlen: cu_seqlens_k is given), got rank ",
          p.k.rank);
      expect_dtype(p.cu_seqlens_k, "cu_seqlens_k", FLASHATTN_I32);
      expect_shape(p.cu_seqlens_k, "cu_seqlens_k", {{"batch+1", batch + 1}});
      if (p.seqused_k.present()) {
        expect_dtype(p.seqused_k, "seqused_k", FLASHATTN_I32);
        expect_shape(p.seqused_k, "seqused_k", {{"batch", batch}});
      }
      FA_CHECK_ARG(max_seqlen_k >= 0,
                   "max_seqlen_k: expected >= 0 with cu_seqlens_k (0 = unknown), got ",
                   max_seqlen_k);
      p.seqlen_k = max_seqlen_k;
      return;
    case KvLayout::Paged:
      FA_CHECK_ARG(p.k.rank == 4,
                   "k: expected rank 4 [num_blocks, block_size, heads_kv, d] (paged), got rank ",
                   p.k.rank);
      expect_dtype(p.block_table, "block_table", FLASHATTN_I32);
      expect_shape(p.block_table, "block_table", {{"batch", batch}, {"max_blocks", kAny}});
      p.block_size = p.k.shape[1];
      FA_CHECK_ARG(p.block_size >= 1, "k: expected block_size = shape[1] >= 1 (paged), got ",
                   shape_string(p.k));
      p.seqlen_k = p.block_table.shape[1] * p.block_size;
      return;
    case KvLayout::Dense:
      FA_CHECK_ARG(p.k.rank == 4,
                   "k: expected rank 4 (dense) or 3 (varlen, with cu_seqlens_k), got rank ",
                   p.k.rank, p.k.rank == 3 ? " without cu_seqlens_k" : "");
      FA_CHECK_ARG(p.k.shape[0] == batch, "k: expected shape[0] = batch=", batch, ", got ",
                   shape_string(p.k));
      p.seqlen_k = p.k.shape[1];  // with cache_seqlens: the cache capacity
      return;
  }
}

void resolve_kv(AttnProblem& p, int64_t max_seqlen_k) {
  expect_dtype(p.k, "k", p.q.dtype, "q");
  expect_dtype(p.v, "v", p.q.dtype, "q");
  p.kv_layout = kv_layout_of(p);
  resolve_kv_extent(p, max_seqlen_k);
  if (p.cache_seqlens.present()) {
    expect_dtype(p.cache_seqlens, "cache_seqlens", FLASHATTN_I32);
    expect_shape(p.cache_seqlens, "cache_seqlens", {{"batch", p.batch}});
  }
  p.heads_kv = p.k.shape[p.k.rank - 2];
  FA_CHECK_ARG(p.heads_kv >= 1, "k: expected heads_kv >= 1, got heads_kv=", p.heads_kv);
  FA_CHECK_ARG(p.heads_q % p.heads_kv == 0, "k: heads_kv=", p.heads_kv,
               " does not divide heads_q=", p.heads_q);
  FA_CHECK_ARG(p.k.shape[p.k.rank - 1] == p.d, "k: expected head dim d=", p.d, " (that of q), got ",
               shape_string(p.k));
  // v matches k in every dim but the last, which is d_v.
  FA_CHECK_ARG(p.v.rank == p.k.rank && std::equal(p.v.shape, p.v.shape + p.v.rank - 1, p.k.shape),
               "v: expected the shape of k ", shape_string(p.k), " with any last dim d_v, got ",
               shape_string(p.v));
  p.d_v = p.v.shape[p.v.rank - 1];
  FA_CHECK_ARG(p.d_v >= 1, "v: expected head dim d_v >= 1, got d_v=", p.d_v);
}

// Row-shaped outputs of q: out (or dout) [.., heads_q, d_v] and lse.
std::vector<Dim> out_dims(const AttnProblem& p) {
  if (p.varlen_q) return {{"total_q", p.q.shape[0]}, {"heads_q", p.heads_q}, {"d_v", p.d_v}};
  return {{"batch", p.batch}, {"seqlen_q", p.seqlen_q}, {"heads_q", p.heads_q}, {"d_v", p.d_v}};
}

std::vector<Dim> lse_dims(const AttnProblem& p) {
  if (p.varlen_q) return {{"heads_q", p.heads_q}, {"total_q", p.q.shape[0]}};
  return {{"batch", p.batch}, {"heads_q", p.heads_q}, {"seqlen_q", p.seqlen_q}};
}

void check_out_lse(const AttnProblem& p) {
  expect_dtype(p.out, "out", p.q.dtype, "q");
  expect_shape(p.out, "out", out_dims(p));
  if (!p.lse.present()) return;
  expect_dtype(p.lse, "lse", FLASHATTN_F32);
  expect_shape(p.lse, "lse", lse_dims(p));
}

void resolve_layouts(AttnProblem& p, int64_t max_seqlen_q, int64_t max_seqlen_k) {
  resolve_q(p, max_seqlen_q);
  resolve_kv(p, max_seqlen_k);
  check_out_lse(p);
}

// ---- forward-only: KV-cache append and rotary -----------------------------------------------

void resolve_append(AttnProblem& p) {
  const bool has_k = p.k_new.present(), has_v = p.v_new.present();
  FA_CHECK_ARG(has_k || !has_v,
               "k_new: required with v_new (an append takes both), got an absent tensor");
  FA_CHECK_ARG(has_v || !has_k,
               "v_new: required with k_new (an append takes both), got an absent tensor");
  if (!has_k) return;
  FA_CHECK_ARG(p.cache_seqlens.present(),
               "k_new: expected a KV cache (cache_seqlens) to append to, got no cache_seqlens");
  FA_CHECK_ARG(!p.varlen_q,
               "k_new: expected a dense q (an append takes no cu_seqlens_q), got cu_seqlens_q");
  expect_dtype(p.k_new, "k_new", p.k.dtype, "k");
  expect_dtype(p.v_new, "v_new", p.v.dtype, "v");
  expect_shape(p.k_new, "k_new",
               {{"batch", p.batch}, {"seqlen_new", kAny}, {"heads_kv", p.heads_kv}, {"d", p.d}});
  p.seqlen_new = p.k_new.shape[1];
  expect_shape(
      p.v_new, "v_new",
      {{"batch", p.batch}, {"seqlen_new", p.seqlen_new}, {"heads_kv", p.heads_kv}, {"d_v", p.d_v}});
}

void resolve_rotary(AttnProblem& p) {
  const bool has_cos = p.rotary_cos.present(), has_sin = p.rotary_sin.present();
  FA_CHECK_ARG(has_cos || !has_sin, "rotary_cos: required with rotary_sin, got an absent tensor");
  FA_CHECK_ARG(has_sin || !has_cos, "rotary_sin: required with rotary_cos, got an absent tensor");
  if (!has_cos) return;
  FA_CHECK_ARG(p.has_append(), "rotary_cos: expected only with an append (k_new), got no k_new");
  FA_CHECK_ARG(p.rotary_cos.dtype == FLASHATTN_F32 || p.rotary_cos.dtype == p.q.dtype,
               "rotary_cos: expected dtype f32 or the dtype of q (", dtype_name(p.q.dtype),
               "), got ", dtype_name(p.rotary_cos.dtype));
  expect_dtype(p.rotary_sin, "rotary_sin", p.rotary_cos.dtype, "rotary_cos");
  expect_shape(p.rotary_cos, "rotary_cos", {{"seqlen_ro", kAny}, {"rotary_dim/2", kAny}});
  expect_shape(p.rotary_sin, "rotary_sin",
               {{"seqlen_ro", p.rotary_cos.shape[0]}, {"rotary_dim/2", p.rotary_cos.shape[1]}});
  p.rotary_dim = 2 * p.rotary_cos.shape[1];
  FA_CHECK_ARG(p.rotary_dim >= 2 && p.rotary_dim <= p.d,
               "rotary_cos: expected rotary_dim = 2 * shape[1] in 2..d=", p.d,
               ", got rotary_dim=", p.rotary_dim);
}

// ---- options ----------------------------------------------------------------------------------

void check_alibi(const View& slopes, const AttnProblem& p) {
  if (!slopes.present()) return;
  expect_dtype(slopes, "opts.alibi_slopes", FLASHATTN_F32);
  bool per_head = slopes.rank == 1 && slopes.shape[0] == p.heads_q;
  bool per_batch = slopes.rank == 2 && slopes.shape[0] == p.batch && slopes.shape[1] == p.heads_q;
  FA_CHECK_ARG(per_head || per_batch, "opts.alibi_slopes: expected shape [heads_q=", p.heads_q,
               "] or [batch=", p.batch, ", heads_q=", p.heads_q, "], got ", shape_string(slopes));
}

ResolvedOptions resolve_options(const flashattn_attn_options& o, const AttnProblem& p) {
  FA_CHECK_ARG(std::isfinite(o.softmax_scale) && o.softmax_scale >= 0.f,
               "opts.softmax_scale: expected a finite value >= 0 (0 = 1/sqrt(d)), got ",
               o.softmax_scale);
  // Every backend takes the softmax in base 2, with scale x log2(e) as one float factor: past
  // FLT_MAX / log2(e) it is inf, and every row's max minus itself NaN.
  FA_CHECK_ARG(double(o.softmax_scale) * double(kLog2e) <= double(std::numeric_limits<float>::max()),
               "opts.softmax_scale: expected at most FLT_MAX / log2(e) = ",
               double(std::numeric_limits<float>::max()) / double(kLog2e), ", got ", o.softmax_scale);
  FA_CHECK_ARG(o.window_left >= -1, "opts.window_left: expected >= -1 (-1 = unbounded), got ",
               o.window_left);
  FA_CHECK_ARG(o.window_right >= -1, "opts.window_right: expected >= -1 (-1 = unbounded), got ",
               o.window_right);
  // Causal is the window (left, 0): a different right edge is a contradiction, not a default.
  FA_CHECK_ARG(!o.causal || o.window_right == -1 || o.window_right == 0,
               "opts.window_right: expected -1 or 0 with opts.causal (causal sets it to 0), got ",
               o.window_right);
  FA_CHECK_ARG(std::isfinite(o.softcap) && o.softcap >= 0.f,
               "opts.softcap: expected a finite value >= 0 (0 = off), got ", o.softcap);
  FA_CHECK_ARG(std::isfinite(o.dropout_p) && o.dropout_p >= 0.f && o.dropout_p < 1.f,
               "opts.dropout_p: expected a probability in [0, 1), got ", o.dropout_p);
  ResolvedOptions r;
  r.alibi_slopes = view_of(o.alibi_slopes);
  check_alibi(r.alibi_slopes, p);
  r.scale = o.softmax_scale > 0.f ? o.softmax_scale : float(1.0 / std::sqrt(double(p.d)));
  r.softcap = o.softcap;
  // Sequence lengths are int32 (cu_seqlens, cache_seqlens), so a window of kUnboundedWindow keys or
  // more reaches every key: it becomes -1, which also keeps the edge arithmetic from overflowing.
  auto bounded = [](int64_t w) { return w >= kUnboundedWindow ? -1 : w; };
  r.window_left = bounded(o.window_left);
  r.window_right = o.causal ? 0 : bounded(o.window_right);
  r.dropout_p = o.dropout_p;
  r.dropout_threshold = dropout_threshold(o.dropout_p);
  r.dropout_seed = o.dropout_seed;
  r.dropout_offset = o.dropout_offset;
  return r;
}

// ---- host contents --------------------------------------------------------------------------

// cu[0] = 0, non-decreasing, cu[batch] <= rows (the rows of the tensor it indexes).
void check_prefix_sums(const View& cu_view, const char* arg, int64_t batch, int64_t rows,
                       const char* rows_name) {
  const int32_t* cu = cu_view.as<const int32_t>();
  FA_CHECK_ARG(cu[0] == 0, arg, ": expected ", arg, "[0] = 0, got ", cu[0]);
  for (int64_t b = 0; b < batch; ++b) {
    FA_CHECK_ARG(cu[b + 1] >= cu[b], arg, ": expected non-decreasing prefix sums, got ", arg, "[",
                 b + 1, "]=", cu[b + 1], " < ", arg, "[", b, "]=", cu[b]);
  }
  FA_CHECK_ARG(cu[batch] <= rows, arg, ": expected ", arg, "[batch=", batch, "] <= ", rows_name,
               "=", rows, ", got ", cu[batch]);
}

// A positive max_seqlen is a promise the CUDA kernels size their grids by: hold the caller to it.
void check_max_seqlen(int64_t max_seqlen, const char* arg, int64_t b, int64_t length,
                      const char* source) {
  FA_CHECK_ARG(max_seqlen == 0 || length <= max_seqlen, arg,
               ": expected >= every sequence length (0 = unknown), got ", max_seqlen, " < ", length,
               " = length of sequence ", b, " (from ", source, ")");
}

void check_varlen_contents(const AttnProblem& p) {
  if (p.varlen_q) {
    check_prefix_sums(p.cu_seqlens_q, "cu_seqlens_q", p.batch, p.q.shape[0], "total_q (rows of q)");
    for (int64_t b = 0; b < p.batch; ++b) {
      check_max_seqlen(p.seqlen_q, "max_seqlen_q", b, p.seqlen_q_of(b), "cu_seqlens_q");
    }
  }
  if (p.kv_layout != KvLayout::Varlen) return;
  check_prefix_sums(p.cu_seqlens_k, "cu_seqlens_k", p.batch, p.k.shape[0], "total_k (rows of k)");
  const int32_t* cu = p.cu_seqlens_k.as<const int32_t>();
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.seqused_k.present()) {
      int32_t used = p.seqused_k.as<const int32_t>()[b], stored = cu[b + 1] - cu[b];
      FA_CHECK_ARG(used >= 0 && used <= stored, "seqused_k: expected seqused_k[", b, "] in [0, ",
                   stored, "] (the keys of sequence ", b, " in cu_seqlens_k), got ", used);
    }
    check_max_seqlen(p.seqlen_k, "max_seqlen_k", b, p.seqlen_k_of(b),
                     p.seqused_k.present() ? "seqused_k" : "cu_seqlens_k");
  }
}

std::string capacity_string(const AttnProblem& p) {
  if (p.kv_layout == KvLayout::Paged) {
    return cat(p.seqlen_k, " (max_blocks=", p.block_table.shape[1], " * block_size=", p.block_size,
               ")");
  }
  return cat(p.seqlen_k, " (k.shape[1])");
}

void check_cache_contents(const AttnProblem& p) {
  const int32_t* lengths = p.cache_seqlens.as<const int32_t>();
  for (int64_t b = 0; b < p.batch; ++b) {
    FA_CHECK_ARG(lengths[b] >= 0, "cache_seqlens: expected cache_seqlens[", b, "] >= 0, got ",
                 lengths[b]);
    if (p.has_append()) {
      FA_CHECK_ARG(lengths[b] + p.seqlen_new <= p.seqlen_k,
                   "cache_seqlens: cache too small for the append: expected cache_seqlens[", b,
                   "] + seqlen_new <= capacity ", capacity_string(p), ", got ", lengths[b], " + ",
                   p.seqlen_new);
    } else {
      FA_CHECK_ARG(lengths[b] <= p.seqlen_k, "cache_seqlens: expected cache_seqlens[", b,
                   "] <= capacity ", capacity_string(p), ", got ", lengths[b]);
    }
  }
}

// Only the blocks a sequence actually uses must be valid: the rest of its row may be garbage.
void check_block_table_contents(const AttnProblem& p) {
  const int32_t* table = p.block_table.as<const int32_t>();
  const int64_t num_blocks = p.k.shape[0];
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t keys = p.cache_position_of(b) + p.seqlen_new;
    int64_t blocks_used = (keys + p.block_size - 1) / p.block_size;
    for (int64_t i = 0; i < blocks_used; ++i) {
      int32_t block = table[p.block_table.offset(b, i)];
      FA_CHECK_ARG(block >= 0 && block < num_blocks,
                   "block_table: expected block indices in [0, num_blocks=", num_blocks,
                   ") for the ", blocks_used, " blocks sequence ", b, " uses, got block_table[", b,
                   "][", i, "]=", block);
    }
  }
}

// Queries rotate at cache_seqlens[b] + i and new keys at cache_seqlens[b] + t.
void check_rotary_contents(const AttnProblem& p) {
  const int64_t rows = std::max(p.seqlen_q, p.seqlen_new), seqlen_ro = p.rotary_cos.shape[0];
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t needed = p.cache_position_of(b) + rows;
    FA_CHECK_ARG(needed <= seqlen_ro,
                 "rotary_cos: table too short: expected seqlen_ro >= cache_seqlens[", b,
                 "] + max(seqlen_q, seqlen_new) = ", needed, ", got seqlen_ro=", seqlen_ro);
  }
}

// ---- entry points ---------------------------------------------------------------------------

using FwdField = TensorField<flashattn_fwd_params, AttnProblem>;
constexpr FwdField kFwdTensors[] = {
    {&flashattn_fwd_params::q, &AttnProblem::q, "q", true},
    {&flashattn_fwd_params::k, &AttnProblem::k, "k", true},
    {&flashattn_fwd_params::v, &AttnProblem::v, "v", true},
    {&flashattn_fwd_params::out, &AttnProblem::out, "out", true},
    {&flashattn_fwd_params::lse, &AttnProblem::lse, "lse", false},
    {&flashattn_fwd_params::cu_seqlens_q, &AttnProblem::cu_seqlens_q, "cu_seqlens_q", false},
    {&flashattn_fwd_params::cu_seqlens_k, &AttnProblem::cu_seqlens_k, "cu_seqlens_k", false},
    {&flashattn_fwd_params::seqused_k, &AttnProblem::seqused_k, "seqused_k", false},
    {&flashattn_fwd_params::cache_seqlens, &AttnProblem::cache_seqlens, "cache_seqlens", false},
    {&flashattn_fwd_params::block_table, &AttnProblem::block_table, "block_table", false},
    {&flashattn_fwd_params::k_new, &AttnProblem::k_new, "k_new", false},
    {&flashattn_fwd_params::v_new, &AttnProblem::v_new, "v_new", false},
    {&flashattn_fwd_params::rotary_cos, &AttnProblem::rotary_cos, "rotary_cos", false},
    {&flashattn_fwd_params::rotary_sin, &AttnProblem::rotary_sin, "rotary_sin", false},
};

using BwdField = TensorField<flashattn_bwd_params, AttnProblem>;
constexpr BwdField kBwdTensors[] = {
    {&flashattn_bwd_params::q, &AttnProblem::q, "q", true},
    {&flashattn_bwd_params::k, &AttnProblem::k, "k", true},
    {&flashattn_bwd_params::v, &AttnProblem::v, "v", true},
    {&flashattn_bwd_params::out, &AttnProblem::out, "out", true},
    {&flashattn_bwd_params::dout, &AttnProblem::dout, "dout", true},
    {&flashattn_bwd_params::lse, &AttnProblem::lse, "lse", true},
    {&flashattn_bwd_params::dq, &AttnProblem::dq, "dq", true},
    {&flashattn_bwd_params::dk, &AttnProblem::dk, "dk", true},
    {&flashattn_bwd_params::dv, &AttnProblem::dv, "dv", true},
    {&flashattn_bwd_params::cu_seqlens_q, &AttnProblem::cu_seqlens_q, "cu_seqlens_q", false},
    {&flashattn_bwd_params::cu_seqlens_k, &AttnProblem::cu_seqlens_k, "cu_seqlens_k", false},
    {&flashattn_bwd_params::seqused_k, &AttnProblem::seqused_k, "seqused_k", false},
};

using MergeField = TensorField<flashattn_merge_params, MergeProblem>;
constexpr MergeField kMergeTensors[] = {
    {&flashattn_merge_params::out_partial, &MergeProblem::out_partial, "out_partial", true},
    {&flashattn_merge_params::lse_partial, &MergeProblem::lse_partial, "lse_partial", true},
    {&flashattn_merge_params::out, &MergeProblem::out, "out", true},
    {&flashattn_merge_params::lse, &MergeProblem::lse, "lse", false},
};

// The gradient tensors of the backward: the dtype of q and the shape of their forward tensor.
void check_gradients(const AttnProblem& p) {
  expect_dtype(p.dout, "dout", p.q.dtype, "q");
  expect_same_shape(p.dout, "dout", p.out, "out");
  expect_dtype(p.dq, "dq", p.q.dtype, "q");
  expect_same_shape(p.dq, "dq", p.q, "q");
  expect_dtype(p.dk, "dk", p.q.dtype, "q");
  expect_same_shape(p.dk, "dk", p.k, "k");
  expect_dtype(p.dv, "dv", p.q.dtype, "q");
  expect_same_shape(p.dv, "dv", p.v, "v");
}

// The options, after the layouts they refer to (alibi_slopes is shaped by batch and heads_q).
ResolvedOptions take_options(const flashattn_attn_options& opts, const AttnProblem& p) {
  check_descriptor(opts.alibi_slopes, "opts.alibi_slopes", false);
  return resolve_options(opts, p);
}

// out [batch, seqlen_q, heads, d_v], or varlen [total_q, heads, d_v]: one run of total_q rows.
void resolve_merge_out(MergeProblem& m) {
  expect_float(m.out, "out");
  FA_CHECK_ARG(
      m.out.rank == 4 || m.out.rank == 3,
      "out: expected rank 4 [batch, seqlen_q, heads, d_v] or 3 [total_q, heads, d_v], got rank ",
      m.out.rank);
  m.varlen = m.out.rank == 3;
  const int64_t* shape = m.out.shape;
  m.batch = m.varlen ? 1 : shape[0];
  m.seqlen_q = m.varlen ? shape[0] : shape[1];
  m.heads = shape[m.out.rank - 2];
  m.d_v = shape[m.out.rank - 1];
}

// out_partial [splits, *out.shape], lse_partial f32 [splits, *lse shape], optional lse f32.
void check_merge_partials(MergeProblem& m) {
  expect_float(m.out_partial, "out_partial");
  FA_CHECK_ARG(m.out_partial.rank == m.out.rank + 1, "out_partial: expected rank ", m.out.rank + 1,
               " [splits, *out.shape], got rank ", m.out_partial.rank);
  m.splits = m.out_partial.shape[0];
  FA_CHECK_ARG(m.splits >= 1, "out_partial: expected splits = shape[0] >= 1, got ",
               shape_string(m.out_partial));
  FA_CHECK_ARG(std::equal(m.out.shape, m.out.shape + m.out.rank, m.out_partial.shape + 1),
               "out_partial: expected shape [splits, *out.shape] with out ", shape_string(m.out),
               ", got ", shape_string(m.out_partial));
  std::vector<Dim> lse = {{"heads", m.heads}, {"total_q", m.seqlen_q}};
  if (!m.varlen) lse = {{"batch", m.batch}, {"heads", m.heads}, {"seqlen_q", m.seqlen_q}};
  std::vector<Dim> lse_partial = lse;
  lse_partial.insert(lse_partial.begin(), Dim{"splits", m.splits});
  expect_dtype(m.lse_partial, "lse_partial", FLASHATTN_F32);
  expect_shape(m.lse_partial, "lse_partial", lse_partial);
  if (!m.lse.present()) return;
  expect_dtype(m.lse, "lse", FLASHATTN_F32);
  expect_shape(m.lse, "lse", lse);
}

}  // namespace

AttnProblem validate_fwd(const flashattn_fwd_params* params) {
  check_header(params, "flashattn_fwd_params");
  check_exec(params->exec);
  AttnProblem p;
  take_tensors(*params, kFwdTensors, p);
  p.rotary_interleaved = params->rotary_interleaved != 0;
  p.exec = params->exec;
  FA_CHECK_ARG(params->num_splits >= 0 && params->num_splits <= kMaxSplits,
               "num_splits: expected 0 (automatic) .. ", kMaxSplits, ", got ", params->num_splits);
  p.num_splits = params->num_splits;
  resolve_layouts(p, params->max_seqlen_q, params->max_seqlen_k);
  resolve_append(p);
  resolve_rotary(p);
  p.opts = take_options(params->opts, p);
  check_supported(p.q, "q");
  return p;
}

AttnProblem validate_bwd(const flashattn_bwd_params* params) {
  check_header(params, "flashattn_bwd_params");
  check_exec(params->exec);
  AttnProblem p;
  take_tensors(*params, kBwdTensors, p);
  p.deterministic = params->deterministic != 0;
  p.exec = params->exec;
  resolve_layouts(p, params->max_seqlen_q, params->max_seqlen_k);
  check_gradients(p);
  p.opts = take_options(params->opts, p);
  check_supported(p.q, "q");
  return p;
}

MergeProblem validate_merge(const flashattn_merge_params* params) {
  check_header(params, "flashattn_merge_params");
  check_exec(params->exec);
  MergeProblem m;
  take_tensors(*params, kMergeTensors, m);
  m.exec = params->exec;
  resolve_merge_out(m);
  check_merge_partials(m);
  check_supported(m.out_partial, "out_partial");
  check_supported(m.out, "out");
  return m;
}

void validate_host_contents(const AttnProblem& p) {
  check_varlen_contents(p);
  if (p.cache_seqlens.present()) check_cache_contents(p);
  if (p.kv_layout == KvLayout::Paged) check_block_table_contents(p);
  if (p.rotary_cos.present()) check_rotary_contents(p);
}

}  // namespace flashattn
