// text_tokenizer.h: the tokenizer a run on text uses: a tokenizer.json (any
// model the `tokenizers` library writes; data/tokenizer/) or a WordPiece
// vocab.txt (wordpiece.h), behind one interface, so the data code does not
// care which one a model directory carries.
//
// The calls of the task heads (pre-split words, question-answering windows)
// need offsets, which WordPieceTokenizer does not give: for a vocab.txt they
// run the tokenizer.json pipeline that transformers' BertTokenizer builds from
// it (BertNormalizer with the WordPieceOptions, BertPreTokenizer, WordPiece
// "##", [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1), made the first time one
// of them runs; encode_batch keeps WordPieceTokenizer's own, faster path.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anatomy/data/wordpiece.h"

namespace anatomy::data {

namespace tok {
class Tokenizer;
}

class TextTokenizer {
 public:
  // Reads `tokenizer_json` when it is not empty, else `vocab_file` with `options`. A tokenizer.json is
  // rebuilt as `tokenizer_config` (tokenizer_config.json's object, read from `config_path`) asks, when given
  // (tok::apply_tokenizer_config).
  static TextTokenizer load(const std::string& tokenizer_json, const std::string& vocab_file,
                            const WordPieceOptions& options, const nlohmann::json* tokenizer_config = nullptr,
                            const std::string& config_path = "");
  // A WordPiece tokenizer already read (`file` names it).
  TextTokenizer(WordPieceTokenizer word_piece, std::string file = "vocab.txt");  // NOLINT: converts on purpose

  // Every input, [CLS]/[SEP] (or the file's special tokens) added, truncated
  // and padded as `options` say; errors name the input's index.
  TextTokenizer() = default;
  std::vector<Encoding> encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                     int threads = 0) const;
  // Pre-split words (run_ner.py's tokenizer(words, is_split_into_words=True, truncation=True,
  // max_length=...)): every example's words, each word tokenized alone, with offsets into the word and
  // word_ids; special tokens added, the words' tokens truncated and padded as `options` say. For byte-level
  // BPE, transformers' RobertaTokenizer wants add_prefix_space=True here (options.add_prefix_space): without
  // it no error, every word is tokenized as the start of a text is, without the space before it.
  std::vector<Encoding> encode_words(std::span<const std::vector<std::string>> examples, const EncodeOptions& options,
                                     int threads = 0) const;
  // A question and a context in overlapping windows (run_qa.py's tokenizer(question, context,
  // truncation="only_second", max_length, stride, return_overflowing_tokens=True,
  // return_offsets_mapping=True, padding=...)), each with offsets and sequence_ids; see
  // tok::Tokenizer::encode_overflowing for the windows and the errors.
  std::vector<Encoding> encode_overflowing(const TextInput& input, const OverflowOptions& options) const;
  // The windows of every input, in order, with overflow_to_sample_mapping; errors name the input's index.
  OverflowingEncodings encode_overflowing_batch(std::span<const TextInput> inputs, const OverflowOptions& options,
                                                int threads = 0) const;
  size_t vocab_size() const;
  int32_t pad_id() const;  // -1 when the tokenizer has no pad token
  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  // The special tokens added to one text, or to a pair.
  size_t special_tokens(bool pair) const;
  // The file it was read from (tokenizer.json or vocab.txt).
  const std::string& file() const { return file_; }

 private:
  // The tokenizer.json pipeline of a vocab.txt, made on first use.
  struct WordPiecePipeline {
    std::once_flag made;
    std::unique_ptr<const tok::Tokenizer> tokenizer;
  };
  // json_, or the pipeline of word_piece_.
  const tok::Tokenizer& pipeline() const;

  std::shared_ptr<const WordPieceTokenizer> word_piece_;
  std::shared_ptr<const tok::Tokenizer> json_;
  std::shared_ptr<WordPiecePipeline> word_piece_pipeline_;
  std::string file_;
};

}  // namespace anatomy::data
