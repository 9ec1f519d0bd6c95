// Random attention problems in host memory and the correctness rule (see attn_case.h).
#include "attn_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/dtype.h"
#include "core/score_mod.h"
#ifdef FLASHATTN_TESTING_CUDA
#include "device_mirror.h"
#endif

namespace flashattn::testing {
namespace {

// Bytes of known pattern on each side of a buffer: a whole number of 128-byte lines, so that a
// contiguous tensor's rows start where an allocator's would (64 put every 128-byte row across two
// lines, which cost the backward's loads a third more L2 sectors than an aligned caller's).
constexpr size_t kGuardBytes = 128;
constexpr unsigned char kGuardByte = 0xA5;  // neither a float zero nor a NaN pattern
constexpr int64_t kRowPad = 8;              // elements of padding per row in strided cases
constexpr double kRotaryBase = 10000.0;     // the usual RoPE frequency base
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMarginShift = 0.3;        // the margin is the rounding error of (x + 0.3) - 0.3

flashattn_tensor absent_tensor() {
  flashattn_tensor t;
  std::memset(&t, 0, sizeof t);
  return t;
}

}  // namespace

// ---- Buffer --------------------------------------------------------------------------------

Buffer::Buffer(flashattn_dtype dtype, std::vector<int64_t> shape, int64_t row_pad,
               std::vector<int> storage_order)
    : shape_(std::move(shape)), storage_order_(std::move(storage_order)), guard_bytes_(kGuardBytes) {
  tensor_ = absent_tensor();
  tensor_.dtype = dtype;
  tensor_.rank = int32_t(shape_.size());
  std::vector<int> dims(shape_.size());
  std::iota(dims.begin(), dims.end(), 0);
  if (storage_order_.empty()) storage_order_ = dims;
  if (!std::is_permutation(storage_order_.begin(), storage_order_.end(), dims.begin(), dims.end()) ||
      (!dims.empty() && storage_order_.back() != dims.back())) {
    throw std::invalid_argument("Buffer: storage_order must permute the dims and keep the last innermost");
  }
  int64_t stride = 1;
  for (int i = tensor_.rank - 1; i >= 0; --i) {
    const int dim = storage_order_[i];
    tensor_.shape[dim] = shape_[dim];
    tensor_.stride[dim] = stride;
    stride *= shape_[dim] + (dim == tensor_.rank - 1 ? row_pad : 0);
  }
  size_t bytes = size_t(std::max<int64_t>(stride, 1)) * flashattn_dtype_size(dtype);
  storage_.assign(bytes + 2 * guard_bytes_, kGuardByte);
  rebind();
}

Buffer::Buffer(const Buffer& other)
    : storage_(other.storage_), shape_(other.shape_), storage_order_(other.storage_order_),
      tensor_(other.tensor_), guard_bytes_(other.guard_bytes_) {
  rebind();
}

Buffer& Buffer::operator=(const Buffer& other) {
  storage_ = other.storage_;
  shape_ = other.shape_;
  storage_order_ = other.storage_order_;
  tensor_ = other.tensor_;
  guard_bytes_ = other.guard_bytes_;
  rebind();
  return *this;
}

void Buffer::rebind() { tensor_.data = storage_.empty() ? nullptr : storage_.data() + guard_bytes_; }

int64_t Buffer::numel() const {
  return std::accumulate(shape_.begin(), shape_.end(), int64_t(1), std::multiplies<int64_t>());
}

int64_t Buffer::element_offset(int64_t index) const {
  int64_t offset = 0;
  for (int dim = tensor_.rank - 1; dim >= 0; --dim) {
    offset += (index % shape_[dim]) * tensor_.stride[dim];
    index /= shape_[dim];
  }
  return offset;
}

double Buffer::get(int64_t index) const {
  return load_as_double(tensor_.data, tensor_.dtype, element_offset(index));
}

void Buffer::set(int64_t index, double value) {
  store_from_double(tensor_.data, tensor_.dtype, element_offset(index), value);
}

int32_t Buffer::get_i32(int64_t index) const {
  return static_cast<const int32_t*>(tensor_.data)[element_offset(index)];
}

void Buffer::set_i32(int64_t index, int32_t value) {
  static_cast<int32_t*>(tensor_.data)[element_offset(index)] = value;
}

template <class F>
void Buffer::for_each_offset(F f) const {
  const int64_t cols = shape_.empty() ? 1 : shape_.back();
  const int64_t rows = cols == 0 ? 0 : numel() / cols;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = element_offset(r * cols);
    for (int64_t j = 0; j < cols; ++j) f(row + j);
  }
}

