// pre_tokenizers.h: the pre-tokenizers of tokenizer.json, which cut a
// normalized text into the pieces the model tokenizes one by one: BertPreTokenizer,
// ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Punctuation, Digits,
// Split, CharDelimiterSplit, UnicodeScripts (unicode_scripts.h) and Sequence,
// as Hugging Face tokenizers runs them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anatomy/data/tokenizer/model.h"
#include "anatomy/data/tokenizer/normalized_text.h"

namespace anatomy::data::tok {

// A piece of the text: normalized, and already tokenized when it is an added
// token (the pre-tokenizers and the model leave those alone).
struct Piece {
  NormalizedText text;
  std::optional<std::vector<ModelToken>> tokens;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer();
  // Replaces each untokenized piece by the pieces it splits into (empty ones dropped).
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// Replaces every piece not yet tokenized by the parts `split` (NormalizedText&
// -> std::vector<NormalizedText>) makes of it, dropping empty parts, as the
// library's PreTokenizedString::split does.
template <typename SplitFunction>
void split_pieces(std::vector<Piece>& pieces, SplitFunction&& split) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (Piece& piece : pieces) {
    if (piece.tokens) {
      out.push_back(std::move(piece));
      continue;
    }
    for (NormalizedText& part : split(piece.text))
      if (!part.empty()) out.push_back({std::move(part), std::nullopt});
  }
  pieces = std::move(out);
}

// The pre-tokenizer of a tokenizer.json's "pre_tokenizer" value (null: none).
std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& value, const std::string& where);

// GPT-2's byte-to-character map of the ByteLevel pre-tokenizer (and its inverse).
char32_t byte_to_char(uint8_t byte);
// The byte behind a ByteLevel character, or -1.
int char_to_byte(char32_t c);

}  // namespace anatomy::data::tok
