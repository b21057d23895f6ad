// normalizers.cpp: the normalizers of tokenizer.json (see the header), each a
// list of (character, change) handed to NormalizedText::transform exactly as
// Hugging Face tokenizers builds it.
#include "anatomy/data/tokenizer/normalizers.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/data/tokenizer/regex.h"
#include "anatomy/data/tokenizer/unicode_tables.h"
#include "anatomy/data/wordpiece_unicode.h"

namespace anatomy::data::tok {

// ---- Unicode lookups (unicode_tables.h) ----------------------------------------

std::span<const char32_t> compatibility_decomposition(char32_t c) {
  using namespace unicode_tables;
  if ((flags(c) & kHasCompatibility) == 0) return {};
  const Decomposition* end = kCompatibility + kCompatibilityCount;
  const Decomposition* it =
      std::lower_bound(kCompatibility, end, c, [](const Decomposition& d, char32_t cp) { return d.cp < cp; });
  if (it == end || it->cp != c) return {};
  return {kCompatibilityData + it->offset, it->length};
}

namespace {

// Hangul (Unicode 3.12), as unicode-normalization-alignments composes it.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

}  // namespace

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kNCount + (b - kVBase) * kTCount);
  if (a >= kSBase && a < kSBase + kSCount && b > kTBase && b < kTBase + kTCount && (a - kSBase) % kTCount == 0)
    return a + (b - kTBase);
  using namespace unicode_tables;
  if ((flags(a) & kComposeFirst) == 0 || (flags(b) & kComposeSecond) == 0) return 0;
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& p, auto key) {
    return p.first < key.first || (p.first == key.first && p.second < key.second);
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

Normalizer::~Normalizer() = default;

namespace {

uint8_t combining_class(char32_t c) {
  return (unicode::flags(c) & unicode::kCombining) != 0 ? unicode::combining_class(c) : 0;
}

bool is_ascii(std::string_view text) {
  for (const char ch : text)
    if (static_cast<unsigned char>(ch) >= 0x80) return false;
  return true;
}

// Applies `changes` unless they leave every character as it is.
void apply_changes(NormalizedText& text, const std::vector<Change>& changes) {
  const std::string& s = text.get();
  size_t at = 0, i = 0;
  for (; i < changes.size() && at < s.size(); ++i)
    if (changes[i].change != 0 || changes[i].c != next_utf8(s, at)) break;
  if (i == changes.size() && at == s.size()) return;
  text.transform(changes, 0);
}

// The library's NormalizedString::map: every character replaced by one.
template <typename Map>
void map_chars(NormalizedText& text, Map map) {
  std::vector<Change> changes;
  const std::string& s = text.get();
  changes.reserve(s.size());
  for (size_t at = 0; at < s.size();) changes.push_back({map(next_utf8(s, at)), 0});
  apply_changes(text, changes);
}

}  // namespace

// ---- NFD, NFKD, NFC, NFKC ----------------------------------------------------------

std::vector<Change> unicode_normalization(std::string_view text, bool compatibility, bool compose_after) {
  struct Item {
    char32_t c;
    int32_t change;
    uint8_t ccc;
  };
  // Decomposition: each character's full decomposition, the first code point
  // marked 0 and the others +1; then each run of non-starters, from the last
  // starter on, stably sorted by combining class with its marks.
  std::vector<Item> items;
  items.reserve(text.size() + text.size() / 2);
  size_t segment = 0;  // where the run being collected starts (a starter, or the text's start)
  const auto sort_segment = [&] {
    const auto begin = items.begin() + static_cast<ptrdiff_t>(segment);
    const auto by_class = [](const Item& x, const Item& y) { return x.ccc < y.ccc; };
    if (items.end() - begin > 32) {
      std::stable_sort(begin, items.end(), by_class);
      return;
    }
    for (auto it = begin + (begin != items.end()); it < items.end(); ++it)  // insertion sort: stable
      for (auto j = it; j > begin && by_class(*j, *(j - 1)); --j) std::iter_swap(j, j - 1);
  };
  const auto push = [&](char32_t d, bool first) {
    const uint8_t ccc = combining_class(d);
    if (ccc == 0) {
      sort_segment();
      segment = items.size();
    }
    items.push_back({d, first ? 0 : 1, ccc});
  };
  for (size_t at = 0; at < text.size();) {
    const char32_t c = next_utf8(text, at);
    if (c < 0x80) {
      push(c, true);
    } else if (c >= kSBase && c < kSBase + kSCount) {
      const char32_t s = c - kSBase;
      push(kLBase + s / kNCount, true);
      push(kVBase + (s % kNCount) / kTCount, false);
      if (s % kTCount != 0) push(kTBase + s % kTCount, false);
    } else {
      std::span<const char32_t> d;
      if (compatibility) d = compatibility_decomposition(c);
      if (d.empty() && (unicode::flags(c) & unicode::kDecomposes) != 0) d = unicode::decomposition(c);
      if (d.empty()) {
        push(c, true);
      } else {
        for (size_t i = 0; i < d.size(); ++i) push(d[i], i == 0);
      }
    }
  }
  sort_segment();

  std::vector<Change> out;
  out.reserve(items.size());
  if (!compose_after) {
    for (const Item& item : items) out.push_back({item.c, item.change});
    return out;
  }
  // Recomposition, as the crate's Recompositions iterator: a starter waits as
  // the "composee"; a following character either composes with it (the
  // composite's change is the sum of both, less one) or, when it cannot or is
  // blocked, waits in `held` until the next starter releases them.
  std::optional<Change> composee;
  std::vector<Change> held;
  int last_ccc = -1;  // the class of the last held character; -1: none held
  for (const Item& item : items) {
    const Change ch{item.c, item.change};
    if (!composee) {
      if (item.ccc != 0)
        out.push_back(ch);
      else
        composee = ch;
      continue;
    }
    if (last_ccc < 0) {
      if (const char32_t r = compose(composee->c, ch.c)) {
        composee = Change{r, composee->change + ch.change - 1};
        continue;
      }
      if (item.ccc == 0) {
        out.push_back(*composee);
        composee = ch;
        continue;
      }
      held.push_back(ch);
      last_ccc = item.ccc;
      continue;
    }
    if (last_ccc >= item.ccc) {  // blocked
      if (item.ccc == 0) {
        out.push_back(*composee);
        out.insert(out.end(), held.begin(), held.end());
        held.clear();
        composee = ch;
        last_ccc = -1;
        continue;
      }
      held.push_back(ch);
      last_ccc = item.ccc;
      continue;
    }
    if (const char32_t r = compose(composee->c, ch.c)) {
      composee = Change{r, composee->change + ch.change - 1};
      continue;
    }
    held.push_back(ch);
    last_ccc = item.ccc;
  }
  if (composee) out.push_back(*composee);
  out.insert(out.end(), held.begin(), held.end());
  return out;
}

// ---- base64 ---------------------------------------------------------------------------

std::optional<std::string> decode_base64(std::string_view text) {
  // base64's STANDARD engine as the library configures it: padding may be
  // left out or given, but only to complete the last quad; the unused bits of
  // the last symbol must be zero.
  if (text.size() % 4 == 1) return std::nullopt;
  size_t data = text.find('=');
  if (data == std::string_view::npos) data = text.size();
  for (size_t i = data; i < text.size(); ++i)
    if (text[i] != '=') return std::nullopt;
  const size_t padding = text.size() - data;
  if (data % 4 == 1 || padding > (4 - data % 4) % 4) return std::nullopt;
  const auto value = [](char ch) -> int {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(data / 4 * 3 + 2);
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < data; ++i) {
    const int v = value(text[i]);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out += static_cast<char>(bits >> 16);
      out += static_cast<char>((bits >> 8) & 0xFF);
      out += static_cast<char>(bits & 0xFF);
      bits = 0;
      count = 0;
    }
  }
  if (count == 2) {
    if ((bits & 0xF) != 0) return std::nullopt;
    out += static_cast<char>(bits >> 4);
  } else if (count == 3) {
    if ((bits & 0x3) != 0) return std::nullopt;
    out += static_cast<char>(bits >> 10);
    out += static_cast<char>((bits >> 2) & 0xFF);
  }
  return out;
}

