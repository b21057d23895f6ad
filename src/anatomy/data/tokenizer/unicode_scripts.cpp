// unicode_scripts.cpp: see unicode_scripts.h; pre_tokenizers/unicode_scripts of
// Hugging Face tokenizers, with the script table of
// src/anatomy/data/generated/unicode_scripts.cpp.
#include "anatomy/data/tokenizer/unicode_scripts.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "anatomy/core/error.h"

namespace anatomy::data::tok {

namespace {

constexpr uint8_t kAny = 0;

// The pieces of `text`: a cut before every scripted character whose script
// differs from the last scripted one; what precedes the first cut (Any
// characters only) is no piece at all.
std::vector<NormalizedText> split_scripts(const NormalizedText& text) {
  const std::string& s = text.get();
  std::vector<uint32_t> cuts;
  std::optional<uint8_t> last;
  for (size_t at = 0; at < s.size();) {
    const auto start = static_cast<uint32_t>(at);
    const uint8_t script = unicode_script(next_utf8(s, at));
    if (script == kAny) continue;
    if (last != script) cuts.push_back(start);
    last = script;
  }
  cuts.push_back(static_cast<uint32_t>(s.size()));
  std::vector<NormalizedText> parts;
  parts.reserve(cuts.size() - 1);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    std::optional<NormalizedText> part = text.slice({cuts[i], cuts[i + 1]});
    if (!part)
      fail("internal error: UnicodeScripts split at bytes {}..{} of a {}-byte text", cuts[i], cuts[i + 1], s.size());
    parts.push_back(std::move(*part));
  }
  return parts;
}

class UnicodeScriptsPre : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override { split_pieces(pieces, split_scripts); }
};

}  // namespace

uint8_t unicode_script(char32_t c) {
  if (c > 0x10FFFF) return kAny;
  const uint32_t* begin = script_table::kRanges;
  const uint32_t* end = begin + script_table::kRangeCount;
  // The last range whose first code point is <= c.
  const uint32_t* it = std::upper_bound(begin, end, (static_cast<uint32_t>(c) << 8) | 0xFFu);
  if (it == begin) return kAny;
  return static_cast<uint8_t>(*(it - 1) & 0xFFu);
}

const char* unicode_script_name(uint8_t script) {
  return script < script_table::kNameCount ? script_table::kNames[script] : "?";
}

std::unique_ptr<PreTokenizer> make_unicode_scripts_pre_tokenizer() { return std::make_unique<UnicodeScriptsPre>(); }

}  // namespace anatomy::data::tok
