// modernbert.h: ModernBertForSequenceClassification with Hugging Face
// semantics, explicit forward and backward, run unit by unit (the embeddings,
// each layer, the head) as BERT's model is:
//   embeddings: dropout(LayerNorm(tok_embeddings[ids]))          (no positions)
//   layer l:    h  = LayerNorm_attn(x)      (layer 0: h = x)
//               q, k, v = h·Wqkv; q, k turned by rotary embeddings (global or local θ)
//               x1 = x + dropout(Wo · attention(q, k, v))        (local layers: a ±window band)
//               x2 = x1 + Wo_mlp · dropout(GELU(a) · g),  [a, g] = LayerNorm_mlp(x1)·Wi
//   head:       final LayerNorm of the first token, dense, GELU, LayerNorm,
//               dropout, classifier (classifier_pooling "cls").
// LayerNorms have no bias unless norm_bias (they then read a zero bias of the
// model's, category functionality, and their bias gradient goes to a
// temporary). Under mixed precision the layers' products compute from the
// 16-bit copy; the embeddings, every LayerNorm and the head read float32.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/activations.h"
#include "anatomy/model/model.h"
#include "anatomy/model/modernbert/modernbert_config.h"

namespace anatomy {

std::vector<ParamSpec> modernbert_parameter_specs(const ModelConfig& config);

// Named handles into a ParameterSet of ModernBERT's parameters (biases undefined where the config has none).
struct ModernBertTensors {
  struct Layer {
    Tensor attn_norm_w, attn_norm_b;  // undefined in layer 0
    Tensor q_w, k_w, v_w, q_b, k_b, v_b;  // the thirds of Wqkv
    Tensor attn_out_w, attn_out_b, mlp_norm_w, mlp_norm_b, wi_w, wi_b, mlp_out_w, mlp_out_b;
  };
  Tensor tok, emb_norm_w, emb_norm_b;
  std::vector<Layer> layers;
  Tensor final_norm_w, final_norm_b, head_dense_w, head_dense_b, head_norm_w, head_norm_b, classifier_w,
      classifier_b;
  // Binds unit `unit` (0 embeddings, 1 + l layer l, L + 1 the head) to what `get` returns for each name.
  void bind_unit(int64_t unit, const ModelConfig& config, const ModernBertOptions& options,
                 const std::function<Tensor(const std::string&)>& get);
};

class ModernBertForSequenceClassification : public Model {
 public:
  ModernBertForSequenceClassification(Backend& backend, const ModelConfig& config, DType compute = DType::F32);
  ~ModernBertForSequenceClassification() override;

  std::string architecture() const override { return "ModernBertForSequenceClassification"; }
  bool reads_float32_in_mixed_precision(const std::string& name) const override;
  std::vector<std::string> checkpoint_names(const std::string& name) const override;
  bool optional_on_load(const std::string& name) const override;
  int64_t zero_row_on_init(const ParamSpec& spec) const override;
  std::string attention_note() const override;

  ForwardOutput forward(const ModelInputs& inputs, const ForwardOptions& options) override;
  void backward(double loss_scale = 1.0) override;

  // What each part saves for backward (the memory plan reads the same lists).
  enum class Part { Embeddings, Layer, Head };
  std::vector<SavedSpec> saved_for_backward(Part part, int64_t layer, int64_t B, int64_t L) const;

 protected:
  void bind_views(Views views, const ParameterSet& set) override;
  void bind_unit_views(Views views, int64_t unit, const std::function<Tensor(const std::string&)>& get) override;

 private:
  struct Step;
  ModernBertTensors& views_of(Views views);
  DropoutSpec dropout_at(double p, int64_t site) const;
  Tensor temporary(Shape shape, const std::string& name, DType dtype = DType::F32);
  const Tensor& bias_or_zero(const Tensor& bias) const;
  Tensor bias_gradient(const Tensor& gradient);
  void embeddings_forward(const SavedTensors& s);
  void embeddings_backward(const SavedTensors& s, const Tensor& dout);
  void attention_part(int64_t l, const Tensor& h, const SavedTensors& s);
  // The layer's normed inputs, which it does not keep: h = attn_norm(x) (x
  // itself for layer 0) and h2 = mlp_norm(x1), the forward's and backward's
  // alike (backward makes them again from the kept x and x1). The forward
  // passes its saved statistics; backward passes none (temporaries take them).
  Tensor attention_input(int64_t l, const Tensor& x, const Tensor& mean = Tensor(), const Tensor& rstd = Tensor());
  Tensor mlp_input(int64_t l, const Tensor& x1, const Tensor& mean = Tensor(), const Tensor& rstd = Tensor());
  void layer_forward(int64_t l, const Tensor& x, const SavedTensors& s);
  Tensor layer_backward(int64_t l, const Tensor& x, const SavedTensors& s, const Tensor& dout);
  void head_forward(const Tensor& hidden, const SavedTensors& s);
  Tensor head_backward(const SavedTensors& s, const Tensor& dlogits);

  ModernBertOptions options_;
  ModernBertTensors w_, wh_, g_;
  Tensor zero_bias_;  // [H] zeros for the LayerNorms without a bias
  // Per batch.
  int64_t B_ = 0, L_ = 0;
  ForwardOptions forward_options_;
  Tensor ids_, mask_;
  std::unique_ptr<Step> step_;
};

}  // namespace anatomy
