// bert_config.cpp: BERT's config.json <-> ModelConfig, with Hugging Face's key names and defaults,
// and the built-in BERT sizes.
#include "anatomy/model/bert/bert_config.h"

#include <algorithm>

#include <fstream>
#include <sstream>

#include "anatomy/core/error.h"

namespace anatomy {

namespace {

using nlohmann::json;

const std::vector<std::string> kKnownKeys = {
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout",
    "max_position_embeddings", "type_vocab_size", "initializer_range", "layer_norm_eps",
    "pad_token_id", "num_labels", "problem_type", "id2label", "label2id", "model_type",
    "position_embedding_type", "is_decoder", "add_cross_attention"};

}  // namespace

int64_t config_int(const json& j, const char* key, int64_t fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) fail("{}: '{}' must be an integer, got {}", source, key, j[key].dump());
  return j[key].get<int64_t>();
}

double config_double(const json& j, const char* key, double fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) fail("{}: '{}' must be a number, got {}", source, key, j[key].dump());
  return j[key].get<double>();
}

Activation parse_activation(const json& value, const char* key, const std::string& source) {
  if (!value.is_string()) fail("{}: '{}' must be a string, got {}", source, key, value.dump());
  const std::string act = value.get<std::string>();
  if (act == "gelu") return Activation::Gelu;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return Activation::GeluNew;
  if (act == "relu") return Activation::Relu;
  fail("{}: {} \"{}\" is not supported (gelu, gelu_new, relu)", source, key, act);
}

void parse_labels(const json& j, const std::string& source, ModelConfig& c) {
  // Hugging Face: num_labels comes from id2label when present, else num_labels, else 2.
  if (j.contains("id2label") && !j["id2label"].is_null()) {
    if (!j["id2label"].is_object()) fail("{}: 'id2label' must be an object", source);
    for (const auto& [key, value] : j["id2label"].items()) {
      int64_t id;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) throw std::invalid_argument(key);
      } catch (const std::exception&) {
        fail("{}: id2label key \"{}\" is not an integer", source, key);
      }
      if (!value.is_string()) fail("{}: id2label[{}] must be a string", source, key);
      c.id2label[id] = value.get<std::string>();
    }
    c.num_labels = static_cast<int64_t>(c.id2label.size());
    for (int64_t i = 0; i < c.num_labels; ++i)
      if (!c.id2label.count(i)) fail("{}: id2label must hold ids 0..{}; {} is missing", source, c.num_labels - 1, i);
  } else {
    c.num_labels = config_int(j, "num_labels", 2, source);
  }

  if (j.contains("problem_type") && !j["problem_type"].is_null()) {
    std::string p = j["problem_type"].is_string() ? j["problem_type"].get<std::string>() : j["problem_type"].dump();
    if (p == "regression") c.problem_type = ProblemType::Regression;
    else if (p == "single_label_classification") c.problem_type = ProblemType::SingleLabel;
    else if (p == "multi_label_classification") c.problem_type = ProblemType::MultiLabel;
    else fail("{}: problem_type \"{}\" is not one of regression, single_label_classification, "
              "multi_label_classification", source, p);
  }
}

void labels_to_json(const ModelConfig& c, json& j) {
  json id2label = json::object(), label2id = json::object();
  for (int64_t i = 0; i < c.num_labels; ++i) {
    auto it = c.id2label.find(i);
    std::string label = it != c.id2label.end() ? it->second : "LABEL_" + std::to_string(i);
    id2label[std::to_string(i)] = label;
    label2id[label] = i;
  }
  j["id2label"] = id2label;
  j["label2id"] = label2id;
  if (c.problem_type != ProblemType::Unset) j["problem_type"] = problem_type_name(c.problem_type);
}

