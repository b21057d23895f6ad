// bert.h: BertForSequenceClassification with Hugging Face semantics, written as
// an explicit forward and backward per layer over the backend's ops.
#pragma once

#include <functional>

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/activations.h"
#include "anatomy/model/config.h"
#include "anatomy/model/parameters.h"

namespace anatomy {

// One batch on the model's device. Optional tensors may be left undefined:
// token types default to 0, the attention mask to all ones; without labels no
// loss is computed.
struct BertInputs {
  Tensor input_ids;       // int64 [B, L]
  Tensor token_type_ids;  // int64 [B, L]
  Tensor attention_mask;  // int64 [B, L], 1 attend / 0 padding
  Tensor labels;          // int64 [B] (single label), float32 [B] or [B, C] (regression, multi-label)
};

struct ForwardOptions {
  bool training = false;           // dropout on
  bool save_for_backward = false;  // keep activations for backward()
  // With save_for_backward: keep only each encoder layer's output, and
  // recompute the layer's forward (same dropout masks) in backward.
  bool gradient_checkpointing = false;
  // With it: keep all but attention's internals and the GELU input
  // (selective_recomputed()), and recompute only those.
  bool selective_checkpointing = false;
  uint64_t seed = 42;              // dropout masks are a function of (seed, step, site)
  uint64_t step = 0;
};

struct ForwardOutput {
  Tensor logits;  // [B, num_labels] on the device
  std::optional<double> loss;
  ProblemType problem_type = ProblemType::Unset;
};

// ZeRO stages 2 and 3 (dist/zero_sharding.h): the model reads a unit's
// weights and writes a unit's gradients (units: bert_parameter_units) through
// buffers this interface lends, each laid out as the unit's run of the flat
// layout from element 0. The model asks for them in the order it uses them,
// and drops its views of a unit's buffers once it is done with the unit.
struct UnitWeights {
  Tensor f32;   // the unit's float32 weights
  Tensor half;  // mixed precision: their 16-bit copy (undefined in float32)
};
class ParameterUnits {
 public:
  virtual ~ParameterUnits() = default;
  // Stage 3: the model's own weights are released and every unit's are
  // lent by weights(); false: the model reads its own (stage 2).
  virtual bool lends_weights() const = 0;
  // Unit `unit`'s weights, about to be read (forward, recompute or backward);
  // `next`: the unit the model reads after it (-1: none known), to prefetch.
  virtual UnitWeights weights(int64_t unit, int64_t next) = 0;
  // Unit `unit`'s backward begins: a zeroed float32 buffer for its gradients.
  virtual Tensor gradients(int64_t unit) = 0;
  // Unit `unit`'s gradients (in the buffer gradients() lent) are final.
  virtual void gradients_ready(int64_t unit) = 0;
};

// Hugging Face's rule: the config's problem_type if set; else regression when
// num_labels == 1, single-label when labels are integers, multi-label otherwise.
ProblemType resolve_problem_type(const BertConfig& config, DType labels_dtype);
// The backend's activation for the config's hidden_act.
ActivationKind activation_kind(Activation a);

class BertForSequenceClassification {
 public:
  // `compute` is float32, or BF16/F16 for mixed precision: the encoder's
  // activations and matrix products in 16 bits from a 16-bit copy of the
  // weights, while the float32 weights (masters), gradients, LayerNorm
  // statistics, the embeddings' sum, the pooler/classifier head and the loss
  // stay float32.
  BertForSequenceClassification(Backend& backend, BertConfig config, DType compute = DType::F32);
  ~BertForSequenceClassification();

  const BertConfig& config() const { return config_; }
  Backend& backend() { return backend_; }
  ParameterSet& weights() { return weights_; }
  const ParameterSet& weights() const { return weights_; }
  DType compute_dtype() const { return compute_; }
  ActivationPlan activation_plan() const;
  // Whether the last encoder layer computes its query, attention and what
  // follows for the first token only (the default; ANATOMY_LAST_LAYER=all: no).
  bool first_token_last_layer() const { return first_token_last_layer_ && config_.num_hidden_layers > 0; }
  // Mixed precision: rounds the float32 weights into the 16-bit copy the
  // encoder computes with; call after the weights change (load, init, a step).
  void refresh_half_weights();
  // The 16-bit copy of the weights under mixed precision (nullptr in float32),
  // for an optimizer that refreshes it as it updates the masters.
  const ParameterSet* half_weights() const { return half_weights_.get(); }
  // Gradients are allocated on first use (inference never allocates them).
  ParameterSet& gradients();
  bool has_gradients() const { return gradients_ != nullptr; }
  void zero_gradients();

