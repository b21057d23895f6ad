// adafactor.cpp: transformers.optimization.Adafactor as Hugging Face Trainer
// builds it for optim="adafactor": Adafactor(params, lr=learning_rate,
// scale_parameter=False, relative_step=False), so eps=(1e-30, 1e-3),
// clip_threshold=1.0, decay_rate=-0.8, beta1=None (no first moment),
// warmup_init=False, and Trainer's two weight-decay groups.
//
// The states are what make Adafactor small: a matrix [rows, cols] keeps only
// the running means of grad² over its rows and over its columns (rows + cols
// floats, not rows · cols); anything else (biases, LayerNorm) keeps a full
// running mean of grad². All float32, zero at the start (as transformers'
// torch.zeros), in one allocation of category optimizer_states.
#include "anatomy/optim/optimizer.h"

namespace anatomy {

namespace {

class Adafactor final : public Optimizer {
 public:
  Adafactor(Backend& backend, const ParameterSet& params, const OptimizerOptions& options)
      : backend_(backend), weight_decay_(options.adam.weight_decay) {
    // One flat buffer, every tensor's states packed without padding, so that
    // the ledger's optimizer_states is exactly Σ (rows + cols) or n floats.
    int64_t total = 0;
    for (const ParamSpec& spec : params.specs()) {
      ANATOMY_CHECK(spec.shape.size() <= 2, "--optim adafactor: {} has {} dimensions; only vectors and matrices are "
                    "supported", spec.name, spec.shape.size());
      total += factored(spec) ? spec.shape[0] + spec.shape[1] : shape_numel(spec.shape);
    }
    states_ = Tensor::empty(backend.ledger(), {total}, DType::F32, Category::OptimizerStates, "adafactor_states");
    backend.zero(states_);
    int64_t offset = 0;
    for (const ParamSpec& spec : params.specs()) {
      TensorStates s;
      if (factored(spec)) {
        s.row = states_.slice(offset, {spec.shape[0]}, "exp_avg_sq_row." + spec.name);
        s.col = states_.slice(offset + spec.shape[0], {spec.shape[1]}, "exp_avg_sq_col." + spec.name);
        offset += spec.shape[0] + spec.shape[1];
      } else {
        const int64_t n = shape_numel(spec.shape);
        s.v = states_.slice(offset, {n}, "exp_avg_sq." + spec.name);
        offset += n;
      }
      states_by_tensor_.push_back(std::move(s));
    }
  }

  void step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy,
            double grad_scale = 1.0) override {
    ANATOMY_CHECK(params.specs().size() == states_by_tensor_.size() && grads.specs().size() == params.specs().size(),
                  "adafactor: the parameter sets differ from the one the optimizer was built for");
    // Adafactor reads each gradient in several passes (its squares' row and column means first): scaled in place.
    if (grad_scale != 1.0) backend_.scale(grads.flat(), grad_scale);
    ++steps_;
    AdafactorHyper h;
    h.lr = lr;
    h.step = steps_;
    for (size_t i = 0; i < states_by_tensor_.size(); ++i) {
      const TensorStates& s = states_by_tensor_[i];
      h.weight_decay = params.specs()[i].weight_decay ? weight_decay_ : 0.0;
      backend_.adafactor_step(params.tensors()[i], grads.tensors()[i], s.row, s.col, s.v, h,
                              half_copy ? &half_copy->tensors()[i] : nullptr);
    }
  }
  std::string name() const override { return "adafactor"; }
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override { return {{"exp_avg_sq", states_}}; }

 private:
  // transformers' _get_options: factored when the parameter has two or more dimensions.
  static bool factored(const ParamSpec& spec) { return spec.shape.size() >= 2; }

  struct TensorStates {
    Tensor row, col;  // a matrix's exp_avg_sq_row [rows] and exp_avg_sq_col [cols]
    Tensor v;         // anything else's exp_avg_sq [n]
  };

  Backend& backend_;
  double weight_decay_;  // of the decaying group; the other group's is 0
  Tensor states_;
  std::vector<TensorStates> states_by_tensor_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adafactor(Backend& backend, const ParameterSet& params,
                                          const OptimizerOptions& options) {
  return std::make_unique<Adafactor>(backend, params, options);
}

}  // namespace anatomy
