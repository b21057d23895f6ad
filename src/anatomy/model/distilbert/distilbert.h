// distilbert.h: the DistilBERT family as a layout of the BERT-style model
// (model/bert/bert_layout.h): its own parameter names
// (distilbert.transformer.layer.N.attention.q_lin, sa_layer_norm, ffn.lin1,
// ...), no token types, no dropout on the attention output, and
// DistilBertForSequenceClassification's head (pre_classifier, ReLU, dropout,
// classifier). Its config.json names the sizes dim, n_layers, n_heads,
// hidden_dim, and the dropouts dropout, attention_dropout, seq_classif_dropout;
// LayerNorm eps is 1e-12 always.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert_layout.h"
#include "anatomy/model/config.h"

namespace anatomy {

const BertLayout& distilbert_layout();

ModelConfig parse_distilbert_config(const nlohmann::json& j, const std::string& source);
nlohmann::json distilbert_config_to_json(const ModelConfig& config);

// distilbert-base-uncased, distilbert-base-cased.
std::optional<ModelConfig> distilbert_preset(const std::string& name);
std::vector<std::string> distilbert_preset_names();

}  // namespace anatomy
