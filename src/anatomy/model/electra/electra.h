// electra.h: the ELECTRA family (discriminator checkpoints) as a layout of
// the BERT-style model (model/bert/bert_layout.h): BERT's embeddings and
// layers under "electra.", the embeddings embedding_size wide and projected
// to hidden_size (electra.embeddings_project) when the two differ, and
// ElectraClassificationHead (dropout, dense, GELU, dropout, out_proj).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert_layout.h"
#include "anatomy/model/config.h"

namespace anatomy {

const BertLayout& electra_layout();

ModelConfig parse_electra_config(const nlohmann::json& j, const std::string& source);
nlohmann::json electra_config_to_json(const ModelConfig& config);

// electra-small-discriminator, electra-base-discriminator, electra-large-discriminator.
std::optional<ModelConfig> electra_preset(const std::string& name);
std::vector<std::string> electra_preset_names();

}  // namespace anatomy
