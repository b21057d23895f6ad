// dtype.cpp: dtype names and IEEE half-precision conversions.
#include "anatomy/core/dtype.h"

#include <cmath>

namespace anatomy {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  if (name == "F32") *out = DType::F32;
  else if (name == "F16") *out = DType::F16;
  else if (name == "BF16") *out = DType::BF16;
  else if (name == "I64") *out = DType::I64;
  else if (name == "U8") *out = DType::U8;
  else return false;
  return true;
}

float f16_to_float(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) value = std::ldexp(static_cast<float>(mantissa), -24);          // zero, subnormal
  else if (exponent == 31) value = mantissa ? NAN : INFINITY;
  else value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return sign ? -value : value;
}

uint16_t float_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {                                                // subnormal or zero
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    // Multiplying by 2^24 maps the subnormal grid onto integers; nearbyint rounds to even.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(magnitude * 16777216.0f)));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace anatomy