template <class Next>
void Buffer::fill_each(Next next) {
  for_each_offset([&](int64_t offset) { store_from_double(tensor_.data, tensor_.dtype, offset, next()); });
}

void Buffer::fill_random(uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  fill_each([&] { return dist(rng); });
}

void Buffer::fill_normal(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  fill_each([&] { return dist(rng); });
}

void Buffer::fill(double value) {
  fill_each([&] { return value; });
}

bool Buffer::guards_intact() const {
  if (storage_.empty()) return true;
  for (size_t i = 0; i < guard_bytes_; ++i) {
    if (storage_[i] != kGuardByte || storage_[storage_.size() - 1 - i] != kGuardByte) return false;
  }
  return true;
}

// ---- AttnCase ------------------------------------------------------------------------------

std::string AttnCase::describe() const {
  std::ostringstream os;
  os << "b" << batch << "_sq" << seqlen_q << "_sk" << seqlen_k << "_h" << heads_q << "x" << heads_kv
     << "_d" << d;
  if (dv > 0 && dv != d) os << "_dv" << dv;
  os << "_" << flashattn_dtype_string(dtype);
  if (causal) os << "_causal";
  if (window_left >= 0 || window_right >= 0) {
    os << "_win" << (window_left < 0 ? std::string("inf") : std::to_string(window_left)) << "x"
       << (window_right < 0 ? std::string("inf") : std::to_string(window_right));
  }
  if (softmax_scale > 0) os << "_scale" << std::lround(softmax_scale * 100);  // in hundredths
  if (softcap > 0) os << "_softcap";
  if (alibi) os << (alibi_per_batch ? "_alibib" : "_alibi") << (alibi_negative ? "neg" : "");
  if (dropout_p > 0) os << "_drop" << int(dropout_p * 100);
  if (normal_inputs) os << "_normal";
  if (varlen) os << (seqused_k ? "_varlenused" : "_varlen");
  if (page_size > 0) os << "_paged" << page_size;
  else if (kv_cache) os << "_cache";
  if (seqlen_new > 0) os << "_new" << seqlen_new;
  if (rotary_dim > 0) os << "_rot" << rotary_dim << (rotary_interleaved ? "i" : "");
  if (!lse) os << "_nolse";
  if (strided) os << "_strided";
  if (heads_major) os << "_bhsd";
  if (num_splits > 0) os << "_split" << num_splits;
  return os.str();
}

// ---- AttnData ------------------------------------------------------------------------------

namespace {

Buffer make_i32(const std::vector<int64_t>& values) {
  Buffer b(FLASHATTN_I32, {int64_t(values.size())});
  for (size_t i = 0; i < values.size(); ++i) b.set_i32(int64_t(i), int32_t(values[i]));
  return b;
}

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) cu[i + 1] = cu[i] + lengths[i];
  return cu;
}

// Fills the first `used[b]` key slots of each sequence with random values and the rest with
// NaN, for a dense cache [batch, capacity, heads, d] (block_table absent) or a paged one.
void fill_cache(Buffer& cache, const std::vector<int64_t>& used, const Buffer& block_table,
                int64_t page_size, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  cache.fill(kNaN);
  const int64_t heads = cache.shape()[2], dim = cache.shape()[3];
  const int64_t row = heads * dim;
  for (size_t b = 0; b < used.size(); ++b) {
    for (int64_t j = 0; j < used[b]; ++j) {
      int64_t base;
      if (block_table.present()) {
        int64_t blocks = block_table.shape()[1];
        int64_t page = block_table.get_i32(int64_t(b) * blocks + j / page_size);
        base = (page * page_size + j % page_size) * row;
      } else {
        base = (int64_t(b) * cache.shape()[1] + j) * row;
      }
      for (int64_t e = 0; e < row; ++e) cache.set(base + e, dist(rng));
    }
  }
}

