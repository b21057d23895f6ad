// sgd.cpp: torch.optim.SGD on the CPU, the reference the CUDA kernel is tested against.
// Each of torch's `x.add(y, alpha=a)` is one fused multiply-add, x + a·y rounded
// once: that is what torch computes on an AVX2/AVX-512 CPU (vec::fmadd) and on
// CUDA (nvcc contracts a + alpha * b), so this loop gives torch's bits there.
#include <cmath>

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
  const auto gs = static_cast<float>(h.grad_scale);
  for (const ParamSegment& seg : segments) {
    check_segment(seg, param, "sgd_step_flat");
    const float wd = seg.weight_decay ? static_cast<float>(h.weight_decay) : 0.0f;
    for (int64_t i = seg.offset; i < seg.offset + seg.count; ++i) {
      float d = g[i] * gs;  // clipping's coefficient, as scale() would have stored it (exact at 1)
      if (wd != 0.0f) d = std::fma(p[i], wd, d);  // grad.add(param, alpha=weight_decay)
      if (momentum) {
        // torch.clone(grad) on the first step, then buf.mul_(momentum).add_(grad, alpha=1 - dampening)
        buf[i] = h.first_step ? d : std::fma(d, keep, mu * buf[i]);
        d = h.nesterov ? std::fma(buf[i], mu, d) : buf[i];  // grad.add(buf, alpha=momentum)
      }
      p[i] = std::fma(d, -lr, p[i]);  // param.add_(grad, alpha=-lr)
      if (half) half[i] = bf16 ? float_to_bf16(p[i]) : float_to_f16(p[i]);
    }
  }
}

}  // namespace anatomy::cpu
