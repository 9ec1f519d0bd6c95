// Random attention problems in host memory, shared by the tests, the benchmarks and the flashattn
// program: buffers with guard bands and NaN-poisoned outputs, C params pointing at them, and the
// correctness rule of docs/semantics.md (error against the f64 reference versus the error of an
// unfused low-precision implementation). Uses only the public C API.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::testing {

// An owning host tensor. Its elements sit inside a guard band of known bytes, and its rows may be
// padded (strides larger than the shape) to exercise strided access.
class Buffer {
 public:
  Buffer() = default;
  // storage_order: the dims from outermost to innermost in memory (empty: row-major); the last dim
  // stays innermost, with row_pad elements of padding after each of its rows.
  Buffer(flashattn_dtype dtype, std::vector<int64_t> shape, int64_t row_pad = 0,
         std::vector<int> storage_order = {});
  Buffer(const Buffer& other);
  Buffer& operator=(const Buffer& other);
  Buffer(Buffer&&) = default;
  Buffer& operator=(Buffer&&) = default;

  bool present() const { return !storage_.empty(); }
  const flashattn_tensor& tensor() const { return tensor_; }  // absent (all zero) if !present()
  flashattn_dtype dtype() const { return tensor_.dtype; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int>& storage_order() const { return storage_order_; }
  int64_t numel() const;
  // Element by logical row-major index (strides applied), converted from / to double.
  double get(int64_t index) const;
  void set(int64_t index, double value);
  int32_t get_i32(int64_t index) const;
  void set_i32(int64_t index, int32_t value);

  void fill_random(uint64_t seed, double lo = -1.0, double hi = 1.0);
  void fill_normal(uint64_t seed);  // N(0, 1), as torch.randn
  void fill(double value);
  bool guards_intact() const;
  void* data() const { return tensor_.data; }
  // The whole allocation, guard bands included (device mirrors copy it as it is).
  unsigned char* storage() { return storage_.data(); }
  const unsigned char* storage() const { return storage_.data(); }
  size_t storage_bytes() const { return storage_.size(); }
  size_t guard_bytes() const { return guard_bytes_; }

 private:
  int64_t element_offset(int64_t index) const;
  // f(offset) for each element in row-major order, the offset resolved once per row (the last dim
  // has stride 1) instead of per element.
  template <class F>
  void for_each_offset(F f) const;
  // Every element set to next(), called in row-major order.
  template <class Next>
  void fill_each(Next next);
  void rebind();
  std::vector<unsigned char> storage_;
  std::vector<int64_t> shape_;
  std::vector<int> storage_order_;
  flashattn_tensor tensor_{};
  size_t guard_bytes_ = 0;
};

struct AttnCase {
  int64_t batch = 2, seqlen_q = 64, seqlen_k = 64;
  int64_t heads_q = 4, heads_kv = 4, d = 64;
  int64_t dv = 0;  // 0: same as d
  flashattn_dtype dtype = FLASHATTN_BF16;
  float softmax_scale = 0.f;  // 0: 1/sqrt(d)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool alibi = false;            // random slopes, [heads_q]
  bool alibi_per_batch = false;  // slopes [batch, heads_q]
  bool alibi_negative = false;   // slopes in [-0.15, -0.1] (scores grow with the distance)
  float dropout_p = 0.f;
  uint64_t dropout_seed = 0x1234, dropout_offset = 0;
  bool varlen = false;     // random lengths in [0, seqlen], one of them 0 when batch >= 3
  bool seqused_k = false;  // varlen: use fewer keys than stored
  bool kv_cache = false;   // dense KV cache of capacity seqlen_k with random cache_seqlens
  int64_t page_size = 0;   // > 0: paged KV cache (implies kv_cache), shuffled block table
  int64_t seqlen_new = 0;  // > 0: append this many new keys (implies kv_cache)
  int64_t rotary_dim = 0;  // > 0: rotary embedding of q and the new keys
  bool rotary_interleaved = false;
  bool lse = true;
  bool strided = false;  // pad rows of q/k/v/out/dout/dq/dk/dv
  // q/k/v/out/dout/dq/dk/dv stored heads before positions: (batch, heads, seqlen, d), as a
  // contiguous PyTorch tensor of that shape, or (heads, total, d) when packed (varlen), each a
  // strided view of the API's shape; paged caches keep their (page, slot, heads, d) storage.
  bool heads_major = false;
  int num_splits = 0;    // forward: the CUDA split-KV request (0 automatic, 1 off)
  uint64_t seed = 1;     // input data
  // q, the dense or varlen k / v, the new keys and dout drawn N(0, 1) (as torch.randn, the peers'
  // benchmarks) instead of uniformly in [-1, 1] (the tests' tolerances assume the latter). The
  // kernels' speed may follow the inputs (docs/performance.md, sm90a v79).
  bool normal_inputs = false;

