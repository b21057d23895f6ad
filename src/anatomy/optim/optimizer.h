// optimizer.h: the optimizers of Hugging Face Trainer's `optim` (AdamW as
// torch.optim.AdamW, 8-bit AdamW as bitsandbytes', SGD as torch.optim.SGD,
// Adafactor as transformers'), over the flat parameter buffer with Trainer's
// parameter groups (no weight decay on biases and LayerNorm weights); global
// gradient-norm clipping as torch.nn.utils.clip_grad_norm_; learning-rate
// schedules as transformers'. Every state lands in the ledger's
// optimizer_states category.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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

enum class OptimizerKind { AdamW, AdamW8bit, Sgd, Adafactor };

// --optim: adamw (also adamw_torch, adamw_torch_fused), adamw_8bit (also
// adamw_bnb_8bit), sgd, adafactor. False for anything else.
bool parse_optimizer_kind(const std::string& name, OptimizerKind* out);
std::string optimizer_name(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::AdamW;
  AdamWOptions adam;          // AdamW and 8-bit AdamW (weight_decay for every optimizer's decaying group)
  double momentum = 0.0;      // SGD, from --optim-args as Hugging Face's optim_args
  double dampening = 0.0;
  bool nesterov = false;
};

// Hugging Face's optim_args ("momentum=0.9,nesterov=True"): the SGD keys
// momentum, dampening, nesterov. Errors name the key or value.
void parse_optim_args(const std::string& text, OptimizerOptions* options);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update at learning rate `lr` from the gradients times `grad_scale`
  // (clipping's coefficient: the same update as scaling the gradients first,
  // bit for bit; AdamW, 8-bit AdamW and SGD, ZeRO's sharded ones included,
  // fold it into their pass, Adafactor scales the gradients in place first);
  // `half_copy` (a 16-bit set of the same layout, the weights a
  // mixed-precision forward reads) is refreshed from the updated float32
  // weights. Overrides declare the same default for grad_scale.
  virtual void step(const ParameterSet& params, const ParameterSet& grads, double lr,
                    const ParameterSet* half_copy = nullptr, double grad_scale = 1.0) = 0;
  virtual std::string name() const = 0;
  int64_t steps_taken() const { return steps_; }
  // What a checkpoint saves and restores: every state tensor under a unique
  // name (F32, or U8 for 8-bit states), and the steps taken, from which the
  // bias corrections, Adafactor's decay and SGD's first step follow.
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() const = 0;
  void restore_steps(int64_t steps) { steps_ = steps; }

 protected:
  int64_t steps_ = 0;
};

// The hyperparameters of one update of step `step` (1-based) at learning rate
// `lr`: what AdamW, SGD and ZeRO-1's sharded update hand to the kernels.
AdamWHyper adamw_hyper(const AdamWOptions& options, double lr, int64_t step, double grad_scale = 1.0);
SgdHyper sgd_hyper(const OptimizerOptions& options, double lr, int64_t step, double grad_scale = 1.0);

// Each tensor's run [offset, offset + count) of a set's flat buffer, with its
// weight-decay group: the same for every set of these specs.
std::vector<ParamSegment> flat_segments(const ParameterSet& set);

std::unique_ptr<Optimizer> make_optimizer(Backend& backend, const ParameterSet& params,
                                          const OptimizerOptions& options);
// Each in its own file (sgd.cpp, adafactor.cpp, adamw_8bit.cpp).
std::unique_ptr<Optimizer> make_sgd(Backend& backend, const ParameterSet& params, const OptimizerOptions& options);
std::unique_ptr<Optimizer> make_adafactor(Backend& backend, const ParameterSet& params,
                                          const OptimizerOptions& options);
std::unique_ptr<Optimizer> make_adamw_8bit(Backend& backend, const ParameterSet& params,
                                           const OptimizerOptions& options);

class AdamW final : public Optimizer {
 public:
  // Allocates both moments (category optimizer_states), zeroed.
  AdamW(Backend& backend, const ParameterSet& params, AdamWOptions options);
  // One update at learning rate `lr` of every parameter from its gradient, in
  // one pass over the flat buffers. `half_copy` (a 16-bit set of the same
  // layout, the weights a mixed-precision forward reads) is refreshed in the same pass.
  void step(const ParameterSet& params, const ParameterSet& grads, double lr,
            const ParameterSet* half_copy = nullptr, double grad_scale = 1.0) override;
  std::string name() const override { return "adamw"; }
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override {
    return {{"exp_avg", exp_avg_.flat()}, {"exp_avg_sq", exp_avg_sq_.flat()}};
  }
  const ParameterSet& exp_avg() const { return exp_avg_; }
  const ParameterSet& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  Backend& backend_;
  AdamWOptions options_;
  ParameterSet exp_avg_, exp_avg_sq_;
  std::vector<ParamSegment> segments_;  // the flat layout's tensors and their groups
};

// The global L2 norm of all gradients.
double gradient_norm(Backend& backend, const ParameterSet& grads);
// torch.nn.utils.clip_grad_norm_'s factor for gradients of global norm `norm`:
// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (no clipping).
double clip_coefficient(double norm, double max_norm);
// Returns the global L2 norm of all gradients and scales them by
// clip_coefficient in place (a pass of its own; the trainer instead hands the
// coefficient to Optimizer::step). max_norm <= 0 only measures.
double clip_grad_norm(Backend& backend, const ParameterSet& grads, double max_norm);

// transformers' SchedulerType names (get_scheduler with its default keyword arguments): cosine with half a
// cycle, cosine_with_restarts with one, polynomial to 1e-7 with power 1, inverse_sqrt with the warmup steps
// (or 10000) as timescale.
// ReduceLROnPlateau: the base rate until an evaluation steps it (optim/plateau.h; the trainer holds it).
enum class ScheduleKind {
  Linear,
  Constant,
  ConstantWithWarmup,
  Cosine,
  CosineWithRestarts,
  Polynomial,
  InverseSqrt,
  ReduceLROnPlateau
};
bool parse_schedule_kind(const std::string& name, ScheduleKind* out);
// The names parse_schedule_kind takes, for messages: "linear, cosine, ...".
const char* schedule_kind_names();

// The learning rate for optimizer step `step` (0-based), as the LambdaLR of
// transformers.get_scheduler evaluates it for that step. Polynomial needs base_lr above its end, 1e-7
// (transformers raises otherwise): check_schedule says so before a run.
double scheduled_lr(ScheduleKind kind, double base_lr, int64_t step, int64_t warmup_steps, int64_t total_steps);
void check_schedule(ScheduleKind kind, double base_lr);
// TrainingArguments.get_warmup_steps for a ratio: ceil(total_steps * ratio).
int64_t warmup_steps_of_ratio(double ratio, int64_t total_steps);

}  // namespace anatomy
