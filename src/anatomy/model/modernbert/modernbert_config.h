// modernbert_config.h: ModernBERT's config.json (ModernBertConfig's keys and
// defaults) and its built-in sizes. The fields every family has go to
// ModelConfig (hidden_activation -> hidden_act, norm_eps -> layer_norm_eps,
// attention_dropout -> attention_probs_dropout_prob, mlp_dropout ->
// hidden_dropout_prob); ModernBERT's own (biases, rotary thetas, which layers
// attend locally, the head) stay in ModelConfig::extra as config.json spells
// them, and modernbert_options() reads them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/model/config.h"

namespace anatomy {

struct ModernBertOptions {
  bool norm_bias = false, attention_bias = false, mlp_bias = false, classifier_bias = false;
  double global_rope_theta = 160000.0, local_rope_theta = 10000.0;
  int64_t local_attention = 128;        // the window's width: a token attends to ±local_attention/2
  std::vector<bool> sliding;            // per layer: local (sliding-window) attention
  Activation classifier_activation = Activation::Gelu;
  double embedding_dropout = 0.0;
  double initializer_cutoff_factor = 2.0;  // random initialisation: truncation at ± this many std
  int64_t window() const { return local_attention / 2; }
};

// A ModernBERT config's options (from its extra keys, Hugging Face's defaults
// where absent); `source` names the file in errors.
ModernBertOptions modernbert_options(const ModelConfig& config, const std::string& source = "ModernBERT config");

ModelConfig parse_modernbert_config(const nlohmann::json& j, const std::string& source);
nlohmann::json modernbert_config_to_json(const ModelConfig& config);

// modernbert-base, modernbert-large (answerdotai's sizes).
std::optional<ModelConfig> modernbert_preset(const std::string& name);
std::vector<std::string> modernbert_preset_names();

}  // namespace anatomy
