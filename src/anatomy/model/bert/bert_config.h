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

// For the families whose config.json uses BERT's key names (RoBERTa,
// XLM-RoBERTa, CamemBERT, ELECTRA): reads those keys onto `defaults` (the
// family's config class defaults, its model_type set), reading
// `family_keys` too when the family has them ("embedding_size"); other keys
// are kept in `extra`. Refuses position_embedding_type other than
// "absolute", is_decoder and add_cross_attention.
ModelConfig parse_bert_style_config(const nlohmann::json& j, const std::string& source, ModelConfig defaults,
                                    const std::vector<std::string>& family_keys = {});
// Writes them back under BERT's names, with `architecture` in "architectures".
nlohmann::json bert_style_config_to_json(const ModelConfig& config, const std::string& architecture);

// The id2label/label2id/num_labels/problem_type keys, shared with the
// families that name the rest differently (DistilBERT).
void parse_labels(const nlohmann::json& j, const std::string& source, ModelConfig& c);
void labels_to_json(const ModelConfig& c, nlohmann::json& j);
// config.json's integer or number `key`, `fallback` when absent or null.
int64_t config_int(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& source);
double config_double(const nlohmann::json& j, const char* key, double fallback, const std::string& source);
// hidden_act's value (gelu, gelu_new / gelu_pytorch_tanh, relu); `key` names it in errors.
Activation parse_activation(const nlohmann::json& value, const char* key, const std::string& source);

// bert-large-uncased, bert-base-uncased, bert-medium, bert-small, bert-mini,
// bert-tiny (Google's compact BERTs: Turc et al. 2019).
std::optional<ModelConfig> bert_preset(const std::string& name);
std::vector<std::string> bert_preset_names();

}  // namespace anatomy
