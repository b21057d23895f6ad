// wordpiece_unicode.h: the Unicode properties that the WordPiece tokenizer
// (wordpiece.h) needs, as Hugging Face tokenizers' BertNormalizer and
// BertPreTokenizer see them. The tables (wordpiece_unicode.cpp) are generated
// by scripts/gen_wordpiece_unicode.py, whose header says which Unicode versions
// they follow and where they depart from Python's unicodedata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace anatomy::data::unicode {

// Flags of a code point.
enum : uint8_t {
  kRemove = 1,          // clean_text drops it: NUL, U+FFFD, control/format/private use except \t \n \r
  kSpace = 2,           // White_Space: clean_text makes it ' ' and the pre-tokenizer splits there
  kPunct = 4,           // the pre-tokenizer makes it a word of its own
  kChinese = 8,         // a CJK ideograph: handle_chinese_chars puts spaces around it
  kDecomposes = 16,     // NFD changes it (Hangul syllables: computed, not in kDecompositions)
  kNonspacing = 32,     // a nonspacing mark (Mn): strip_accents drops it after NFD
  kLowercase = 64,      // to_lowercase changes it
  kCombining = 128,     // canonical combining class not 0: NFD reorders it
};

// Two-stage table: the flags of `cp` are kBlocks[kBlockIndex[cp >> 8]][cp & 0xFF].
extern const uint16_t kBlockIndex[0x1100];
extern const uint8_t kBlocks[][256];

inline uint8_t flags(char32_t cp) { return cp < 0x110000 ? kBlocks[kBlockIndex[cp >> 8]][cp & 0xFF] : 0; }

// A code point's replacement: `length` code points at kXxxData[offset]. Sorted by `cp`.
struct Mapping {
  char32_t cp;
  uint16_t offset;
  uint8_t length;
};
extern const Mapping kDecompositions[];  // full canonical decomposition (NFD), Hangul excepted
extern const size_t kDecompositionsCount;
extern const char32_t kDecompositionsData[];
extern const Mapping kLowercaseMappings[];  // to_lowercase (one code point, but two for U+0130)
extern const size_t kLowercaseMappingsCount;
extern const char32_t kLowercaseMappingsData[];

struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
extern const CombiningClass kCombiningClasses[];  // the non-zero ones, sorted
extern const size_t kCombiningClassCount;

// The replacement of `cp` in a table (empty if none).
std::span<const char32_t> decomposition(char32_t cp);
std::span<const char32_t> lowercase(char32_t cp);
uint8_t combining_class(char32_t cp);

// Hangul syllables decompose by arithmetic (Unicode 3.12).
constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

}  // namespace anatomy::data::unicode
