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
//
// Pre-split words (is_split_into_words=True) go through steps 1 to 4 one word at a time, as texts of their own
// (offsets relative to the word), before step 5 on all of them. Overflowing windows (truncation only_second with
// return_overflowing_tokens and a stride) cut the second text's tokens before step 5, which then runs on each
// window as on a whole input (utils/truncation.rs, Encoding::truncate).
#pragma once

#include <memory>
#include <optional>
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
  // The file's JSON document, as from_file reads it.
  static nlohmann::json read_document(const std::string& path);
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

  // Pre-split words, tokenizer(words, is_split_into_words=True), with word_ids: each word's tokens (none for a
  // word the normalizer empties) carry its index and offsets into it. Special tokens added; truncation (of the
  // words' tokens) and padding as `options` say, padding kLongest left to encode_words_batch.
  Encoding encode_words(std::span<const std::string> words, const EncodeOptions& options) const;
  std::vector<Encoding> encode_words_batch(std::span<const std::vector<std::string>> examples,
                                           const EncodeOptions& options, int threads = 0) const;

  // A question and its context as windows (see OverflowOptions): the second text's tokens cut in windows of
  // max_length less the first text's tokens and the special tokens, each starting `stride` tokens before the
  // end of the one before, the last one ending with the text; each window with the whole first text and the
  // special tokens, its offsets and sequence ids. One window when the pair fits (or has no second text).
  // Errors, as the library's: a stride above max_length less one text's special tokens; a pair that does not
  // fit and whose first text leaves the second no room, or less than stride + 1 tokens; a single text that
  // does not fit; and a max_length that only the special tokens fill (the library wraps around there).
  std::vector<Encoding> encode_overflowing(const TextInput& input, const OverflowOptions& options) const;
  // Every input's windows, in order, with the input of each; errors name the input's index.
  OverflowingEncodings encode_overflowing_batch(std::span<const TextInput> inputs, const OverflowOptions& options,
                                                int threads = 0) const;

  int32_t token_to_id(std::string_view token) const;  // added tokens first; -1 if absent
  std::string id_to_token(int32_t id) const;          // empty if absent
  size_t vocab_size() const;                          // the model's and the added tokens' ids
  // The id padding uses: the file's "padding" pad_id, else [PAD] / <pad>; -1 if none.
  int32_t pad_id() const { return pad_id_; }
  const std::string& source() const { return source_; }
  // How many special tokens the post-processor adds to one text or a pair.
  size_t added_special_tokens(bool pair) const;

 private:
  // The pre-tokenizer and post-processor a call runs (the file's, or those of its add_prefix_space).
  struct Pipeline {
    const PreTokenizer* pre_tokenizer;
    const PostProcessor* post_processor;
  };
  Pipeline pipeline(std::optional<bool> add_prefix_space) const;
  TokenSequence encode_text(std::string_view text, const Pipeline& pipeline) const;
  Encoding encode(const TextInput& input, const EncodeOptions& options, bool add_special_tokens,
                  int32_t& pad_sequence_id) const;
  Encoding encode_words(std::span<const std::string> words, const EncodeOptions& options,
                        int32_t& pad_sequence_id) const;
  // Post-processing, then padding to `pad_to` tokens (0: none); the sequence id padding takes goes to
  // `pad_sequence_id`. `words`, if given, is the word of each of the texts' tokens, for word_ids.
  Encoding assemble(std::vector<TokenSequence> sequences, const Pipeline& pipeline, bool add_special_tokens,
                    const std::vector<int32_t>* words, size_t pad_to, int32_t& pad_sequence_id) const;
  // Right padding to `length` tokens (word_ids too when `words`).
  void pad(Encoding& e, size_t length, int32_t pad_sequence_id, bool words) const;
  std::vector<Encoding> windows(const TextInput& input, const OverflowOptions& options,
                                std::vector<int32_t>& pad_sequence_ids) const;
  void cut_added_tokens(std::vector<Piece>& pieces, bool normalized) const;

  std::string source_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  // The file's pre-tokenizer and post-processor with every ByteLevel add_prefix_space false ([0]) or true
  // ([1]), where that changes them (EncodeOptions::add_prefix_space).
  std::unique_ptr<PreTokenizer> prefix_pre_tokenizers_[2];
  std::unique_ptr<PostProcessor> prefix_post_processors_[2];
  std::vector<AddedToken> added_;
  Vocabulary added_ids_;                      // content -> id
  std::vector<std::pair<std::string, size_t>> raw_patterns_, normalized_patterns_;  // (pattern, index in added_), longest first
  int32_t pad_id_ = -1;
};

}  // namespace anatomy::data::tok
