// tokenizer_config.cpp: tokenizer_config.json over tokenizer.json (see tokenizer_config.h).
#include "anatomy/data/tokenizer/tokenizer_config.h"

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/data/tokenizer/tokenizer.h"

namespace anatomy::data::tok {

namespace {

bool is_class(const std::string& name, std::initializer_list<std::string_view> classes) {
  for (std::string_view c : classes)
    if (name == c || name == std::string(c) + "Fast") return true;
  return false;
}

struct ConfigReader {
  const nlohmann::json& config;
  const std::string& path;

  // A special token: a string, or an AddedToken object's "content"; nullopt when absent or null.
  std::optional<std::string> token(const char* key) const {
    const nlohmann::json* v = optional_field(config, key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    if (v->is_string()) return v->get<std::string>();
    if (v->is_object())
      if (const nlohmann::json* content = optional_field(*v, "content"); content && content->is_string())
        return content->get<std::string>();
    fail("{}: '{}' must be a token (a string, or an object with a \"content\" string), not {}", path, key,
         json_kind(*v));
  }
  std::optional<bool> flag(const char* key) const {
    const nlohmann::json* v = optional_field(config, key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    if (!v->is_boolean()) fail("{}: '{}' must be true or false, not {}", path, key, json_kind(*v));
    return v->get<bool>();
  }
};

// The id of `token` in the document: its added tokens first, then the model's vocabulary; -1 if absent.
int64_t document_token_id(const nlohmann::json& document, const std::string& token) {
  if (const nlohmann::json* added = optional_field(document, "added_tokens"); added && added->is_array())
    for (const nlohmann::json& t : *added)
      if (const nlohmann::json* content = optional_field(t, "content"); content && *content == token)
        if (const nlohmann::json* id = optional_field(t, "id"); id && id->is_number_integer())
          return id->get<int64_t>();
  const nlohmann::json* model = optional_field(document, "model");
  const nlohmann::json* vocab = model ? optional_field(*model, "vocab") : nullptr;
  if (vocab == nullptr) return -1;
  if (vocab->is_object()) {
    const auto it = vocab->find(token);
    return it != vocab->end() && it->is_number_integer() ? it->get<int64_t>() : -1;
  }
  if (vocab->is_array())  // Unigram: [piece, score] pairs, the id the index
    for (size_t i = 0; i < vocab->size(); ++i)
      if ((*vocab)[i].is_array() && !(*vocab)[i].empty() && (*vocab)[i][0] == token) return static_cast<int64_t>(i);
  return -1;
}

int64_t special_id(const nlohmann::json& document, const std::string& token, const char* key,
                   const std::string& path) {
  const int64_t id = document_token_id(document, token);
  if (id < 0) fail("{}: {} \"{}\" is not in the tokenizer's vocabulary", path, key, token);
  return id;
}

// Sets add_prefix_space on every ByteLevel pre-tokenizer of `pre` (a Sequence's too).
void set_byte_level_prefix(nlohmann::json& pre, bool add_prefix_space) {
  if (!pre.is_object()) return;
  if (pre.value("type", "") == "ByteLevel") pre["add_prefix_space"] = add_prefix_space;
  if (nlohmann::json* seq = pre.contains("pretokenizers") ? &pre["pretokenizers"] : nullptr; seq && seq->is_array())
    for (nlohmann::json& p : *seq) set_byte_level_prefix(p, add_prefix_space);
}

void bert_pipeline(nlohmann::json& document, const ConfigReader& config) {
  const std::optional<bool> strip = config.flag("strip_accents");
  document["normalizer"] = {{"type", "BertNormalizer"},
                            {"clean_text", true},
                            {"handle_chinese_chars", config.flag("tokenize_chinese_chars").value_or(true)},
                            {"strip_accents", strip ? nlohmann::json(*strip) : nlohmann::json()},
                            {"lowercase", config.flag("do_lower_case").value_or(true)}};
  document["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  const std::string cls = config.token("cls_token").value_or("[CLS]");
  const std::string sep = config.token("sep_token").value_or("[SEP]");
  const int64_t cls_id = special_id(document, cls, "cls_token", config.path);
  const int64_t sep_id = special_id(document, sep, "sep_token", config.path);
  const auto item = [](const char* kind, const std::string& id, int type_id) {
    return nlohmann::json{{kind, {{"id", id}, {"type_id", type_id}}}};
  };
  nlohmann::json specials = nlohmann::json::object();
  specials[cls] = {{"id", cls}, {"ids", {cls_id}}, {"tokens", {cls}}};
  specials[sep] = {{"id", sep}, {"ids", {sep_id}}, {"tokens", {sep}}};
  document["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {item("SpecialToken", cls, 0), item("Sequence", "A", 0), item("SpecialToken", sep, 0)}},
      {"pair",
       {item("SpecialToken", cls, 0), item("Sequence", "A", 0), item("SpecialToken", sep, 0), item("Sequence", "B", 1),
        item("SpecialToken", sep, 1)}},
      {"special_tokens", specials}};
}

void roberta_pipeline(nlohmann::json& document, const ConfigReader& config) {
  const bool prefix = config.flag("add_prefix_space").value_or(false);
  const std::string cls = config.token("cls_token").value_or("<s>");
  const std::string sep = config.token("sep_token").value_or("</s>");
  document["post_processor"] = {{"type", "RobertaProcessing"},
                                {"sep", {sep, special_id(document, sep, "sep_token", config.path)}},
                                {"cls", {cls, special_id(document, cls, "cls_token", config.path)}},
                                {"trim_offsets", config.flag("trim_offsets").value_or(true)},
                                {"add_prefix_space", prefix}};
  if (document.contains("pre_tokenizer")) set_byte_level_prefix(document["pre_tokenizer"], prefix);
}

}  // namespace

void apply_tokenizer_config(nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& config_path) {
  if (!config.is_object() || !tokenizer.is_object()) return;
  const ConfigReader reader{config, config_path};
  const nlohmann::json* class_field = optional_field(config, "tokenizer_class");
  const std::string name = class_field && class_field->is_string() ? class_field->get<std::string>() : "";
  const nlohmann::json* model = optional_field(tokenizer, "model");
  const std::string model_type = model && model->is_object() ? model->value("type", "") : "";
  if (is_class(name, {"BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer"}) && model_type == "WordPiece")
    bert_pipeline(tokenizer, reader);
  else if (is_class(name, {"RobertaTokenizer"}) && model_type == "BPE")
    roberta_pipeline(tokenizer, reader);
  else if (is_class(name, {"GPT2Tokenizer"}) && model_type == "BPE" && tokenizer.contains("pre_tokenizer"))
    if (const std::optional<bool> prefix = reader.flag("add_prefix_space"))
      set_byte_level_prefix(tokenizer["pre_tokenizer"], *prefix);

  // The padding token: the tokenizer reads its id from "padding" (the rest of which is not applied).
  if (const std::optional<std::string> pad = reader.token("pad_token")) {
    const int64_t id = special_id(tokenizer, *pad, "pad_token", config_path);
    nlohmann::json& padding = tokenizer["padding"];
    if (!padding.is_object()) padding = nlohmann::json::object();
    padding["pad_id"] = id;
    padding["pad_token"] = *pad;
  }
}

nlohmann::json read_configured_tokenizer(const std::string& path, const nlohmann::json* config,
                                         const std::string& config_path) {
  nlohmann::json document = Tokenizer::read_document(path);
  if (config != nullptr && config->is_object()) apply_tokenizer_config(document, *config, config_path);
  return document;
}

}  // namespace anatomy::data::tok
