// inference.cpp: packing a host batch for InferenceModel::forward.
#include "anatomy/model/inference.h"

#include <algorithm>

#include "anatomy/core/error.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/model/model.h"

namespace anatomy {

InferenceBatch make_inference_batch(const std::vector<const int64_t*>& ids, const std::vector<const int64_t*>& types,
                                    const std::vector<int64_t>& lengths, int64_t pad_to) {
  ANATOMY_CHECK(ids.size() == lengths.size() && (types.empty() || types.size() == lengths.size()),
                "make_inference_batch: {} id rows, {} type rows, {} lengths", ids.size(), types.size(),
                lengths.size());
  InferenceBatch batch;
  batch.lengths = lengths;
  batch.padded_length = pad_to;
  batch.offsets.push_back(0);
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t len = lengths[b];
    ANATOMY_CHECK(len > 0 && (pad_to == 0 || len <= pad_to), "make_inference_batch: sequence {} has {} tokens", b,
                  len);
    const int64_t width = pad_to > 0 ? pad_to : len;
    for (int64_t t = 0; t < width; ++t) {
      batch.input_ids.push_back(t < len ? ids[b][t] : 0);
      if (!types.empty() && types[b] != nullptr) batch.token_type_ids.push_back(t < len ? types[b][t] : 0);
    }
    batch.offsets.push_back(batch.offsets.back() + width);
  }
  if (batch.token_type_ids.size() != batch.input_ids.size()) batch.token_type_ids.clear();
  return batch;
}

namespace {

class PaddedInference final : public InferenceModel {
 public:
  PaddedInference(Backend& backend, std::unique_ptr<Model> model) : backend_(backend), model_(std::move(model)) {}
  const ModelConfig& config() const override { return model_->config(); }
  DType dtype() const override { return model_->compute_dtype(); }
  int64_t parameter_count() const override { return model_->weights().parameter_count(); }
  void load_from(const Model& source) override {
    const ParameterSet& from = source.weights();
    ANATOMY_CHECK(from.flat().numel() == model_->weights().flat().numel() && from.flat().dtype() == DType::F32,
                  "load_from: the source model's parameters differ from this model's");
    std::vector<float> values(from.flat().numel());
    source.backend().copy_to_host(from.flat(), values.data());
    backend_.copy_from_host(model_->weights().flat(), values.data());
    model_->refresh_half_weights();
  }
  Tensor forward(const InferenceBatch& batch) override {
    const int64_t B = batch.sequences();
    ANATOMY_CHECK(B > 0 && static_cast<int64_t>(batch.offsets.size()) == B + 1, "inference: a batch of {} sequences",
                  B);
    int64_t L = batch.padded_length;
    if (L == 0)
      for (int64_t len : batch.lengths) L = std::max(L, len);
    for (int64_t len : batch.lengths)
      ANATOMY_CHECK(len <= config().max_sequence_length(), "a sequence of {} tokens is longer than the model's {}",
                    len, max_sequence_length_text(config()));
    const bool typed = !batch.token_type_ids.empty();
    std::vector<int64_t> ids(B * L, config().pad_token_id), mask(B * L, 0), types(typed ? B * L : 0, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < batch.lengths[b]; ++t) {
        ids[b * L + t] = batch.input_ids[batch.offsets[b] + t];
        mask[b * L + t] = 1;
        if (typed) types[b * L + t] = batch.token_type_ids[batch.offsets[b] + t];
      }
    Ledger& ledger = backend_.ledger();
    ledger.set_phase("inputs");
    ModelInputs inputs;
    inputs.input_ids = Tensor::empty(ledger, {B, L}, DType::I64, Category::Data, "input_ids");
    inputs.attention_mask = Tensor::empty(ledger, {B, L}, DType::I64, Category::Data, "attention_mask");
    backend_.copy_from_host(inputs.input_ids, ids.data());
    backend_.copy_from_host(inputs.attention_mask, mask.data());
    if (typed) {
      inputs.token_type_ids = Tensor::empty(ledger, {B, L}, DType::I64, Category::Data, "token_type_ids");
      backend_.copy_from_host(inputs.token_type_ids, types.data());
    }
    const Tensor logits = model_->forward(inputs, ForwardOptions{}).logits;
    // A logit row per token ([B, L, C]) of a packed batch: its real tokens' rows only, in order, as packed
    // inference gives them.
    if (batch.padded_length > 0 || logits.rank() != 3) return logits;
    const int64_t C = logits.dim(2);
    Tensor packed = Tensor::empty(ledger, {batch.offsets[B], C}, logits.dtype(), Category::Temporary, "logits");
    for (int64_t b = 0; b < B; ++b)
      backend_.copy(packed.slice(batch.offsets[b] * C, {batch.lengths[b], C}),
                    logits.slice(b * L * C, {batch.lengths[b], C}));
    return packed;
  }

 private:
  Backend& backend_;
  std::unique_ptr<Model> model_;
};

}  // namespace

std::unique_ptr<InferenceModel> make_padded_inference(Backend& backend, std::unique_ptr<Model> model) {
  return std::make_unique<PaddedInference>(backend, std::move(model));
}

}  // namespace anatomy