namespace {

// ---- Grapheme clusters (unicode-segmentation's extended clusters) ------------------

struct GraphemeChar {
  uint32_t start;
  char32_t c;
  GraphemeCategory cat;
};

bool is_control_like(GraphemeCategory g) {
  return g == GraphemeCategory::kControl || g == GraphemeCategory::kCR || g == GraphemeCategory::kLF;
}

// Whether a cluster ends between chars[i - 1] and chars[i]; `regional` counts
// the regional indicators that end at chars[i - 1].
bool grapheme_break(const std::vector<GraphemeChar>& chars, size_t i, size_t regional) {
  using G = GraphemeCategory;
  const G before = chars[i - 1].cat, after = chars[i].cat;
  if (before == G::kCR && after == G::kLF) return false;               // GB3
  if (is_control_like(before) || is_control_like(after)) return true;  // GB4, GB5
  if (before == G::kL && (after == G::kL || after == G::kV || after == G::kLV || after == G::kLVT))
    return false;  // GB6
  if ((before == G::kLV || before == G::kV) && (after == G::kV || after == G::kT)) return false;  // GB7
  if ((before == G::kLVT || before == G::kT) && after == G::kT) return false;                    // GB8
  if (after == G::kExtend || after == G::kZWJ || after == G::kSpacingMark) return false;         // GB9, GB9a
  if (before == G::kPrepend) return false;                                                       // GB9b
  if (after == G::kInCBConsonant) {  // GB9c: Consonant [Extend Linker]* Linker [Extend Linker]* x Consonant
    size_t linkers = 0;
    for (size_t j = i; j-- > 0;) {
      if (is_incb_linker(chars[j].c)) {
        ++linkers;
      } else if (!is_incb_extend(chars[j].c)) {
        return !(linkers > 0 && chars[j].cat == G::kInCBConsonant);
      }
    }
    return true;
  }
  if (before == G::kZWJ && after == G::kExtendedPictographic) {  // GB11
    size_t j = i - 1;
    while (j-- > 0) {
      if (chars[j].cat == G::kExtendedPictographic) return false;
      if (chars[j].cat != G::kExtend) return true;
    }
    return true;
  }
  if (before == G::kRegionalIndicator && after == G::kRegionalIndicator) return regional % 2 == 0;  // GB12, GB13
  return true;
}

// Calls f(start, end) for each extended grapheme cluster of `text` (bytes).
template <typename F>
void for_each_grapheme(std::string_view text, std::vector<GraphemeChar>& chars, F f) {
  chars.clear();
  for (size_t at = 0; at < text.size();) {
    const uint32_t start = static_cast<uint32_t>(at);
    const char32_t c = next_utf8(text, at);
    chars.push_back({start, c, grapheme_category(c)});
  }
  size_t first = 0, regional = 0;
  for (size_t i = 1; i <= chars.size(); ++i) {
    regional = chars[i - 1].cat == GraphemeCategory::kRegionalIndicator ? regional + 1 : 0;
    if (i == chars.size() || grapheme_break(chars, i, regional)) {
      f(chars[first].start, i == chars.size() ? static_cast<uint32_t>(text.size()) : chars[i].start);
      first = i;
    }
  }
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

// ---- The normalizers -------------------------------------------------------------------

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(NormalizedText& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  UnicodeNormalizer(bool compatibility, bool compose) : compatibility_(compatibility), compose_(compose) {}
  void normalize(NormalizedText& text) const override {
    if (is_ascii(text.get())) return;  // ASCII neither decomposes nor composes
    apply_changes(text, unicode_normalization(text.get(), compatibility_, compose_));
  }

 private:
  bool compatibility_, compose_;
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}
  void normalize(NormalizedText& text) const override {
    if (clean_text_) {
      text.filter_if([](char32_t c) { return (unicode::flags(c) & unicode::kRemove) == 0; });
      map_chars(text, [](char32_t c) { return (unicode::flags(c) & unicode::kSpace) != 0 ? U' ' : c; });
    }
    if (chinese_) {
      std::vector<Change> changes;
      bool any = false;
      const std::string& s = text.get();
      changes.reserve(s.size());
      for (size_t at = 0; at < s.size();) {
        const char32_t c = next_utf8(s, at);
        if ((unicode::flags(c) & unicode::kChinese) != 0) {
          changes.insert(changes.end(), {{U' ', 0}, {c, 1}, {U' ', 1}});
          any = true;
        } else {
          changes.push_back({c, 0});
        }
      }
      if (any) text.transform(changes, 0);
    }
    if (strip_accents_) {
      if (!is_ascii(text.get())) apply_changes(text, unicode_normalization(text.get(), false, false));
      text.filter_if([](char32_t c) { return (unicode::flags(c) & unicode::kNonspacing) == 0; });
    }
    if (lowercase_) text.lowercase();
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override { text.lowercase(); }
};

class StripAccents : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override {
    text.filter_if([](char32_t c) { return !is_combining_mark(c); });
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedText& text) const override {
    if (left_ && right_) {
      text.strip(true, true);
    } else {
      if (left_) text.strip(true, false);
      if (right_) text.strip(false, true);
    }
  }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(NormalizedText& text) const override {
    if (!text.empty()) text.prepend(prefix_);
  }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(std::optional<Regex> regex, std::string literal, std::string content)
      : regex_(std::move(regex)), literal_(std::move(literal)), content_(std::move(content)) {}
  void normalize(NormalizedText& text) const override {
    const std::string& s = text.get();
    if (regex_) {
      text.replace(regex_->find_matches(s), content_);
    } else if (!literal_.empty()) {
      text.replace(find_string_matches(s, literal_), content_);
    } else if (!s.empty()) {
      // The library runs a literal as the regex of its escaped text: an empty
      // one matches the empty string before every character and at the end.
      std::vector<PatternMatch> matches;
      for (size_t at = 0; at < s.size();) {
        const uint32_t start = static_cast<uint32_t>(at);
        next_utf8(s, at);
        matches.push_back({start, start, true});
        matches.push_back({start, static_cast<uint32_t>(at), false});
      }
      matches.push_back({static_cast<uint32_t>(s.size()), static_cast<uint32_t>(s.size()), true});
      text.replace(matches, content_);
    }
  }

 private:
  std::optional<Regex> regex_;
  std::string literal_, content_;
};

class Nmt : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override {
    text.filter_if([](char32_t c) {
      return !((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F ||
               c == 0x9F);
    });
    map_chars(text, [](char32_t c) -> char32_t {
      if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
          c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD)
        return U' ';
      return c;
    });
  }
};

