// Element types: IEEE half and bfloat16 conversions (round to nearest even) and typed loads and
// stores through a run-time dtype, used by the CPU backends and the tests.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"
#include "flashattn/flashattn.h"

namespace flashattn {

FA_HD float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

FA_HD uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

FA_HD float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

FA_HD uint16_t float_to_bf16(float f) {
  uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding_bias) >> 16);
}

FA_HD float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf/NaN
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_float(sign);
    // Subnormal half: value = mantissa * 2^-24, exact in float.
    float magnitude = float(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

FA_HD uint16_t float_to_f16(float f) {
  uint32_t bits = float_to_bits(f);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs_bits >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs_bits < 0x38800000u) {
    // Result is subnormal (or zero) in half: units of 2^-24, rounded to nearest even.
    float magnitude = bits_to_float(abs_bits) * 16777216.0f;
    uint32_t units = uint32_t(magnitude);
    float remainder = magnitude - float(units);
    if (remainder > 0.5f || (remainder == 0.5f && (units & 1u))) ++units;
    return uint16_t(sign | units);
  }
  uint32_t exponent = (abs_bits >> 23) - 112u;
  uint32_t mantissa = abs_bits & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // carries into exponent
  return uint16_t(sign | half);
}

// Reads element `index` (in elements from `base`) of a float-typed tensor as double.
inline double load_as_double(const void* base, flashattn_dtype dtype, int64_t index) {
  switch (dtype) {
    case FLASHATTN_F32: return static_cast<const float*>(base)[index];
    case FLASHATTN_F16: return f16_to_float(static_cast<const uint16_t*>(base)[index]);
    case FLASHATTN_BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    default: return 0.0;
  }
}

inline float load_as_float(const void* base, flashattn_dtype dtype, int64_t index) {
  return float(load_as_double(base, dtype, index));
}

// Writes `value` rounded to the tensor's float dtype.
inline void store_from_double(void* base, flashattn_dtype dtype, int64_t index, double value) {
  switch (dtype) {
    case FLASHATTN_F32: static_cast<float*>(base)[index] = float(value); break;
    case FLASHATTN_F16: static_cast<uint16_t*>(base)[index] = float_to_f16(float(value)); break;
    case FLASHATTN_BF16: static_cast<uint16_t*>(base)[index] = float_to_bf16(float(value)); break;
    default: break;
  }
}

// The value a float passes through when stored in dtype (used to emulate low-precision math).
inline float round_to_dtype(float value, flashattn_dtype dtype) {
  switch (dtype) {
    case FLASHATTN_F16: return f16_to_float(float_to_f16(value));
    case FLASHATTN_BF16: return bf16_to_float(float_to_bf16(value));
    default: return value;
  }
}

}  // namespace flashattn
