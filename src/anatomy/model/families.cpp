// families.cpp: the model families the engine has (config.json's
// model_type), each with its config.json reader and writer and its built-in
// sizes: apart from registry.cpp's architectures, so that reading a
// config.json needs no model code (fuzz/fuzz_config_json.cpp links it alone).
// Adding a family adds its entry here (docs/DESIGN.md: "Adding a model family").
#include "anatomy/core/error.h"
#include "anatomy/model/bert/bert_config.h"
#include "anatomy/model/deberta/deberta.h"
#include "anatomy/model/distilbert/distilbert.h"
#include "anatomy/model/electra/electra.h"
#include "anatomy/model/modernbert/modernbert_config.h"
#include "anatomy/model/registry.h"
#include "anatomy/model/roberta/roberta.h"

namespace anatomy {

const std::vector<ModelFamily>& model_families() {
  // A preset's name is unique across the families (model_preset looks in each).
  static const std::vector<ModelFamily> families = {
      {"bert", parse_bert_config, bert_config_to_json, bert_preset, bert_preset_names},
      {"roberta", parse_roberta_config, roberta_config_to_json, roberta_preset, roberta_preset_names},
      {"xlm-roberta", parse_roberta_config, roberta_config_to_json, [](const std::string&) {
         return std::optional<ModelConfig>();  // the RoBERTa entry serves the presets of all three
       }, [] { return std::vector<std::string>(); }},
      {"camembert", parse_roberta_config, roberta_config_to_json,
       [](const std::string&) { return std::optional<ModelConfig>(); }, [] { return std::vector<std::string>(); }},
      {"electra", parse_electra_config, electra_config_to_json, electra_preset, electra_preset_names},
      {"distilbert", parse_distilbert_config, distilbert_config_to_json, distilbert_preset, distilbert_preset_names},
      {"deberta-v2", parse_deberta_config, deberta_config_to_json, deberta_preset, deberta_preset_names},
      {"modernbert", parse_modernbert_config, modernbert_config_to_json, modernbert_preset, modernbert_preset_names},
  };
  return families;
}

const ModelFamily& model_family(const std::string& model_type, const std::string& source) {
  std::vector<std::string> types;
  for (const ModelFamily& family : model_families()) {
    if (family.model_type == model_type) return family;
    types.push_back('"' + family.model_type + '"');
  }
  fail("{}: model_type \"{}\" is not supported (supported: {})", source, model_type, fmt::join(types, ", "));
}

}  // namespace anatomy
