// distilbert.cpp: the DistilBERT family's layout, config.json and sizes.
#include "anatomy/model/distilbert/distilbert.h"

#include <algorithm>
#include <tuple>

#include "anatomy/core/error.h"
#include "anatomy/model/bert/bert_config.h"

namespace anatomy {

namespace {

using nlohmann::json;

const std::vector<std::string> kKnownKeys = {
    "vocab_size", "dim", "n_layers", "n_heads", "hidden_dim", "activation", "dropout", "attention_dropout",
    "seq_classif_dropout", "max_position_embeddings", "initializer_range", "pad_token_id", "num_labels",
    "problem_type", "id2label", "label2id", "model_type", "sinusoidal_pos_embds"};

// DistilBertConfig's defaults.
ModelConfig defaults() {
  ModelConfig c;
  c.model_type = "distilbert";
  c.num_hidden_layers = 6;
  c.type_vocab_size = 0;
  c.classifier_dropout = 0.2;
  c.layer_norm_eps = 1e-12;
  return c;
}

}  // namespace

const BertLayout& distilbert_layout() {
  static const BertLayout layout = [] {
    BertLayout l;
    l.model_type = "distilbert";
    l.architecture = "DistilBertForSequenceClassification";
    l.prefix = "distilbert.";
    l.embeddings_norm = "embeddings.LayerNorm";
    l.layer = "transformer.layer.{}.";
    l.query = "attention.q_lin";
    l.key = "attention.k_lin";
    l.value = "attention.v_lin";
    l.attention_output = "attention.out_lin";
    l.attention_norm = "sa_layer_norm";
    l.intermediate = "ffn.lin1";
    l.output = "ffn.lin2";
    l.output_norm = "output_layer_norm";
    l.attention_output_dropout = false;
    l.head_dense = "pre_classifier";
    l.classifier = "classifier";
    l.head_activation = ActivationKind::Relu;
    l.dropout_before_head_dense = false;
    return l;
  }();
  return layout;
}

ModelConfig parse_distilbert_config(const json& j, const std::string& source) {
  if (j.contains("sinusoidal_pos_embds") && !j["sinusoidal_pos_embds"].is_null()) {
    if (!j["sinusoidal_pos_embds"].is_boolean())
      fail("{}: 'sinusoidal_pos_embds' must be true or false, got {}", source, j["sinusoidal_pos_embds"].dump());
    if (j["sinusoidal_pos_embds"].get<bool>())
      fail("{}: sinusoidal_pos_embds true is not supported (learned position embeddings only)", source);
  }
  ModelConfig c = defaults();
  c.vocab_size = config_int(j, "vocab_size", c.vocab_size, source);
  c.hidden_size = config_int(j, "dim", c.hidden_size, source);
  c.num_hidden_layers = config_int(j, "n_layers", c.num_hidden_layers, source);
  c.num_attention_heads = config_int(j, "n_heads", c.num_attention_heads, source);
  c.intermediate_size = config_int(j, "hidden_dim", c.intermediate_size, source);  // 3072 whatever dim is
  c.hidden_dropout_prob = config_double(j, "dropout", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob = config_double(j, "attention_dropout", c.attention_probs_dropout_prob, source);
  c.classifier_dropout = config_double(j, "seq_classif_dropout", *c.classifier_dropout, source);
  c.max_position_embeddings = config_int(j, "max_position_embeddings", c.max_position_embeddings, source);
  c.initializer_range = config_double(j, "initializer_range", c.initializer_range, source);
  c.pad_token_id = config_int(j, "pad_token_id", c.pad_token_id, source);
  if (j.contains("activation")) c.hidden_act = parse_activation(j["activation"], "activation", source);
  // Its own key names in errors about its sizes (validate_model_config would name BERT's).
  for (const auto& [key, value, limit] : {std::tuple{"dim", c.hidden_size, int64_t{1} << 20},
                                          std::tuple{"n_layers", c.num_hidden_layers, int64_t{1} << 16},
                                          std::tuple{"n_heads", c.num_attention_heads, int64_t{1} << 16},
                                          std::tuple{"hidden_dim", c.intermediate_size, int64_t{1} << 22}}) {
    if (value <= 0) fail("{}: '{}' must be positive, got {}", source, key, value);
    if (value > limit) fail("{}: '{}' is {}, more than {} (no device holds such a model)", source, key, value, limit);
  }
  if (c.hidden_size % c.num_attention_heads != 0)
    fail("{}: dim {} is not a multiple of n_heads {}", source, c.hidden_size, c.num_attention_heads);
  parse_labels(j, source, c);
  for (const auto& [key, value] : j.items())
    if (std::find(kKnownKeys.begin(), kKnownKeys.end(), key) == kKnownKeys.end()) c.extra[key] = value;
  validate_model_config(c, source);
  return c;
}

json distilbert_config_to_json(const ModelConfig& c) {
  json j = c.extra;
  j["architectures"] = json::array({distilbert_layout().architecture});
  j["model_type"] = "distilbert";
  j["vocab_size"] = c.vocab_size;
  j["dim"] = c.hidden_size;
  j["n_layers"] = c.num_hidden_layers;
  j["n_heads"] = c.num_attention_heads;
  j["hidden_dim"] = c.intermediate_size;
  j["activation"] = activation_name(c.hidden_act);
  j["dropout"] = c.hidden_dropout_prob;
  j["attention_dropout"] = c.attention_probs_dropout_prob;
  j["seq_classif_dropout"] = c.classifier_dropout_prob();
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["sinusoidal_pos_embds"] = false;
  j["initializer_range"] = c.initializer_range;
  j["pad_token_id"] = c.pad_token_id;
  labels_to_json(c, j);
  if (!j.contains("dtype")) j["dtype"] = "float32";
  return j;
}

std::optional<ModelConfig> distilbert_preset(const std::string& name) {
  ModelConfig c = defaults();
  if (name == "distilbert-base-uncased") return c;
  if (name == "distilbert-base-cased") {
    c.vocab_size = 28996;
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> distilbert_preset_names() { return {"distilbert-base-uncased", "distilbert-base-cased"}; }

}  // namespace anatomy
