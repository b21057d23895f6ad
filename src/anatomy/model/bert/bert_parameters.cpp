// bert_parameters.cpp: a BERT-style model's parameter names (its layout's),
// shapes, handles and units.
#include "anatomy/model/bert/bert_parameters.h"

#include <fmt/format.h>

#include "anatomy/core/error.h"

namespace anatomy {

bool has_embeddings_projection(const ModelConfig& c) { return c.embedding_width() != c.hidden_size; }

std::vector<ParamSpec> bert_parameter_specs(const ModelConfig& c, const BertLayout& layout) {
  ANATOMY_CHECK(c.model_type == layout.model_type, "a {} config with the parameters of {}", c.model_type,
                layout.architecture);
  const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.embedding_width();
  const std::string& p = layout.prefix;
  std::vector<ParamSpec> specs;
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in) {
    specs.push_back({prefix + ".weight", {out, in}, true, ParamInit::Normal});
    specs.push_back({prefix + ".bias", {out}, false, ParamInit::Zeros});
  };
  auto layer_norm = [&](const std::string& prefix, int64_t width) {
    specs.push_back({prefix + ".weight", {width}, false, ParamInit::Ones});
    specs.push_back({prefix + ".bias", {width}, false, ParamInit::Zeros});
  };
  specs.push_back({p + layout.word + ".weight", {c.vocab_size, E}, true, ParamInit::Normal});
  if (layout.has_position_table())
    specs.push_back({p + layout.position + ".weight", {c.max_position_embeddings, E}, true, ParamInit::Normal});
  if (c.type_vocab_size > 0)
    specs.push_back({p + layout.token_type + ".weight", {c.type_vocab_size, E}, true, ParamInit::Normal});
  layer_norm(p + layout.embeddings_norm, E);
  if (has_embeddings_projection(c)) linear(p + layout.projection, H, E);
  const int64_t embeddings_end = static_cast<int64_t>(specs.size());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int64_t qkv = static_cast<int64_t>(specs.size());
    linear(layout.layer_name(l, layout.query), H, H);
    linear(layout.layer_name(l, layout.key), H, H);
    linear(layout.layer_name(l, layout.value), H, H);
    // Laid out as the three weights, then the three biases, so that one
    // [3H, H] product can serve all three (EncoderLayerTensors::qkv_w); the
    // list keeps Hugging Face's order (weights are initialised by their place
    // in it).
    for (int64_t i = 0; i < 3; ++i) {
      specs[static_cast<size_t>(qkv + 2 * i)].slot = qkv + i;
      specs[static_cast<size_t>(qkv + 2 * i + 1)].slot = qkv + 3 + i;
    }
    linear(layout.layer_name(l, layout.attention_output), H, H);
    layer_norm(layout.layer_name(l, layout.attention_norm), H);
    linear(layout.layer_name(l, layout.intermediate), I, H);
    linear(layout.layer_name(l, layout.output), H, I);
    layer_norm(layout.layer_name(l, layout.output_norm), H);
  }
  // DeBERTa's relative embeddings and their LayerNorm come after the layers in
  // Hugging Face's order, and in the embeddings' unit in the flat layout: their
  // slots go before the layers'.
  const int64_t relative_begin = static_cast<int64_t>(specs.size());
  if (layout.relative_attention) {
    ANATOMY_CHECK(c.relative.enabled(), "{}: a relative-attention layout without relative positions",
                  layout.architecture);
    specs.push_back({p + layout.relative_embeddings + ".weight", {c.relative.rows(), H}, true, ParamInit::Normal});
    if (c.relative.layer_norm) layer_norm(p + layout.relative_norm, H);
  }
  const int64_t relative_count = static_cast<int64_t>(specs.size()) - relative_begin;
  for (int64_t i = 0; i < relative_begin; ++i)
    if (specs[static_cast<size_t>(i)].slot < 0) specs[static_cast<size_t>(i)].slot = i;
  for (int64_t i = embeddings_end; i < relative_begin; ++i) specs[static_cast<size_t>(i)].slot += relative_count;
  for (int64_t i = 0; i < relative_count; ++i)
    specs[static_cast<size_t>(relative_begin + i)].slot = embeddings_end + i;
  if (layout.masked_lm()) {
    // dense (H -> E), its LayerNorm, the decoder's bias; the decoder's weight is the word embeddings.
    linear(layout.head_dense, E, H);
    layer_norm(layout.lm_norm, E);
    specs.push_back({layout.lm_bias, {c.vocab_size}, false, ParamInit::Zeros});
  } else {
    if (layout.has_head_dense()) linear(layout.head_dense, H, H);
    linear(layout.classifier, layout.head_outputs(c), H);
  }
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].slot < 0) specs[i].slot = static_cast<int64_t>(i);
  return specs;
}

BertTensors BertTensors::bind(const ParameterSet& set, const ModelConfig& c, const BertLayout& layout) {
  BertTensors t;
  const auto get = [&](const std::string& name) { return set.get(name); };
  for (int64_t u = 0; u < c.num_hidden_layers + 2; ++u) t.bind_unit(u, c, layout, get);
  return t;
}

