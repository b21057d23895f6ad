// roberta.h: the RoBERTa family — "roberta", and "xlm-roberta" and
// "camembert", the same architecture under their own class names — as a
// layout of the BERT-style model (model/bert/bert_layout.h): BERT's layers
// under "roberta.", positions past the padding id, one token type, and
// RobertaClassificationHead (dropout, dense, tanh, dropout, out_proj) with no
// pooler. Its config.json uses BERT's keys with RobertaConfig's defaults.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert_layout.h"
#include "anatomy/model/config.h"

namespace anatomy {

// The layout of "roberta", "xlm-roberta" or "camembert".
const BertLayout& roberta_layout(const std::string& model_type);

// config.json of one of the three (its model_type says which).
ModelConfig parse_roberta_config(const nlohmann::json& j, const std::string& source);
nlohmann::json roberta_config_to_json(const ModelConfig& config);

// roberta-base, roberta-large, xlm-roberta-base, xlm-roberta-large, camembert-base.
std::optional<ModelConfig> roberta_preset(const std::string& name);
std::vector<std::string> roberta_preset_names();

}  // namespace anatomy
