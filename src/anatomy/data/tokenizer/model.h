// model.h: the models of tokenizer.json, which turn one pre-tokenized piece of
// normalized text into tokens: WordPiece, BPE and WordLevel here, Unigram in
// unigram.h. Each follows Hugging Face tokenizers' models/ to the edge cases
// (unknown words, byte fallback, fused unknowns), because the ids must agree.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace anatomy::data::tok {

// A token of a piece: its id and the bytes [start, end) of the piece it covers.
struct ModelToken {
  int32_t id;
  uint32_t start, end;
};

class Model {
 public:
  virtual ~Model();
  // Appends the tokens of `piece` (never empty) to `out`.
  virtual void tokenize(std::string_view piece, std::vector<ModelToken>& out) const = 0;
  virtual int32_t token_to_id(std::string_view token) const = 0;  // -1 if absent
  virtual std::string id_to_token(int32_t id) const = 0;          // empty if absent
  virtual size_t vocab_size() const = 0;
};

// A string-keyed map that looks up string_views without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocabulary = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The vocabulary object {"token": id, ...} of a model; `where` names it in errors.
// Also fills `by_id` (id -> token; ids must be below 2^24).
Vocabulary read_vocabulary(const nlohmann::json& vocab, const std::string& where, std::vector<std::string>& by_id);

class WordPieceModel : public Model {
 public:
  static std::unique_ptr<WordPieceModel> from_json(const nlohmann::json& model, const std::string& where);
  void tokenize(std::string_view piece, std::vector<ModelToken>& out) const override;
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  size_t vocab_size() const override { return vocab_.size(); }
  const std::string& continuing_subword_prefix() const { return prefix_; }

 private:
  Vocabulary vocab_;
  Vocabulary continuations_;  // the tokens that start with the prefix, without it
  std::vector<std::string> by_id_;
  std::string unk_token_, prefix_;
  int32_t unk_id_ = -1;
  size_t max_input_chars_per_word_ = 100;
  // The longest token, and continuation without its prefix, in bytes: no longer
  // substring can match, so the greedy search starts there (the same result).
  size_t longest_word_ = 0, longest_continuation_ = 0;
};

class BpeModel : public Model {
 public:
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, const std::string& where);
  void tokenize(std::string_view piece, std::vector<ModelToken>& out) const override;
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  size_t vocab_size() const override { return vocab_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* find_merge(int32_t a, int32_t b) const;
  void merge_word(std::string_view word, std::vector<ModelToken>& out) const;

  // Words seen before and their tokens, per thread, as the library caches them
  // (a speed-up only: merging is a function of the word). Keyed by `id_`, not
  // by address, so that a model made where a destroyed one was starts empty.
  static constexpr size_t kCacheCapacity = 10000, kCacheMaxWord = 256;
  uint64_t id_ = 0;

  Vocabulary vocab_;
  std::vector<std::string> by_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<std::string> unk_token_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int32_t byte_ids_[256];  // <0xNN> tokens for byte_fallback, -1 where absent
};

class WordLevelModel : public Model {
 public:
  static std::unique_ptr<WordLevelModel> from_json(const nlohmann::json& model, const std::string& where);
  void tokenize(std::string_view piece, std::vector<ModelToken>& out) const override;
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  size_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocabulary vocab_;
  std::vector<std::string> by_id_;
  std::string unk_token_;
};

// The model of a tokenizer.json's "model" object (Unigram included).
std::unique_ptr<Model> model_from_json(const nlohmann::json& model, const std::string& where);

}  // namespace anatomy::data::tok
