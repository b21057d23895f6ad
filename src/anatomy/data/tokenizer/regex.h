// regex.h: the regular expressions of tokenizer.json (Split pre-tokenizer,
// Replace normalizer, ByteLevel's GPT-2 pattern), with the meaning Hugging Face
// tokenizers gives them: Oniguruma's syntax and Unicode classes, run here by
// PCRE2 (linked statically) after translating the few constructs whose meaning
// differs (\w, \d, \s, \h and their negations, POSIX brackets).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "anatomy/data/tokenizer/normalized_text.h"

namespace anatomy::data::tok {

class Regex {
 public:
  // Throws Error naming the pattern when it does not compile.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // The matches in `text` and the text between them, covering it in order
  // (tokenizers' Pattern::find_matches for a SysRegex). Thread-safe.
  std::vector<PatternMatch> find_matches(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace anatomy::data::tok
