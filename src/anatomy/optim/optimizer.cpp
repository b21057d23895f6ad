// optimizer.cpp: AdamW, clipping and schedules.
#include "anatomy/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "anatomy/core/error.h"

namespace anatomy {

bool parse_optimizer_kind(const std::string& name, OptimizerKind* out) {
  if (name == "adamw" || name == "adamw_torch" || name == "adamw_torch_fused") *out = OptimizerKind::AdamW;
  else if (name == "adamw_8bit" || name == "adamw_bnb_8bit") *out = OptimizerKind::AdamW8bit;
  else if (name == "sgd") *out = OptimizerKind::Sgd;
  else if (name == "adafactor") *out = OptimizerKind::Adafactor;
  else return false;
  return true;
}

std::string optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::AdamW8bit: return "adamw_8bit";
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::Adafactor: return "adafactor";
  }
  return "?";
}

void parse_optim_args(const std::string& text, OptimizerOptions* options) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail("--optim-args {}: '{}' is not key=value", text, item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto number = [&] {
      try {
        size_t used = 0;
        const double v = std::stod(value, &used);
        if (used != value.size() || !std::isfinite(v) || v < 0) throw std::invalid_argument(value);
        return v;
      } catch (const std::exception&) {
        fail("--optim-args {}: {}={} is not a non-negative number", text, key, value);
      }
    };
    if (key == "momentum") options->momentum = number();
    else if (key == "dampening") options->dampening = number();
    else if (key == "nesterov") {
      if (value == "True" || value == "true" || value == "1") options->nesterov = true;
      else if (value == "False" || value == "false" || value == "0") options->nesterov = false;
      else fail("--optim-args {}: nesterov={} is not True or False", text, value);
    } else {
      fail("--optim-args {}: unknown key '{}' (known: momentum, dampening, nesterov)", text, key);
    }
  }
}

std::vector<ParamSegment> flat_segments(const ParameterSet& set) {
  std::vector<ParamSegment> segments;
  const auto* base = static_cast<const char*>(set.flat().raw());
  const auto element = static_cast<int64_t>(dtype_size(set.flat().dtype()));
  for (size_t i = 0; i < set.specs().size(); ++i) {
    const Tensor& t = set.tensors()[i];
    const int64_t offset = (static_cast<const char*>(t.raw()) - base) / element;
    segments.push_back(ParamSegment{offset, t.numel(), set.specs()[i].weight_decay});
  }
  return segments;
}

std::unique_ptr<Optimizer> make_optimizer(Backend& backend, const ParameterSet& params,
                                          const OptimizerOptions& options) {
  switch (options.kind) {
    case OptimizerKind::AdamW: return std::make_unique<AdamW>(backend, params, options.adam);
    case OptimizerKind::AdamW8bit: return make_adamw_8bit(backend, params, options);
    case OptimizerKind::Sgd: return make_sgd(backend, params, options);
    case OptimizerKind::Adafactor: return make_adafactor(backend, params, options);
  }
  fail("unknown optimizer");
}

AdamW::AdamW(Backend& backend, const ParameterSet& params, AdamWOptions options)
    : backend_(backend),
      options_(options),
      exp_avg_(backend, params.specs(), Category::OptimizerStates, "exp_avg."),
      exp_avg_sq_(backend, params.specs(), Category::OptimizerStates, "exp_avg_sq.") {
  segments_ = flat_segments(exp_avg_);
}

void AdamW::step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy,
                 double grad_scale) {
  ++steps_;
  backend_.adamw_step_flat(params.flat(), grads.flat(), exp_avg_.flat(), exp_avg_sq_.flat(), segments_,
                           adamw_hyper(options_, lr, steps_, grad_scale), half_copy ? &half_copy->flat() : nullptr);
}

AdamWHyper adamw_hyper(const AdamWOptions& options, double lr, int64_t step, double grad_scale) {
  AdamWHyper hyper;
  hyper.lr = lr;
  hyper.beta1 = options.beta1;
  hyper.beta2 = options.beta2;
  hyper.eps = options.eps;
  hyper.weight_decay = options.weight_decay;
  hyper.step = step;
  hyper.grad_scale = grad_scale;
  return hyper;
}