void BertTensors::bind_unit(int64_t unit, const ModelConfig& c, const BertLayout& layout,
                            const std::function<Tensor(const std::string&)>& get) {
  const int64_t L = c.num_hidden_layers;
  ANATOMY_CHECK(unit >= 0 && unit <= L + 1, "parameter unit {} of {}", unit, L + 2);
  if (static_cast<int64_t>(layers.size()) != L) layers.resize(static_cast<size_t>(L));
  const std::string& p = layout.prefix;
  if (unit == 0) {
    word = get(p + layout.word + ".weight");
    position = layout.has_position_table() ? get(p + layout.position + ".weight") : Tensor();
    rel_embeddings = layout.relative_attention ? get(p + layout.relative_embeddings + ".weight") : Tensor();
    const bool rel_norm = layout.relative_attention && c.relative.layer_norm;
    rel_norm_w = rel_norm ? get(p + layout.relative_norm + ".weight") : Tensor();
    rel_norm_b = rel_norm ? get(p + layout.relative_norm + ".bias") : Tensor();
    token_type = c.type_vocab_size > 0 ? get(p + layout.token_type + ".weight") : Tensor();
    emb_ln_w = get(p + layout.embeddings_norm + ".weight");
    emb_ln_b = get(p + layout.embeddings_norm + ".bias");
    projection_w = has_embeddings_projection(c) ? get(p + layout.projection + ".weight") : Tensor();
    projection_b = has_embeddings_projection(c) ? get(p + layout.projection + ".bias") : Tensor();
  } else if (unit <= L) {
    const int64_t l = unit - 1;
    EncoderLayerTensors& e = layers[static_cast<size_t>(l)];
    const auto weight = [&](const std::string& part) { return get(layout.layer_name(l, part) + ".weight"); };
    const auto bias = [&](const std::string& part) { return get(layout.layer_name(l, part) + ".bias"); };
    e.query_w = weight(layout.query);
    e.query_b = bias(layout.query);
    e.key_w = weight(layout.key);
    e.key_b = bias(layout.key);
    e.value_w = weight(layout.value);
    e.value_b = bias(layout.value);
    e.attn_out_w = weight(layout.attention_output);
    e.attn_out_b = bias(layout.attention_output);
    e.attn_ln_w = weight(layout.attention_norm);
    e.attn_ln_b = bias(layout.attention_norm);
    e.inter_w = weight(layout.intermediate);
    e.inter_b = bias(layout.intermediate);
    e.out_w = weight(layout.output);
    e.out_b = bias(layout.output);
    e.out_ln_w = weight(layout.output_norm);
    e.out_ln_b = bias(layout.output_norm);
    const int64_t H = c.hidden_size;
    // "...self.query.weight" -> "...self.query+key+value.weight" (the family's names)
    const auto stacked_name = [&](const Tensor& query) {
      std::string name = query.name();
      const std::string stacked = layout.query + "+" + layout.key.substr(layout.key.rfind('.') + 1) + "+" +
                                  layout.value.substr(layout.value.rfind('.') + 1);
      if (const size_t at = name.rfind(layout.query); at != std::string::npos)
        name.replace(at, layout.query.size(), stacked);
      return name;
    };
    e.qkv_w = Tensor::adjacent({e.query_w, e.key_w, e.value_w}, {3 * H, H}, stacked_name(e.query_w));
    e.qkv_b = Tensor::adjacent({e.query_b, e.key_b, e.value_b}, {3 * H}, stacked_name(e.query_b));
  } else {
    head_dense_w = layout.has_head_dense() ? get(layout.head_dense + ".weight") : Tensor();
    head_dense_b = layout.has_head_dense() ? get(layout.head_dense + ".bias") : Tensor();
    const bool lm = layout.masked_lm();
    classifier_w = lm ? Tensor() : get(layout.classifier + ".weight");
    classifier_b = lm ? Tensor() : get(layout.classifier + ".bias");
    lm_norm_w = lm ? get(layout.lm_norm + ".weight") : Tensor();
    lm_norm_b = lm ? get(layout.lm_norm + ".bias") : Tensor();
    lm_bias = lm ? get(layout.lm_bias) : Tensor();
  }
}

std::vector<ParameterUnit> bert_parameter_units(const ParameterSet& set, const ModelConfig& c,
                                                const BertLayout& layout) {
  // Each unit starts at its first tensor in the specs' order (bert_parameter_specs).
  std::vector<int64_t> starts = {0};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    starts.push_back(set.offset_of(layout.layer_name(l, layout.query) + ".weight"));
  starts.push_back(set.offset_of(layout.head_first_parameter()));
  std::vector<ParameterUnit> units;
  for (size_t u = 0; u < starts.size(); ++u)
    units.push_back({starts[u], u + 1 < starts.size() ? starts[u + 1] : set.flat_elements()});
  return units;
}

}  // namespace anatomy
