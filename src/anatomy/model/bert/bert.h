// bert.h: a BERT-style model with Hugging Face semantics: BERT's encoder
// (bert_encoder.h) and the head of the layout's task (bert_head.h: sequence
// or token classification) over the model's parameters, run unit by unit (the
// embeddings, each encoder layer, the head), explicit forward and backward.
// With BERT's layout it is BertForSequenceClassification (or, with
// bert_task_layout(), BertForTokenClassification); the same class is
// RobertaFor* (XLM-RoBERTa, CamemBERT), ElectraFor* and DistilBertFor*, given
// their layout (bert_layout.h).
#pragma once

#include <functional>

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/bert/bert_activations.h"
#include "anatomy/model/bert/bert_head.h"
#include "anatomy/model/bert/bert_encoder.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/model.h"

namespace anatomy {

class BertStyleModel : public Model {
 public:
  // `compute` is float32, or BF16/F16 for mixed precision: the encoder's
  // activations and matrix products in 16 bits from a 16-bit copy of the
  // weights, while the float32 weights (masters), gradients, LayerNorm
  // statistics, the embeddings' sum, the sequence classification head and
  // the loss stay float32 (the token classifier's product runs in 16 bits).
  // `layout`: the family's with its task (its model_type must be the config's).
  BertStyleModel(Backend& backend, const ModelConfig& config, DType compute = DType::F32,
                 const BertLayout& layout = bert_layout());
  ~BertStyleModel() override;

  std::string architecture() const override { return layout_.architecture; }
  std::string task() const override { return layout_.task; }
  const BertLayout& layout() const { return layout_; }
  ActivationPlan activation_plan() const { return encoder_.activation_plan(); }
  // Whether the last encoder layer computes its query, attention and what
  // follows for the first token only (the default; --last-layer all: no).
  bool first_token_last_layer() const { return encoder_.first_token_last_layer(); }
  std::string attention_note() const override;
  // Under mixed precision the encoder's dense layers (ELECTRA's embeddings
  // projection, the token classifier) compute from the 16-bit copy;
  // everything else (the embeddings, every LayerNorm, the sequence
  // classification head) reads the float32 weights.
  bool reads_float32_in_mixed_precision(const std::string& name) const override;
  // Old gamma/beta LayerNorm names, and a bare base model's checkpoint (no "bert." prefix).
  std::vector<std::string> checkpoint_names(const std::string& name) const override;
  // The head (a checkpoint of BertModel, BertForPreTraining or RobertaForMaskedLM has none).
  bool optional_on_load(const std::string& name) const override;
  int64_t zero_row_on_init(const ParamSpec& spec) const override;

  // Gradients after the head, after each encoder layer and after the
  // embeddings are each reported final to the gradients-ready hook.
  ForwardOutput forward(const ModelInputs& inputs, const ForwardOptions& options) override;
  void backward(double loss_scale = 1.0) override;

 protected:
  void bind_views(Views views, const ParameterSet& set) override;
  void bind_unit_views(Views views, int64_t unit, const std::function<Tensor(const std::string&)>& get) override;

 private:
  struct Step;  // the state one training forward leaves for its backward
  BertTensors& views_of(Views views);

  const BertLayout& layout_;
  BertTensors w_;   // the float32 weights
  BertTensors wh_;  // the encoder's weights: w_ or the 16-bit copy
  BertTensors g_;   // the gradients (or the units ZeRO lends)
  BertEncoder encoder_;
  std::unique_ptr<BertHead> head_;
  std::unique_ptr<Step> step_;
};

}  // namespace anatomy
