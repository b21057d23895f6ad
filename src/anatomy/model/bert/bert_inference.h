// bert_inference.h: BertForSequenceClassification (and the other families of
// a BERT-style layout, bert_layout.h) for inference only
// (InferenceModel of model/inference.h), as
// model.eval() under torch.no_grad() with the model cast to one dtype
// (model.to(torch.bfloat16)): no gradients, no optimizer, no masters, nothing
// kept between layers but the hidden states.
//
// Weights: every parameter once, in the inference dtype (bf16, fp16, or
// float32 where the backend computes only in float32), category weights. The
// LayerNorm γ and β are also kept in float32 (the fused LayerNorm kernels read
// float32 parameters; 0.1% of bert-large's parameters).
//
// Batches are packed: the sequences' real tokens one after another, no
// padding (the seeds' BetterTransformer point: pad tokens cost nothing). Every
// product runs on [tokens, hidden]; attention runs per sequence through
// Backend::attention_forward_packed. A padded batch (every sequence of one
// length, with a key mask) runs through the same code for comparison.
#pragma once

#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/inference.h"

namespace anatomy {

class BertInference : public InferenceModel {
 public:
  // `dtype`: F32, BF16 or F16 (16-bit only where the backend computes in 16 bits).
  BertInference(Backend& backend, ModelConfig config, DType dtype, const BertLayout& layout = bert_layout());

  const ModelConfig& config() const override { return config_; }
  DType dtype() const override { return dtype_; }
  int64_t parameter_count() const override { return weights_.parameter_count(); }
  // Takes the weights of a float32 model (on any backend, typically the CPU
  // one the checkpoint was loaded into), rounded to the inference dtype.
  void load_from(const Model& source) override;

  // Logits, float32 on the device: [B, num_labels], [rows, num_labels] for token classification, or
  // [2, rows] for question answering (start logits, then end logits).
  Tensor forward(const InferenceBatch& batch) override;

 private:
  Tensor temporary(Shape shape, const std::string& name, DType dtype);
  Tensor upload(const std::vector<int64_t>& host, const std::string& name);

  Backend& backend_;
  ModelConfig config_;
  const BertLayout& layout_;
  DType dtype_;
  ParameterSet weights_;
  BertTensors w_;
  ParameterSet norms_;  // float32 LayerNorm γ and β (16-bit inference only; else empty)
  BertTensors n_;       // w_ with the LayerNorm tensors taken from norms_
  ActivationKind activation_;
};

}  // namespace anatomy
