// bert.h: BertForSequenceClassification with Hugging Face semantics, written as
// an explicit forward and backward per layer over the backend's ops.
#pragma once

#include <functional>

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/bert/bert_activations.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/model.h"

namespace anatomy {

// The backend's activation for the config's hidden_act.
ActivationKind activation_kind(Activation a);

class BertForSequenceClassification : public Model {
 public:
  // `compute` is float32, or BF16/F16 for mixed precision: the encoder's
  // activations and matrix products in 16 bits from a 16-bit copy of the
  // weights, while the float32 weights (masters), gradients, LayerNorm
  // statistics, the embeddings' sum, the pooler/classifier head and the loss
  // stay float32.
  BertForSequenceClassification(Backend& backend, const ModelConfig& config, DType compute = DType::F32);
  ~BertForSequenceClassification() override;

  std::string architecture() const override { return "BertForSequenceClassification"; }
  ActivationPlan activation_plan() const;
  // Whether the last encoder layer computes its query, attention and what
  // follows for the first token only (the default; --last-layer all: no).
  bool first_token_last_layer() const { return first_token_last_layer_ && config_.num_hidden_layers > 0; }
  std::string attention_note() const override;
  // Under mixed precision the encoder's dense layers compute from the 16-bit
  // copy; everything else (the embeddings, every LayerNorm, the pooler and
  // the classifier) reads the float32 weights.
  bool reads_float32_in_mixed_precision(const std::string& name) const override;
  // Old gamma/beta LayerNorm names, and a bare BertModel's checkpoint (no "bert." prefix).
  std::vector<std::string> checkpoint_names(const std::string& name) const override;
  // The pooler and the classifier (a checkpoint of BertModel or BertForPreTraining has none).
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

  DropoutSpec dropout_at(double p, int64_t site) const;
  // The tokens of each sequence that encoder layer l computes after attention:
  // L_, or 1 for the last layer when only its first token's output is read
  // (the pooler's input; --last-layer all turns this off, and so does a
  // backend whose first-query attention does not take the model's shape).
  int64_t rows_after_attention(int64_t l) const;
  bool first_token_last_layer_ = true;
  Tensor temporary(Shape shape, const std::string& name, DType dtype = DType::F32);
  void prepare_inputs(const ModelInputs& inputs);

  void embeddings_forward(const SavedTensors& s);
  void encoder_forward(int64_t layer, const Tensor& x, const SavedTensors& s);
  // The layer's attention, of every token or of the first token only (x0: its row of x).
  void attention_part(int64_t layer, const Tensor& x, const SavedTensors& s);
  void first_query_attention_part(int64_t layer, const Tensor& x, const Tensor& x0, const SavedTensors& s);
  Tensor first_token_row(const Tensor& x);
  void head_forward(const Tensor& hidden, const SavedTensors& s);
  double loss_forward(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits);

  // Selective checkpointing: recomputes a layer's selective_recomputed() tensors into `s`.
  void recompute_selective(int64_t layer, const Tensor& x, SavedTensors& s);
  Tensor encoder_backward(int64_t layer, const Tensor& x, const SavedTensors& s, const Tensor& dout);
  void embeddings_backward(const SavedTensors& s, const Tensor& dout);

  BertTensors& views_of(Views views);
  BertTensors w_;   // the float32 weights
  BertTensors wh_;  // the encoder's weights: w_ or the 16-bit copy
  BertTensors g_;
  ActivationKind activation_;

  // Per-batch state.
  int64_t B_ = 0, L_ = 0;
  ForwardOptions options_;
  Tensor ids_, token_types_, positions_, mask_;
  std::unique_ptr<Step> step_;
};

}  // namespace anatomy