// GPT-2's map of bytes to printable characters (the ByteLevel normalizer and pre-tokenizer).
std::array<char32_t, 256> byte_level_chars() {
  std::array<char32_t, 256> chars{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    chars[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return chars;
}

class ByteLevel : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override {
    static const std::array<char32_t, 256> kChars = byte_level_chars();
    const std::string& s = text.get();
    if (s.empty()) return;
    std::vector<Change> changes;
    changes.reserve(s.size());
    for (size_t at = 0; at < s.size();) {
      const size_t start = at;
      next_utf8(s, at);
      for (size_t i = start; i < at; ++i)
        changes.push_back({kChars[static_cast<unsigned char>(s[i])], i > start ? 1 : 0});
    }
    text.transform(changes, 0);
  }
};

// SentencePiece's precompiled normalization (spm_precompiled): a Darts double
// array from byte strings to offsets of NUL-terminated replacements.
class Precompiled : public Normalizer {
 public:
  Precompiled(std::vector<uint32_t> units, std::string replacements, std::string where)
      : units_(std::move(units)), replacements_(std::move(replacements)), where_(std::move(where)) {}

  void normalize(NormalizedText& text) const override {
    const std::string& s = text.get();
    if (s.empty()) return;
    std::vector<Change> changes;
    changes.reserve(s.size());
    std::vector<GraphemeChar> chars;
    bool modified = false;
    for_each_grapheme(s, chars, [&](uint32_t start, uint32_t end) {
      const std::string_view grapheme(s.data() + start, end - start);
      // A cluster shorter than 6 bytes is looked up whole, then character by character.
      if (grapheme.size() < 6) {
        if (const std::optional<std::string_view> r = lookup(grapheme)) {
          modified = true;
          replace(changes, grapheme, *r);
          return;
        }
      }
      for (size_t at = 0; at < grapheme.size();) {
        const size_t from = at;
        const char32_t c = next_utf8(grapheme, at);
        const std::string_view part = grapheme.substr(from, at - from);
        if (const std::optional<std::string_view> r = lookup(part)) {
          modified = true;
          replace(changes, part, *r);
        } else {
          changes.push_back({c, 0});
        }
      }
    });
    if (modified) text.transform(changes, 0);
  }

 private:
  [[noreturn]] void outside() const {
    fail("{}: \"precompiled_charsmap\" is malformed: its trie points outside its {} units or its {} bytes of "
         "replacements",
         where_, units_.size(), replacements_.size());
  }
  uint32_t unit(uint64_t position) const {
    if (position >= units_.size()) outside();
    return units_[position];
  }
  static uint64_t offset(uint32_t u) { return static_cast<uint64_t>(u >> 10) << ((u & (1u << 9)) >> 6); }

  // The replacement of the shortest key that prefixes `key` (common_prefix_search's first result).
  std::optional<std::string_view> lookup(std::string_view key) const {
    uint64_t position = offset(unit(0));
    std::optional<uint32_t> found;
    for (const char ch : key) {
      const auto label = static_cast<unsigned char>(ch);
      if (label == 0) break;
      position ^= label;
      const uint32_t u = unit(position);
      if ((u & ((1u << 31) | 0xFF)) != label) break;
      position ^= offset(u);
      if ((u >> 8) & 1) {
        const uint32_t value = unit(position) & 0x7FFFFFFF;  // the library reads every leaf, then keeps the first
        if (!found) found = value;
      }
    }
    if (!found) return std::nullopt;
    const size_t index = *found;
    if (index > replacements_.size() ||
        (index < replacements_.size() && (static_cast<unsigned char>(replacements_[index]) & 0xC0) == 0x80))
      outside();
    size_t stop = index;
    while (stop < replacements_.size() && replacements_[stop] != '\0') ++stop;
    return std::string_view(replacements_).substr(index, stop - index);
  }

  // precompiled.rs' replace(): the new characters replace the old ones, the
  // extra ones inserted (+1) or the missing ones removed by the last change.
  static void replace(std::vector<Change>& changes, std::string_view old_part, std::string_view new_part) {
    const auto diff = static_cast<int64_t>(count_chars(new_part)) - static_cast<int64_t>(count_chars(old_part));
    for (size_t at = 0; at < new_part.size();) changes.push_back({next_utf8(new_part, at), 0});
    if (diff > 0) {
      for (int64_t i = 0; i < diff; ++i) changes[changes.size() - 1 - static_cast<size_t>(i)].change = 1;
    } else if (diff < 0 && !changes.empty()) {
      changes.back().change += static_cast<int32_t>(diff);
    }
  }

  std::vector<uint32_t> units_;
  std::string replacements_;
  std::string where_;
};

// ---- Reading tokenizer.json -----------------------------------------------------------

bool required_bool(const nlohmann::json& object, const char* name, const std::string& at) {
  const nlohmann::json& field = required_field(object, name, at);
  if (!field.is_boolean()) fail("{}: \"{}\" must be true or false, got {}", at, name, short_dump(field));
  return field.get<bool>();
}

std::string required_string(const nlohmann::json& object, const char* name, const std::string& at) {
  const nlohmann::json& field = required_field(object, name, at);
  if (!field.is_string()) fail("{}: \"{}\" must be a string, got {}", at, name, short_dump(field));
  return field.get<std::string>();
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char lead = b(i);
    size_t n;
    char32_t c;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if (lead >= 0xC2 && lead < 0xE0) {
      n = 2;
      c = lead & 0x1F;
    } else if (lead >= 0xE0 && lead < 0xF0) {
      n = 3;
      c = lead & 0x0F;
    } else if (lead >= 0xF0 && lead < 0xF5) {
      n = 4;
      c = lead & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((b(i + k) & 0xC0) != 0x80) return false;
      c = (c << 6) | (b(i + k) & 0x3F);
    }
    if ((n == 3 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) || (n == 4 && (c < 0x10000 || c > 0x10FFFF)))
      return false;
    i += n;
  }
  return true;
}

