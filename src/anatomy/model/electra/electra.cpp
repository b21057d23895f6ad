// electra.cpp: the ELECTRA family's layout, config.json and sizes.
#include "anatomy/model/electra/electra.h"

#include "anatomy/model/bert/bert_config.h"

namespace anatomy {

namespace {

// ElectraConfig's defaults.
ModelConfig defaults() {
  ModelConfig c;
  c.model_type = "electra";
  c.embedding_size = 128;
  c.hidden_size = 256;
  c.num_attention_heads = 4;
  c.intermediate_size = 1024;
  return c;
}

}  // namespace

const BertLayout& electra_layout() {
  static const BertLayout layout = [] {
    BertLayout l;
    l.model_type = "electra";
    l.architecture = "ElectraForSequenceClassification";
    l.prefix = "electra.";
    l.head_dense = "classifier.dense";
    l.classifier = "classifier.out_proj";
    l.head_activation = ActivationKind::GeluErf;  // get_activation("gelu"), whatever hidden_act says
    l.dropout_before_head_dense = true;
    return l;
  }();
  return layout;
}

ModelConfig parse_electra_config(const nlohmann::json& j, const std::string& source) {
  return parse_bert_style_config(j, source, defaults(), {"embedding_size"});
}

nlohmann::json electra_config_to_json(const ModelConfig& config) {
  return bert_style_config_to_json(config, electra_layout().architecture);
}

std::optional<ModelConfig> electra_preset(const std::string& name) {
  auto make = [](int64_t embedding, int64_t layers, int64_t hidden, int64_t heads) {
    ModelConfig c = defaults();
    c.embedding_size = embedding;
    c.num_hidden_layers = layers;
    c.hidden_size = hidden;
    c.num_attention_heads = heads;
    c.intermediate_size = 4 * hidden;
    return c;
  };
  if (name == "electra-small-discriminator") return make(128, 12, 256, 4);
  if (name == "electra-base-discriminator") return make(768, 12, 768, 12);
  if (name == "electra-large-discriminator") return make(1024, 24, 1024, 16);
  return std::nullopt;
}

std::vector<std::string> electra_preset_names() {
  return {"electra-small-discriminator", "electra-base-discriminator", "electra-large-discriminator"};
}

}  // namespace anatomy
