// roberta.cpp: the RoBERTa family's layouts, config.json and sizes.
#include "anatomy/model/roberta/roberta.h"

#include "anatomy/core/error.h"
#include "anatomy/model/bert/bert_config.h"

namespace anatomy {

namespace {

BertLayout make_layout(const std::string& model_type, const std::string& architecture) {
  BertLayout l;
  l.model_type = model_type;
  l.architecture = architecture;
  l.prefix = "roberta.";
  l.position_padding_row = true;
  l.head_dense = "classifier.dense";
  l.classifier = "classifier.out_proj";
  l.head_activation = ActivationKind::Tanh;
  l.dropout_before_head_dense = true;
  return l;
}

// RobertaConfig's defaults (XLMRobertaConfig and CamembertConfig differ only in vocab_size).
ModelConfig defaults(const std::string& model_type) {
  ModelConfig c;
  c.model_type = model_type;
  c.vocab_size = model_type == "roberta" ? 50265 : 30522;
  c.pad_token_id = 1;
  c.position_ids = PositionIds::PastPadding;
  return c;
}

}  // namespace

const BertLayout& roberta_layout(const std::string& model_type) {
  static const BertLayout roberta = make_layout("roberta", "RobertaForSequenceClassification");
  static const BertLayout xlm = make_layout("xlm-roberta", "XLMRobertaForSequenceClassification");
  static const BertLayout camembert = make_layout("camembert", "CamembertForSequenceClassification");
  if (model_type == "xlm-roberta") return xlm;
  if (model_type == "camembert") return camembert;
  ANATOMY_CHECK(model_type == "roberta", "model_type {} is not of the RoBERTa family", model_type);
  return roberta;
}

ModelConfig parse_roberta_config(const nlohmann::json& j, const std::string& source) {
  const std::string model_type = j.value("model_type", std::string("roberta"));
  return parse_bert_style_config(j, source, defaults(model_type));
}

nlohmann::json roberta_config_to_json(const ModelConfig& config) {
  return bert_style_config_to_json(config, roberta_layout(config.model_type).architecture);
}

std::optional<ModelConfig> roberta_preset(const std::string& name) {
  // The published checkpoints' configs: 514 positions (512 tokens past the
  // padding id), one token type, LayerNorm eps 1e-5.
  auto make = [](const std::string& model_type, int64_t vocab, int64_t layers, int64_t hidden, int64_t heads) {
    ModelConfig c = defaults(model_type);
    c.vocab_size = vocab;
    c.num_hidden_layers = layers;
    c.hidden_size = hidden;
    c.num_attention_heads = heads;
    c.intermediate_size = 4 * hidden;
    c.max_position_embeddings = 514;
    c.type_vocab_size = 1;
    c.layer_norm_eps = 1e-5;
    return c;
  };
  if (name == "roberta-base") return make("roberta", 50265, 12, 768, 12);
  if (name == "roberta-large") return make("roberta", 50265, 24, 1024, 16);
  if (name == "xlm-roberta-base") return make("xlm-roberta", 250002, 12, 768, 12);
  if (name == "xlm-roberta-large") return make("xlm-roberta", 250002, 24, 1024, 16);
  if (name == "camembert-base") return make("camembert", 32005, 12, 768, 12);
  return std::nullopt;
}

std::vector<std::string> roberta_preset_names() {
  return {"roberta-base", "roberta-large", "xlm-roberta-base", "xlm-roberta-large", "camembert-base"};
}

}  // namespace anatomy
