// tokenizer.h: a Hugging Face tokenizer.json, run as the `tokenizers` library
// runs it, to the same ids, type ids and offsets.
//
// The steps of one text, in the library's order:
//   1. added tokens written in the raw text (those not "normalized") are cut
//      out and kept whole;
//   2. the normalizer runs on the pieces between them; added tokens that are
//      "normalized" are then cut out of the normalized pieces;
//   3. the pre-tokenizer splits the pieces further;
//   4. the model (WordPiece, BPE, Unigram, WordLevel) tokenizes each piece;
//   5. truncation, then the post-processor (special tokens, type ids, offset
//      trimming), then padding.
// Offsets are character (code point) spans of the original text, as the Python
// library's Encoding.offsets; the tokens of a pair's second text have spans of
// that text. The file's own "truncation" and "padding" are not applied: as in
// transformers, the caller's settings (EncodeOptions) decide.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anatomy/data/tokenizer/model.h"
#include "anatomy/data/tokenizer/post_processors.h"
#include "anatomy/data/wordpiece.h"

namespace anatomy::data::tok {

class Normalizer;
class PreTokenizer;
struct Piece;

// A token added to the vocabulary (tokenizer.json's "added_tokens").
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class Tokenizer {
 public:
  // Reads a tokenizer.json; every problem is one error naming the file.
  static Tokenizer from_file(const std::string& path);
  Tokenizer(const nlohmann::json& document, const std::string& source);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // The ids of one text or pair, with offsets; truncated and padded as `options` say
  // (padding kLongest pads nothing alone: encode_batch does it).
  Encoding encode(const TextInput& input, const EncodeOptions& options, bool add_special_tokens = true) const;
  // Every input on `threads` threads (0: one per hardware thread), in order. Errors name the input's index.
  std::vector<Encoding> encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                     bool add_special_tokens = true, int threads = 0) const;

  int32_t token_to_id(std::string_view token) const;  // added tokens first; -1 if absent
  std::string id_to_token(int32_t id) const;          // empty if absent
  size_t vocab_size() const;                          // the model's and the added tokens' ids
  // The id padding uses: the file's "padding" pad_id, else [PAD] / <pad>; -1 if none.
  int32_t pad_id() const { return pad_id_; }
  const std::string& source() const { return source_; }
  // How many special tokens the post-processor adds to one text or a pair.
  size_t added_special_tokens(bool pair) const;

 private:
  TokenSequence encode_text(std::string_view text, bool fill_values) const;
  void cut_added_tokens(std::vector<Piece>& pieces, bool normalized) const;

  std::string source_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::vector<AddedToken> added_;
  Vocabulary added_ids_;                      // content -> id
  std::vector<std::pair<std::string, size_t>> raw_patterns_, normalized_patterns_;  // (pattern, index in added_), longest first
  int32_t pad_id_ = -1;
};

}  // namespace anatomy::data::tok
