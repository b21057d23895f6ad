// dtype.h: element types of tensors and the conversions between the 16-bit
// floating formats and float32 (round to nearest even, as PyTorch does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace anatomy {

enum class DType { F32, F16, BF16, I64, U8 };  // U8: quantized optimizer states

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

// Names as safetensors spells them.
std::string_view dtype_name(DType t);
// Parses a safetensors dtype name; returns false for names the engine does not handle.
bool parse_dtype(std::string_view name, DType* out);

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

}  // namespace anatomy
