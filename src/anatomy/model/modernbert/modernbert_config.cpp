// modernbert_config.cpp: ModernBERT's config.json <-> ModelConfig, and its sizes.
#include "anatomy/model/modernbert/modernbert_config.h"

#include <algorithm>

#include "anatomy/core/error.h"
#include "anatomy/model/bert/bert_config.h"

namespace anatomy {

namespace {

using nlohmann::json;

// Keys read into ModelConfig's fields (the rest stay in extra).
const std::vector<std::string> kFieldKeys = {
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_activation", "max_position_embeddings", "initializer_range", "norm_eps", "pad_token_id",
    "attention_dropout", "mlp_dropout", "classifier_dropout", "num_labels", "problem_type", "id2label",
    "label2id", "model_type"};

bool get_bool(const json& j, const char* key, bool fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail("{}: '{}' must be true or false, got {}", source, key, j[key].dump());
  return j[key].get<bool>();
}

// The theta of one layer type from rope_parameters; refuses any rope_type but "default".
double rope_theta(const json& j, const char* layer_type, double fallback, const std::string& source) {
  if (!j.contains("rope_parameters") || j["rope_parameters"].is_null()) return fallback;
  const json& all = j["rope_parameters"];
  if (!all.is_object()) fail("{}: 'rope_parameters' must be an object, got {}", source, all.dump());
  if (!all.contains(layer_type) || all[layer_type].is_null()) return fallback;
  const json& p = all[layer_type];
  if (!p.is_object()) fail("{}: rope_parameters.{} must be an object", source, layer_type);
  if (p.contains("rope_type") && p["rope_type"] != "default")
    fail("{}: rope_parameters.{}.rope_type {} is not supported (only \"default\")", source, layer_type,
         p["rope_type"].dump());
  return config_double(p, "rope_theta", fallback, source);
}

}  // namespace

ModernBertOptions modernbert_options(const ModelConfig& c, const std::string& source) {
  const json& j = c.extra;
  ModernBertOptions o;
  o.norm_bias = get_bool(j, "norm_bias", o.norm_bias, source);
  o.attention_bias = get_bool(j, "attention_bias", o.attention_bias, source);
  o.mlp_bias = get_bool(j, "mlp_bias", o.mlp_bias, source);
  o.classifier_bias = get_bool(j, "classifier_bias", o.classifier_bias, source);
  o.global_rope_theta = rope_theta(j, "full_attention", config_double(j, "global_rope_theta", o.global_rope_theta, source),
                                   source);
  o.local_rope_theta = rope_theta(j, "sliding_attention", config_double(j, "local_rope_theta", o.local_rope_theta, source),
                                  source);
  o.local_attention = config_int(j, "local_attention", o.local_attention, source);
  o.embedding_dropout = config_double(j, "embedding_dropout", o.embedding_dropout, source);
  // Hugging Face takes 3 when the key is null.
  o.initializer_cutoff_factor = j.contains("initializer_cutoff_factor") && j["initializer_cutoff_factor"].is_null()
                                    ? 3.0
                                    : config_double(j, "initializer_cutoff_factor", o.initializer_cutoff_factor, source);
  if (j.contains("classifier_activation"))
    o.classifier_activation = parse_activation(j["classifier_activation"], "classifier_activation", source);
  o.sliding.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    for (size_t l = 0; l < o.sliding.size(); ++l) o.sliding[l] = j["layer_types"][l] == "sliding_attention";
  } else {
    const int64_t every = config_int(j, "global_attn_every_n_layers", 3, source);
    for (size_t l = 0; l < o.sliding.size(); ++l) o.sliding[l] = static_cast<int64_t>(l) % every != 0;
  }
  return o;
}

