// The CUDA entry points' shared host code: support checks, kernel params from a validated
// problem, the device guard and per-call scratch memory.
#include "cuda/launch_common.h"

#include <algorithm>
#include <cfloat>
#include <climits>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "build_config.h"

namespace flashattn::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kHeadDimMultiple = 8;  // rows move in 16-byte pieces of 8 16-bit elements

// Whether this build instantiated a kernel of the direction that serves head_dim and dtype
// (checked before anything runs, so that an unsupported call leaves every output untouched).
bool has_kernel(int64_t head_dim, flashattn_dtype dtype, bool backward) {
  if ((kBuiltCudaDtypes & (1u << dtype)) == 0) return false;
  if (backward && !kBuiltCudaBackward) return false;
  for (int i = 0; i < kNumBuiltHeadDims; ++i) {
    if (kBuiltHeadDims[i] >= head_dim) return true;
  }
  return false;
}

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail(FLASHATTN_CUDA_ERROR, what, ": ", cudaGetErrorString(err));
}

}  // namespace

void check_aligned(const View& t, const char* name) {
  constexpr int kAlignBytes = 16;
  const int64_t elements = kAlignBytes / int64_t(flashattn_dtype_size(t.dtype));
  FA_CHECK_SUPPORTED(reinterpret_cast<uintptr_t>(t.data) % kAlignBytes == 0, name,
                     ": the CUDA kernels need a 16-byte aligned data pointer, got ", t.data);
  for (int dim = 0; dim + 1 < t.rank; ++dim) {
    FA_CHECK_SUPPORTED(t.stride[dim] % elements == 0, name, ": the CUDA kernels need strides that are "
                       "multiples of ", elements, " elements (16 bytes), got stride[", dim, "]=",
                       t.stride[dim]);
  }
}

void check_int32(int64_t value, const char* what) {
  FA_CHECK_SUPPORTED(value <= INT32_MAX, what, ": the CUDA kernels take at most ", INT32_MAX,
                     ", got ", value);
}

// The kernels' softcap factor scale / softcap (softcap_tanh, softmax_sm80.h), once per call, or 0
// where the cap is off or bends no score in float, which the kernels then take as off. Under 2^-100
// (a cap past 2^100 x scale) tanh(dot in) = dot in to float precision for every |dot| under 2^88,
// and a subnormal factor would cost every score its precision; from 2^-100 a product dot x in falls
// under FLT_MIN, where the tanh may flush it, only for |dot| under 2^-26. Held at FLT_MAX (a cap
// under scale / FLT_MAX), which caps every dot product past 2^-124 whole either way and takes a
// zero one to 0 rather than 0 x inf.
float softcap_factor(float scale, float softcap) {
  if (softcap <= 0.f) return 0.f;
  const float in = scale / softcap;
  return in >= 0x1p-100f ? std::min(in, FLT_MAX) : 0.f;
}

void check_attention_supported(const AttnProblem& p, bool backward) {
  FA_CHECK_SUPPORTED(p.q.dtype == FLASHATTN_F16 || p.q.dtype == FLASHATTN_BF16,
                     "q: the CUDA kernels take f16 or bf16, got ", flashattn_dtype_string(p.q.dtype));
  // One instantiation serves d and d_v up to its head dim: Q/K columns past d and V columns past
  // d_v load as zeros, and only d (d_v) columns are stored.
  FA_CHECK_SUPPORTED(p.d % kHeadDimMultiple == 0 && p.d <= kMaxHeadDim,
                     "q: the CUDA kernels take head dims that are multiples of 8 up to ", kMaxHeadDim,
                     ", got d=", p.d);
  FA_CHECK_SUPPORTED(p.d_v % kHeadDimMultiple == 0 && p.d_v <= kMaxHeadDim,
                     "v: the CUDA kernels take head dims that are multiples of 8 up to ", kMaxHeadDim,
                     ", got d_v=", p.d_v);
  FA_CHECK_ARG(!p.varlen_q || p.seqlen_q > 0 || p.q.shape[0] == 0,
               "max_seqlen_q: the CUDA backend needs an upper bound of the query lengths, got 0");
  FA_CHECK_SUPPORTED(p.batch <= kMaxGridYZ && p.heads_q <= kMaxGridYZ,
                     "q: the CUDA grid holds at most ", kMaxGridYZ, " sequences and heads, got batch=",
                     p.batch, ", heads_q=", p.heads_q);
  check_int32(p.seqlen_q, p.varlen_q ? "max_seqlen_q" : "q: seqlen_q");
  check_int32(p.seqlen_k, "k: seqlen_k");
  if (p.kv_layout == KvLayout::Varlen) check_int32(p.k.shape[0], "k: total_k");
  check_int32(p.seqlen_new, "k_new: seqlen_new");
  check_int32(p.block_size, "k: block_size");
  const int device_count = cuda::device_count();
  FA_CHECK_ARG(p.exec.device < device_count, "exec.device: expected -1 or a device below ",
               device_count, ", got ", p.exec.device);
  check_aligned(p.q, "q");
  check_aligned(p.k, "k");
  check_aligned(p.v, "v");
  check_aligned(p.out, "out");
  const int64_t head_dim = std::max(p.d, p.d_v);
  FA_CHECK_SUPPORTED(has_kernel(head_dim, p.q.dtype, backward), "q: no CUDA ",
                     backward ? "backward" : "forward", " kernel for head dim ", head_dim,
                     " and dtype ", flashattn_dtype_string(p.q.dtype),
                     " in this build (see FLASHATTN_HEAD_DIMS / FLASHATTN_DTYPES",
                     backward ? " / FLASHATTN_CUDA_BACKWARD)" : ")");
}

