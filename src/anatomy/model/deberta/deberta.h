// deberta.h: DeBERTa-v2/v3 (config.json's model_type "deberta-v2") as a
// layout of the BERT-style model (model/bert/bert_layout.h): post-LayerNorm
// layers like BERT's under DeBERTa's names (query_proj, key_proj,
// value_proj), no absolute position table, and disentangled attention over
// relative positions: a table of 2·span relative embeddings (LayerNorm'd,
// shared by every layer) goes through each layer's query and key projections,
// and the scores gain content-to-position and position-to-content terms,
// all scaled by 1/sqrt(head_dim · (1 + terms)) (ModelConfig::relative,
// Backend::attention_relative_forward). The head is ContextPooler (dropout,
// dense, GELU) and a classifier after dropout (cls_dropout).
//
// What DeBERTa-v3 checkpoints use is served; the rest of DebertaV2Config is
// refused by name: relative_attention false, position_biased_input true,
// share_att_key false (separate pos_key_proj/pos_query_proj),
// conv_kernel_size > 0, embedding_size other than hidden_size, pos_att_type
// other than c2p/p2c, pooler_hidden_act other than gelu, pooler_hidden_size
// other than hidden_size.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert_layout.h"
#include "anatomy/model/config.h"

namespace anatomy {

const BertLayout& deberta_layout();

ModelConfig parse_deberta_config(const nlohmann::json& j, const std::string& source);
nlohmann::json deberta_config_to_json(const ModelConfig& config);

// deberta-v3-xsmall, -small, -base, -large (microsoft's sizes).
std::optional<ModelConfig> deberta_preset(const std::string& name);
std::vector<std::string> deberta_preset_names();

}  // namespace anatomy