  int64_t head_dim_v() const { return dv > 0 ? dv : d; }
  bool has_cache() const { return kv_cache || page_size > 0 || seqlen_new > 0; }
  std::string describe() const;
};

// All buffers of one case. Inputs random, outputs NaN, unused cache slots NaN (a kernel that
// reads them is caught). Copying deep-copies every buffer.
struct AttnData {
  AttnCase c;
  Buffer q, k, v, out, lse;
  Buffer cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, block_table;
  Buffer k_new, v_new, rotary_cos, rotary_sin, alibi_slopes;
  Buffer dout, dq, dk, dv;  // filled by prepare_backward()
  std::vector<int64_t> seqlens_q, seqlens_k;  // per sequence, keys after the append
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;

  flashattn_fwd_params fwd_params(flashattn_backend backend, int num_threads = 0) const;
  flashattn_bwd_params bwd_params(flashattn_backend backend, bool deterministic = false,
                                  int num_threads = 0) const;
  // Random dout, NaN dq/dk/dv. Requires a dense or varlen case (no KV cache).
  void prepare_backward();
  // Kept (query, key) pairs summed over the batch, times heads_q: the FLOP count's core.
  double kept_pairs() const;
};

// GoogleTest prints a case by its description instead of its bytes.
inline void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.describe(); }

AttnData make_attn_data(const AttnCase& c);

// Max |a - b| over all elements: infinity if either holds a NaN (an output never may) or if one
// holds an infinity the other does not. Shapes must match.
double max_abs_diff(const Buffer& a, const Buffer& b);
bool has_nan(const Buffer& b);

// One compared output under the rule: pass iff err <= factor * baseline + margin.
struct Check {
  std::string name;  // "out", "lse", "dq", ...
  double err = 0, baseline = 0, margin = 0, factor = 0;
  bool pass = false;
  std::string to_string() const;  // yes/no checks (factor 0) print "name: ok" or "name: FAIL"
};

// Runs the forward on `backend`, on CPU_REFERENCE (f64) and on CPU_REFERENCE_LOWP, each on its own
// copy of `data`, and checks out (factor 2) and lse (factor 2), guard bands and that every output
// element was written. Throws std::runtime_error if a call fails.
std::vector<Check> check_fwd(const AttnData& data, flashattn_backend backend, int num_threads = 0);

// True when this testing library can mirror buffers to a CUDA device and one is visible.
bool cuda_device_available();
// Same for the backward (dq, dk, dv; factor 3). `data` must have had prepare_backward().
std::vector<Check> check_bwd(const AttnData& data, flashattn_backend backend, bool deterministic = false,
                             int num_threads = 0);

// The checks of check_bwd for gradients `test` already computed from `data` (its q, k, v, out, lse
// and dout) by other means, e.g. a captured CUDA graph.
std::vector<Check> check_bwd_result(const AttnData& data, const AttnData& test);

// Runs the forward on `backend` for `data` in place; throws std::runtime_error with the status
// and message on failure. For the CUDA backends every buffer is mirrored to device memory
// (guard bands included), the call runs there, and every buffer is copied back.
void run_fwd(AttnData& data, flashattn_backend backend, int num_threads = 0);
void run_bwd(AttnData& data, flashattn_backend backend, bool deterministic = false, int num_threads = 0);

}  // namespace flashattn::testing