std::unique_ptr<Normalizer> precompiled_from_json(const nlohmann::json& value, const std::string& at) {
  const std::string encoded = required_string(value, "precompiled_charsmap", at);
  const std::optional<std::string> blob = decode_base64(encoded);
  if (!blob) fail("{}: \"precompiled_charsmap\" is not valid base64", at);
  // [u32 trie size in bytes][trie: u32 units][NUL-terminated replacements]
  if (blob->size() < 4)
    fail("{}: \"precompiled_charsmap\" is malformed: {} bytes, too few for its trie's size", at, blob->size());
  const auto u32 = [&](size_t pos) {
    uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>((*blob)[pos + static_cast<size_t>(k)]);
    return v;
  };
  const size_t count = u32(0) / 4;
  if (count > (blob->size() - 4) / 4)
    fail("{}: \"precompiled_charsmap\" is malformed: its trie of {} bytes runs past its end ({} bytes)", at,
         u32(0), blob->size());
  if (count == 0) fail("{}: \"precompiled_charsmap\" is malformed: its trie is empty", at);
  std::vector<uint32_t> units(count);
  for (size_t i = 0; i < count; ++i) units[i] = u32(4 + 4 * i);
  std::string replacements = blob->substr(4 + 4 * count);
  if (!valid_utf8(replacements))
    fail("{}: \"precompiled_charsmap\" is malformed: its replacements are not valid UTF-8", at);
  return std::make_unique<Precompiled>(std::move(units), std::move(replacements), at);
}

