// model.cpp: what every model shares: its parameter buffers, and lending them
// unit by unit to ZeRO.
#include "anatomy/model/model.h"

namespace anatomy {

ProblemType resolve_problem_type(const ModelConfig& config, DType labels_dtype) {
  if (config.problem_type != ProblemType::Unset) return config.problem_type;
  if (config.num_labels == 1) return ProblemType::Regression;
  if (labels_dtype == DType::I64) return ProblemType::SingleLabel;
  return ProblemType::MultiLabel;
}

double sequence_classification_loss(Backend& backend, const Tensor& logits, const Tensor& labels, ProblemType type,
                                   const Tensor& dlogits, double label_smoothing) {
  const int64_t B = logits.dim(0), C = logits.dim(1);
  ANATOMY_CHECK(label_smoothing == 0.0 || type == ProblemType::SingleLabel,
                "label smoothing applies to single-label classification only");
  switch (type) {
    case ProblemType::SingleLabel:
      ANATOMY_CHECK(labels.dtype() == DType::I64 && labels.numel() == B,
                    "single-label classification needs int64 labels [{}]", B);
      return backend.cross_entropy(logits, labels, dlogits, label_smoothing);
    case ProblemType::Regression:
      // Hugging Face squeezes both sides when num_labels == 1, else compares [B, C] with [B, C].
      ANATOMY_CHECK(labels.dtype() == DType::F32 && labels.numel() == B * C,
                    "regression needs float32 labels with {} values", B * C);
      return backend.mse(logits, labels, dlogits);
    case ProblemType::MultiLabel:
      ANATOMY_CHECK(labels.dtype() == DType::F32 && labels.numel() == B * C,
                    "multi-label classification needs float32 labels [{}, {}]", B, C);
      return backend.bce_with_logits(logits, labels, dlogits);
    case ProblemType::Unset: break;
  }
  ANATOMY_CHECK(false, "problem type unresolved");
  return 0.0;
}

Model::Model(Backend& backend, ModelConfig config, DType compute, std::vector<ParamSpec> specs,
             const std::function<std::vector<ParameterUnit>(const ParameterSet&)>& units)
    : backend_(backend),
      config_(std::move(config)),
      compute_(compute),
      weights_(backend, std::move(specs), Category::Weights, "") {
  ANATOMY_CHECK(compute == DType::F32 || compute == DType::BF16 || compute == DType::F16,
                "compute dtype {} is not float32, bf16 or fp16", dtype_name(compute));
  if (compute_ != DType::F32)
    half_weights_ = std::make_unique<ParameterSet>(backend, weights_.specs(), Category::WeightsHalf, "half.", compute_);
  unit_runs_ = units(weights_);
}

Model::~Model() = default;

void Model::refresh_half_weights() {
  if (half_weights_ && weights_.allocated()) backend_.cast(weights_.flat(), half_weights_->flat());
}

ParameterSet& Model::gradients() {
  if (!gradients_) {
    gradients_ = std::make_unique<ParameterSet>(backend_, weights_.specs(), Category::Gradients, "grad.");
    bind_views(Views::Gradients, *gradients_);
  }
  return *gradients_;
}

void Model::zero_gradients() { backend_.zero(gradients().flat()); }

void Model::read_float32_from(const ParameterSet& subset) {
  ANATOMY_CHECK(compute_ != DType::F32 && !weights_.allocated(), "read_float32_from: float32 or whole weights");
  for (size_t u = 0; u < unit_runs_.size(); ++u)
    bind_unit_views(Views::Weights, static_cast<int64_t>(u),
                    [&](const std::string& name) { return subset.has(name) ? subset.get(name) : Tensor(); });
}

void Model::release_weights(bool keep_half) {
  weights_.release();
  bind_views(Views::Weights, weights_);
  if (keep_half && half_weights_) return;
  if (half_weights_) half_weights_->release();
  bind_views(Views::Compute, half_weights_ ? *half_weights_ : weights_);
}

void Model::restore_weights() {
  if (weights_.allocated()) return;
  weights_.allocate(backend_);
  bind_views(Views::Weights, weights_);
  if (half_weights_ && !half_weights_->allocated()) half_weights_->allocate(backend_);
  bind_views(Views::Compute, half_weights_ ? *half_weights_ : weights_);
}

void Model::bind_unit_buffer(Views views, int64_t unit, const Tensor& buffer) {
  const int64_t begin = unit_runs_.at(static_cast<size_t>(unit)).begin;
  bind_unit_views(views, unit, [&](const std::string& name) {
    if (!buffer.defined()) return Tensor();
    return buffer.slice(weights_.offset_of(name) - begin, weights_.spec(name).shape, buffer.name() + ":" + name);
  });
}

void Model::use_unit_weights(int64_t unit, int64_t next) {
  if (units_ == nullptr || !units_->lends_weights()) return;
  const UnitWeights lent = units_->weights(unit, next);
  bind_unit_buffer(Views::Weights, unit, lent.f32);
  bind_unit_buffer(Views::Compute, unit, compute_ == DType::F32 ? lent.f32 : lent.half);
}

void Model::drop_unit_weights(int64_t unit) {
  if (units_ == nullptr || !units_->lends_weights()) return;
  bind_unit_buffer(Views::Weights, unit, Tensor());
  bind_unit_buffer(Views::Compute, unit, Tensor());
}

void Model::use_unit_gradients(int64_t unit) {
  if (units_ == nullptr) return;
  bind_unit_buffer(Views::Gradients, unit, units_->gradients(unit));
}

void Model::unit_gradients_ready(int64_t unit) {
  if (units_ == nullptr) return;
  bind_unit_buffer(Views::Gradients, unit, Tensor());
  units_->gradients_ready(unit);
}

void Model::gradients_ready(const char* first_parameter) {
  if (!ready_hook_ || units_ != nullptr) return;
  ready_hook_(first_parameter == nullptr ? 0 : gradients().offset_of(first_parameter));
}

}  // namespace anatomy