// An input tensor's draw: N(0, 1) with c.normal_inputs, else uniform in [-1, 1].
void fill_input(Buffer& b, const AttnCase& c, uint64_t seed) {
  if (c.normal_inputs) b.fill_normal(seed);
  else b.fill_random(seed);
}

}  // namespace

AttnData make_attn_data(const AttnCase& c) {
  AttnData data;
  data.c = c;
  std::mt19937_64 rng(c.seed);
  auto next_seed = [&] { return rng(); };
  auto uniform_int = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t B = c.batch, dv = c.head_dim_v(), pad = c.strided ? kRowPad : 0;
  const bool cache = c.has_cache();
  const bool varlen_k = c.varlen && !cache;
  if (cache && c.seqlen_new > c.seqlen_k) throw std::invalid_argument("seqlen_new > cache capacity");

  // Per-sequence lengths: the first sequence is full so that the maxima are reached.
  std::vector<int64_t> sq(B, c.seqlen_q), stored_k(B, c.seqlen_k), cache_len(B, 0);
  if (c.varlen) {
    for (int64_t b = 1; b < B; ++b) sq[b] = uniform_int(0, c.seqlen_q);
    if (B >= 3) sq[1] = 0;
    if (varlen_k) {
      for (int64_t b = 1; b < B; ++b) stored_k[b] = uniform_int(0, c.seqlen_k);
      if (B >= 3) stored_k[2] = 0;
    }
  }
  data.seqlens_q = sq;
  data.seqlens_k = stored_k;
  if (cache) {
    for (int64_t b = 0; b < B; ++b) {
      cache_len[b] = b == 0 ? c.seqlen_k - c.seqlen_new : uniform_int(0, c.seqlen_k - c.seqlen_new);
      data.seqlens_k[b] = cache_len[b] + c.seqlen_new;
    }
    data.cache_seqlens = make_i32(cache_len);
  }

  const int64_t total_q = std::accumulate(sq.begin(), sq.end(), int64_t(0));
  // The storage order of a (.., positions, heads, d) tensor: heads before positions with
  // c.heads_major, else row-major.
  auto order = [&](int rank) {
    std::vector<int> dims(rank);
    std::iota(dims.begin(), dims.end(), 0);
    if (c.heads_major) std::swap(dims[rank - 3], dims[rank - 2]);
    return dims;
  };
  if (c.varlen) {
    data.q = Buffer(c.dtype, {total_q, c.heads_q, c.d}, pad, order(3));
    data.out = Buffer(c.dtype, {total_q, c.heads_q, dv}, pad, order(3));
    if (c.lse) data.lse = Buffer(FLASHATTN_F32, {c.heads_q, total_q});
    data.cu_seqlens_q = make_i32(prefix_sums(sq));
  } else {
    data.q = Buffer(c.dtype, {B, c.seqlen_q, c.heads_q, c.d}, pad, order(4));
    data.out = Buffer(c.dtype, {B, c.seqlen_q, c.heads_q, dv}, pad, order(4));
    if (c.lse) data.lse = Buffer(FLASHATTN_F32, {B, c.heads_q, c.seqlen_q});
  }
  fill_input(data.q, c, next_seed());
  data.out.fill(kNaN);
  if (data.lse.present()) data.lse.fill(kNaN);

  if (varlen_k) {
    std::vector<int64_t> cu = prefix_sums(stored_k);
    data.k = Buffer(c.dtype, {cu.back(), c.heads_kv, c.d}, pad, order(3));
    data.v = Buffer(c.dtype, {cu.back(), c.heads_kv, dv}, pad, order(3));
    data.cu_seqlens_k = make_i32(cu);
    fill_input(data.k, c, next_seed());
    fill_input(data.v, c, next_seed());
    if (c.seqused_k) {
      std::vector<int64_t> used(B);
      for (int64_t b = 0; b < B; ++b) used[b] = b == 0 ? stored_k[b] : uniform_int(0, stored_k[b]);
      data.seqused_k = make_i32(used);
      data.seqlens_k = used;
    }
  } else if (c.page_size > 0) {
    const int64_t blocks_per_seq = (c.seqlen_k + c.page_size - 1) / c.page_size;
    const int64_t num_blocks = B * blocks_per_seq + 2;  // two blocks no sequence uses
    std::vector<int64_t> pages(num_blocks);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    data.block_table = Buffer(FLASHATTN_I32, {B, blocks_per_seq});
    for (int64_t i = 0; i < B * blocks_per_seq; ++i) data.block_table.set_i32(i, int32_t(pages[i]));
    data.k = Buffer(c.dtype, {num_blocks, c.page_size, c.heads_kv, c.d}, pad);
    data.v = Buffer(c.dtype, {num_blocks, c.page_size, c.heads_kv, dv}, pad);
    fill_cache(data.k, cache_len, data.block_table, c.page_size, rng);
    fill_cache(data.v, cache_len, data.block_table, c.page_size, rng);
  } else {
    data.k = Buffer(c.dtype, {B, c.seqlen_k, c.heads_kv, c.d}, pad, order(4));
    data.v = Buffer(c.dtype, {B, c.seqlen_k, c.heads_kv, dv}, pad, order(4));
    if (cache) {
      fill_cache(data.k, cache_len, Buffer(), 0, rng);
      fill_cache(data.v, cache_len, Buffer(), 0, rng);
    } else {
      fill_input(data.k, c, next_seed());
      fill_input(data.v, c, next_seed());
    }
  }

  if (c.seqlen_new > 0) {
    data.k_new = Buffer(c.dtype, {B, c.seqlen_new, c.heads_kv, c.d});
    data.v_new = Buffer(c.dtype, {B, c.seqlen_new, c.heads_kv, dv});
    fill_input(data.k_new, c, next_seed());
    fill_input(data.v_new, c, next_seed());
    if (c.rotary_dim > 0) {
      const int64_t half = c.rotary_dim / 2, positions = c.seqlen_k + c.seqlen_q;
      data.rotary_cos = Buffer(c.dtype, {positions, half});
      data.rotary_sin = Buffer(c.dtype, {positions, half});
      for (int64_t pos = 0; pos < positions; ++pos) {
        for (int64_t r = 0; r < half; ++r) {
          double angle = double(pos) * std::pow(kRotaryBase, -2.0 * double(r) / double(c.rotary_dim));
          data.rotary_cos.set(pos * half + r, std::cos(angle));
          data.rotary_sin.set(pos * half + r, std::sin(angle));
        }
      }
    }
  }

  if (c.alibi) {
    data.alibi_slopes = c.alibi_per_batch ? Buffer(FLASHATTN_F32, {B, c.heads_q})
                                          : Buffer(FLASHATTN_F32, {c.heads_q});
    if (c.alibi_negative) {
      data.alibi_slopes.fill_random(next_seed(), -0.15, -0.1);
    } else {
      data.alibi_slopes.fill_random(next_seed(), 0.05, 0.5);
    }
  }
  data.max_seqlen_q = B > 0 ? *std::max_element(sq.begin(), sq.end()) : 0;
  data.max_seqlen_k = B > 0 ? *std::max_element(data.seqlens_k.begin(), data.seqlens_k.end()) : 0;
  return data;
}

