// text_tokenizer.cpp: see text_tokenizer.h.
#include "anatomy/data/text_tokenizer.h"

#include <nlohmann/json.hpp>

#include "anatomy/data/tokenizer/tokenizer.h"
#include "anatomy/data/tokenizer/tokenizer_config.h"

namespace anatomy::data {

namespace {

// The tokenizer.json of transformers' BertTokenizer for a vocab.txt read as `word_piece` (models/bert/
// tokenization_bert.py): its special tokens added, not normalized, with the ids WordPieceTokenizer gives them.
nlohmann::json word_piece_document(const WordPieceTokenizer& word_piece) {
  const WordPieceOptions& options = word_piece.options();
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [token, id] : word_piece.vocabulary()) vocab[token] = id;
  nlohmann::json added = nlohmann::json::array();
  for (const char* token : {"[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"})
    added.push_back({{"id", word_piece.token_to_id(token)}, {"content", token}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  const auto special = [](const char* token, int32_t id) {
    return nlohmann::json{{"id", token}, {"ids", {id}}, {"tokens", {token}}};
  };
  const auto item = [](const char* kind, const char* id, int type_id) {
    return nlohmann::json{{kind, {{"id", id}, {"type_id", type_id}}}};
  };
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"},
        {"clean_text", true},
        {"handle_chinese_chars", options.tokenize_chinese_chars},
        {"strip_accents", options.strip_accents ? nlohmann::json(*options.strip_accents) : nlohmann::json()},
        {"lowercase", options.lowercase}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {item("SpecialToken", "[CLS]", 0), item("Sequence", "A", 0), item("SpecialToken", "[SEP]", 0)}},
        {"pair",
         {item("SpecialToken", "[CLS]", 0), item("Sequence", "A", 0), item("SpecialToken", "[SEP]", 0),
          item("Sequence", "B", 1), item("SpecialToken", "[SEP]", 1)}},
        {"special_tokens",
         {{"[CLS]", special("[CLS]", word_piece.cls_id())}, {"[SEP]", special("[SEP]", word_piece.sep_id())}}}}},
      {"model",
       {{"type", "WordPiece"},
        {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", options.max_input_chars_per_word},
        {"vocab", vocab}}},
  };
}

}  // namespace

TextTokenizer TextTokenizer::load(const std::string& tokenizer_json, const std::string& vocab_file,
                                  const WordPieceOptions& options, const nlohmann::json* tokenizer_config,
                                  const std::string& config_path) {
  if (!tokenizer_json.empty()) {
    TextTokenizer t;
    t.json_ = std::make_shared<const tok::Tokenizer>(
        tok::read_configured_tokenizer(tokenizer_json, tokenizer_config, config_path), tokenizer_json);
    t.file_ = tokenizer_json;
    return t;
  }
  return TextTokenizer(WordPieceTokenizer::from_file(vocab_file, options), vocab_file);
}

TextTokenizer::TextTokenizer(WordPieceTokenizer word_piece, std::string file)
    : word_piece_(std::make_shared<const WordPieceTokenizer>(std::move(word_piece))),
      word_piece_pipeline_(std::make_shared<WordPiecePipeline>()),
      file_(std::move(file)) {}

const tok::Tokenizer& TextTokenizer::pipeline() const {
  if (json_) return *json_;
  std::call_once(word_piece_pipeline_->made, [&] {
    word_piece_pipeline_->tokenizer = std::make_unique<const tok::Tokenizer>(word_piece_document(*word_piece_), file_);
  });
  return *word_piece_pipeline_->tokenizer;
}

std::vector<Encoding> TextTokenizer::encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                                  int threads) const {
  if (json_) return json_->encode_batch(inputs, options, /*add_special_tokens=*/true, threads);
  return word_piece_->encode_batch(inputs, options, threads);
}

std::vector<Encoding> TextTokenizer::encode_words(std::span<const std::vector<std::string>> examples,
                                                  const EncodeOptions& options, int threads) const {
  return pipeline().encode_words_batch(examples, options, threads);
}

std::vector<Encoding> TextTokenizer::encode_overflowing(const TextInput& input, const OverflowOptions& options) const {
  return pipeline().encode_overflowing(input, options);
}

OverflowingEncodings TextTokenizer::encode_overflowing_batch(std::span<const TextInput> inputs,
                                                             const OverflowOptions& options, int threads) const {
  return pipeline().encode_overflowing_batch(inputs, options, threads);
}

size_t TextTokenizer::vocab_size() const { return json_ ? json_->vocab_size() : word_piece_->vocab_size(); }

int32_t TextTokenizer::pad_id() const { return json_ ? json_->pad_id() : word_piece_->pad_id(); }

int32_t TextTokenizer::token_to_id(std::string_view token) const {
  return json_ ? json_->token_to_id(token) : word_piece_->token_to_id(token);
}

size_t TextTokenizer::special_tokens(bool pair) const {
  if (json_) return json_->added_special_tokens(pair);
  return pair ? 3 : 2;
}

}  // namespace anatomy::data
