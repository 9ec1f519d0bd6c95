/* flashattn: exact attention (FlashAttention algorithm), forward and backward, behind a plain C ABI.
 * Every entry point validates its arguments before touching memory and returns a status; on
 * failure the outputs are untouched and flashattn_last_error() names the argument at fault. */
#ifndef FLASHATTN_FLASHATTN_H
#define FLASHATTN_FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(FLASHATTN_BUILDING)
#    define FLASHATTN_API __declspec(dllexport)
#  else
#    define FLASHATTN_API __declspec(dllimport)
#  endif
#else
#  define FLASHATTN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0

/* ---- status ------------------------------------------------------------------------------- */
typedef enum flashattn_status {
  FLASHATTN_SUCCESS = 0,
  FLASHATTN_INVALID_ARGUMENT = 1, /* the request is malformed (shape, dtype, stride, pointer, ...) */
  FLASHATTN_NOT_SUPPORTED = 2,    /* a valid request this build or device cannot serve */
  FLASHATTN_CUDA_ERROR = 3,       /* the CUDA runtime reported an error */
  FLASHATTN_OUT_OF_MEMORY = 4,    /* host or device allocation failed */
  FLASHATTN_INTERNAL_ERROR = 5    /* a bug in flashattn: please report it */
} flashattn_status;

/* A static string naming the status ("INVALID_ARGUMENT"). Never NULL. */
FLASHATTN_API const char* flashattn_status_string(flashattn_status status);

/* The message of the last failed call on this thread ("" if none), e.g.
 * "k: heads_kv=5 does not divide heads_q=32". Valid until the next flashattn call on this thread. */
FLASHATTN_API const char* flashattn_last_error(void);

/* ---- tensors ------------------------------------------------------------------------------ */
typedef enum flashattn_dtype {
  FLASHATTN_DTYPE_INVALID = 0,
  FLASHATTN_F32 = 1,
  FLASHATTN_F16 = 2,
  FLASHATTN_BF16 = 3,
  FLASHATTN_E4M3 = 4, /* fp8 e4m3: reserved for later kernels, rejected with NOT_SUPPORTED today */
  FLASHATTN_I32 = 5
} flashattn_dtype;

#define FLASHATTN_MAX_RANK 5

/* A strided view of memory. Strides are in elements; the last dimension must have stride 1.
 * A tensor with data == NULL and rank == 0 (all zero, as flashattn_*_params_init leaves it) is
 * "absent": optional inputs and outputs are skipped when absent. */
typedef struct flashattn_tensor {
  void* data;
  flashattn_dtype dtype;
  int32_t rank;
  int64_t shape[FLASHATTN_MAX_RANK];
  int64_t stride[FLASHATTN_MAX_RANK];
} flashattn_tensor;

/* Size in bytes of one element of dtype (0 for FLASHATTN_DTYPE_INVALID). */
FLASHATTN_API size_t flashattn_dtype_size(flashattn_dtype dtype);
/* A static lowercase name ("bf16"). */
FLASHATTN_API const char* flashattn_dtype_string(flashattn_dtype dtype);

/* Fills a contiguous (row-major) descriptor of the given rank and shape. */
FLASHATTN_API flashattn_tensor flashattn_make_tensor(void* data, flashattn_dtype dtype, int32_t rank,
                                                     const int64_t* shape);

/* ---- where work runs ---------------------------------------------------------------------- */
typedef enum flashattn_backend {
  FLASHATTN_BACKEND_AUTO = 0,          /* CUDA if q is device memory and CUDA is built in, else CPU */
  FLASHATTN_BACKEND_CPU = 1,           /* tiled online-softmax, multi-threaded, f32 accumulation */
  FLASHATTN_BACKEND_CPU_REFERENCE = 2, /* naive, f64 accumulation: the reference of every test */
  FLASHATTN_BACKEND_CUDA = 3,          /* the device's fastest kernels: the sm90a forward on compute
                                        * capability 9.0 where it serves the call, sm80 otherwise */
  /* The naive backend with the roundings of an unfused low-precision implementation (scores,
   * probabilities, gradients and outputs rounded to the input dtype, as a framework computing
   * attention in f16/bf16 does). Slow; its error against CPU_REFERENCE is the baseline of the
   * correctness rule in docs/semantics.md. */
  FLASHATTN_BACKEND_CPU_REFERENCE_LOWP = 4,
  /* The CUDA backend restricted to its portable sm80 kernels, also where faster ones exist (the
   * Hopper forward on sm90): for comparison and testing. */
  FLASHATTN_BACKEND_CUDA_SM80 = 5
} flashattn_backend;