ModelConfig parse_modernbert_config(const json& j, const std::string& source) {
  ModelConfig c;
  c.model_type = "modernbert";
  c.vocab_size = config_int(j, "vocab_size", 50368, source);
  c.hidden_size = config_int(j, "hidden_size", 768, source);
  c.num_hidden_layers = config_int(j, "num_hidden_layers", 22, source);
  c.num_attention_heads = config_int(j, "num_attention_heads", 12, source);
  c.intermediate_size = config_int(j, "intermediate_size", 1152, source);
  c.hidden_act = j.contains("hidden_activation") ? parse_activation(j["hidden_activation"], "hidden_activation", source)
                                                 : Activation::Gelu;
  c.max_position_embeddings = config_int(j, "max_position_embeddings", 8192, source);
  c.initializer_range = config_double(j, "initializer_range", 0.02, source);
  c.layer_norm_eps = config_double(j, "norm_eps", 1e-5, source);
  c.pad_token_id = config_int(j, "pad_token_id", 50283, source);
  c.attention_probs_dropout_prob = config_double(j, "attention_dropout", 0.0, source);
  c.hidden_dropout_prob = config_double(j, "mlp_dropout", 0.0, source);
  c.classifier_dropout = config_double(j, "classifier_dropout", 0.0, source);
  c.type_vocab_size = 0;
  parse_labels(j, source, c);
  for (const auto& [key, value] : j.items())
    if (std::find(kFieldKeys.begin(), kFieldKeys.end(), key) == kFieldKeys.end()) c.extra[key] = value;
  validate_model_config(c, source);

  // What the model does not implement, refused here by name.
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    fail("{}: rope_scaling {} is not supported", source, j["rope_scaling"].dump());
  if (j.contains("classifier_pooling") && j["classifier_pooling"] != "cls")
    fail("{}: classifier_pooling {} is not supported (only \"cls\")", source, j["classifier_pooling"].dump());
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& types = j["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      fail("{}: 'layer_types' must list {} layer types, got {}", source, c.num_hidden_layers, types.dump());
    for (const json& t : types)
      if (t != "full_attention" && t != "sliding_attention")
        fail("{}: layer type {} is not supported (full_attention, sliding_attention)", source, t.dump());
  }
  if (j.contains("global_attn_every_n_layers") && config_int(j, "global_attn_every_n_layers", 3, source) <= 0)
    fail("{}: 'global_attn_every_n_layers' must be positive", source);
  const ModernBertOptions o = modernbert_options(c, source);  // reads and checks the rest
  if (o.local_attention < 2 || o.local_attention % 2 != 0)
    fail("{}: 'local_attention' must be a positive even number, got {}", source, o.local_attention);
  if (!(o.global_rope_theta > 0.0) || !(o.local_rope_theta > 0.0)) fail("{}: rope thetas must be positive", source);
  if (!(o.initializer_cutoff_factor > 0.0))
    fail("{}: 'initializer_cutoff_factor' must be positive, got {}", source, o.initializer_cutoff_factor);
  if (c.head_dim() % 2 != 0) fail("{}: rotary embeddings need an even head size, got {}", source, c.head_dim());
  return c;
}

json modernbert_config_to_json(const ModelConfig& c) {
  json j = c.extra;
  j["architectures"] = json::array({"ModernBertForSequenceClassification"});
  j["model_type"] = "modernbert";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_activation"] = activation_name(c.hidden_act);
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = c.initializer_range;
  j["norm_eps"] = c.layer_norm_eps;
  j["pad_token_id"] = c.pad_token_id;
  j["attention_dropout"] = c.attention_probs_dropout_prob;
  j["mlp_dropout"] = c.hidden_dropout_prob;
  j["classifier_dropout"] = c.classifier_dropout_prob();
  labels_to_json(c, j);
  if (!j.contains("dtype")) j["dtype"] = "float32";
  return j;
}

std::optional<ModelConfig> modernbert_preset(const std::string& name) {
  ModelConfig c = parse_modernbert_config(json{{"model_type", "modernbert"}}, name);
  if (name == "modernbert-base") return c;
  if (name == "modernbert-large") {
    c.hidden_size = 1024;
    c.num_hidden_layers = 28;
    c.num_attention_heads = 16;
    c.intermediate_size = 2624;
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> modernbert_preset_names() { return {"modernbert-base", "modernbert-large"}; }

}  // namespace anatomy
