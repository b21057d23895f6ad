// whitespace_classes.h: the character classes of tokenizer.json's Whitespace
// pre-tokenizer, which Hugging Face tokenizers runs with the Rust regex crate
// (`\w+|[^\w\s]+`) and that crate's Unicode data, newer than PCRE2's. The tables
// (generated/whitespace_classes.cpp) come from asking the library about every
// code point (scripts/gen_whitespace_classes.py).
#pragma once

#include <algorithm>
#include <cstddef>

namespace anatomy::data::tok {

struct CodePointRange {
  char32_t first, last;
};
extern const CodePointRange kWordRanges[];
extern const size_t kWordRangesCount;
extern const CodePointRange kSpaceRanges[];
extern const size_t kSpaceRangesCount;

inline bool in_ranges(const CodePointRange* ranges, size_t count, char32_t c) {
  const CodePointRange* end = ranges + count;
  const CodePointRange* it =
      std::upper_bound(ranges, end, c, [](char32_t value, const CodePointRange& r) { return value < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

// Rust regex's \w and \s, as the Whitespace pre-tokenizer sees them.
inline bool is_regex_word(char32_t c) { return c < 0x80 ? ((c | 0x20) - 'a' < 26 || c - '0' < 10 || c == '_')
                                                       : in_ranges(kWordRanges, kWordRangesCount, c); }
inline bool is_regex_space(char32_t c) { return in_ranges(kSpaceRanges, kSpaceRangesCount, c); }

}  // namespace anatomy::data::tok
