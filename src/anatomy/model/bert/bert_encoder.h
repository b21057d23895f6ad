// bert_encoder.h: a BERT-style encoder — the embeddings and the encoder
// layers, as the family's layout arranges them (bert_layout.h) — as an
// explicit forward and backward per layer over the backend's ops. It
// reads and writes through the model's parameter handles (the model binds
// them, lends units to ZeRO and runs the layers in order); a head reads its
// output (bert_classification_head.h).
#pragma once

#include <cstdint>
#include <string>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/bert/bert_activations.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/model.h"

namespace anatomy {

// The backend's activation for the config's hidden_act.
ActivationKind activation_kind(Activation a);

class BertEncoder {
 public:
  // `w`: the float32 weights; `wh`: what the encoder's products read (`w`, or
  // the 16-bit copy under mixed precision); `g`: the gradients. The handles
  // are the model's and may be rebound between batches.
  BertEncoder(Backend& backend, const ModelConfig& config, const BertLayout& layout, DType compute,
              const BertTensors& w, const BertTensors& wh, const BertTensors& g);

  // Whether the last layer computes past attention for the first token only
  // (set by the model when its head reads only that token's output).
  void set_first_token_last_layer(bool on) { first_token_last_layer_ = on; }
  bool first_token_last_layer() const { return first_token_last_layer_ && config_.num_hidden_layers > 0; }
  // The tokens of each sequence that encoder layer l computes after
  // attention: L, or 1 for the last layer when only its first token's output
  // is read.
  int64_t rows_after_attention(int64_t l) const;

  // A batch: its ids, token types (0 when absent; not read without a token
  // type table), positions (the config's PositionIds) and key mask.
  void prepare_inputs(const ModelInputs& inputs, const ForwardOptions& options);
  int64_t batch() const { return B_; }
  int64_t length() const { return L_; }
  const ForwardOptions& options() const { return options_; }
  ActivationPlan activation_plan() const;
  // Dropout at `site` of this batch (p 0 when not training); the head's sites
  // start at dropout_sites().
  DropoutSpec dropout_at(double p, int64_t site) const;
  int64_t dropout_sites() const;
  Tensor temporary(Shape shape, const std::string& name, DType dtype = DType::F32);

  void embeddings_forward(const SavedTensors& s);
  void layer_forward(int64_t layer, const Tensor& x, const SavedTensors& s);
  // Selective checkpointing: recomputes a layer's selective_recomputed() tensors into `s`.
  void recompute_selective(int64_t layer, const Tensor& x, SavedTensors& s);
  // The layer's backward from its output's gradient `dout` (consumed); returns its input's.
  Tensor layer_backward(int64_t layer, const Tensor& x, const SavedTensors& s, const Tensor& dout);
  void embeddings_backward(const SavedTensors& s, const Tensor& dout);
  // Lets go of the relative embeddings' products input (after an inference forward).
  void release_relative() { rel_ = Tensor(); }

 private:
  // The layer's attention, of every token or of the first token only (x0: its row of x).
  void attention_part(int64_t layer, const Tensor& x, const SavedTensors& s);
  void first_query_attention_part(int64_t layer, const Tensor& x, const Tensor& x0, const SavedTensors& s);
  Tensor first_token_row(const Tensor& x);
  // The dropout of layer l's attention output (p 0 where the family has none).
  DropoutSpec attention_output_dropout(int64_t l) const;

  Backend& backend_;
  const ModelConfig& config_;
  const BertLayout& layout_;
  DType compute_;
  const BertTensors& w_;
  const BertTensors& wh_;
  const BertTensors& g_;
  ActivationKind activation_;
  bool first_token_last_layer_ = false;

  // DeBERTa: the layer's relative attention (its position products in s["pos_qk"]).
  void relative_attention_part(int64_t layer, const Tensor& x, const SavedTensors& s);
  // The relative embeddings a layer's products read: the table (LayerNorm'd)
  // after that layer's dropout (relative_dropout(layer)), or the table itself without dropout.
  Tensor relative_embeddings_of(const DropoutSpec& dropout);
  DropoutSpec relative_dropout(int64_t layer) const;
  double attention_scale() const;
  // The layer's backward from its attention's context gradient (relative attention); returns d_x.
  Tensor relative_attention_backward(int64_t layer, const Tensor& x, const SavedTensors& s, const Tensor& d_ctx,
                                     Tensor d_x);

  // Per-batch state.
  int64_t B_ = 0, L_ = 0;
  ForwardOptions options_;
  Tensor ids_, token_types_, positions_, mask_;
  // Relative attention: the index of each distance [2L − 1] and the distances
  // of each index [P, 2] (for L_); the table every layer reads (the
  // embeddings' saved "rel"); the sum of its gradient over the layers.
  Tensor rel_index_, rel_ranges_, rel_, d_rel_sum_;
  int64_t rel_length_ = -1;
};

}  // namespace anatomy