std::unique_ptr<Normalizer> replace_from_json(const nlohmann::json& value, const std::string& at) {
  const nlohmann::json& pattern = required_field(value, "pattern", at);
  if (!pattern.is_object() || pattern.size() != 1)
    fail("{}: \"pattern\" must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", at, short_dump(pattern));
  std::string content = required_string(value, "content", at);
  const auto entry = pattern.begin();
  const std::string& kind = entry.key();
  const nlohmann::json& text = entry.value();
  if ((kind != "String" && kind != "Regex") || !text.is_string())
    fail("{}: \"pattern\" must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", at, short_dump(pattern));
  if (kind == "String") return std::make_unique<Replace>(std::nullopt, text.get<std::string>(), std::move(content));
  try {
    return std::make_unique<Replace>(Regex(text.get<std::string>()), std::string(), std::move(content));
  } catch (const Error& e) {
    fail("{}: \"pattern\": {}", at, e.what());
  }
}

std::unique_ptr<Normalizer> from_json(const nlohmann::json& value, const std::string& where) {
  if (!value.is_object()) fail("{}: a normalizer must be an object, got {}", where, json_kind(value));
  const nlohmann::json* type_field = optional_field(value, "type");
  if (type_field == nullptr || type_field->is_null()) fail("{}: a normalizer has no \"type\"", where);
  if (!type_field->is_string())
    fail("{}: a normalizer's \"type\" must be a string, got {}", where, short_dump(*type_field));
  const std::string type = type_field->get<std::string>();
  const std::string at = where + " (normalizer " + short_text(type) + ")";
  if (type == "BertNormalizer" || type == "Bert") {
    const bool clean_text = required_bool(value, "clean_text", at);
    const bool chinese = required_bool(value, "handle_chinese_chars", at);
    const bool lowercase = required_bool(value, "lowercase", at);
    bool strip_accents = lowercase;  // null or absent: as lowercase
    if (const nlohmann::json* s = optional_field(value, "strip_accents"); s && !s->is_null()) {
      if (!s->is_boolean()) fail("{}: \"strip_accents\" must be true, false or null, got {}", at, short_dump(*s));
      strip_accents = s->get<bool>();
    }
    return std::make_unique<BertNormalizer>(clean_text, chinese, strip_accents, lowercase);
  }
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(false, false);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(true, false);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(false, true);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(true, true);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Nmt") return std::make_unique<Nmt>();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Strip")
    return std::make_unique<Strip>(required_bool(value, "strip_left", at), required_bool(value, "strip_right", at));
  if (type == "Prepend") return std::make_unique<Prepend>(required_string(value, "prepend", at));
  if (type == "Replace") return replace_from_json(value, at);
  if (type == "Precompiled") return precompiled_from_json(value, at);
  if (type == "Sequence") {
    const nlohmann::json& list = required_field(value, "normalizers", at);
    if (!list.is_array()) fail("{}: \"normalizers\" must be an array, got {}", at, short_dump(list));
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) steps.push_back(from_json(list[i], fmt::format("{} step {}", at, i + 1)));
    return std::make_unique<Sequence>(std::move(steps));
  }
  fail("{}: normalizer type \"{}\" is not one this tokenizer reads (BertNormalizer, NFC, NFD, NFKC, NFKD, "
       "Lowercase, StripAccents, Strip, Replace, Prepend, Nmt, Precompiled, ByteLevel, Sequence)",
       where, short_text(type));
}

}  // namespace

std::unique_ptr<Normalizer> normalizer_from_json(const nlohmann::json& value, const std::string& where) {
  if (value.is_null()) return nullptr;
  return from_json(value, where);
}

}  // namespace anatomy::data::tok
