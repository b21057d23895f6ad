// wordpiece.h: the WordPiece tokenizer of BERT, identical to Hugging Face's
// BertTokenizerFast (transformers 5: BertTokenizer) built from a vocab.txt.
//
// A text goes through the steps of Hugging Face tokenizers, in its order:
//   1. the special tokens ([PAD] [UNK] [CLS] [SEP] [MASK]) written in the raw
//      text are cut out and kept as they are;
//   2. normalization (BertNormalizer) of the pieces between them: control
//      characters dropped and white space made ' ' (clean_text), spaces put
//      around CJK ideographs, then, when stripping accents, NFD and the
//      nonspacing marks dropped, then lowercasing (each step optional as in
//      Hugging Face: strip_accents follows lowercase unless set);
//   3. pre-tokenization (BertPreTokenizer): split at white space, every
//      punctuation character a word of its own;
//   4. WordPiece: the longest vocabulary entry at the start of the word, then
//      the longest "##" entry after it, and so on; a word with no such split,
//      or longer than 100 characters, is [UNK];
//   5. [CLS] A [SEP] (B [SEP]) with token types 0 and 1, truncation
//      longest_first and padding as Hugging Face's Rust code does them.
// The Unicode data (wordpiece_unicode.h) reproduces the library's, code point
// by code point. Encoding is thread-safe; encode_batch uses several threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anatomy::data {

// BertTokenizer's settings.
struct WordPieceOptions {
  bool lowercase = true;                // do_lower_case
  std::optional<bool> strip_accents;    // unset: as `lowercase` (original BERT)
  bool tokenize_chinese_chars = true;
  size_t max_input_chars_per_word = 100;
};

enum class Padding { kNone, kLongest, kMaxLength };

// The settings of one encode call (`tokenizer(texts, ...)`), resolved: the CLI
// applies Hugging Face's rules for which flags imply which (tokenize_command.cpp).
struct EncodeOptions {
  size_t truncate_to = 0;             // > 0: truncation longest_first to this many tokens, special ones included
  Padding padding = Padding::kNone;   // kLongest: to the longest of the batch
  size_t pad_to = 0;                  // for kMaxLength
  // tokenizer.json only. Set: every ByteLevel pre-tokenizer and ByteLevel or RobertaProcessing post-processor of
  // the file adds the prefix space (true) or not (false), as transformers' byte-level classes (RobertaTokenizer,
  // GPT2Tokenizer...) rebuild them from their add_prefix_space argument; unset: the file's. Other tokenizers
  // have no such setting (transformers ignores the argument for them, and for TokenizersBackend).
  std::optional<bool> add_prefix_space;
};

// The settings of a question-answering call: tokenizer(question, context, truncation="only_second",
// max_length=max_length, stride=stride, return_overflowing_tokens=True, padding=...).
struct OverflowOptions {
  size_t max_length = 384;            // tokens of every window, special ones included
  size_t stride = 128;                // context tokens a window shares with the one before it
  Padding padding = Padding::kNone;   // kMaxLength: to max_length; kLongest: to the longest window of the call
  std::optional<bool> add_prefix_space;  // as in EncodeOptions
};

struct Encoding {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> token_type_ids;
  std::vector<int32_t> attention_mask;
  // Character spans [start, end) of each token in its text ((0, 0) for special
  // and padding tokens); filled by tokenizer.json tokenizers (tokenizer/tokenizer.h)
  // and by TextTokenizer's task calls (encode_words, encode_overflowing).
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
  // The text each token comes from (Hugging Face's sequence_ids()): 0 for the first, 1 for the pair's, -1 for
  // special and padding tokens. (A tokenizer.json without a post-processor gives 0 to every token of a single
  // text, padding included, as the library does.) Filled by every encode call.
  std::vector<int32_t> sequence_ids;
  // The word each token comes from (word_ids()): the index of the word in a pre-split input, -1 for special and
  // padding tokens. Filled by the calls on pre-split words only (encode_words); empty otherwise.
  std::vector<int32_t> word_ids;
};

// The windows of several question-answering inputs.
struct OverflowingEncodings {
  std::vector<Encoding> features;                   // every window of every input, in order
  std::vector<int32_t> overflow_to_sample_mapping;  // the input of each window
};

