// bert.cpp: a BERT-style model: the encoder and the head run unit by unit — the embeddings (unit 0), each encoder
// layer (unit 1 + l), the head (unit L + 1) — each unit's weights used (and,
// under ZeRO stage 3, lent) around its work, its gradients reported final
// after its backward.
#include "anatomy/model/bert/bert.h"

#include <vector>

#include <fmt/format.h>

namespace anatomy {

struct BertStyleModel::Step {
  SavedTensors embeddings;
  std::vector<SavedTensors> layers;
  SavedTensors head;
  Tensor dlogits;
  bool has_loss = false;
};

BertStyleModel::BertStyleModel(Backend& backend, const ModelConfig& config, DType compute,
                               const BertLayout& layout)
    : Model(backend, config, compute, bert_parameter_specs(config, layout),
            [&config, &layout](const ParameterSet& set) { return bert_parameter_units(set, config, layout); }),
      layout_(layout),
      encoder_(backend_, config_, layout_, compute_, w_, wh_, g_),
      head_(make_bert_head(backend_, config_, layout_, compute_, w_, wh_, g_, encoder_)) {
  // A head that reads the first token only: the last layer for that token
  // alone, unless asked otherwise or the backend's first-query attention does
  // not take the model's head size and longest sequence (then the whole layer).
  encoder_.set_first_token_last_layer(
      head_->first_token_only() && !layout_.relative_attention &&
          backend_.options().last_layer == LastLayer::FirstToken &&
      config_.num_attention_heads > 0 &&
      backend_.attention_first_query_supported(config_.head_dim(), config_.max_position_embeddings));
  bind_views(Views::Weights, weights_);
  bind_views(Views::Compute, half_weights_ ? *half_weights_ : weights_);
}

std::string BertStyleModel::attention_note() const {
  return first_token_last_layer() ? "; the last layer's, of the first token only (--last-layer all: every token)"
                                  : "";
}

BertTensors& BertStyleModel::views_of(Views views) {
  switch (views) {
    case Views::Weights: return w_;
    case Views::Compute: return wh_;
    case Views::Gradients: return g_;
  }
  return w_;
}

void BertStyleModel::bind_views(Views views, const ParameterSet& set) {
  views_of(views) = BertTensors::bind(set, config_, layout_);
}

void BertStyleModel::bind_unit_views(Views views, int64_t unit,
                                                    const std::function<Tensor(const std::string&)>& get) {
  views_of(views).bind_unit(unit, config_, layout_, get);
}

bool BertStyleModel::reads_float32_in_mixed_precision(const std::string& name) const {
  const bool projection = name.rfind(layout_.prefix + layout_.projection + ".", 0) == 0;
  const bool token_classifier = (layout_.task == kTokenClassification || layout_.task == kQuestionAnswering) &&
                                name.rfind(layout_.classifier + ".", 0) == 0;
  // The masked-LM head's dense layer and the decoder's bias (its weight, the
  // word embeddings, is read in both: float32 by the embeddings, 16-bit by the decoder).
  const bool lm_head = layout_.masked_lm() && (name.rfind(layout_.head_dense + ".", 0) == 0 || name == layout_.lm_bias);
  return !(layout_.in_encoder_layer(name) || projection || token_classifier || lm_head) ||
         layout_.is_layer_norm(name);
}

std::vector<std::string> BertStyleModel::checkpoint_names(const std::string& name) const {
  std::vector<std::string> names = {name};
  auto legacy = [](std::string n) {
    auto replace_suffix = [&](const std::string& from, const std::string& to) {
      if (n.size() >= from.size() && n.compare(n.size() - from.size(), from.size(), from) == 0)
        n = n.substr(0, n.size() - from.size()) + to;
    };
    replace_suffix("LayerNorm.weight", "LayerNorm.gamma");
    replace_suffix("LayerNorm.bias", "LayerNorm.beta");
    return n;
  };
  if (legacy(name) != name) names.push_back(legacy(name));
  const std::string& prefix = layout_.prefix;
  if (name.rfind(prefix, 0) == 0) {  // a bare base model's checkpoint has no "bert." prefix
    names.push_back(name.substr(prefix.size()));
    if (legacy(name) != name) names.push_back(legacy(name).substr(prefix.size()));
  }
  return names;
}

bool BertStyleModel::optional_on_load(const std::string& name) const {
  if (layout_.masked_lm())
    return name.rfind(layout_.head_dense + ".", 0) == 0 || name.rfind(layout_.lm_norm + ".", 0) == 0 ||
           name == layout_.lm_bias;
  return (layout_.has_head_dense() && name.rfind(layout_.head_dense + ".", 0) == 0) ||
         name.rfind(layout_.classifier + ".", 0) == 0;
}

int64_t BertStyleModel::zero_row_on_init(const ParamSpec& spec) const {
  // nn.Embedding(padding_idx=pad_token_id): that row starts at zero.
  if (spec.name == layout_.prefix + layout_.word + ".weight") return config_.pad_token_id;
  if (layout_.position_padding_row && spec.name == layout_.prefix + layout_.position + ".weight")
    return config_.pad_token_id;
  return -1;
}

BertStyleModel::~BertStyleModel() = default;

ForwardOutput BertStyleModel::forward(const ModelInputs& given, const ForwardOptions& options) {
  // Multiple choice: [examples, choices, L] inputs run as examples × choices sequences.
  ModelInputs inputs = given;
  int64_t choices = 0;
  if (given.input_ids.defined() && given.input_ids.rank() == 3) {
    ANATOMY_CHECK(layout_.task == kMultipleChoice, "{}: input_ids [examples, choices, seq] are multiple choice's",
                  layout_.architecture);
    choices = given.input_ids.dim(1);
    const Shape flat = {given.input_ids.dim(0) * choices, given.input_ids.dim(2)};
    for (Tensor* t : {&inputs.input_ids, &inputs.token_type_ids, &inputs.attention_mask})
      if (t->defined()) *t = t->reshape(flat);
  }
  encoder_.prepare_inputs(inputs, options);
  const int64_t B = encoder_.batch(), L = encoder_.length();
  const Category kept = options.save_for_backward ? Category::Activations : Category::Temporary;
  Ledger& ledger = backend_.ledger();
  auto step = std::make_unique<Step>();

  ledger.set_phase("forward embeddings");
  const ActivationPlan plan = encoder_.activation_plan();
  step->embeddings = SavedTensors(backend_, saved_for_backward(LayerKind::Embeddings, config_, B, L, plan, 0, layout_),
                                  kept, "embeddings.");
  use_unit_weights(0, 1);
  encoder_.embeddings_forward(step->embeddings);
  drop_unit_weights(0);
  const Tensor* hidden = &step->embeddings["out"];
  SavedTensors previous;  // inference keeps only the layer before
  // Full gradient checkpointing keeps each layer's output (the next layer's
  // input) only; selective keeps all but attention's internals and the GELU input.
  const bool checkpointing = options.save_for_backward && options.gradient_checkpointing;
  std::set<std::string> checkpoint = {"out"};
  if (options.selective_checkpointing)
    for (const SavedSpec& spec : saved_for_backward(LayerKind::EncoderLayer, config_, B, L, plan, 0, layout_))
      if (selective_recomputed().count(spec.name) == 0) checkpoint.insert(spec.name);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    ledger.set_phase(fmt::format("forward layer {}", l));
    SavedTensors layer(backend_,
                       saved_for_backward(LayerKind::EncoderLayer, config_, B, L, plan,
                                          encoder_.rows_after_attention(l), layout_),
                       kept, fmt::format("layer.{}.", l), checkpointing ? &checkpoint : nullptr);
    use_unit_weights(1 + l, 2 + l);
    encoder_.layer_forward(l, *hidden, layer);
    drop_unit_weights(1 + l);
    if (checkpointing) layer.keep_only(checkpoint);
    if (options.save_for_backward) {
      step->layers.push_back(std::move(layer));
      hidden = &step->layers.back()["out"];
    } else {
      previous = std::move(layer);
      hidden = &previous["out"];
    }
  }
  ledger.set_phase("forward head");
  step->head =
      SavedTensors(backend_, saved_for_backward(LayerKind::Head, config_, B, L, plan, 0, layout_), kept, "head.");
  use_unit_weights(config_.num_hidden_layers + 1, -1);
  head_->forward(*hidden, inputs.labels, step->head);
  drop_unit_weights(config_.num_hidden_layers + 1);

