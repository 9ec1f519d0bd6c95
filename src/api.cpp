// The C entry points: catch every internal failure at the ABI boundary, record its message in the
// thread-local slot and return its status. Validation always runs before dispatch.
#include <cmath>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/validate.h"
#include "dispatch.h"
#include "flashattn/flashattn.h"
#ifdef FLASHATTN_WITH_CUDA
#include "build_config.h"
#include "cuda/cuda_backend.h"
#endif

namespace {

template <class Fn>
flashattn_status guarded(Fn&& fn) {
  flashattn::clear_last_error();
  try {
    fn();
    return FLASHATTN_SUCCESS;
  } catch (const flashattn::Failure& failure) {
    flashattn::set_last_error(failure.message);
    return failure.status;
  } catch (const std::bad_alloc&) {
    flashattn::set_last_error("host memory allocation failed");
    return FLASHATTN_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    flashattn::set_last_error(std::string("internal error: ") + e.what());
    return FLASHATTN_INTERNAL_ERROR;
  } catch (...) {
    flashattn::set_last_error("internal error: unknown exception");
    return FLASHATTN_INTERNAL_ERROR;
  }
}

void init_exec(flashattn_exec* exec) { exec->device = -1; }

void init_options(flashattn_attn_options* opts) {
  opts->window_left = -1;
  opts->window_right = -1;
}

}  // namespace

extern "C" {

const char* flashattn_status_string(flashattn_status status) {
  switch (status) {
    case FLASHATTN_SUCCESS: return "SUCCESS";
    case FLASHATTN_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case FLASHATTN_NOT_SUPPORTED: return "NOT_SUPPORTED";
    case FLASHATTN_CUDA_ERROR: return "CUDA_ERROR";
    case FLASHATTN_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case FLASHATTN_INTERNAL_ERROR: return "INTERNAL_ERROR";
  }
  return "UNKNOWN_STATUS";
}

const char* flashattn_last_error(void) { return flashattn::last_error_message(); }

size_t flashattn_dtype_size(flashattn_dtype dtype) {
  switch (dtype) {
    case FLASHATTN_F32: return 4;
    case FLASHATTN_F16: return 2;
    case FLASHATTN_BF16: return 2;
    case FLASHATTN_E4M3: return 1;
    case FLASHATTN_I32: return 4;
    default: return 0;
  }
}

const char* flashattn_dtype_string(flashattn_dtype dtype) {
  switch (dtype) {
    case FLASHATTN_F32: return "f32";
    case FLASHATTN_F16: return "f16";
    case FLASHATTN_BF16: return "bf16";
    case FLASHATTN_E4M3: return "e4m3";
    case FLASHATTN_I32: return "i32";
    default: return "invalid";
  }
}

flashattn_tensor flashattn_make_tensor(void* data, flashattn_dtype dtype, int32_t rank,
                                       const int64_t* shape) {
  flashattn_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.rank = rank;
  if (rank < 0 || rank > FLASHATTN_MAX_RANK || shape == nullptr) return t;  // validation rejects it
  int64_t stride = 1;
  for (int32_t dim = rank - 1; dim >= 0; --dim) {
    t.shape[dim] = shape[dim];
    t.stride[dim] = stride;
    stride *= shape[dim];
  }
  return t;
}

void flashattn_fwd_params_init(flashattn_fwd_params* params) {
  if (params == nullptr) return;
  std::memset(params, 0, sizeof *params);
  params->struct_size = sizeof *params;
  init_options(&params->opts);
  init_exec(&params->exec);
}

void flashattn_bwd_params_init(flashattn_bwd_params* params) {
  if (params == nullptr) return;
  std::memset(params, 0, sizeof *params);
  params->struct_size = sizeof *params;
  init_options(&params->opts);
  init_exec(&params->exec);
}

void flashattn_merge_params_init(flashattn_merge_params* params) {
  if (params == nullptr) return;
  std::memset(params, 0, sizeof *params);
  params->struct_size = sizeof *params;
  init_exec(&params->exec);
}

flashattn_status flashattn_fwd(const flashattn_fwd_params* params) {
  return guarded([&] { flashattn::dispatch_fwd(flashattn::validate_fwd(params)); });
}

flashattn_status flashattn_bwd(const flashattn_bwd_params* params) {
  return guarded([&] { flashattn::dispatch_bwd(flashattn::validate_bwd(params)); });
}

flashattn_status flashattn_merge(const flashattn_merge_params* params) {
  return guarded([&] { flashattn::dispatch_merge(flashattn::validate_merge(params)); });
}

flashattn_status flashattn_fwd_workspace_size(const flashattn_fwd_params* params, size_t* bytes) {
  return guarded([&] {
    FA_CHECK_ARG(bytes != nullptr, "bytes: expected a non-null pointer, got NULL");
    *bytes = flashattn::fwd_workspace_size(flashattn::validate_fwd(params));
  });
}

flashattn_status flashattn_bwd_workspace_size(const flashattn_bwd_params* params, size_t* bytes) {
  return guarded([&] {
    FA_CHECK_ARG(bytes != nullptr, "bytes: expected a non-null pointer, got NULL");
    *bytes = flashattn::bwd_workspace_size(flashattn::validate_bwd(params));
  });
}

flashattn_status flashattn_get_capabilities(flashattn_capabilities* caps) {
  return guarded([&] {
    FA_CHECK_ARG(caps != nullptr, "caps: expected a non-null pointer, got NULL");
    FA_CHECK_ARG(caps->struct_size >= sizeof(flashattn_capabilities),
                 "caps->struct_size: expected sizeof(flashattn_capabilities)=",
                 sizeof(flashattn_capabilities), ", got ", caps->struct_size);
    size_t size = caps->struct_size;
    std::memset(caps, 0, sizeof *caps);
    caps->struct_size = size;
    caps->version_major = FLASHATTN_VERSION_MAJOR;
    caps->version_minor = FLASHATTN_VERSION_MINOR;
    caps->version_patch = FLASHATTN_VERSION_PATCH;
    caps->backends = (1u << FLASHATTN_BACKEND_CPU) | (1u << FLASHATTN_BACKEND_CPU_REFERENCE) |
                     (1u << FLASHATTN_BACKEND_CPU_REFERENCE_LOWP);
#ifdef FLASHATTN_WITH_CUDA
    caps->backends |= (1u << FLASHATTN_BACKEND_CUDA) | (1u << FLASHATTN_BACKEND_CUDA_SM80);
    for (int arch : kBuiltCudaArchs) {
      if (caps->num_cuda_archs < FLASHATTN_MAX_LIST) caps->cuda_archs[caps->num_cuda_archs++] = arch;
    }
    for (int i = 0; i < kNumBuiltHeadDims && i < FLASHATTN_MAX_LIST; ++i) {
      caps->head_dims[caps->num_head_dims++] = kBuiltHeadDims[i];
    }
    caps->cuda_dtypes = kBuiltCudaDtypes;
    caps->cuda_backward = kBuiltCudaBackward;
    caps->cuda_hopper_forward = kBuiltSm90Forward;
    caps->cuda_device_count = flashattn::cuda::device_count();
#endif
  });
}

const char* flashattn_version_string(void) {
#define FLASHATTN_STR2(x) #x
#define FLASHATTN_STR(x) FLASHATTN_STR2(x)
  return FLASHATTN_STR(FLASHATTN_VERSION_MAJOR) "." FLASHATTN_STR(FLASHATTN_VERSION_MINOR) "." FLASHATTN_STR(
      FLASHATTN_VERSION_PATCH);
#undef FLASHATTN_STR
#undef FLASHATTN_STR2
}

}  // extern "C"
