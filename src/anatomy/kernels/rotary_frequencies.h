// rotary_frequencies.h: the rotary position embedding's frequencies and
// angles as Hugging Face computes them (ModernBertRotaryEmbedding: inv_freq =
// 1 / base^(arange(0, d, 2) / d) in float32, angle = position · inv_freq in
// float32, cos and sin of that float32 angle), shared by the CPU reference and
// the CUDA kernel so that both turn by the same floats.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace anatomy {

// f_i for i < d/2, float32 as torch computes base ** (float32(2i) / d) and its reciprocal.
inline std::vector<float> rotary_inverse_frequencies(double theta, int64_t d) {
  std::vector<float> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    f[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return f;
}

}  // namespace anatomy
