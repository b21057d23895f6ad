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
};

struct Encoding {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> token_type_ids;
  std::vector<int32_t> attention_mask;
  // Character spans [start, end) of each token in its text ((0, 0) for special
  // and padding tokens); filled by tokenizer.json tokenizers (tokenizer/tokenizer.h).
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
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
  // (padding kLongest pads nothing alone: encode_batch does it).
  Encoding encode(const TextInput& input, const EncodeOptions& options) const;
  // Every input on `threads` threads (0: one per hardware thread), in order.
  // Errors name the input's index.
  std::vector<Encoding> encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                     int threads = 0) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string& id_to_token(int32_t id) const;
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
