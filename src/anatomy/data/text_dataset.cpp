// text_dataset.cpp: text tables tokenized into examples; the tokenizer's files.
#include "anatomy/data/text_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy {

namespace fs = std::filesystem;

bool is_text_data_file(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jsonl" || ext == ".json" || ext == ".csv" || ext == ".tsv";
}

Dataset padded_examples(const std::string& source, std::span<const data::Encoding> encodings, int32_t pad_id,
                        int64_t min_length) {
  Dataset d;
  d.source = source;
  d.size = static_cast<int64_t>(encodings.size());
  d.seq_len = min_length;
  for (const data::Encoding& e : encodings) d.seq_len = std::max<int64_t>(d.seq_len, e.input_ids.size());
  d.pad_per_batch = true;
  const auto cells = static_cast<size_t>(d.size * d.seq_len);
  d.input_ids.assign(cells, pad_id);
  d.token_type_ids.assign(cells, 0);
  d.attention_mask.assign(cells, 0);
  for (int64_t i = 0; i < d.size; ++i) {
    const data::Encoding& e = encodings[static_cast<size_t>(i)];
    const auto row = static_cast<size_t>(i * d.seq_len);
    for (size_t t = 0; t < e.input_ids.size(); ++t) {
      d.input_ids[row + t] = e.input_ids[t];
      d.token_type_ids[row + t] = t < e.token_type_ids.size() ? e.token_type_ids[t] : 0;
      d.attention_mask[row + t] = t < e.attention_mask.size() ? e.attention_mask[t] : 1;
    }
  }
  return d;
}

Dataset tokenize_text_table(const TextTable& table, const data::TextTokenizer& tokenizer,
                            const LabelVocabulary* labels, const TextDataOptions& options) {
  if (table.rows.empty()) fail("{}: no examples", table.source);
  const bool pairs = std::any_of(table.rows.begin(), table.rows.end(),
                                 [](const TextExample& row) { return !row.text_pair.empty(); });
  const auto specials = static_cast<int64_t>(tokenizer.special_tokens(pairs));
  if (options.max_seq_length < specials + 1)
    fail("--max-seq-length {}: too short for the {} special tokens of {} and one token of text (at least {})",
         options.max_seq_length, specials, tokenizer.file(), specials + 1);
  if (tokenizer.pad_id() < 0)
    fail("{}: the tokenizer has no pad token ([PAD] or <pad>), which batches of text need", tokenizer.file());
  std::vector<data::TextInput> inputs;
  inputs.reserve(table.rows.size());
  for (const TextExample& row : table.rows) {
    data::TextInput in{row.text, std::nullopt};
    if (!row.text_pair.empty()) in.pair = std::string_view(row.text_pair);
    inputs.push_back(in);
  }
  data::EncodeOptions encode;
  encode.truncate_to = static_cast<size_t>(options.max_seq_length);
  std::vector<data::Encoding> encodings;
  try {
    encodings = tokenizer.encode_batch(inputs, encode, options.threads);
  } catch (const Error& e) {
    fail("{}: {}", table.source, e.what());
  }

  Dataset d = padded_examples(table.source, encodings, tokenizer.pad_id());
  if (labels == nullptr) return d;
  d.label_width = 1;
  if (labels->regression) {
    d.label_dtype = DType::F32;
    for (const TextExample& row : table.rows)
      d.labels_f32.push_back(static_cast<float>(labels->value_of(row, table.source)));
  } else {
    d.label_dtype = DType::I64;
    for (const TextExample& row : table.rows) d.labels_i64.push_back(labels->id_of(row, table.source));
  }
  return d;
}

namespace {
constexpr const char* kTokenizerConfig = "tokenizer_config.json";
}

