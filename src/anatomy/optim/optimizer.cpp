// optimizer.cpp: AdamW, clipping and schedules.
#include "anatomy/optim/optimizer.h"

#include <algorithm>
#include <cmath>

namespace anatomy {

AdamW::AdamW(Backend& backend, const ParameterSet& params, AdamWOptions options)
    : backend_(backend),
      options_(options),
      exp_avg_(backend, params.specs(), Category::OptimizerStates, "exp_avg."),
      exp_avg_sq_(backend, params.specs(), Category::OptimizerStates, "exp_avg_sq.") {}

void AdamW::step(const ParameterSet& params, const ParameterSet& grads, double lr) {
  ++steps_;
  AdamWHyper hyper;
  hyper.lr = lr;
  hyper.beta1 = options_.beta1;
  hyper.beta2 = options_.beta2;
  hyper.eps = options_.eps;
  hyper.step = steps_;
  for (size_t i = 0; i < params.specs().size(); ++i) {
    hyper.weight_decay = params.specs()[i].weight_decay ? options_.weight_decay : 0.0;
    backend_.adamw_step(params.tensors()[i], grads.tensors()[i], exp_avg_.tensors()[i], exp_avg_sq_.tensors()[i],
                        hyper);
  }
}

double clip_grad_norm(Backend& backend, const ParameterSet& grads, double max_norm) {
  const double norm = std::sqrt(backend.sum_of_squares(grads.flat()));
  if (max_norm > 0.0) {
    const double coef = std::min(1.0, max_norm / (norm + 1e-6));
    if (coef < 1.0) backend.scale(grads.flat(), coef);
  }
  return norm;
}

bool parse_schedule_kind(const std::string& name, ScheduleKind* out) {
  if (name == "linear") *out = ScheduleKind::Linear;
  else if (name == "constant") *out = ScheduleKind::Constant;
  else if (name == "constant_with_warmup") *out = ScheduleKind::ConstantWithWarmup;
  else return false;
  return true;
}

double scheduled_lr(ScheduleKind kind, double base_lr, int64_t step, int64_t warmup, int64_t total) {
  switch (kind) {
    case ScheduleKind::Constant: return base_lr;
    case ScheduleKind::ConstantWithWarmup:
      return step < warmup ? base_lr * static_cast<double>(step) / std::max<int64_t>(1, warmup) : base_lr;
    case ScheduleKind::Linear:
      if (step < warmup) return base_lr * static_cast<double>(step) / std::max<int64_t>(1, warmup);
      return base_lr * std::max(0.0, static_cast<double>(total - step) / std::max<int64_t>(1, total - warmup));
  }
  return base_lr;
}

}  // namespace anatomy
