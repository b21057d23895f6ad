// model.h: the interface every trainable model implements, and what it
// shares. The trainer, checkpointing, ZeRO sharding, the memory plan and the
// commands know a model only through it: its parameters (Hugging Face names,
// one flat layout, units for ZeRO), a training forward and backward, the
// outputs under Hugging Face's names, and the loss. A family (model/bert/, ...)
// derives from Model, declares its parameters and binds its named handles; the
// registry (model/registry.h) makes one from a config.json.
//
// What Model does for every family: it owns the float32 weights, their 16-bit
// copy under mixed precision and the gradients; it lends them unit by unit to
// ZeRO stages 2 and 3 (the family calls use_unit_weights()/drop_unit_weights()
// and use_unit_gradients()/unit_gradients_ready() around each unit's work) and
// tells data parallelism when a suffix of the gradients is final.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/config.h"
#include "anatomy/model/parameters.h"
#include "anatomy/model/tasks.h"

namespace anatomy {

// One batch on the model's device. Optional tensors may be left undefined:
// token types default to 0, the attention mask to all ones; without labels no
// loss is computed.
struct ModelInputs {
  Tensor input_ids;       // int64 [B, L]
  Tensor token_type_ids;  // int64 [B, L]
  Tensor attention_mask;  // int64 [B, L], 1 attend / 0 padding
  Tensor labels;          // int64 [B] (single label), float32 [B] or [B, C] (regression, multi-label),
                          // int64 [B, L] (token classification, -100: none), int64 [2, B]
                          // (question answering: start_positions, then end_positions)
};

struct ForwardOptions {
  bool training = false;           // dropout on
  bool save_for_backward = false;  // keep activations for backward()
  // With save_for_backward: keep only each layer's output, and recompute the
  // layer's forward (same dropout masks) in backward.
  bool gradient_checkpointing = false;
  // With it: keep all but attention's internals and the activation's input,
  // and recompute only those.
  bool selective_checkpointing = false;
  uint64_t seed = 42;              // dropout masks are a function of (seed, step, site)
  uint64_t step = 0;
  // With labels: Trainer's label smoothing ε of a single-label cross-entropy
  // (sequence and token classification, multiple choice); 0 otherwise.
  double label_smoothing = 0.0;
};

struct ForwardOutput {
  // On the device: [B, num_labels]; token classification: [B, L, num_labels];
  // question answering: [2, B, L] (the start logits, then the end logits).
  Tensor logits;
  std::optional<double> loss;
  ProblemType problem_type = ProblemType::Unset;
  // The outputs under Hugging Face's names (ModelOutput's fields), in its
  // order: views of `logits` ("logits"; or "start_logits", "end_logits").
  std::vector<std::pair<std::string, Tensor>> outputs;
  std::vector<std::pair<std::string, Tensor>> named() const {
    return outputs.empty() ? std::vector<std::pair<std::string, Tensor>>{{"logits", logits}} : outputs;
  }
};

// ZeRO stages 2 and 3 (distributed/zero_sharding.h): the model reads a unit's
// weights and writes a unit's gradients (units: Model::parameter_units()) through
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
ProblemType resolve_problem_type(const ModelConfig& config, DType labels_dtype);

// The mean loss of logits [B, C] against `labels` for the problem type
// (cross-entropy, MSE, binary cross-entropy with logits), its gradient into
// `dlogits`; labels as ModelInputs holds them. `label_smoothing` (Trainer's
// LabelSmoother) applies to the single-label cross-entropy only.
double sequence_classification_loss(Backend& backend, const Tensor& logits, const Tensor& labels, ProblemType type,
                                    const Tensor& dlogits, double label_smoothing = 0.0);

class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Hugging Face's class name, e.g. "BertForSequenceClassification".
  virtual std::string architecture() const = 0;
  // What its head does (model/tasks.h).
  virtual std::string task() const { return kSequenceClassification; }
  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }
  // float32, or BF16/F16 under mixed precision (the family says what computes in 16 bits).
  DType compute_dtype() const { return compute_; }

  // ---- parameters
  ParameterSet& weights() { return weights_; }
  const ParameterSet& weights() const { return weights_; }
  // The 16-bit copy of the weights under mixed precision (nullptr in float32),
  // for an optimizer that refreshes it as it updates the masters.
  const ParameterSet* half_weights() const { return half_weights_.get(); }
  // Mixed precision: rounds the float32 weights into the 16-bit copy; call
  // after the weights change (load, init, a step).
  void refresh_half_weights();
  // Gradients are allocated on first use (inference never allocates them).
  ParameterSet& gradients();
  bool has_gradients() const { return gradients_ != nullptr; }
  void zero_gradients();
  // Under mixed precision, whether the model reads parameter `name` as
  // float32 (not from the 16-bit copy): ZeRO stage 2 keeps those whole.
  virtual bool reads_float32_in_mixed_precision(const std::string& name) const = 0;
  // The units of the flat layout, in order (ZeRO's granularity).
  const std::vector<ParameterUnit>& parameter_units() const { return unit_runs_; }

  // ---- checkpoints (model/checkpoint.h reads and writes through these)
  // The names a checkpoint may use for parameter `name`, in order of preference.
  virtual std::vector<std::string> checkpoint_names(const std::string& name) const { return {name}; }
  // Whether `name` may be missing from a checkpoint (a head trained anew).
  virtual bool optional_on_load(const std::string& name) const { return false; }
  // The row of an embedding that initialisation leaves zero (the padding
  // token's), or -1.
  virtual int64_t zero_row_on_init(const ParamSpec& spec) const { return -1; }

  // What the model's attention computes beyond the kernels' choice, as a
  // clause for the run's "Attention:" line (e.g. a layer computed for fewer
  // tokens), or "".
  virtual std::string attention_note() const { return ""; }

  // ---- training
  virtual ForwardOutput forward(const ModelInputs& inputs, const ForwardOptions& options) = 0;
  // Backpropagates the loss of the last forward that saved for backward,
  // accumulating into gradients() the gradient of `loss_scale` × loss; frees
  // the saved activations.
  virtual void backward(double loss_scale = 1.0) = 0;
  // Called during backward() each time a suffix of the gradients' flat buffer
  // is final — elements [from, end) — at the point of the backend's queue
  // where it is. Data parallelism starts the all-reduce of those gradients
  // there, while the rest of backward computes.
  void set_gradients_ready_hook(std::function<void(int64_t from)> hook) { ready_hook_ = std::move(hook); }
  // ZeRO stages 2 and 3: weights and gradients unit by unit through `units`
  // (null: the model's own buffers, as without it). With units that lend the
  // weights, call release_weights() after it, and restore_weights() (then
  // fill the weights) before unsetting it.
  void set_parameter_units(ParameterUnits* units) { units_ = units; }
  // Gives the model's float32 weights (and their 16-bit copy, unless
  // `keep_half`) back to the ledger, keeping their layout; restore_weights()
  // allocates them again, zeroed (and reads its own float32 weights again).
  void release_weights(bool keep_half = false);
  void restore_weights();
  // Mixed precision with the float32 masters sharded (ZeRO stage 2): after
  // release_weights(true), the float32 parameters the model reads (those of
  // reads_float32_in_mixed_precision) come from `subset`, a set of those specs only.
  void read_float32_from(const ParameterSet& subset);

 protected:
  // Allocates the float32 weights of `specs` (category weights), then their
  // 16-bit copy when `compute` is 16-bit; `units` are computed from the layout.
  Model(Backend& backend, ModelConfig config, DType compute, std::vector<ParamSpec> specs,
        const std::function<std::vector<ParameterUnit>(const ParameterSet&)>& units);

  // The family's named handles: Weights (float32 masters), Compute (what the
  // products read: the masters, or the 16-bit copy) and Gradients.
  enum class Views { Weights, Compute, Gradients };
  // Binds every handle of `views` to `set`'s tensors (undefined ones when released).
  virtual void bind_views(Views views, const ParameterSet& set) = 0;
  // Binds the handles of one unit to what `get` returns for each parameter
  // name (an undefined tensor unbinds).
  virtual void bind_unit_views(Views views, int64_t unit, const std::function<Tensor(const std::string&)>& get) = 0;

  // Around the work of one unit, for ZeRO (no-ops without units).
  void use_unit_weights(int64_t unit, int64_t next);
  void drop_unit_weights(int64_t unit);
  void use_unit_gradients(int64_t unit);
  void unit_gradients_ready(int64_t unit);
  bool lends_gradients() const { return units_ != nullptr; }
  // The gradients from parameter `first_parameter` on (nullptr: all) are final.
  void gradients_ready(const char* first_parameter);

  Backend& backend_;
  ModelConfig config_;
  DType compute_;
  ParameterSet weights_;
  std::unique_ptr<ParameterSet> half_weights_;  // mixed precision only
  std::unique_ptr<ParameterSet> gradients_;

 private:
  void bind_unit_buffer(Views views, int64_t unit, const Tensor& buffer);
  std::vector<ParameterUnit> unit_runs_;
  ParameterUnits* units_ = nullptr;
  std::function<void(int64_t)> ready_hook_;
};

}  // namespace anatomy