/* How a call executes. The *_params_init defaults: automatic backend, current CUDA device, all
 * hardware threads, the CUDA legacy default stream, no caller workspace. */
typedef struct flashattn_exec {
  flashattn_backend backend;
  int32_t device;        /* CUDA backend: device ordinal; -1 (the init default) = current device */
  int32_t num_threads;   /* CPU backends: worker threads, 0 = hardware concurrency */
  void* stream;          /* CUDA backend: a cudaStream_t; all work is enqueued on it */
  void* workspace;       /* scratch memory of at least the size the *_workspace_size query gives */
  size_t workspace_size; /* bytes available at workspace */
} flashattn_exec;

/* ---- options shared by forward and backward ------------------------------------------------ */
typedef struct flashattn_attn_options {
  float softmax_scale;  /* 0 means 1/sqrt(d) */
  int32_t causal;       /* nonzero: window_right = 0 (with window_left -1: the window (-1, 0)) */
  int64_t window_left;  /* keys kept: i + off - left <= j <= i + off + right; -1 (or >= 2^31) */
  int64_t window_right; /* = unbounded; off = seqlen_k - seqlen_q (bottom-right alignment) */
  float softcap;        /* > 0: s = softcap * tanh(s / softcap); 0 = off */
  flashattn_tensor alibi_slopes; /* optional f32 [heads_q] or [batch, heads_q] */
  float dropout_p;      /* in [0, 1): probability of dropping an attention weight */
  uint64_t dropout_seed;
  uint64_t dropout_offset;
} flashattn_attn_options;

/* ---- forward ------------------------------------------------------------------------------ */
/* One entry point for dense, varlen, KV cache (dense or paged) and KV-cache append.
 *   dense : q [batch, seqlen_q, heads_q, d], k [batch, seqlen_k, heads_kv, d],
 *           v [batch, seqlen_k, heads_kv, d_v], out [batch, seqlen_q, heads_q, d_v],
 *           lse f32 [batch, heads_q, seqlen_q]
 *   varlen: q [total_q, heads_q, d] with cu_seqlens_q i32 [batch+1]; lse f32 [heads_q, total_q];
 *           k/v [total_k, heads_kv, d] with cu_seqlens_k i32 [batch+1] and optional seqused_k
 *   cache : k/v [batch, seqlen_cache, heads_kv, d] with cache_seqlens i32 [batch], or paged
 *           k/v [num_blocks, block_size, heads_kv, d] with block_table i32 [batch, max_blocks]
 *           (v's last dimension: d_v)
 *   append: k_new/v_new [batch, seqlen_new, heads_kv, d] (v_new: d_v) written into the cache at
 *           cache_seqlens
 *           (rotated by rotary_cos/sin [seqlen_ro, rotary_dim/2] if given) before attention. */
typedef struct flashattn_fwd_params {
  size_t struct_size; /* sizeof(flashattn_fwd_params): set by flashattn_fwd_params_init */
  flashattn_tensor q, k, v, out;
  flashattn_tensor lse; /* optional output */
  /* varlen */
  flashattn_tensor cu_seqlens_q, cu_seqlens_k, seqused_k;
  int64_t max_seqlen_q; /* varlen: an upper bound of the sequence lengths; required for CUDA */
  int64_t max_seqlen_k;
  /* KV cache */
  flashattn_tensor cache_seqlens, block_table;
  flashattn_tensor k_new, v_new;
  flashattn_tensor rotary_cos, rotary_sin; /* f32 or q's dtype, both the same */
  int32_t rotary_interleaved; /* nonzero: rotate pairs (2r, 2r+1); else (r, r + rotary_dim/2) */
  flashattn_attn_options opts;
  flashattn_exec exec;
  /* CUDA split-KV (dense q): CTAs that share one query tile's keys, their partial results merged
   * as flashattn_merge does. 0 = chosen from the problem size and the SM count, 1 = off, at most
   * 128. The CPU backends ignore it. */
  int32_t num_splits;
} flashattn_fwd_params;

