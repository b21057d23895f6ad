// adamw_8bit.cpp: the CPU reference of bitsandbytes' block-wise 8-bit AdamW
// (semantics in backend.h). Block by block of kAdam8bitBlock elements: both
// moments dequantized (map[byte] · absmax), the AdamW update in double exactly
// as CpuBackend::adamw_loop computes it (so with states that quantize exactly
// the 8-bit and fp32 optimizers give the same bits), then each moment
// re-quantized against its block's new absmax.
#include <algorithm>
#include <cmath>

#include "anatomy/core/dtype.h"
#include "anatomy/kernels/cpu/optimizer_kernels.h"
#include "anatomy/kernels/quantize_8bit.h"

namespace anatomy::cpu {

void adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                    const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                    const AdamWHyper& hp, const Tensor* half_copy) {
  const int64_t n = param.numel();
  const int64_t blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
  ANATOMY_CHECK(param.dtype() == DType::F32 && grad.dtype() == DType::F32 && grad.numel() == n,
                "adamw8bit_step: {} and its gradient must be float32 of one size", param.name());
  ANATOMY_CHECK(state1.dtype() == DType::U8 && state2.dtype() == DType::U8 && state1.numel() == n &&
                    state2.numel() == n,
                "adamw8bit_step: states of {} must be uint8 [{}]", param.name(), n);
  ANATOMY_CHECK(absmax1.dtype() == DType::F32 && absmax2.dtype() == DType::F32 && absmax1.numel() == blocks &&
                    absmax2.numel() == blocks,
                "adamw8bit_step: absmax of {} must be float32 [{}]", param.name(), blocks);
  ANATOMY_CHECK(qmap1.numel() == kQuantizationMapSize && qmap2.numel() == kQuantizationMapSize &&
                    qmap1.dtype() == DType::F32 && qmap2.dtype() == DType::F32,
                "adamw8bit_step: quantization maps must be float32 [256]");
  ANATOMY_CHECK(!half_copy || (half_copy->numel() == n && (half_copy->dtype() == DType::BF16 ||
                                                            half_copy->dtype() == DType::F16)),
                "adamw8bit_step: the 16-bit copy of {} must be BF16/F16 [{}]", param.name(), n);

  // The constants as CpuBackend::adamw_loop (and the CUDA adamw_constants) form them.
  const double bias1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bias2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  const double step_size = hp.lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  const double decay = 1.0 - hp.lr * hp.weight_decay;
  const float gs = static_cast<float>(hp.grad_scale);

  float* p = param.data<float>();
  const float* g = grad.data<float>();
  uint8_t* s1 = state1.data<uint8_t>();
  uint8_t* s2 = state2.data<uint8_t>();
  float* a1 = absmax1.data<float>();
  float* a2 = absmax2.data<float>();
  const float* map1 = qmap1.data<float>();
  const float* map2 = qmap2.data<float>();
  float m[kAdam8bitBlock], v[kAdam8bitBlock];

  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kAdam8bitBlock, count = std::min(kAdam8bitBlock, n - begin);
    float max1 = 0.0f, max2 = 0.0f;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t i = begin + j;
      const float m_old = map1[s1[i]] * a1[b], v_old = map2[s2[i]] * a2[b];
      // adamw_loop's body, operation for operation.
      const double gi = g[i] * gs;
      const double mi = hp.beta1 * m_old + (1.0 - hp.beta1) * gi;
      const double vi = hp.beta2 * v_old + (1.0 - hp.beta2) * gi * gi;
      m[j] = static_cast<float>(mi);
      v[j] = static_cast<float>(vi);
      const double denom = std::sqrt(vi) / bias2_sqrt + hp.eps;
      p[i] = static_cast<float>(p[i] * decay - step_size * mi / denom);
      max1 = std::max(max1, std::fabs(m[j]));
      max2 = std::max(max2, std::fabs(v[j]));
    }
    a1[b] = max1;
    a2[b] = max2;
    for (int64_t j = 0; j < count; ++j) {
      s1[begin + j] = nearest_map_index(map1, scale_to_map(m[j], max1));
      s2[begin + j] = nearest_map_index(map2, scale_to_map(v[j], max2));
    }
  }
  if (half_copy) {
    auto* out = static_cast<uint16_t*>(half_copy->raw());
    const bool bf16 = half_copy->dtype() == DType::BF16;
    for (int64_t i = 0; i < n; ++i) out[i] = bf16 ? float_to_bf16(p[i]) : float_to_f16(p[i]);
  }
}

}  // namespace anatomy::cpu
