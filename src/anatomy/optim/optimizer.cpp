// optimizer.cpp: AdamW, clipping and schedules.
#include "anatomy/optim/optimizer.h"

#include <algorithm>
#include <cmath>

namespace anatomy {

AdamW::AdamW(Backend& backend, const ParameterSet& params, AdamWOptions options)
    : backend_(backend),
      options_(options),
      exp_avg_(backend, params.specs(), Category::OptimizerStates, "exp_avg."),
      exp_avg_sq_(backend, params.specs(), Category::OptimizerStates, "exp_avg_sq.") {
  // Each tensor's run of the flat buffers, with its parameter group: the same
  // for every set of these specs (weights, gradients, moments, 16-bit copy).
  const auto* base = static_cast<const char*>(exp_avg_.flat().raw());
  for (size_t i = 0; i < exp_avg_.specs().size(); ++i) {
    const Tensor& t = exp_avg_.tensors()[i];
    const int64_t offset = (static_cast<const char*>(t.raw()) - base) / static_cast<int64_t>(sizeof(float));
    segments_.push_back(ParamSegment{offset, t.numel(), exp_avg_.specs()[i].weight_decay});
  }
}

void AdamW::step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy) {
  ++steps_;
  AdamWHyper hyper;
  hyper.lr = lr;
  hyper.beta1 = options_.beta1;
  hyper.beta2 = options_.beta2;
  hyper.eps = options_.eps;
  hyper.weight_decay = options_.weight_decay;
  hyper.step = steps_;
  backend_.adamw_step_flat(params.flat(), grads.flat(), exp_avg_.flat(), exp_avg_sq_.flat(), segments_, hyper,
                           half_copy ? &half_copy->flat() : nullptr);
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
