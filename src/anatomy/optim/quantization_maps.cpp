// quantization_maps.cpp: bitsandbytes' create_dynamic_map in float32.
#include "anatomy/optim/quantization_maps.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "anatomy/core/error.h"

namespace anatomy {

namespace {

// torch.linspace(start, end, steps, dtype=float32) on the CPU: a float32 step,
// the first half counted up from start and the second down from end, each
// element start + step·i rounded once (torch's kernel is built with fused
// multiply-adds: rounding the product first gives other bits at 42 of the
// signed map's entries).
std::vector<float> linspace_f32(float start, float end, int64_t steps) {
  const float step = (end - start) / static_cast<float>(steps - 1);
  std::vector<float> out(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i) {
    out[static_cast<size_t>(i)] = i < steps / 2 ? std::fma(step, static_cast<float>(i), start)
                                                : std::fma(-step, static_cast<float>(steps - i - 1), end);
  }
  return out;
}

}  // namespace

QuantizationMap dynamic_quantization_map(bool is_signed) {
  constexpr int kMaxExponentBits = 7, kNonSignBits = 7;  // total_bits = 8
  std::vector<float> data;
  for (int i = 0; i < kMaxExponentBits; ++i) {
    const int64_t fraction_items = (int64_t{1} << (i + kNonSignBits - kMaxExponentBits + (is_signed ? 0 : 1))) + 1;
    const std::vector<float> boundaries = linspace_f32(0.1f, 1.0f, fraction_items);
    // 10 ** (i - 6) is a Python number that torch applies to a float32 tensor as a float32.
    float scale = 1.0f;
    if (i < kMaxExponentBits - 1) {
      double power = 1.0;
      for (int k = i; k < kMaxExponentBits - 1; ++k) power *= 10.0;  // exact up to 10^6
      scale = static_cast<float>(1.0 / power);                        // the double 10^(i-6), rounded once
    }
    for (size_t k = 0; k + 1 < boundaries.size(); ++k) {
      const float sum = boundaries[k] + boundaries[k + 1];
      const float mean = sum / 2.0f;
      const float value = scale * mean;
      data.push_back(value);
      if (is_signed) data.push_back(-value);  // (-scale) * mean: the same magnitude
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  ANATOMY_CHECK(data.size() == 256, "dynamic_quantization_map: {} entries, expected 256", data.size());
  std::sort(data.begin(), data.end());
  QuantizationMap map;
  std::copy(data.begin(), data.end(), map.begin());
  return map;
}

}  // namespace anatomy
