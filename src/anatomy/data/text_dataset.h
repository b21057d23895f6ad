// text_dataset.h: labelled text (text_table.h) made into training examples with
// the model's tokenizer, as Hugging Face's run_glue does it: [CLS] text [SEP]
// (pair [SEP]) or the tokenizer.json's own special tokens, truncated
// longest_first to max_seq_length, labels through the label vocabulary. The
// examples are padded to the longest of the file and marked for dynamic
// padding: the loader pads each batch only to its own longest example
// (DataCollatorWithPadding). Also the tokenizer's files in a model directory:
// tokenizer.json and/or vocab.txt, and tokenizer_config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "anatomy/data/dataset.h"
#include "anatomy/data/text_table.h"
#include "anatomy/data/text_tokenizer.h"
#include "anatomy/data/wordpiece.h"

namespace anatomy {

// .jsonl, .json, .csv or .tsv: a file read_text_table reads (anything else is
// taken for pre-tokenized safetensors).
bool is_text_data_file(const std::string& path);

struct TextDataOptions {
  int64_t max_seq_length = 128;  // tokens, the special ones included
  int threads = 0;               // encoding threads (0: one per hardware thread)
};

// The examples of `table`, tokenized: input_ids, token_type_ids and
// attention_mask [N, L] with L the longest encoding (at most max_seq_length),
// right-padded with the tokenizer's pad token; pad_per_batch set. Labels: int64
// class ids, or float32 [N] for a regression vocabulary; none when `labels` is
// null. A label the vocabulary lacks is an Error naming the file and line.
Dataset tokenize_text_table(const TextTable& table, const data::TextTokenizer& tokenizer,
                            const LabelVocabulary* labels, const TextDataOptions& options);

// Encodings (unpadded) as examples: input_ids, token_type_ids and
// attention_mask [N, L], each row right-padded with `pad_id` (mask 0) to L,
// the longest encoding or `min_length` if longer; pad_per_batch set.
Dataset padded_examples(const std::string& source, std::span<const data::Encoding> encodings, int32_t pad_id,
                        int64_t min_length = 0);

// The tokenizer a model directory carries, or that a run uses.
struct TokenizerSettings {
  std::string tokenizer_file;            // path of tokenizer.json: when set, the tokenizer
  std::string vocab_file;                // path of vocab.txt (WordPiece when there is no tokenizer.json)
  data::WordPieceOptions options;        // do_lower_case, strip_accents, tokenize_chinese_chars
  int64_t model_max_length = 512;
  nlohmann::json config = nlohmann::json::object();  // tokenizer_config.json as read (other keys kept)
  std::string config_file;                          // its path; empty when the directory has none
};

// `dir`/tokenizer.json (as AutoTokenizer prefers it) or else `dir`/vocab.txt,
// with the settings of `dir`/tokenizer_config.json when there is one
// (do_lower_case, strip_accents, tokenize_chinese_chars, model_max_length;
// Hugging Face's defaults otherwise; over a tokenizer.json, what its class
// rebuilds and pad_token: tok::apply_tokenizer_config); nullopt when `dir` has
// neither file. A malformed tokenizer_config.json is an Error naming it, and so
// is one whose special tokens a vocab.txt alone cannot follow (WordPiece's
// [CLS], [SEP], [PAD], [UNK] are fixed there).
std::optional<TokenizerSettings> read_tokenizer_settings(const std::string& dir);

// Writes copies of the tokenizer's files to `dir` (tokenizer.json and/or
// vocab.txt) and `dir`/tokenizer_config.json (for a vocab.txt alone:
// BertTokenizer with these settings, as AutoTokenizer.from_pretrained reads
// it; for a tokenizer.json: the source's settings with model_max_length), each
// atomically.
void save_tokenizer(const TokenizerSettings& settings, const std::string& dir);

// The tokenizer `settings` describe.
data::TextTokenizer load_tokenizer(const TokenizerSettings& settings);

}  // namespace anatomy
