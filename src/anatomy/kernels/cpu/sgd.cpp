// sgd.cpp: torch.optim.SGD on the CPU, the reference the CUDA kernel is tested against.
#include "anatomy/core/dtype.h"
#include "anatomy/kernels/cpu/optimizer_kernels.h"

namespace anatomy::cpu {

void sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                   const std::vector<ParamSegment>& segments, const SgdHyper& h, const Tensor* half_copy) {
  ANATOMY_CHECK(param.numel() == grad.numel(), "sgd_step_flat: {} and {} differ in size", param.name(), grad.name());
  const bool momentum = h.momentum != 0.0;
  ANATOMY_CHECK(!momentum || (momentum_buf.defined() && momentum_buf.numel() == param.numel()),
                "sgd_step_flat: momentum {} needs a momentum buffer of {} elements", h.momentum, param.numel());
  if (half_copy)
    ANATOMY_CHECK(half_copy->numel() == param.numel() &&
                      (half_copy->dtype() == DType::BF16 || half_copy->dtype() == DType::F16),
                  "sgd_step_flat: the half copy {} must be a 16-bit tensor of {} elements", half_copy->name(),
                  param.numel());
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* buf = momentum ? momentum_buf.data<float>() : nullptr;
  auto* half = half_copy ? half_copy->data<uint16_t>() : nullptr;
  const bool bf16 = half_copy && half_copy->dtype() == DType::BF16;
  const auto lr = static_cast<float>(h.lr), mu = static_cast<float>(h.momentum);
  const auto keep = static_cast<float>(1.0 - h.dampening);
  for (const ParamSegment& seg : segments) {
    ANATOMY_CHECK(seg.offset >= 0 && seg.count >= 0 && seg.offset + seg.count <= param.numel(),
                  "sgd_step_flat: segment [{}, +{}) outside {}", seg.offset, seg.count, param.name());
    const float wd = seg.weight_decay ? static_cast<float>(h.weight_decay) : 0.0f;
    for (int64_t i = seg.offset; i < seg.offset + seg.count; ++i) {
      // Each operation rounded to float32 in torch's order (ISO C++ on x86-64: no contraction into FMAs).
      float d = g[i];
      if (wd != 0.0f) d = d + wd * p[i];  // grad.add(param, alpha=weight_decay)
      if (momentum) {
        if (h.first_step) {
          buf[i] = d;  // torch.clone(grad)
        } else {
          const float scaled = mu * buf[i];
          const float add = keep * d;
          buf[i] = scaled + add;  // buf.mul_(momentum).add_(grad, alpha=1 - dampening)
        }
        if (h.nesterov) {
          const float nb = mu * buf[i];
          d = d + nb;  // grad.add(buf, alpha=momentum)
        } else {
          d = buf[i];
        }
      }
      const float step = lr * d;
      p[i] = p[i] - step;  // param.add_(grad, alpha=-lr)
      if (half) half[i] = bf16 ? float_to_bf16(p[i]) : float_to_f16(p[i]);
    }
  }
}

}  // namespace anatomy::cpu