ModelConfig parse_bert_style_config(const json& j, const std::string& source, ModelConfig c,
                                    const std::vector<std::string>& family_keys) {
  if (j.contains("position_embedding_type") && j["position_embedding_type"] != "absolute")
    fail("{}: position_embedding_type {} is not supported (only \"absolute\")", source,
         j["position_embedding_type"].dump());
  for (const char* key : {"is_decoder", "add_cross_attention"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_boolean()) fail("{}: '{}' must be true or false, got {}", source, key, j[key].dump());
    if (j[key].get<bool>()) fail("{}: {} true is not supported", source, key);
  }
  const auto family_has = [&](const char* key) {
    return std::find(family_keys.begin(), family_keys.end(), key) != family_keys.end();
  };

  c.vocab_size = config_int(j, "vocab_size", c.vocab_size, source);
  c.hidden_size = config_int(j, "hidden_size", c.hidden_size, source);
  c.num_hidden_layers = config_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = config_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.intermediate_size = config_int(j, "intermediate_size", c.intermediate_size, source);
  c.hidden_dropout_prob = config_double(j, "hidden_dropout_prob", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob = config_double(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, source);
  if (j.contains("classifier_dropout") && !j["classifier_dropout"].is_null())
    c.classifier_dropout = config_double(j, "classifier_dropout", 0.0, source);
  c.max_position_embeddings = config_int(j, "max_position_embeddings", c.max_position_embeddings, source);
  c.type_vocab_size = config_int(j, "type_vocab_size", c.type_vocab_size, source);
  if (c.type_vocab_size <= 0) fail("{}: 'type_vocab_size' must be positive, got {}", source, c.type_vocab_size);
  c.initializer_range = config_double(j, "initializer_range", c.initializer_range, source);
  c.layer_norm_eps = config_double(j, "layer_norm_eps", c.layer_norm_eps, source);
  c.pad_token_id = config_int(j, "pad_token_id", c.pad_token_id, source);
  if (family_has("embedding_size")) {
    c.embedding_size = config_int(j, "embedding_size", c.embedding_size, source);
    if (c.embedding_size <= 0) fail("{}: 'embedding_size' must be positive, got {}", source, c.embedding_size);
  }
  if (j.contains("hidden_act")) c.hidden_act = parse_activation(j["hidden_act"], "hidden_act", source);
  parse_labels(j, source, c);

  for (const auto& [key, value] : j.items())
    if (std::find(kKnownKeys.begin(), kKnownKeys.end(), key) == kKnownKeys.end() && !family_has(key.c_str()))
      c.extra[key] = value;
  validate_model_config(c, source);
  return c;
}

ModelConfig parse_bert_config(const json& j, const std::string& source) {
  return parse_bert_style_config(j, source, ModelConfig{});
}

json bert_style_config_to_json(const ModelConfig& c, const std::string& architecture) {
  json j = c.extra;
  j["architectures"] = json::array({architecture});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  if (c.embedding_size > 0) j["embedding_size"] = c.embedding_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_act"] = activation_name(c.hidden_act);
  j["hidden_dropout_prob"] = c.hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = c.attention_probs_dropout_prob;
  j["classifier_dropout"] = c.classifier_dropout ? json(*c.classifier_dropout) : json(nullptr);
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["type_vocab_size"] = c.type_vocab_size;
  j["initializer_range"] = c.initializer_range;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["pad_token_id"] = c.pad_token_id;
  j["position_embedding_type"] = "absolute";
  labels_to_json(c, j);
  if (!j.contains("dtype")) j["dtype"] = "float32";
  return j;
}

json bert_config_to_json(const ModelConfig& c) { return bert_style_config_to_json(c, "BertForSequenceClassification"); }

std::optional<ModelConfig> bert_preset(const std::string& name) {
  auto make = [](int64_t layers, int64_t hidden, int64_t heads) {
    ModelConfig c;
    c.num_hidden_layers = layers;
    c.hidden_size = hidden;
    c.num_attention_heads = heads;
    c.intermediate_size = 4 * hidden;
    return c;
  };
  if (name == "bert-large-uncased") return make(24, 1024, 16);
  if (name == "bert-base-uncased") return make(12, 768, 12);
  if (name == "bert-medium") return make(8, 512, 8);
  if (name == "bert-small") return make(4, 512, 8);
  if (name == "bert-mini") return make(4, 256, 4);
  if (name == "bert-tiny") return make(2, 128, 2);
  return std::nullopt;
}

std::vector<std::string> bert_preset_names() {
  return {"bert-large-uncased", "bert-base-uncased", "bert-medium", "bert-small", "bert-mini", "bert-tiny"};
}

}  // namespace anatomy
