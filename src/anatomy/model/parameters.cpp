// parameters.cpp: parameter names, shapes and the flat layout.
#include "anatomy/model/parameters.h"

#include <fmt/format.h>

namespace anatomy {

namespace {
// Each tensor starts on a 64-element boundary (256 bytes in fp32) so that vector
// loads on any backend stay aligned; the padding is counted by the ledger.
constexpr int64_t kAlignElements = 64;
int64_t align_up(int64_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }
}  // namespace

std::vector<ParamSpec> bert_parameter_specs(const BertConfig& c) {
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
    linear(p + "attention.self.query", H, H);
    linear(p + "attention.self.key", H, H);
    linear(p + "attention.self.value", H, H);
    linear(p + "attention.output.dense", H, H);
    layer_norm(p + "attention.output.LayerNorm");
    linear(p + "intermediate.dense", I, H);
    linear(p + "output.dense", H, I);
    layer_norm(p + "output.LayerNorm");
  }
  linear("bert.pooler.dense", H, H);
  linear("classifier", c.num_labels, H);
  return specs;
}

ParameterSet::ParameterSet(Backend& backend, std::vector<ParamSpec> specs, Category category,
                           const std::string& prefix, DType dtype)
    : specs_(std::move(specs)) {
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const auto& s : specs_) {
    offsets.push_back(total);
    total += align_up(shape_numel(s.shape));
  }
  offsets_ = offsets;
  flat_ = Tensor::empty(backend.ledger(), {total}, dtype, category, prefix + "flat");
  backend.zero(flat_);
  for (size_t i = 0; i < specs_.size(); ++i) {
    tensors_.push_back(flat_.slice(offsets[i], specs_[i].shape, prefix + specs_[i].name));
    index_[specs_[i].name] = i;
  }
}

const Tensor& ParameterSet::get(const std::string& name) const {
  auto it = index_.find(name);
  ANATOMY_CHECK(it != index_.end(), "no parameter named {}", name);
  return tensors_[it->second];
}

int64_t ParameterSet::offset_of(const std::string& name) const {
  auto it = index_.find(name);
  ANATOMY_CHECK(it != index_.end(), "no parameter named {}", name);
  return offsets_[it->second];
}

int64_t ParameterSet::parameter_count() const {
  int64_t n = 0;
  for (const auto& s : specs_) n += shape_numel(s.shape);
  return n;
}

BertTensors BertTensors::bind(const ParameterSet& set, const BertConfig& c) {
  BertTensors t;
  t.word = set.get("bert.embeddings.word_embeddings.weight");
  t.position = set.get("bert.embeddings.position_embeddings.weight");
  t.token_type = set.get("bert.embeddings.token_type_embeddings.weight");
  t.emb_ln_w = set.get("bert.embeddings.LayerNorm.weight");
  t.emb_ln_b = set.get("bert.embeddings.LayerNorm.bias");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("bert.encoder.layer.{}.", l);
    EncoderLayerTensors e;
    e.query_w = set.get(p + "attention.self.query.weight");
    e.query_b = set.get(p + "attention.self.query.bias");
    e.key_w = set.get(p + "attention.self.key.weight");
    e.key_b = set.get(p + "attention.self.key.bias");
    e.value_w = set.get(p + "attention.self.value.weight");
    e.value_b = set.get(p + "attention.self.value.bias");
    e.attn_out_w = set.get(p + "attention.output.dense.weight");
    e.attn_out_b = set.get(p + "attention.output.dense.bias");
    e.attn_ln_w = set.get(p + "attention.output.LayerNorm.weight");
    e.attn_ln_b = set.get(p + "attention.output.LayerNorm.bias");
    e.inter_w = set.get(p + "intermediate.dense.weight");
    e.inter_b = set.get(p + "intermediate.dense.bias");
    e.out_w = set.get(p + "output.dense.weight");
    e.out_b = set.get(p + "output.dense.bias");
    e.out_ln_w = set.get(p + "output.LayerNorm.weight");
    e.out_ln_b = set.get(p + "output.LayerNorm.bias");
    t.layers.push_back(std::move(e));
  }
  t.pooler_w = set.get("bert.pooler.dense.weight");
  t.pooler_b = set.get("bert.pooler.dense.bias");
  t.classifier_w = set.get("classifier.weight");
  t.classifier_b = set.get("classifier.bias");
  return t;
}

}  // namespace anatomy
