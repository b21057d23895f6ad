// sgd.cpp: torch.optim.SGD as Hugging Face Trainer's optim="sgd" builds it:
// the learning rate, Trainer's two parameter groups for weight decay (coupled
// L2, as torch's SGD applies it), and momentum, dampening and nesterov from
// --optim-args. The momentum buffer (4 bytes a parameter) exists only with momentum.
#include "anatomy/optim/optimizer.h"

namespace anatomy {

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(Backend& backend, const ParameterSet& params, const OptimizerOptions& options)
      : backend_(backend), options_(options), segments_(flat_segments(params)) {
    if (options.momentum > 0.0) {
      buffer_ = std::make_unique<ParameterSet>(backend, params.specs(), Category::OptimizerStates, "momentum_buffer.");
      ANATOMY_CHECK(flat_segments(*buffer_) == segments_, "sgd: the momentum buffer's layout differs");
    }
  }

  void step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy,
            double grad_scale = 1.0) override {
    ++steps_;
    backend_.sgd_step_flat(params.flat(), grads.flat(), buffer_ ? buffer_->flat() : Tensor(), segments_,
                           sgd_hyper(options_, lr, steps_, grad_scale), half_copy ? &half_copy->flat() : nullptr);
  }
  std::string name() const override { return "sgd"; }
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override {
    if (!buffer_) return {};
    return {{"momentum_buffer", buffer_->flat()}};
  }

 private:
  Backend& backend_;
  OptimizerOptions options_;
  std::vector<ParamSegment> segments_;
  std::unique_ptr<ParameterSet> buffer_;  // the momentum buffer, when there is momentum
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(Backend& backend, const ParameterSet& params, const OptimizerOptions& options) {
  return std::make_unique<Sgd>(backend, params, options);
}

}  // namespace anatomy
