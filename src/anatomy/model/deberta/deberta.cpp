// deberta.cpp: the DeBERTa-v2/v3 family's layout, config.json and sizes.
#include "anatomy/model/deberta/deberta.h"

#include <algorithm>
#include <cctype>

#include "anatomy/core/error.h"
#include "anatomy/io/json.h"
#include "anatomy/model/bert/bert_config.h"

namespace anatomy {

namespace {

using nlohmann::json;
using io::short_dump;

// The keys read into ModelConfig; the others stay in `extra` (pooler_dropout
// among them, which the head reads; legacy, bos/eos ids, ...).
const std::vector<std::string> kKnownKeys = {
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "cls_dropout", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "num_labels", "problem_type",
    "id2label", "label2id", "model_type", "relative_attention", "max_relative_positions", "position_buckets",
    "position_biased_input", "pos_att_type", "share_att_key", "norm_rel_ebd", "conv_kernel_size", "embedding_size",
    "attention_head_size", "pooler_hidden_act", "pooler_hidden_size"};

// DebertaV2Config's defaults (its class's, not a checkpoint's: relative
// attention is off and position_biased_input on unless config.json says).
ModelConfig defaults() {
  ModelConfig c;
  c.model_type = "deberta-v2";
  c.vocab_size = 128100;
  c.hidden_size = 1536;
  c.num_hidden_layers = 24;
  c.num_attention_heads = 24;
  c.intermediate_size = 6144;
  c.type_vocab_size = 0;
  c.layer_norm_eps = 1e-7;
  return c;
}

bool config_bool(const json& j, const char* key, bool fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail("{}: '{}' must be true or false, got {}", source, key, short_dump(j[key]));
  return j[key].get<bool>();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// "a|b | c" as DebertaV2Config splits pos_att_type and norm_rel_ebd: lower-cased, each part trimmed.
std::vector<std::string> bar_separated(const std::string& value) {
  const std::string text = lower(value);
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t bar = text.find('|', start);
    parts.push_back(trimmed(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start)));
    if (bar == std::string::npos) return parts;
    start = bar + 1;
  }
}

// "p2c|c2p" or ["p2c", "c2p"], as DebertaV2Config reads it.
std::vector<std::string> pos_att_types(const json& value, const std::string& source) {
  std::vector<std::string> types;
  if (value.is_null()) return types;
  if (value.is_string()) {
    types = bar_separated(value.get<std::string>());
  } else if (value.is_array()) {
    for (const json& item : value) {
      if (!item.is_string()) fail("{}: 'pos_att_type' must hold strings, got {}", source, short_dump(item));
      types.push_back(item.get<std::string>());
    }
  } else {
    fail("{}: 'pos_att_type' must be a string or a list, got {}", source, short_dump(value));
  }
  return types;
}

}  // namespace

const BertLayout& deberta_layout() {
  static const BertLayout layout = [] {
    BertLayout l;
    l.model_type = "deberta-v2";
    l.architecture = "DebertaV2ForSequenceClassification";
    l.prefix = "deberta.";
    l.position.clear();  // no absolute position table
    l.relative_attention = true;
    l.mask_embeddings = true;
    l.query = "attention.self.query_proj";
    l.key = "attention.self.key_proj";
    l.value = "attention.self.value_proj";
    // ContextPooler: dropout(pooler_dropout) -> dense -> GELU; then dropout(cls_dropout) -> classifier.
    l.head_dense = "pooler.dense";
    l.classifier = "classifier";
    l.head_activation = ActivationKind::GeluErf;
    l.dropout_before_head_dense = true;
    l.head_dense_dropout_key = "pooler_dropout";
    return l;
  }();
  return layout;
}

