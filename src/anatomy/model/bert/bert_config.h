// bert_config.h: BERT's config.json (Hugging Face's BertConfig keys and
// defaults) and its built-in sizes, for the registry's "bert" family.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/model/config.h"

namespace anatomy {

// `j` is config.json's object; `source` names the file in errors.
ModelConfig parse_bert_config(const nlohmann::json& j, const std::string& source);
nlohmann::json bert_config_to_json(const ModelConfig& config);

// bert-large-uncased, bert-base-uncased, bert-medium, bert-small, bert-mini,
// bert-tiny (Google's compact BERTs: Turc et al. 2019).
std::optional<ModelConfig> bert_preset(const std::string& name);
std::vector<std::string> bert_preset_names();

}  // namespace anatomy
