// tokenizer.json's regular expressions (data/tokenizer/regex.h): Oniguruma's meaning on PCRE2, where the two
// engines' Unicode data and escapes differ. The expected pieces come from the `tokenizers` library 0.23.3
// (Split(pattern, "isolated").pre_tokenize_str(text)) with characters of Unicode 15 and later (CJK Extension H
// and I, Nag Mundari letters and digits, Kawi), the joiners, Latin-1 superscripts (word characters for
// Oniguruma's \w alone, not inside brackets) and a mark whose category changed after Unicode 14.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "anatomy/data/tokenizer/regex.h"

namespace anatomy::data::tok {
namespace {

std::vector<std::string> pieces(const Regex& regex, const std::string& text) {
  std::vector<std::string> out;
  for (const PatternMatch& m : regex.find_matches(text)) out.push_back(text.substr(m.start, m.end - m.start));
  return out;
}

TEST(TokenizerRegex, UnicodeDifferencesFollowOniguruma) {
  struct Case {
    const char* pattern;
    const char* text;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {R"(\p{Han})", "a\U0003235E\u4e00b\U0002EBF0", {"a", "\U0003235E", "\u4e00", "b", "\U0002EBF0"}},
      {R"(\p{L}+)", "x\U0001E4D0y z", {"x\U0001E4D0y", " ", "z"}},
      {R"(\w+)", "a\u200db\u00b2c", {"a", "\u200d", "b\u00b2c"}},
      {R"([^\p{L}\s]+)", "ab\U0001E4D0!?\U0001E4D0 c", {"ab\U0001E4D0", "!?", "\U0001E4D0 c"}},
      {R"(\P{L}+)", "ab\U0001E4D0!?c", {"ab\U0001E4D0", "!?", "c"}},
      {R"([\p{Mn}x]+)", "a\U0001171Ex\u0301b", {"a\U0001171E", "x\u0301", "b"}},
      {R"(\d+)", "1\U0001E4F0\U0001E4F12a", {"1\U0001E4F0\U0001E4F12", "a"}},
      {R"([^\w]+)", "a\u200d\u200cb\u00b2!c", {"a", "\u200d\u200c", "b", "\u00b2!", "c"}},
      {R"([\W\d]+)", "ab!\u00b29c", {"ab", "!\u00b29", "c"}},
      {R"(\p{Hangul}+|\p{Han})", "\uac00\uac01\U0003235E", {"\uac00\uac01", "\U0003235E"}},
      {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
       "I'm x\U0001E4D0y \U0001E4F0 \U00011F00!",
       {"I", "'m", " x\U0001E4D0y", " \U0001E4F0", " \U00011F00!"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pattern);
    EXPECT_EQ(pieces(Regex(c.pattern), c.text), c.expected);
  }
}

}  // namespace
}  // namespace anatomy::data::tok