void AttnData::prepare_backward() {
  if (c.has_cache()) throw std::invalid_argument("the backward takes no KV cache");
  const int64_t pad = c.strided ? kRowPad : 0;
  auto like = [&](const Buffer& b) { return Buffer(b.dtype(), b.shape(), pad, b.storage_order()); };
  dout = like(out);
  fill_input(dout, c, c.seed ^ 0x5eedu);
  dq = like(q);
  dk = like(k);
  dv = like(v);
  dq.fill(kNaN);
  dk.fill(kNaN);
  dv.fill(kNaN);
  if (!lse.present()) {
    lse = c.varlen ? Buffer(FLASHATTN_F32, {c.heads_q, q.shape()[0]})
                   : Buffer(FLASHATTN_F32, {c.batch, c.heads_q, c.seqlen_q});
    lse.fill(kNaN);
  }
}

namespace {

void fill_options(const AttnCase& c, const AttnData& d, flashattn_attn_options* opts) {
  opts->softmax_scale = c.softmax_scale;
  opts->causal = c.causal;
  opts->window_left = c.window_left;
  opts->window_right = c.window_right;
  opts->softcap = c.softcap;
  opts->alibi_slopes = d.alibi_slopes.tensor();
  opts->dropout_p = c.dropout_p;
  opts->dropout_seed = c.dropout_seed;
  opts->dropout_offset = c.dropout_offset;
}

// The fields flashattn_fwd_params and flashattn_bwd_params share, by the same names.
template <class Params>
void fill_common(const AttnData& d, flashattn_backend backend, int num_threads, Params* p) {
  p->q = d.q.tensor();
  p->k = d.k.tensor();
  p->v = d.v.tensor();
  p->out = d.out.tensor();
  p->lse = d.lse.tensor();
  p->cu_seqlens_q = d.cu_seqlens_q.tensor();
  p->cu_seqlens_k = d.cu_seqlens_k.tensor();
  p->seqused_k = d.seqused_k.tensor();
  p->max_seqlen_q = d.c.varlen ? d.max_seqlen_q : 0;
  p->max_seqlen_k = d.cu_seqlens_k.present() ? d.max_seqlen_k : 0;
  fill_options(d.c, d, &p->opts);
  p->exec.backend = backend;
  p->exec.num_threads = num_threads;
}

}  // namespace

