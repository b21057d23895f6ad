// optimizer.h: AdamW as torch.optim.AdamW computes it, over the flat parameter
// buffer, with Hugging Face Trainer's parameter groups (no weight decay on
// biases and LayerNorm weights); global gradient-norm clipping as
// torch.nn.utils.clip_grad_norm_; learning-rate schedules as transformers'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/parameters.h"

namespace anatomy {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  // Allocates both moments (category optimizer_states), zeroed.
  AdamW(Backend& backend, const ParameterSet& params, AdamWOptions options);
  // One update at learning rate `lr` of every parameter from its gradient, in
  // one pass over the flat buffers. `half_copy` (a 16-bit set of the same
  // layout, the weights a mixed-precision forward reads) is refreshed in the same pass.
  void step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy = nullptr);
  int64_t steps_taken() const { return steps_; }
  const ParameterSet& exp_avg() const { return exp_avg_; }
  const ParameterSet& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  Backend& backend_;
  AdamWOptions options_;
  ParameterSet exp_avg_, exp_avg_sq_;
  std::vector<ParamSegment> segments_;  // the flat layout's tensors and their groups
  int64_t steps_ = 0;
};

// Returns the global L2 norm of all gradients and scales them by
// min(1, max_norm / (norm + 1e-6)). max_norm <= 0 only measures.
double clip_grad_norm(Backend& backend, const ParameterSet& grads, double max_norm);

enum class ScheduleKind { Linear, Constant, ConstantWithWarmup };
bool parse_schedule_kind(const std::string& name, ScheduleKind* out);

// The learning rate for optimizer step `step` (0-based), as the LambdaLR of
// transformers.get_scheduler evaluates it for that step.
double scheduled_lr(ScheduleKind kind, double base_lr, int64_t step, int64_t warmup_steps, int64_t total_steps);

}  // namespace anatomy
