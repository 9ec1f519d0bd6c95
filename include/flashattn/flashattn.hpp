// flashattn C++ interface: a thin header over the C API. Params structs that initialise
// themselves, typed tensor views, and exceptions carrying the status and the library's message.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "flashattn/flashattn.h"

namespace flashattn {

// A failed call: the status and flashattn_last_error()'s message.
class Error : public std::runtime_error {
 public:
  Error(flashattn_status status, const std::string& message)
      : std::runtime_error(std::string(flashattn_status_string(status)) + ": " + message),
        status_(status) {}
  flashattn_status status() const { return status_; }

 private:
  flashattn_status status_;
};

inline void check(flashattn_status status) {
  if (status != FLASHATTN_SUCCESS) throw Error(status, flashattn_last_error());
}

// 16-bit element types with no arithmetic, for typed views of f16 / bf16 memory.
struct half {
  uint16_t bits;
};
struct bfloat16 {
  uint16_t bits;
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr flashattn_dtype value = FLASHATTN_F32;
};
template <>
struct dtype_of<half> {
  static constexpr flashattn_dtype value = FLASHATTN_F16;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr flashattn_dtype value = FLASHATTN_BF16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr flashattn_dtype value = FLASHATTN_I32;
};

// A contiguous (row-major) view; change .stride[] afterwards for strided memory.
inline flashattn_tensor tensor(void* data, flashattn_dtype dtype, std::initializer_list<int64_t> shape) {
  if (shape.size() > FLASHATTN_MAX_RANK) throw Error(FLASHATTN_INVALID_ARGUMENT, "tensor: rank too large");
  return flashattn_make_tensor(data, dtype, int32_t(shape.size()), shape.begin());
}

template <class T>
flashattn_tensor tensor(T* data, std::initializer_list<int64_t> shape) {
  return tensor(static_cast<void*>(const_cast<std::remove_const_t<T>*>(data)),
                dtype_of<std::remove_const_t<T>>::value, shape);
}

// Params with the C defaults already applied (flashattn_*_params_init).
struct FwdParams : flashattn_fwd_params {
  FwdParams() { flashattn_fwd_params_init(this); }
};
struct BwdParams : flashattn_bwd_params {
  BwdParams() { flashattn_bwd_params_init(this); }
};
struct MergeParams : flashattn_merge_params {
  MergeParams() { flashattn_merge_params_init(this); }
};

inline void fwd(const flashattn_fwd_params& params) { check(flashattn_fwd(&params)); }
inline void bwd(const flashattn_bwd_params& params) { check(flashattn_bwd(&params)); }
inline void merge(const flashattn_merge_params& params) { check(flashattn_merge(&params)); }

inline size_t fwd_workspace_size(const flashattn_fwd_params& params) {
  size_t bytes = 0;
  check(flashattn_fwd_workspace_size(&params, &bytes));
  return bytes;
}

inline size_t bwd_workspace_size(const flashattn_bwd_params& params) {
  size_t bytes = 0;
  check(flashattn_bwd_workspace_size(&params, &bytes));
  return bytes;
}

inline flashattn_capabilities capabilities() {
  flashattn_capabilities caps{};
  caps.struct_size = sizeof caps;
  check(flashattn_get_capabilities(&caps));
  return caps;
}

}  // namespace flashattn