ModelConfig parse_deberta_config(const json& j, const std::string& source) {
  ModelConfig c = defaults();
  c.vocab_size = config_int(j, "vocab_size", c.vocab_size, source);
  c.hidden_size = config_int(j, "hidden_size", c.hidden_size, source);
  c.num_hidden_layers = config_int(j, "num_hidden_layers", c.num_hidden_layers, source);
  c.num_attention_heads = config_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.intermediate_size = config_int(j, "intermediate_size", c.intermediate_size, source);
  if (j.contains("hidden_act")) c.hidden_act = parse_activation(j["hidden_act"], "hidden_act", source);
  c.hidden_dropout_prob = config_double(j, "hidden_dropout_prob", c.hidden_dropout_prob, source);
  c.attention_probs_dropout_prob =
      config_double(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, source);
  if (j.contains("cls_dropout") && !j["cls_dropout"].is_null())
    c.classifier_dropout = config_double(j, "cls_dropout", 0.0, source);
  c.max_position_embeddings = config_int(j, "max_position_embeddings", c.max_position_embeddings, source);
  c.type_vocab_size = config_int(j, "type_vocab_size", c.type_vocab_size, source);
  c.initializer_range = config_double(j, "initializer_range", c.initializer_range, source);
  c.layer_norm_eps = config_double(j, "layer_norm_eps", c.layer_norm_eps, source);
  c.pad_token_id = config_int(j, "pad_token_id", c.pad_token_id, source);
  parse_labels(j, source, c);

  // What DeBERTa-v3 uses; anything else would be another computation, refused by name.
  if (!config_bool(j, "relative_attention", false, source))
    fail("{}: relative_attention false is not supported (DeBERTa's disentangled attention only)", source);
  if (config_bool(j, "position_biased_input", true, source))
    fail("{}: position_biased_input true is not supported (absolute position embeddings in DeBERTa)", source);
  if (!config_bool(j, "share_att_key", false, source))
    fail("{}: share_att_key false is not supported (separate pos_key_proj/pos_query_proj)", source);
  if (const int64_t conv = config_int(j, "conv_kernel_size", 0, source); conv > 0)
    fail("{}: conv_kernel_size {} is not supported (DeBERTa's convolution layer)", source, conv);
  if (const int64_t e = config_int(j, "embedding_size", c.hidden_size, source); e != c.hidden_size)
    fail("{}: embedding_size {} is not supported (only hidden_size, {}: no embed_proj)", source, e, c.hidden_size);
  if (c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0) {
    const int64_t head = config_int(j, "attention_head_size", c.hidden_size / c.num_attention_heads, source);
    if (head != c.hidden_size / c.num_attention_heads)
      fail("{}: attention_head_size {} is not supported (only hidden_size / num_attention_heads, {})", source, head,
           c.hidden_size / c.num_attention_heads);
  }
  if (j.contains("pooler_hidden_act") && !j["pooler_hidden_act"].is_null() &&
      !(j["pooler_hidden_act"].is_string() && j["pooler_hidden_act"].get<std::string>() == "gelu"))
    fail("{}: pooler_hidden_act {} is not supported (only \"gelu\")", source, short_dump(j["pooler_hidden_act"]));
  if (const int64_t pooler = config_int(j, "pooler_hidden_size", c.hidden_size, source); pooler != c.hidden_size)
    fail("{}: pooler_hidden_size {} is not supported (only hidden_size, {})", source, pooler, c.hidden_size);
  const double pooler_dropout = config_double(j, "pooler_dropout", 0.0, source);
  if (!(pooler_dropout >= 0.0 && pooler_dropout < 1.0))
    fail("{}: 'pooler_dropout' must be in [0, 1), got {}", source, pooler_dropout);

  RelativePositions& r = c.relative;
  for (const std::string& type : pos_att_types(j.contains("pos_att_type") ? j["pos_att_type"] : json(), source)) {
    if (type == "c2p") r.c2p = true;
    else if (type == "p2c") r.p2c = true;
    else fail("{}: pos_att_type \"{}\" is not supported (c2p, p2c)", source, type);
  }
  const int64_t max_relative = config_int(j, "max_relative_positions", -1, source);
  r.max_position = max_relative < 1 ? c.max_position_embeddings : max_relative;
  const int64_t buckets = config_int(j, "position_buckets", -1, source);
  r.buckets = buckets > 0 ? buckets : 0;
  r.span = buckets > 0 ? buckets : r.max_position;
  if (r.buckets > 0 && r.buckets < 4)
    fail("{}: position_buckets {} is too small (at least 4: the buckets past the middle grow from it)", source,
         r.buckets);
  if (r.buckets > 0 && r.max_position <= r.buckets / 2 + 1)
    fail("{}: max_relative_positions {} must exceed position_buckets / 2 + 1 ({})", source, r.max_position,
         r.buckets / 2 + 1);
  if (r.span > (int64_t{1} << 20)) fail("{}: the relative span {} is too large", source, r.span);
  if (j.contains("norm_rel_ebd") && !j["norm_rel_ebd"].is_null()) {
    if (!j["norm_rel_ebd"].is_string())
      fail("{}: 'norm_rel_ebd' must be a string, got {}", source, short_dump(j["norm_rel_ebd"]));
    for (const std::string& part : bar_separated(j["norm_rel_ebd"].get<std::string>())) {
      if (part == "layer_norm") r.layer_norm = true;
      else if (part != "none") fail("{}: norm_rel_ebd \"{}\" is not supported (layer_norm, none)", source, part);
    }
  }

  for (const auto& [key, value] : j.items())
    if (std::find(kKnownKeys.begin(), kKnownKeys.end(), key) == kKnownKeys.end()) c.extra[key] = value;
  validate_model_config(c, source);
  return c;
}