FwdParams make_fwd_params(const AttnProblem& p) {
  FwdParams k{};
  k.q = p.q.data;
  k.k = p.k.data;
  k.v = p.v.data;
  k.out = p.out.data;
  k.lse = static_cast<float*>(p.lse.data);
  auto strides3 = [](const View& t, int64_t* batch, int64_t* row, int64_t* head) {
    if (t.rank == 4) {
      *batch = t.stride[0], *row = t.stride[1], *head = t.stride[2];
    } else {  // varlen: [total, heads, d]
      *batch = 0, *row = t.stride[0], *head = t.stride[1];
    }
  };
  strides3(p.q, &k.q_batch_stride, &k.q_row_stride, &k.q_head_stride);
  strides3(p.k, &k.k_batch_stride, &k.k_row_stride, &k.k_head_stride);
  strides3(p.v, &k.v_batch_stride, &k.v_row_stride, &k.v_head_stride);
  strides3(p.out, &k.out_batch_stride, &k.out_row_stride, &k.out_head_stride);
  if (p.lse.present()) {
    if (p.lse.rank == 3) {
      k.lse_batch_stride = p.lse.stride[0], k.lse_head_stride = p.lse.stride[1], k.lse_row_stride = p.lse.stride[2];
    } else {
      k.lse_batch_stride = 0, k.lse_head_stride = p.lse.stride[0], k.lse_row_stride = p.lse.stride[1];
    }
  }
  k.cu_seqlens_q = p.cu_seqlens_q.as<const int32_t>();
  k.cu_seqlens_k = p.cu_seqlens_k.as<const int32_t>();
  k.seqused_k = p.seqused_k.as<const int32_t>();
  k.cache_seqlens = p.cache_seqlens.as<const int32_t>();
  k.block_table = p.block_table.as<const int32_t>();
  k.block_table_stride = p.block_table.present() ? p.block_table.stride[0] : 0;
  k.block_size = int(p.block_size);
  k.batch = int(p.batch);
  k.heads_q = int(p.heads_q);
  k.group = int(p.heads_q / p.heads_kv);
  k.d = int(p.d);
  k.d_v = int(p.d_v);
  k.seqlen_q = int(p.seqlen_q);
  k.seqlen_k = int(p.seqlen_k);
  k.seqlen_new = int(p.seqlen_new);
  k.scale = p.opts.scale;
  // The kernels take c log2(e) as one factor (apply_score_mods): a cap held at 2^126 keeps it
  // finite. A larger one bends only scores past 2^114 (in float tanh(s / c) c = s while |s| / c <
  // 2^-12), and rows with such scores put all their weight on their largest either way.
  k.softcap = std::min(p.opts.softcap, 0x1p126f);
  k.softcap_in = softcap_factor(k.scale, k.softcap);
  k.window_left = int(p.opts.window_left);
  k.window_right = int(p.opts.window_right);
  k.alibi_slopes = p.opts.alibi_slopes.as<const float>();
  k.alibi_batch_stride = p.opts.alibi_slopes.rank == 2 ? p.opts.alibi_slopes.stride[0] : 0;
  if (p.has_append()) {
    k.k_new = p.k_new.data;
    k.v_new = p.v_new.data;
    strides3(p.k_new, &k.k_new_batch_stride, &k.k_new_row_stride, &k.k_new_head_stride);
    strides3(p.v_new, &k.v_new_batch_stride, &k.v_new_row_stride, &k.v_new_head_stride);
  }
  if (p.rotary_cos.present()) {
    k.rotary_cos = p.rotary_cos.data;
    k.rotary_sin = p.rotary_sin.data;
    k.rotary_row_stride = p.rotary_cos.stride[0];
    k.rotary_dim = int(p.rotary_dim);
    k.rotary_interleaved = p.rotary_interleaved;
    k.rotary_f32 = p.rotary_cos.dtype == FLASHATTN_F32;
  }
  k.dropout_threshold = p.opts.dropout_threshold;
  k.dropout_scale = p.opts.dropout_p > 0.f ? 1.f / (1.f - p.opts.dropout_p) : 1.f;
  k.dropout_seed = p.opts.dropout_seed;
  k.dropout_offset = p.opts.dropout_offset;
  k.pack_gqa = 1;
  k.num_splits = 1;
  return k;
}

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  else previous_ = -1;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

int device_attribute(cudaDeviceAttr attribute, int device, const char* what) {
  if (device < 0) cudaGetDevice(&device);
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) {
    cudaGetLastError();
    fail(FLASHATTN_CUDA_ERROR, "exec.device: cannot read the ", what, " of device ", device);
  }
  return value;
}

Scratch::Scratch(const flashattn_exec& exec, size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (bytes == 0) return;
  if (exec.workspace != nullptr) {
    FA_CHECK_ARG(exec.workspace_size >= bytes, "exec.workspace_size: this call needs ", bytes,
                 " bytes of workspace (see the *_workspace_size query), got ", exec.workspace_size);
    FA_CHECK_ARG(reinterpret_cast<uintptr_t>(exec.workspace) % kWorkspaceAlign == 0,
                 "exec.workspace: expected a ", kWorkspaceAlign, "-byte aligned pointer, got ",
                 exec.workspace);
    data_ = exec.workspace;
    return;
  }
  check_cuda(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync (workspace)");
  owned_ = true;
}

Scratch::~Scratch() {
  if (owned_) cudaFreeAsync(data_, stream_);
}

}  // namespace flashattn::cuda
