// adamw_8bit.cpp: --optim adamw_8bit, bitsandbytes' AdamW8bit (block-wise
// quantization, Dettmers et al. 2022, "8-bit Optimizers via Block-wise
// Quantization"). A tensor of at least kMin8bitSize elements keeps each moment
// as one byte per element (an index into the signed or unsigned dynamic map)
// and a float32 absmax per block of kAdam8bitBlock (256, bitsandbytes'
// blocksize for optimizer states); smaller tensors keep float32 moments and
// the ordinary AdamW update, as bitsandbytes' min_8bit_size does.
#include <array>

#include "anatomy/optim/optimizer.h"
#include "anatomy/optim/quantization_maps.h"

namespace anatomy {

namespace {

constexpr int64_t kMin8bitSize = 4096;  // bitsandbytes' min_8bit_size default

class AdamW8bit final : public Optimizer {
 public:
  AdamW8bit(Backend& backend, const ParameterSet& params, AdamWOptions options)
      : backend_(backend), options_(options) {
    Ledger& ledger = backend.ledger();
    // The maps live with the states (bitsandbytes keeps them in the optimizer's
    // state as qmap1/qmap2): memory held because this optimizer was chosen.
    const QuantizationMap signed_map = dynamic_quantization_map(true);
    const QuantizationMap unsigned_map = dynamic_quantization_map(false);
    qmap1_ = Tensor::empty(ledger, {256}, DType::F32, Category::OptimizerStates, "adamw_8bit.qmap1");
    qmap2_ = Tensor::empty(ledger, {256}, DType::F32, Category::OptimizerStates, "adamw_8bit.qmap2");
    backend.copy_from_host(qmap1_, signed_map.data());
    backend.copy_from_host(qmap2_, unsigned_map.data());

    for (size_t i = 0; i < params.specs().size(); ++i) {
      const std::string& name = params.specs()[i].name;
      const int64_t n = params.tensors()[i].numel();
      TensorState s;
      s.quantized = n >= kMin8bitSize;
      auto make = [&](const std::string& what, Shape shape, DType dtype) {
        Tensor t = Tensor::empty(ledger, std::move(shape), dtype, Category::OptimizerStates, what + "." + name);
        // Zero bytes with absmax 0 read as 0 whatever map[0] is (bitsandbytes'
        // zero-filled uint8 state and absmax).
        backend.zero(t);
        return t;
      };
      if (s.quantized) {
        const int64_t blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
        s.first = make("state1", {n}, DType::U8);
        s.second = make("state2", {n}, DType::U8);
        s.absmax1 = make("absmax1", {blocks}, DType::F32);
        s.absmax2 = make("absmax2", {blocks}, DType::F32);
      } else {
        s.first = make("exp_avg", {n}, DType::F32);
        s.second = make("exp_avg_sq", {n}, DType::F32);
      }
      states_.push_back(std::move(s));
    }
  }

  // The maps are constants (rebuilt here), not state.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const TensorState& s : states_)
      for (const Tensor* t : {&s.first, &s.second, &s.absmax1, &s.absmax2})
        if (t->defined()) out.emplace_back(t->name(), *t);
    return out;
  }

  void step(const ParameterSet& params, const ParameterSet& grads, double lr, const ParameterSet* half_copy,
            double grad_scale = 1.0) override {
    ANATOMY_CHECK(params.specs().size() == states_.size() && grads.specs().size() == states_.size(),
                  "adamw_8bit: {} parameter tensors, the optimizer was built for {}", params.specs().size(),
                  states_.size());
    ++steps_;
    for (size_t i = 0; i < states_.size(); ++i) {
      AdamWHyper hyper = adamw_hyper(options_, lr, steps_, grad_scale);
      if (!params.specs()[i].weight_decay) hyper.weight_decay = 0.0;  // Trainer's no-decay group
      const Tensor& param = params.tensors()[i];
      const Tensor& grad = grads.tensors()[i];
      const Tensor* copy = half_copy ? &half_copy->tensors()[i] : nullptr;
      const TensorState& s = states_[i];
      if (s.quantized) {
        backend_.adamw8bit_step(param, grad, s.first, s.second, s.absmax1, s.absmax2, qmap1_, qmap2_, hyper, copy);
      } else {
        backend_.adamw_step(param, grad, s.first, s.second, hyper);
        if (copy) backend_.cast(param, *copy);
      }
    }
  }

  std::string name() const override { return "adamw_8bit"; }

 private:
  struct TensorState {
    bool quantized = false;
    Tensor first, second;      // U8 state1/state2, or F32 exp_avg/exp_avg_sq for small tensors
    Tensor absmax1, absmax2;   // F32 [blocks]; undefined for small tensors
  };

  Backend& backend_;
  AdamWOptions options_;
  Tensor qmap1_, qmap2_;  // the signed (first moment) and unsigned (second moment) maps
  std::vector<TensorState> states_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw_8bit(Backend& backend, const ParameterSet& params,
                                           const OptimizerOptions& options) {
  return std::make_unique<AdamW8bit>(backend, params, options.adam);
}

}  // namespace anatomy