  ForwardOutput out;
  out.logits = head_->logits(step->head);
  if (choices > 0) out.logits = out.logits.reshape({B / choices, choices});  // a logit per choice
  if (out.logits.defined()) out.outputs = head_->named_outputs(out.logits);
  if (inputs.labels.defined()) {
    out.problem_type = head_->problem_type(inputs.labels.dtype());
    if (const std::optional<double> loss = head_->forward_loss()) {
      out.loss = *loss;
    } else {
      step->dlogits = Tensor::empty(ledger, out.logits.shape(), DType::F32, Category::Temporary, "dlogits");
      ledger.set_phase("loss");
      out.loss = head_->loss(out.logits, inputs.labels, out.problem_type, step->dlogits, options.label_smoothing);
    }
    step->has_loss = true;
  }
  if (options.save_for_backward) {
    step_ = std::move(step);
  } else {
    step_.reset();
    encoder_.release_relative();
  }
  return out;
}

void BertStyleModel::backward(double loss_scale) {
  ANATOMY_CHECK(step_ && step_->has_loss, "backward without a training forward that computed a loss");
  std::unique_ptr<Step> step = std::move(step_);
  if (!lends_gradients()) gradients();
  Ledger& ledger = backend_.ledger();
  const ForwardOptions& options = encoder_.options();
  const int64_t head_unit = config_.num_hidden_layers + 1;

  ledger.set_phase("backward head");
  use_unit_weights(head_unit, head_unit - 1);
  use_unit_gradients(head_unit);
  if (loss_scale != 1.0 && step->dlogits.defined()) backend_.scale(step->dlogits, loss_scale);
  // The head's held gradients (the pooler's) stay until the end of backward, as the plan has them.
  BertHead::Gradients head_gradients = head_->backward(step->head, step->dlogits, loss_scale);
  Tensor d_hidden = std::move(head_gradients.d_hidden);
  step->head = SavedTensors();
  drop_unit_weights(head_unit);
  unit_gradients_ready(head_unit);
  gradients_ready(layout_.head_first_parameter().c_str());

  for (int64_t l = config_.num_hidden_layers - 1; l >= 0; --l) {
    const Tensor& x = l > 0 ? step->layers[l - 1]["out"] : step->embeddings["out"];
    // The layer's weights (lent: gathered) serve its recompute and its backward.
    if (lends_gradients())
      ledger.set_phase(options.gradient_checkpointing ? fmt::format("recompute layer {}", l)
                                                     : fmt::format("backward layer {}", l));
    use_unit_weights(1 + l, l);
    use_unit_gradients(1 + l);
    if (options.gradient_checkpointing && options.selective_checkpointing) {
      ledger.set_phase(fmt::format("recompute layer {}", l));
      encoder_.recompute_selective(l, x, step->layers[l]);
      ledger.set_phase(fmt::format("backward layer {}", l));
      d_hidden = encoder_.layer_backward(l, x, step->layers[l], d_hidden);
    } else if (options.gradient_checkpointing) {
      // The layer's forward again, from its checkpointed input: the same
      // kernels and the same dropout masks (a function of seed, step and
      // site), so the same activations and gradients as without checkpointing.
      ledger.set_phase(fmt::format("recompute layer {}", l));
      SavedTensors layer(backend_,
                         saved_for_backward(LayerKind::EncoderLayer, config_, encoder_.batch(), encoder_.length(),
                                            encoder_.activation_plan(), encoder_.rows_after_attention(l), layout_),
                         Category::Activations, fmt::format("layer.{}.", l));
      encoder_.layer_forward(l, x, layer);
      ledger.set_phase(fmt::format("backward layer {}", l));
      d_hidden = encoder_.layer_backward(l, x, layer, d_hidden);
    } else {
      ledger.set_phase(fmt::format("backward layer {}", l));
      d_hidden = encoder_.layer_backward(l, x, step->layers[l], d_hidden);
    }
    step->layers.pop_back();  // layer l's saved tensors are no longer needed
    drop_unit_weights(1 + l);
    unit_gradients_ready(1 + l);
    gradients_ready((layout_.layer_name(l, layout_.query) + ".weight").c_str());
  }
  ledger.set_phase("backward embeddings");
  use_unit_weights(0, -1);
  use_unit_gradients(0);
  encoder_.embeddings_backward(step->embeddings, d_hidden);
  drop_unit_weights(0);
  unit_gradients_ready(0);
  gradients_ready(nullptr);
}

}  // namespace anatomy