SgdHyper sgd_hyper(const OptimizerOptions& options, double lr, int64_t step, double grad_scale) {
  SgdHyper hyper;
  hyper.lr = lr;
  hyper.momentum = options.momentum;
  hyper.dampening = options.dampening;
  hyper.nesterov = options.nesterov;
  hyper.weight_decay = options.adam.weight_decay;
  hyper.first_step = step == 1;
  hyper.grad_scale = grad_scale;
  return hyper;
}

double gradient_norm(Backend& backend, const ParameterSet& grads) {
  return std::sqrt(backend.sum_of_squares(grads.flat()));
}

double clip_coefficient(double norm, double max_norm) {
  return max_norm > 0.0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

double clip_grad_norm(Backend& backend, const ParameterSet& grads, double max_norm) {
  const double norm = gradient_norm(backend, grads);
  const double coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0) backend.scale(grads.flat(), coef);
  return norm;
}

namespace {
constexpr double kPolynomialEnd = 1e-7;  // get_polynomial_decay_schedule_with_warmup's lr_end
}

bool parse_schedule_kind(const std::string& name, ScheduleKind* out) {
  if (name == "linear") *out = ScheduleKind::Linear;
  else if (name == "constant") *out = ScheduleKind::Constant;
  else if (name == "constant_with_warmup") *out = ScheduleKind::ConstantWithWarmup;
  else if (name == "cosine") *out = ScheduleKind::Cosine;
  else if (name == "cosine_with_restarts") *out = ScheduleKind::CosineWithRestarts;
  else if (name == "polynomial") *out = ScheduleKind::Polynomial;
  else if (name == "inverse_sqrt") *out = ScheduleKind::InverseSqrt;
  else if (name == "reduce_lr_on_plateau") *out = ScheduleKind::ReduceLROnPlateau;
  else return false;
  return true;
}

const char* schedule_kind_names() {
  return "linear, cosine, cosine_with_restarts, polynomial, constant, constant_with_warmup, inverse_sqrt or "
         "reduce_lr_on_plateau";
}

void check_schedule(ScheduleKind kind, double base_lr) {
  if (kind == ScheduleKind::Polynomial && !(base_lr > kPolynomialEnd))
    fail("--lr-scheduler-type polynomial: the learning rate ({}) must be above the schedule's end, {}", base_lr,
         kPolynomialEnd);
}

int64_t warmup_steps_of_ratio(double ratio, int64_t total_steps) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * ratio));
}

double scheduled_lr(ScheduleKind kind, double base_lr, int64_t step, int64_t warmup, int64_t total) {
  // ReduceLROnPlateau: no warmup, and its rate moves with the evaluations (the trainer's PlateauSchedule).
  if (kind == ScheduleKind::Constant || kind == ScheduleKind::ReduceLROnPlateau) return base_lr;
  // Every other schedule warms up linearly: LambdaLR multiplies base_lr by the factor.
  if (step < warmup) return base_lr * (static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup)));
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  double factor = 1.0;
  switch (kind) {
    case ScheduleKind::Constant:
    case ScheduleKind::ReduceLROnPlateau:
    case ScheduleKind::ConstantWithWarmup: factor = 1.0; break;
    case ScheduleKind::Linear:
      factor = std::max(0.0, static_cast<double>(total - step) / static_cast<double>(std::max<int64_t>(1, total - warmup)));
      break;
    case ScheduleKind::Cosine:  // num_cycles 0.5
      factor = std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
      break;
    case ScheduleKind::CosineWithRestarts:  // num_cycles 1
      factor = progress >= 1.0 ? 0.0 : std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(1.0 * progress, 1.0))));
      break;
    case ScheduleKind::Polynomial: {  // lr_end 1e-7, power 1
      if (step > total) {
        factor = kPolynomialEnd / base_lr;
        break;
      }
      const double remaining =
          1.0 - static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
      factor = ((base_lr - kPolynomialEnd) * remaining + kPolynomialEnd) / base_lr;
      break;
    }
    case ScheduleKind::InverseSqrt: {  // timescale: the warmup steps, or 10000 without warmup
      const int64_t timescale = warmup > 0 ? warmup : 10000;
      const int64_t shift = timescale - warmup;
      factor = 1.0 / std::sqrt(static_cast<double>(step + shift) / static_cast<double>(timescale));
      break;
    }
  }
  return base_lr * factor;
}

}  // namespace anatomy
