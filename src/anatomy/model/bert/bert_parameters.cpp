// bert_parameters.cpp: BERT's parameter names, shapes, handles and units.
#include "anatomy/model/bert/bert_parameters.h"

#include <fmt/format.h>

namespace anatomy {

std::vector<ParamSpec> bert_parameter_specs(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  std::vector<ParamSpec> specs;
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in) {
    specs.push_back({prefix + ".weight", {out, in}, true, ParamInit::Normal});
    specs.push_back({prefix + ".bias", {out}, false, ParamInit::Zeros});
  };
  auto layer_norm = [&](const std::string& prefix) {
    specs.push_back({prefix + ".weight", {H}, false, ParamInit::Ones});
    specs.push_back({prefix + ".bias", {H}, false, ParamInit::Zeros});
  };
  specs.push_back({"bert.embeddings.word_embeddings.weight", {c.vocab_size, H}, true, ParamInit::Normal});
  specs.push_back({"bert.embeddings.position_embeddings.weight", {c.max_position_embeddings, H}, true, ParamInit::Normal});
  specs.push_back({"bert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, H}, true, ParamInit::Normal});
  layer_norm("bert.embeddings.LayerNorm");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("bert.encoder.layer.{}.", l);
    const int64_t qkv = static_cast<int64_t>(specs.size());
    linear(p + "attention.self.query", H, H);
    linear(p + "attention.self.key", H, H);
    linear(p + "attention.self.value", H, H);
    // Laid out as the three weights, then the three biases, so that one
    // [3H, H] product can serve all three (EncoderLayerTensors::qkv_w); the
    // list keeps Hugging Face's order (weights are initialised by their place
    // in it).
    for (int64_t i = 0; i < 3; ++i) {
      specs[static_cast<size_t>(qkv + 2 * i)].slot = qkv + i;
      specs[static_cast<size_t>(qkv + 2 * i + 1)].slot = qkv + 3 + i;
    }
    linear(p + "attention.output.dense", H, H);
    layer_norm(p + "attention.output.LayerNorm");
    linear(p + "intermediate.dense", I, H);
    linear(p + "output.dense", H, I);
    layer_norm(p + "output.LayerNorm");
  }
  linear("bert.pooler.dense", H, H);
  linear("classifier", c.num_labels, H);
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].slot < 0) specs[i].slot = static_cast<int64_t>(i);
  return specs;
}

BertTensors BertTensors::bind(const ParameterSet& set, const ModelConfig& c) {
  BertTensors t;
  const auto get = [&](const std::string& name) { return set.get(name); };
  for (int64_t u = 0; u < c.num_hidden_layers + 2; ++u) t.bind_unit(u, c, get);
  return t;
}

void BertTensors::bind_unit(int64_t unit, const ModelConfig& c, const std::function<Tensor(const std::string&)>& get) {
  const int64_t L = c.num_hidden_layers;
  ANATOMY_CHECK(unit >= 0 && unit <= L + 1, "parameter unit {} of {}", unit, L + 2);
  if (static_cast<int64_t>(layers.size()) != L) layers.resize(static_cast<size_t>(L));
  if (unit == 0) {
    word = get("bert.embeddings.word_embeddings.weight");
    position = get("bert.embeddings.position_embeddings.weight");
    token_type = get("bert.embeddings.token_type_embeddings.weight");
    emb_ln_w = get("bert.embeddings.LayerNorm.weight");
    emb_ln_b = get("bert.embeddings.LayerNorm.bias");
  } else if (unit <= L) {
    const std::string p = fmt::format("bert.encoder.layer.{}.", unit - 1);
    EncoderLayerTensors& e = layers[static_cast<size_t>(unit - 1)];
    e.query_w = get(p + "attention.self.query.weight");
    e.query_b = get(p + "attention.self.query.bias");
    e.key_w = get(p + "attention.self.key.weight");
    e.key_b = get(p + "attention.self.key.bias");
    e.value_w = get(p + "attention.self.value.weight");
    e.value_b = get(p + "attention.self.value.bias");
    e.attn_out_w = get(p + "attention.output.dense.weight");
    e.attn_out_b = get(p + "attention.output.dense.bias");
    e.attn_ln_w = get(p + "attention.output.LayerNorm.weight");
    e.attn_ln_b = get(p + "attention.output.LayerNorm.bias");
    e.inter_w = get(p + "intermediate.dense.weight");
    e.inter_b = get(p + "intermediate.dense.bias");
    e.out_w = get(p + "output.dense.weight");
    e.out_b = get(p + "output.dense.bias");
    e.out_ln_w = get(p + "output.LayerNorm.weight");
    e.out_ln_b = get(p + "output.LayerNorm.bias");
    const int64_t H = c.hidden_size;
    const auto stacked_name = [](const Tensor& query) {  // "...self.query.weight" -> "...self.query+key+value.weight"
      std::string name = query.name();
      if (const size_t at = name.rfind("query"); at != std::string::npos) name.replace(at, 5, "query+key+value");
      return name;
    };
    e.qkv_w = Tensor::adjacent({e.query_w, e.key_w, e.value_w}, {3 * H, H}, stacked_name(e.query_w));
    e.qkv_b = Tensor::adjacent({e.query_b, e.key_b, e.value_b}, {3 * H}, stacked_name(e.query_b));
  } else {
    pooler_w = get("bert.pooler.dense.weight");
    pooler_b = get("bert.pooler.dense.bias");
    classifier_w = get("classifier.weight");
    classifier_b = get("classifier.bias");
  }
}

std::vector<ParameterUnit> bert_parameter_units(const ParameterSet& set, const ModelConfig& c) {
  // Each unit starts at its first tensor in the specs' order (bert_parameter_specs).
  std::vector<int64_t> starts = {0};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    starts.push_back(set.offset_of(fmt::format("bert.encoder.layer.{}.attention.self.query.weight", l)));
  starts.push_back(set.offset_of("bert.pooler.dense.weight"));
  std::vector<ParameterUnit> units;
  for (size_t u = 0; u < starts.size(); ++u)
    units.push_back({starts[u], u + 1 < starts.size() ? starts[u + 1] : set.flat_elements()});
  return units;
}

}  // namespace anatomy