// One input: a text, or a pair of texts.
struct TextInput {
  std::string_view text;
  std::optional<std::string_view> pair;
};

class WordPieceTokenizer {
 public:
  // Reads a vocab.txt as Hugging Face does: one token a line, its id the line's
  // index; trailing white space trimmed; a token on several lines keeps the last
  // id. [UNK] must be there; [SEP], [PAD], [CLS], [MASK] that are not get the
  // next ids, in that order, as transformers adds them. Errors name the file
  // (and line).
  static WordPieceTokenizer from_file(const std::string& path, const WordPieceOptions& options = {});
  // The same from the lines themselves; `source` names them in errors.
  WordPieceTokenizer(const std::vector<std::string>& lines, const WordPieceOptions& options,
                     const std::string& source = "vocabulary");

  // The ids of `text` without special tokens (Hugging Face's
  // add_special_tokens=False), appended to `ids`. Invalid UTF-8 throws Error.
  void tokenize(std::string_view text, std::vector<int32_t>& ids) const;
  std::vector<int32_t> tokenize(std::string_view text) const;

  // Steps 2 and 3 alone: the normalized words of `text` (special tokens not
  // recognized), as backend_tokenizer.pre_tokenizer.pre_tokenize_str(
  // backend_tokenizer.normalizer.normalize_str(text)) gives them.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // [CLS] text [SEP] (pair [SEP]), truncated and padded as `options` say
  // (padding kLongest pads nothing alone: encode_batch does it). No offsets:
  // TextTokenizer gives them, through the equivalent tokenizer.json pipeline.
  Encoding encode(const TextInput& input, const EncodeOptions& options) const;
  // Every input on `threads` threads (0: one per hardware thread), in order.
  // Errors name the input's index.
  std::vector<Encoding> encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                     int threads = 0) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string& id_to_token(int32_t id) const;
  // The vocabulary as read: each distinct token of the file with its id (the last line's), by id; the
  // special tokens added after it are not in it.
  std::vector<std::pair<std::string, int32_t>> vocabulary() const;
  size_t vocab_size() const { return tokens_.size(); }  // the ids, added special tokens included
  const WordPieceOptions& options() const { return options_; }

  int32_t unk_id() const { return unk_id_; }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t mask_id() const { return mask_id_; }

  // Open addressing from a token's bytes to its id.
  class Table {
   public:
    void insert(std::string_view key, int32_t id);
    int32_t find(uint64_t hash, const char* key, size_t length) const;
    int32_t find(std::string_view key) const;
    size_t longest() const { return longest_; }
    static uint64_t hash(std::string_view key);
    // Every key and its id, in no particular order.
    std::vector<std::pair<std::string, int32_t>> entries() const;

   private:
    struct Slot {
      uint32_t tag = 0;
      int32_t id = -1;
      uint32_t offset = 0;
      uint32_t length = 0;
    };
    void grow();
    std::vector<Slot> slots_ = std::vector<Slot>(16);
    std::string bytes_;
    size_t used_ = 0;
    size_t longest_ = 0;
  };

 private:
  struct Scratch;
  template <typename Sink>
  void split_words(std::string_view text, Scratch& scratch, Sink&& sink) const;
  void tokenize_piece(std::string_view text, Scratch& scratch, std::vector<int32_t>& ids) const;
  void tokenize(std::string_view text, Scratch& scratch, std::vector<int32_t>& ids) const;
  void wordpiece(std::string_view word, size_t chars, std::vector<int32_t>& ids) const;
  Encoding encode(const TextInput& input, const EncodeOptions& options, Scratch& scratch) const;

  WordPieceOptions options_;
  bool strip_accents_ = true;
  Table words_;          // tokens that start a word
  Table continuations_;  // "##" tokens, without the "##"
  std::vector<std::string> tokens_;
  struct Special {
    std::string text;
    int32_t id;
  };
  std::vector<Special> specials_;  // matched in the raw text
  int32_t unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, mask_id_ = -1;
};

// Checks that `bytes` are UTF-8; returns the offset of the first bad byte, or npos.
size_t find_invalid_utf8(std::string_view bytes);

}  // namespace anatomy::data
