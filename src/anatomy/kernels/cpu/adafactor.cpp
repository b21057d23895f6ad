// adafactor.cpp: transformers.optimization.Adafactor.step on the CPU for one
// parameter tensor, as Hugging Face Trainer builds it (scale_parameter,
// relative_step and warmup_init off, no first moment): the reference the CUDA
// kernel is tested against.
//
// Every element-wise operation is the float32 operation torch performs, in
// its order: grad**2 + eps1 (two roundings), state.mul_(beta2t) then
// .add_(mean, alpha=1 - beta2t) (one fused multiply-add, as torch's vectorised
// add with alpha on AVX2/AVX-512 CPUs and on CUDA), rsqrt as 1 / sqrt (two
// roundings, as torch's Vectorized<float>::rsqrt), the outer product r_i · c_j
// and then · grad, the division by the clipped RMS, · lr, weight decay as
// p.add_(p, alpha=-wd·lr), and p.add_(-update). The reductions differ: torch
// sums float32 in a cascade, this sums in double and rounds once, so a mean or
// the RMS can differ from torch's by an ulp or a few (see test_adafactor.cpp
// for the tolerance that follows).
#include <cmath>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/kernels/cpu/optimizer_kernels.h"

namespace anatomy::cpu {

namespace {

float rsqrt(float x) { return 1.0f / std::sqrt(x); }

// x.mul_(beta2t).add_(mean, alpha=1 - beta2t): the product rounded, then one fused multiply-add.
float moving_average(float state, float mean, float beta2t, float one_minus_beta2t) {
  return std::fma(mean, one_minus_beta2t, state * beta2t);
}

}  // namespace

void adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state, const Tensor& col_state,
                    const Tensor& v_state, const AdafactorHyper& h, const Tensor* half_copy) {
  const int64_t n = param.numel();
  ANATOMY_CHECK(grad.numel() == n, "adafactor_step: {} and {} differ in size", param.name(), grad.name());
  ANATOMY_CHECK(h.step >= 1, "adafactor_step: step {} is not 1-based", h.step);
  const bool factored = row_state.defined();
  int64_t rows = 0, cols = 0;
  if (factored) {
    ANATOMY_CHECK(param.rank() == 2 && col_state.defined(), "adafactor_step: {} is not a matrix with row and column states",
                  param.name());
    rows = param.dim(0), cols = param.dim(1);
    ANATOMY_CHECK(row_state.numel() == rows && col_state.numel() == cols,
                  "adafactor_step: states of {} and {} elements for {} [{}, {}]", row_state.numel(), col_state.numel(),
                  param.name(), rows, cols);
  } else {
    ANATOMY_CHECK(v_state.defined() && v_state.numel() == n, "adafactor_step: {} needs a second-moment state of {} elements",
                  param.name(), n);
  }
  if (half_copy)
    ANATOMY_CHECK(half_copy->numel() == n && (half_copy->dtype() == DType::BF16 || half_copy->dtype() == DType::F16),
                  "adafactor_step: the half copy {} must be a 16-bit tensor of {} elements", half_copy->name(), n);
  if (n == 0) return;

  float* p = param.data<float>();
  const float* g = grad.data<float>();
  // Python floats, rounded to float32 where torch meets them in a float32 op.
  const double beta2t_d = 1.0 - std::pow(static_cast<double>(h.step), h.decay_rate);
  const auto beta2t = static_cast<float>(beta2t_d), one_minus_beta2t = static_cast<float>(1.0 - beta2t_d);
  const auto eps1 = static_cast<float>(h.eps1);
  auto sq_plus_eps = [&](int64_t i) { return g[i] * g[i] + eps1; };

  // The update before clipping, as a function of the element index.
  std::vector<float> update(static_cast<size_t>(n));
  if (factored) {
    float* row = row_state.data<float>();
    float* col = col_state.data<float>();
    std::vector<double> col_sums(static_cast<size_t>(cols), 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      double row_sum = 0.0;
      for (int64_t j = 0; j < cols; ++j) {
        const float u = sq_plus_eps(i * cols + j);
        row_sum += u;
        col_sums[j] += u;
      }
      row[i] = moving_average(row[i], static_cast<float>(row_sum / cols), beta2t, one_minus_beta2t);
    }
    for (int64_t j = 0; j < cols; ++j)
      col[j] = moving_average(col[j], static_cast<float>(col_sums[j] / rows), beta2t, one_minus_beta2t);
    // _approx_sq_grad: (row / row.mean()).rsqrt() ⊗ col.rsqrt(), then · grad.
    double row_total = 0.0;
    for (int64_t i = 0; i < rows; ++i) row_total += row[i];
    const auto row_mean = static_cast<float>(row_total / rows);
    std::vector<float> col_factor(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) col_factor[j] = rsqrt(col[j]);
    for (int64_t i = 0; i < rows; ++i) {
      const float row_factor = rsqrt(row[i] / row_mean);
      for (int64_t j = 0; j < cols; ++j) update[i * cols + j] = row_factor * col_factor[j] * g[i * cols + j];
    }
  } else {
    float* v = v_state.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      v[i] = moving_average(v[i], sq_plus_eps(i), beta2t, one_minus_beta2t);
      update[i] = rsqrt(v[i]) * g[i];
    }
  }

  // update.div_((_rms(update) / clip_threshold).clamp_(min=1)), _rms = norm(2) / numel ** 0.5.
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(update[i]) * update[i];
  const float rms = static_cast<float>(std::sqrt(sum_sq)) / static_cast<float>(std::sqrt(static_cast<double>(n)));
  const float clip_divisor = std::max(1.0f, rms / static_cast<float>(h.clip_threshold));

  const auto lr = static_cast<float>(h.lr);
  const auto decay = static_cast<float>(-h.weight_decay * h.lr);  // alpha of p.add_(p, alpha=-wd·lr)
  auto* half = half_copy ? half_copy->data<uint16_t>() : nullptr;
  const bool bf16 = half_copy && half_copy->dtype() == DType::BF16;
  for (int64_t i = 0; i < n; ++i) {
    const float u = update[i] / clip_divisor * lr;
    float w = p[i];
    if (h.weight_decay != 0.0) w = std::fma(w, decay, w);
    w = w - u;
    p[i] = w;
    if (half) half[i] = bf16 ? float_to_bf16(w) : float_to_f16(w);
  }
}

}  // namespace anatomy::cpu