/* Zeroes *params, sets struct_size and the defaults (window -1/-1, exec.device -1).
 * Always call it first. */
FLASHATTN_API void flashattn_fwd_params_init(flashattn_fwd_params* params);
FLASHATTN_API flashattn_status flashattn_fwd(const flashattn_fwd_params* params);
FLASHATTN_API flashattn_status flashattn_fwd_workspace_size(const flashattn_fwd_params* params,
                                                            size_t* bytes);

/* ---- backward ----------------------------------------------------------------------------- */
/* Dense or varlen (same layouts as forward; no KV cache). Takes the forward's out and lse and
 * writes dq, dk, dv (for GQA, dk/dv sum over the query heads of a group). */
typedef struct flashattn_bwd_params {
  size_t struct_size; /* sizeof(flashattn_bwd_params): set by flashattn_bwd_params_init */
  flashattn_tensor q, k, v, out, dout, lse;
  flashattn_tensor dq, dk, dv;
  flashattn_tensor cu_seqlens_q, cu_seqlens_k, seqused_k;
  int64_t max_seqlen_q, max_seqlen_k;
  int32_t deterministic; /* nonzero: bitwise-reproducible gradients */
  flashattn_attn_options opts;
  flashattn_exec exec;
} flashattn_bwd_params;

FLASHATTN_API void flashattn_bwd_params_init(flashattn_bwd_params* params);
FLASHATTN_API flashattn_status flashattn_bwd(const flashattn_bwd_params* params);
FLASHATTN_API flashattn_status flashattn_bwd_workspace_size(const flashattn_bwd_params* params,
                                                            size_t* bytes);

/* ---- merge -------------------------------------------------------------------------------- */
/* Combines attention computed over disjoint key sets: out_partial [splits, ...out shape],
 * lse_partial f32 [splits, ...lse shape] into out and (optional) lse, where out is
 * [batch, seqlen_q, heads, d_v] with lse [batch, heads, seqlen_q], or [total_q, heads, d_v] with
 * lse [heads, total_q]. A row whose every partial lse is -inf gives out 0 and lse -inf. */
typedef struct flashattn_merge_params {
  size_t struct_size; /* sizeof(flashattn_merge_params): set by flashattn_merge_params_init */
  flashattn_tensor out_partial, lse_partial;
  flashattn_tensor out, lse;
  flashattn_exec exec;
} flashattn_merge_params;

FLASHATTN_API void flashattn_merge_params_init(flashattn_merge_params* params);
FLASHATTN_API flashattn_status flashattn_merge(const flashattn_merge_params* params);

/* ---- build and device information ---------------------------------------------------------- */
#define FLASHATTN_MAX_LIST 16
typedef struct flashattn_capabilities {
  size_t struct_size;            /* set by the caller to sizeof(flashattn_capabilities) */
  int32_t version_major, version_minor, version_patch;
  uint32_t backends;             /* bit (1u << flashattn_backend) for each backend built in */
  int32_t num_cuda_archs;        /* compute capabilities compiled in, e.g. 80, 90 (90a reports 90) */
  int32_t cuda_archs[FLASHATTN_MAX_LIST];
  int32_t num_head_dims;         /* head dims the CUDA kernels serve (the build's FLASHATTN_HEAD_DIMS) */
  int32_t head_dims[FLASHATTN_MAX_LIST];
  uint32_t cuda_dtypes;          /* bit (1u << flashattn_dtype) for each CUDA kernel dtype */
  int32_t cuda_backward;         /* nonzero if CUDA backward kernels are built */
  int32_t cuda_device_count;     /* devices visible now (0 without CUDA or without a GPU) */
  int32_t cuda_hopper_forward;   /* nonzero if the sm90a forward is built (used on compute
                                  * capability 9.0 GPUs; needs 90a in FLASHATTN_CUDA_ARCHS) */
} flashattn_capabilities;

FLASHATTN_API flashattn_status flashattn_get_capabilities(flashattn_capabilities* caps);
/* "0.1.0" */
FLASHATTN_API const char* flashattn_version_string(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHATTN_FLASHATTN_H */
