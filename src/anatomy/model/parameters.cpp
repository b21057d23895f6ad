// parameters.cpp: parameter names, shapes and the flat layout.
#include "anatomy/model/parameters.h"

#include <fmt/format.h>

#include <algorithm>

#include "anatomy/core/hash.h"

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

std::string parameter_layout_id(const ParameterSet& set) {
  std::string text = fmt::format("{}", set.flat_elements());
  for (const ParamSpec& spec : set.specs())
    text += fmt::format(";{}@{}+{}", spec.name, set.offset_of(spec.name), shape_numel(spec.shape));
  return fmt::format("{:016x}", fnv1a64(text));
}

ParameterSet::ParameterSet(Backend& backend, std::vector<ParamSpec> specs, Category category,
                           const std::string& prefix, DType dtype)
    : specs_(std::move(specs)), category_(category), prefix_(prefix), dtype_(dtype) {
  // The layout order: by slot, or by place in the list when no spec has one
  // (a part of a list keeps its slots, so only their order counts).
  const size_t n = specs_.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) {
    order[i] = i;
    ANATOMY_CHECK((specs_[i].slot < 0) == (specs_.front().slot < 0), "parameter layout: {} has {} slot, {} {}",
                  specs_[i].name, specs_[i].slot < 0 ? "no" : "a", specs_.front().name,
                  specs_[i].slot < 0 ? "has one" : "none");
  }
  if (n > 0 && specs_.front().slot >= 0) {
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return specs_[a].slot < specs_[b].slot; });
    for (size_t i = 0; i + 1 < n; ++i)
      ANATOMY_CHECK(specs_[order[i]].slot != specs_[order[i + 1]].slot, "parameter layout: {} and {} share slot {}",
                    specs_[order[i]].name, specs_[order[i + 1]].name, specs_[order[i]].slot);
  }
  offsets_.assign(n, 0);
  int64_t total = 0;
  for (size_t i : order) {
    offsets_[i] = total;
    total += align_up(shape_numel(specs_[i].shape));
  }
  for (size_t i = 0; i < n; ++i) index_[specs_[i].name] = i;
  total_ = total;
  allocate(backend);
}

void ParameterSet::allocate(Backend& backend) {
  flat_ = Tensor::empty(backend.ledger(), {total_}, dtype_, category_, prefix_ + "flat");
  backend.zero(flat_);
  bind_views();
}

void ParameterSet::bind_views() {
  tensors_.clear();
  for (size_t i = 0; i < specs_.size(); ++i) tensors_.push_back(flat_.slice(offsets_[i], specs_[i].shape, prefix_ + specs_[i].name));
}

void ParameterSet::release() {
  flat_ = Tensor();
  tensors_.assign(specs_.size(), Tensor());
}

const ParamSpec& ParameterSet::spec(const std::string& name) const {
  auto it = index_.find(name);
  ANATOMY_CHECK(it != index_.end(), "no parameter named {}", name);
  return specs_[it->second];
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
  const auto get = [&](const std::string& name) { return set.get(name); };
  for (int64_t u = 0; u < c.num_hidden_layers + 2; ++u) t.bind_unit(u, c, get);
  return t;
}

void BertTensors::bind_unit(int64_t unit, const BertConfig& c, const std::function<Tensor(const std::string&)>& get) {
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

std::vector<ParameterUnit> bert_parameter_units(const ParameterSet& set, const BertConfig& c) {
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