flashattn_fwd_params AttnData::fwd_params(flashattn_backend backend, int num_threads) const {
  flashattn_fwd_params p;
  flashattn_fwd_params_init(&p);
  fill_common(*this, backend, num_threads, &p);
  p.cache_seqlens = cache_seqlens.tensor();
  p.block_table = block_table.tensor();
  p.k_new = k_new.tensor();
  p.v_new = v_new.tensor();
  p.rotary_cos = rotary_cos.tensor();
  p.rotary_sin = rotary_sin.tensor();
  p.rotary_interleaved = c.rotary_interleaved;
  p.num_splits = c.num_splits;
  return p;
}

flashattn_bwd_params AttnData::bwd_params(flashattn_backend backend, bool deterministic,
                                          int num_threads) const {
  flashattn_bwd_params p;
  flashattn_bwd_params_init(&p);
  fill_common(*this, backend, num_threads, &p);
  p.dout = dout.tensor();
  p.dq = dq.tensor();
  p.dk = dk.tensor();
  p.dv = dv.tensor();
  p.deterministic = deterministic;
  return p;
}

double AttnData::kept_pairs() const {
  double pairs = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t q_len = seqlens_q[b], k_len = seqlens_k[b];
    ScoreMod<double> mod{1.0, 0.0, 0.0, k_len - q_len, k_len, c.window_left,
                         c.causal ? 0 : c.window_right};
    for (int64_t i = 0; i < q_len; ++i) pairs += double(std::max<int64_t>(0, mod.last_key(i) - mod.first_key(i)));
  }
  return pairs * double(c.heads_q);
}

// ---- running and checking ------------------------------------------------------------------

namespace {

void throw_on_failure(const char* call, flashattn_status status) {
  if (status != FLASHATTN_SUCCESS) {
    throw std::runtime_error(std::string(call) + ": " + flashattn_status_string(status) + ": " +
                             flashattn_last_error());
  }
}

// Runs `call` on params built from `data`, on device copies when the backend is a CUDA one.
template <class Params, class Call>
void run_on_backend([[maybe_unused]] AttnData& data, Params params, flashattn_backend backend, const char* name,
                    Call call) {
  if (backend != FLASHATTN_BACKEND_CUDA && backend != FLASHATTN_BACKEND_CUDA_SM80) {
    throw_on_failure(name, call(&params));
    return;
  }
#ifdef FLASHATTN_TESTING_CUDA
  DeviceMirror mirror(data);
  mirror.translate(&params);
  throw_on_failure(name, call(&params));
  mirror.download();
#else
  throw std::runtime_error("this testing library was built without CUDA: cannot run on device");
#endif
}

}  // namespace