  ForwardOutput forward(const BertInputs& inputs, const ForwardOptions& options);
  // Backpropagates the loss of the last forward that saved for backward, accumulating into
  // gradients() the gradient of `loss_scale` × loss; frees the saved activations.
  void backward(double loss_scale = 1.0);
  // Called during backward() each time a suffix of the gradients' flat buffer
  // is final — elements [from, end): after the head, after each encoder layer
  // (from its first parameter), after the embeddings (from 0) — at the point
  // of the backend's queue where it is. Data parallelism starts the all-reduce
  // of those gradients there, while the rest of backward computes.
  void set_gradients_ready_hook(std::function<void(int64_t from)> hook) { ready_hook_ = std::move(hook); }
  // ZeRO stages 2 and 3: weights and gradients unit by unit through `units`
  // (null: the model's own buffers, as without it). With units that lend the
  // weights, call release_weights() after it, and restore_weights() (then
  // fill the weights) before unsetting it.
  void set_parameter_units(ParameterUnits* units);
  // Gives the model's float32 weights (and their 16-bit copy, unless
  // `keep_half`) back to the ledger, keeping their layout; restore_weights()
  // allocates them again, zeroed (and reads its own float32 weights again).
  void release_weights(bool keep_half = false);
  void restore_weights();
  // Mixed precision with the float32 masters sharded (ZeRO stage 2): after
  // release_weights(true), the float32 parameters the model reads (those of
  // reads_float32_in_mixed_precision) come from `subset`, a set of those specs only.
  void read_float32_from(const ParameterSet& subset);
  // Under mixed precision the encoder's dense layers compute from the 16-bit
  // copy; everything else (the embeddings, every LayerNorm, the pooler and
  // the classifier) reads the float32 weights.
  static bool reads_float32_in_mixed_precision(const std::string& name);

 private:
  ParameterUnits* units_ = nullptr;
  std::vector<ParameterUnit> unit_runs_;  // bert_parameter_units of the layout
  // With units_: binds unit u's weights (lent) or gradients for use, and unbinds them after.
  void use_unit_weights(int64_t unit, int64_t next);
  void drop_unit_weights(int64_t unit);
  void use_unit_gradients(int64_t unit);
  void unit_gradients_ready(int64_t unit);
  void bind_unit(BertTensors& t, int64_t unit, const Tensor& buffer, const ParameterSet& layout);
  std::function<void(int64_t)> ready_hook_;
  void gradients_ready(const char* first_parameter);
  struct Step;  // the state one training forward leaves for its backward

  DropoutSpec dropout_at(double p, int64_t site) const;
  // The tokens of each sequence that encoder layer l computes after attention:
  // L_, or 1 for the last layer when only its first token's output is read
  // (the pooler's input; ANATOMY_LAST_LAYER=all turns this off, and so does a
  // backend whose first-query attention does not take the model's shape).
  int64_t rows_after_attention(int64_t l) const;
  bool first_token_last_layer_ = true;
  Tensor temporary(Shape shape, const std::string& name, DType dtype = DType::F32);
  void prepare_inputs(const BertInputs& inputs);

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

  Backend& backend_;
  BertConfig config_;
  DType compute_;
  ParameterSet weights_;
  BertTensors w_;
  std::unique_ptr<ParameterSet> half_weights_;  // mixed precision only
  BertTensors wh_;                              // the encoder's weights: w_ or the 16-bit copy
  std::unique_ptr<ParameterSet> gradients_;
  BertTensors g_;
  ActivationKind activation_;

  // Per-batch state.
  int64_t B_ = 0, L_ = 0;
  ForwardOptions options_;
  Tensor ids_, token_types_, positions_, mask_;
  std::unique_ptr<Step> step_;
};

}  // namespace anatomy