json deberta_config_to_json(const ModelConfig& c) {
  json j = c.extra;
  j["architectures"] = json::array({deberta_layout().architecture});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_act"] = activation_name(c.hidden_act);
  j["hidden_dropout_prob"] = c.hidden_dropout_prob;
  j["attention_probs_dropout_prob"] = c.attention_probs_dropout_prob;
  if (c.classifier_dropout) j["cls_dropout"] = *c.classifier_dropout;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["type_vocab_size"] = c.type_vocab_size;
  j["initializer_range"] = c.initializer_range;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["pad_token_id"] = c.pad_token_id;
  const RelativePositions& r = c.relative;
  j["relative_attention"] = true;
  j["position_biased_input"] = false;
  j["share_att_key"] = true;
  j["max_relative_positions"] = r.max_position == c.max_position_embeddings ? -1 : r.max_position;
  j["position_buckets"] = r.buckets > 0 ? r.buckets : -1;
  json types = json::array();
  if (r.p2c) types.push_back("p2c");
  if (r.c2p) types.push_back("c2p");
  j["pos_att_type"] = types;
  j["norm_rel_ebd"] = r.layer_norm ? "layer_norm" : "none";
  j["pooler_hidden_size"] = c.hidden_size;
  j["pooler_hidden_act"] = "gelu";
  if (!j.contains("pooler_dropout")) j["pooler_dropout"] = 0.0;
  labels_to_json(c, j);
  if (!j.contains("dtype")) j["dtype"] = "float32";
  return j;
}

std::optional<ModelConfig> deberta_preset(const std::string& name) {
  auto make = [](int64_t layers, int64_t hidden, int64_t heads) {
    ModelConfig c = defaults();
    c.num_hidden_layers = layers;
    c.hidden_size = hidden;
    c.num_attention_heads = heads;
    c.intermediate_size = 4 * hidden;
    c.relative = RelativePositions{256, 256, 512, true, true, true};
    c.extra["pooler_dropout"] = 0.0;
    return c;
  };
  if (name == "deberta-v3-xsmall") return make(12, 384, 6);
  if (name == "deberta-v3-small") return make(6, 768, 12);
  if (name == "deberta-v3-base") return make(12, 768, 12);
  if (name == "deberta-v3-large") return make(24, 1024, 16);
  return std::nullopt;
}

std::vector<std::string> deberta_preset_names() {
  return {"deberta-v3-xsmall", "deberta-v3-small", "deberta-v3-base", "deberta-v3-large"};
}

}  // namespace anatomy