bool cuda_device_available() {
#ifdef FLASHATTN_TESTING_CUDA
  flashattn_capabilities caps{};
  caps.struct_size = sizeof caps;
  return flashattn_get_capabilities(&caps) == FLASHATTN_SUCCESS && caps.cuda_device_count > 0;
#else
  return false;
#endif
}

void run_fwd(AttnData& data, flashattn_backend backend, int num_threads) {
  run_on_backend(data, data.fwd_params(backend, num_threads), backend, "flashattn_fwd",
                 [](const flashattn_fwd_params* p) { return flashattn_fwd(p); });
}

void run_bwd(AttnData& data, flashattn_backend backend, bool deterministic, int num_threads) {
  run_on_backend(data, data.bwd_params(backend, deterministic, num_threads), backend,
                 "flashattn_bwd", [](const flashattn_bwd_params* p) { return flashattn_bwd(p); });
}

double max_abs_diff(const Buffer& a, const Buffer& b) {
  if (a.shape() != b.shape()) throw std::invalid_argument("max_abs_diff: shapes differ");
  double worst = 0;
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    double x = a.get(i), y = b.get(i);
    if (x == y) continue;  // also equal infinities (lse of empty rows)
    double diff = std::fabs(x - y);
    if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, diff);
  }
  return worst;
}

bool has_nan(const Buffer& b) {
  for (int64_t i = 0, n = b.numel(); i < n; ++i) {
    if (std::isnan(b.get(i))) return true;
  }
  return false;
}

std::string Check::to_string() const {
  if (factor == 0) return name + (pass ? ": ok" : ": FAIL");  // a yes/no check
  std::ostringstream os;
  os << name << ": err " << err << " vs limit " << factor << " x " << baseline << " + " << margin
     << (pass ? " ok" : " FAIL");
  return os.str();
}

namespace {

// Twice the rounding error of the dtype at the scale of the reference values (computing
// (x + 0.3) - 0.3 in the dtype), so that outputs near zero are not held to an impossible bound.
double rounding_margin(const Buffer& reference, flashattn_dtype dtype) {
  double worst = 0;
  for (int64_t i = 0, n = reference.numel(); i < n; ++i) {
    double x = reference.get(i);
    if (!std::isfinite(x)) continue;
    double shifted = round_to_dtype(round_to_dtype(float(x + kMarginShift), dtype) - float(kMarginShift), dtype);
    worst = std::max(worst, std::fabs(shifted - x));
  }
  return 2 * worst;
}

Check compare(const std::string& name, const Buffer& test, const Buffer& ref, const Buffer& lowp,
              double factor) {
  Check check;
  check.name = name;
  check.factor = factor;
  check.err = has_nan(test) ? std::numeric_limits<double>::infinity() : max_abs_diff(test, ref);
  check.baseline = max_abs_diff(lowp, ref);
  check.margin = rounding_margin(ref, test.dtype());
  // A non-finite baseline (the low-precision run overflowed) would accept anything.
  check.pass = std::isfinite(check.baseline) && check.err <= factor * check.baseline + check.margin;
  return check;
}

Check flag(const std::string& name, bool ok) {
  Check check;
  check.name = name;
  check.pass = ok;
  return check;
}

bool bytes_equal(const Buffer& a, const Buffer& b) {
  if (a.present() != b.present()) return false;
  if (!a.present()) return true;
  // Identical storage is the common case and a memcmp away (multi-GB caches included); otherwise
  // compare values, to which NaNs of any payload are equal.
  if (a.storage_bytes() == b.storage_bytes() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
      std::memcmp(a.storage(), b.storage(), a.storage_bytes()) == 0) {
    return true;
  }
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    double x = a.get(i), y = b.get(i);
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
  }
  return true;
}