std::optional<TokenizerSettings> read_tokenizer_settings(const std::string& dir) {
  const fs::path vocab = fs::path(dir) / "vocab.txt";
  const fs::path json = fs::path(dir) / "tokenizer.json";
  const bool has_vocab = io::path_kind(vocab.string()) == io::PathKind::Other;
  const bool has_json = io::path_kind(json.string()) == io::PathKind::Other;
  if (!has_vocab && !has_json) return std::nullopt;
  TokenizerSettings s;
  if (has_vocab) s.vocab_file = vocab.string();
  if (has_json) s.tokenizer_file = json.string();
  const fs::path config = fs::path(dir) / kTokenizerConfig;
  if (!io::path_exists(config.string())) return s;
  const std::string path = config.string();
  const nlohmann::json j = io::parse_json(io::read_text_file(path), path);
  if (!j.is_object()) fail("{}: expected a JSON object", path);
  auto boolean = [&](const char* key, bool* out) {
    if (!j.contains(key) || j[key].is_null()) return false;
    if (!j[key].is_boolean()) fail("{}: '{}' must be true or false", path, key);
    *out = j[key].get<bool>();
    return true;
  };
  boolean("do_lower_case", &s.options.lowercase);
  bool strip = false;
  if (boolean("strip_accents", &strip)) s.options.strip_accents = strip;
  boolean("tokenize_chinese_chars", &s.options.tokenize_chinese_chars);
  if (j.contains("model_max_length") && j["model_max_length"].is_number_integer())
    s.model_max_length = j["model_max_length"].get<int64_t>();
  if (!has_json)
    for (const auto& [key, fixed] : {std::pair{"cls_token", "[CLS]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"},
                                     {"unk_token", "[UNK]"}}) {
      if (!j.contains(key) || j[key].is_null()) continue;
      const nlohmann::json& v = j[key];
      const nlohmann::json* content = v.is_object() && v.contains("content") ? &v["content"] : &v;
      if (!content->is_string() || content->get<std::string>() != fixed)
        fail("{}: {} {} is not supported with a vocab.txt, whose {} is {} (a tokenizer.json can name it)", path, key,
             data::tok::short_dump(v), key, fixed);
    }
  s.config = j;
  s.config_file = path;
  return s;
}

void save_tokenizer(const TokenizerSettings& s, const std::string& dir) {
  const auto copy = [&](const std::string& from, const char* name) {
    const std::vector<uint8_t> bytes = io::read_file_bytes(from);
    io::write_text_file_atomic((fs::path(dir) / name).string(),
                               std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  };
  if (!s.vocab_file.empty()) copy(s.vocab_file, "vocab.txt");
  nlohmann::json j = s.config.is_object() ? s.config : nlohmann::json::object();
  if (!s.tokenizer_file.empty()) {
    copy(s.tokenizer_file, "tokenizer.json");
    if (!j.contains("tokenizer_class")) j["tokenizer_class"] = "PreTrainedTokenizerFast";
    j["model_max_length"] = s.model_max_length;
    io::write_text_file_atomic((fs::path(dir) / kTokenizerConfig).string(), j.dump(2) + "\n");
    return;
  }
  j["tokenizer_class"] = "BertTokenizer";
  j["do_lower_case"] = s.options.lowercase;
  j["strip_accents"] = s.options.strip_accents ? nlohmann::json(*s.options.strip_accents) : nlohmann::json(nullptr);
  j["tokenize_chinese_chars"] = s.options.tokenize_chinese_chars;
  j["model_max_length"] = s.model_max_length;
  for (const auto& [key, token] : {std::pair{"unk_token", "[UNK]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"},
                                   {"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}})
    if (!j.contains(key)) j[key] = token;
  io::write_text_file_atomic((fs::path(dir) / kTokenizerConfig).string(), j.dump(2) + "\n");
}

data::TextTokenizer load_tokenizer(const TokenizerSettings& settings) {
  return data::TextTokenizer::load(settings.tokenizer_file, settings.vocab_file, settings.options,
                                   settings.config_file.empty() ? nullptr : &settings.config,
                                   settings.config_file);
}

}  // namespace anatomy
