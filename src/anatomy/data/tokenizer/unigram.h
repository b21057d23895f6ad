// unigram.h: the Unigram model of tokenizer.json (SentencePiece's unigram
// language model, as Hugging Face tokenizers' models/unigram runs it): the
// Viterbi best path over the pieces that start at each character, unknown
// characters scored min_score - 10 and fused into one token, and byte fallback
// to <0xNN> pieces for a token the vocabulary lacks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anatomy/data/tokenizer/model.h"

namespace anatomy::data::tok {

class UnigramModel : public Model {
 public:
  // {"type": "Unigram", "unk_id": n or null, "vocab": [[piece, score], ...], "byte_fallback": bool}.
  static std::unique_ptr<UnigramModel> from_json(const nlohmann::json& model, const std::string& where);

  // Throws Error when a character has no piece of its own and there is no unk_id.
  void tokenize(std::string_view piece, std::vector<ModelToken>& out) const override;
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  size_t vocab_size() const override { return pieces_.size(); }
  int32_t unk_id() const { return unk_id_; }  // -1 if none
  bool byte_fallback() const { return byte_fallback_; }

 private:
  // A trie of the pieces' bytes; each node's children are contiguous and sorted by label.
  struct Node {
    uint32_t first_child = 0;
    uint16_t child_count = 0;
    uint8_t label = 0;
    int32_t id = -1;  // the piece ending here (the vocabulary's id for it), or -1
  };
  int32_t child(int32_t node, uint8_t label) const;
  void build_trie();

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  Vocabulary ids_;  // piece -> id; a repeated piece has its last id, as in the library
  std::vector<Node> nodes_;
  int32_t root_children_[256];
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  double min_score_ = 0;
  int32_t byte_ids_[256];  // <0xNN>, -1 where absent
  std::string where_;
};

}  // namespace anatomy::data::tok