// The call's inputs are as they were (the KV cache excepted when an append writes it).
bool inputs_unchanged(const AttnData& before, const AttnData& after, bool forward) {
  std::vector<std::pair<const Buffer*, const Buffer*>> inputs = {
      {&before.q, &after.q}, {&before.cu_seqlens_q, &after.cu_seqlens_q},
      {&before.cu_seqlens_k, &after.cu_seqlens_k}, {&before.seqused_k, &after.seqused_k},
      {&before.cache_seqlens, &after.cache_seqlens}, {&before.block_table, &after.block_table},
      {&before.k_new, &after.k_new}, {&before.v_new, &after.v_new},
      {&before.rotary_cos, &after.rotary_cos}, {&before.rotary_sin, &after.rotary_sin},
      {&before.alibi_slopes, &after.alibi_slopes}};
  if (!forward || !before.k_new.present()) {
    inputs.push_back({&before.k, &after.k});
    inputs.push_back({&before.v, &after.v});
  }
  if (!forward) {
    for (auto pair : {std::make_pair(&before.out, &after.out), std::make_pair(&before.lse, &after.lse),
                      std::make_pair(&before.dout, &after.dout)}) {
      inputs.push_back(pair);
    }
  }
  for (const auto& [a, b] : inputs) {
    if (!bytes_equal(*a, *b)) return false;
  }
  return true;
}

bool guards_intact(const AttnData& d) {
  for (const Buffer* b : {&d.q, &d.k, &d.v, &d.out, &d.lse, &d.dq, &d.dk, &d.dv, &d.dout}) {
    if (!b->guards_intact()) return false;
  }
  return true;
}

constexpr double kFwdFactor = 2.0;  // docs/semantics.md: forward within 2x the low-precision error
constexpr double kBwdFactor = 3.0;  // gradients within 3x

}  // namespace

std::vector<Check> check_fwd(const AttnData& data, flashattn_backend backend, int num_threads) {
  AttnData ref = data, lowp = data, test = data;
  run_fwd(ref, FLASHATTN_BACKEND_CPU_REFERENCE);
  run_fwd(lowp, FLASHATTN_BACKEND_CPU_REFERENCE_LOWP);
  run_fwd(test, backend, num_threads);
  std::vector<Check> checks{compare("out", test.out, ref.out, lowp.out, kFwdFactor)};
  if (data.lse.present()) checks.push_back(compare("lse", test.lse, ref.lse, lowp.lse, kFwdFactor));
  checks.push_back(flag("guard bands", guards_intact(test)));
  checks.push_back(flag("inputs unchanged", inputs_unchanged(data, test, true)));
  if (data.k_new.present()) {
    checks.push_back(flag("appended cache", bytes_equal(test.k, ref.k) && bytes_equal(test.v, ref.v)));
  }
  return checks;
}

std::vector<Check> check_bwd_result(const AttnData& data, const AttnData& test) {
  AttnData ref = data, lowp = data;
  run_bwd(ref, FLASHATTN_BACKEND_CPU_REFERENCE);
  run_bwd(lowp, FLASHATTN_BACKEND_CPU_REFERENCE_LOWP);
  return {compare("dq", test.dq, ref.dq, lowp.dq, kBwdFactor),
          compare("dk", test.dk, ref.dk, lowp.dk, kBwdFactor),
          compare("dv", test.dv, ref.dv, lowp.dv, kBwdFactor),
          flag("guard bands", guards_intact(test)),
          flag("inputs unchanged", inputs_unchanged(data, test, false))};
}

std::vector<Check> check_bwd(const AttnData& data, flashattn_backend backend, bool deterministic,
                             int num_threads) {
  AttnData base = data;
  run_fwd(base, FLASHATTN_BACKEND_CPU_REFERENCE);  // out and lse every backward run shares
  AttnData test = base;
  run_bwd(test, backend, deterministic, num_threads);
  return check_bwd_result(base, test);
}

}  // namespace flashattn::testing
