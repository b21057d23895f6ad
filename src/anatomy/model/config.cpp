// config.cpp: config.json <-> ModelConfig: the JSON is read here, its model_type
// picks the family (model/registry.h), whose parser reads the fields.
#include "anatomy/model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/io/json.h"
#include "anatomy/model/registry.h"

namespace anatomy {

using nlohmann::json;

std::string activation_name(Activation a) {
  switch (a) {
    case Activation::Gelu: return "gelu";
    case Activation::GeluNew: return "gelu_new";
    case Activation::Relu: return "relu";
  }
  return "?";
}

std::string problem_type_name(ProblemType p) {
  switch (p) {
    case ProblemType::Unset: return "";
    case ProblemType::Regression: return "regression";
    case ProblemType::SingleLabel: return "single_label_classification";
    case ProblemType::MultiLabel: return "multi_label_classification";
  }
  return "?";
}

std::string max_sequence_length_text(const ModelConfig& c) {
  if (c.position_ids == PositionIds::PastPadding)
    return fmt::format("max_position_embeddings {} less pad_token_id + 1 ({})", c.max_position_embeddings,
                       c.max_sequence_length());
  return fmt::format("max_position_embeddings ({})", c.max_position_embeddings);
}

ModelConfig parse_model_config(const std::string& text, const std::string& source) {
  const json j = io::parse_json(text, source);
  if (!j.is_object()) fail("{}: expected a JSON object", source);
  // Checkpoints without a model_type (written by hand, or by old tools) are read as BERT.
  std::string model_type = "bert";
  if (j.contains("model_type")) {
    if (!j["model_type"].is_string()) fail("{}: 'model_type' must be a string, got {}", source, j["model_type"].dump());
    model_type = j["model_type"].get<std::string>();
  }
  // Hugging Face's class names for the checkpoint (the registry reads them: model/registry.h).
  if (j.contains("architectures")) {
    const json& named = j["architectures"];
    bool names = named.is_array();
    for (const json& name : names ? named : json::array()) names = names && name.is_string();
    if (!names && !named.is_null())
      fail("{}: 'architectures' must be a list of class names, got {}", source, named.dump());
  }
  return model_family(model_type, source).parse_config(j, source);
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (missing or unreadable)", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_model_config(buffer.str(), path);
}

int64_t RelativePositions::index(int64_t d) const {
  int64_t bucket = d;
  if (buckets > 0 && max_position > 0) {
    // make_log_bucket_position: distances within ±mid stay, farther ones grow logarithmically to max_position.
    const int64_t mid = buckets / 2;
    const int64_t magnitude = (d < mid && d > -mid) ? mid - 1 : (d < 0 ? -d : d);
    if (magnitude > mid) {
      const double log_pos = std::ceil(std::log(static_cast<double>(magnitude) / static_cast<double>(mid)) /
                                       std::log(static_cast<double>(max_position - 1) / static_cast<double>(mid)) *
                                       static_cast<double>(mid - 1)) +
                             static_cast<double>(mid);
      bucket = static_cast<int64_t>(log_pos) * (d > 0 ? 1 : -1);
    }
  }
  return std::clamp<int64_t>(bucket + span, 0, 2 * span - 1);
}

void validate_model_config(const ModelConfig& c, const std::string& source) {
  auto positive = [&](int64_t value, const char* key) {
    if (value <= 0) fail("{}: '{}' must be positive, got {}", source, key, value);
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.max_position_embeddings, "max_position_embeddings");
  if (c.type_vocab_size < 0) fail("{}: 'type_vocab_size' must not be negative, got {}", source, c.type_vocab_size);
  if (c.embedding_size < 0) fail("{}: 'embedding_size' must be positive, got {}", source, c.embedding_size);
  positive(c.num_labels, "num_labels");
  // Sizes past these cannot be allocated on any device, and their products would overflow the
  // element counts: refused here, naming the key, rather than by an allocation or a check deep inside.
  auto at_most = [&](int64_t value, int64_t limit, const char* key) {
    if (value > limit) fail("{}: '{}' is {}, more than {} (no device holds such a model)", source, key, value, limit);
  };
  at_most(c.vocab_size, int64_t{1} << 30, "vocab_size");
  at_most(c.hidden_size, int64_t{1} << 20, "hidden_size");
  at_most(c.num_hidden_layers, int64_t{1} << 16, "num_hidden_layers");
  at_most(c.num_attention_heads, int64_t{1} << 16, "num_attention_heads");
  at_most(c.intermediate_size, int64_t{1} << 22, "intermediate_size");
  at_most(c.max_position_embeddings, int64_t{1} << 24, "max_position_embeddings");
  at_most(c.type_vocab_size, int64_t{1} << 20, "type_vocab_size");
  at_most(c.embedding_size, int64_t{1} << 20, "embedding_size");
  at_most(c.num_labels, int64_t{1} << 24, "num_labels");
  const double parameters =
      static_cast<double>(c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * c.embedding_width() +
      static_cast<double>(c.num_hidden_layers) *
          (4.0 * c.hidden_size * c.hidden_size + 3.0 * c.hidden_size * c.intermediate_size);
  if (parameters > 1e13)
    fail("{}: the sizes make about {:.3g} parameters, more than any device holds", source, parameters);
  if (c.hidden_size % c.num_attention_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", source, c.hidden_size,
         c.num_attention_heads);
  auto probability = [&](double p, const char* key) {
    if (!(p >= 0.0 && p < 1.0)) fail("{}: '{}' must be in [0, 1), got {}", source, key, p);
  };
  probability(c.hidden_dropout_prob, "hidden_dropout_prob");
  probability(c.attention_probs_dropout_prob, "attention_probs_dropout_prob");
  if (c.classifier_dropout) probability(*c.classifier_dropout, "classifier_dropout");
  if (!(c.layer_norm_eps > 0.0)) fail("{}: 'layer_norm_eps' must be positive", source);
  if (!(c.initializer_range >= 0.0)) fail("{}: 'initializer_range' must be non-negative", source);
  if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size)
    fail("{}: pad_token_id {} is outside the vocabulary of {}", source, c.pad_token_id, c.vocab_size);
  if (c.max_sequence_length() <= 0)
    fail("{}: max_position_embeddings {} leaves no position past pad_token_id {} (positions start at "
         "pad_token_id + 1)", source, c.max_position_embeddings, c.pad_token_id);
}

json model_config_to_json(const ModelConfig& config) {
  return model_family(config.model_type, "model config").config_to_json(config);
}

std::optional<ModelConfig> model_preset(const std::string& name) {
  for (const ModelFamily& family : model_families())
    if (auto config = family.preset(name)) return config;
  return std::nullopt;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelFamily& family : model_families())
    for (const std::string& name : family.preset_names()) names.push_back(name);
  return names;
}

double training_flops_per_sequence(const ModelConfig& c, int64_t seq_len) {
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size),
               L = static_cast<double>(seq_len), layers = static_cast<double>(c.num_hidden_layers);
  return 6.0 * layers * (4.0 * H * H + 2.0 * H * I) * L + 3.0 * layers * 4.0 * L * L * H;
}

}  // namespace anatomy
