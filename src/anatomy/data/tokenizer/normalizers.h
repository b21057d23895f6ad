// normalizers.h: the normalizers of tokenizer.json (BertNormalizer, NFC, NFD,
// NFKC, NFKD, Lowercase, StripAccents, Strip, Replace, Prepend, Nmt,
// Precompiled, ByteLevel, Sequence), each changing a NormalizedText as Hugging
// Face tokenizers changes its NormalizedString: the same text, and the same
// alignments, so that offsets agree to the character.
//
// The alignments follow from the (character, change) lists each normalizer
// hands to transform. Those of NF* are unicode-normalization-alignments'
// (decomposition marks the first character of each decomposition 0 and the
// others +1, and canonical reordering carries the marks along; composition
// adds them, less one); those of Precompiled are spm_precompiled's through the
// library's replace(), grapheme cluster by grapheme cluster.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "anatomy/data/tokenizer/normalized_text.h"

namespace anatomy::data::tok {

class Normalizer {
 public:
  virtual ~Normalizer();
  // Throws Error for data that cannot be run (a Precompiled charsmap whose trie
  // points outside itself).
  virtual void normalize(NormalizedText& text) const = 0;
};

// The normalizer of a tokenizer.json's "normalizer" value; null for JSON null.
// `where` names the file in errors, which also name the normalizer and field.
std::unique_ptr<Normalizer> normalizer_from_json(const nlohmann::json& value, const std::string& where);

// The (character, change) lists of unicode-normalization-alignments for `text`
// (valid UTF-8): NFD/NFKD (compose false) and NFC/NFKC (compose true).
std::vector<Change> unicode_normalization(std::string_view text, bool compatibility, bool compose);

// Standard base64 as the library's precompiled_charsmap reads it (padding optional,
// no stray bits); nullopt if malformed.
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace anatomy::data::tok
