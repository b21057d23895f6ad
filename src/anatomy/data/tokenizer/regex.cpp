// regex.cpp: Oniguruma patterns on PCRE2 (see regex.h).
//
// Both engines backtrack and take the leftmost match the same way. What
// differs is the meaning of a few escapes with UTF-8 text; they are rewritten
// before compiling:
//   \w  Oniguruma: its word characters; PCRE2 10.42: letters, numbers and '_'.
//       Written as Alphabetic, marks, decimal digits, connector punctuation and
//       the joiners, with the differences below.
//   \s  Oniguruma: White_Space; PCRE2 also U+180E (its horizontal space list).
//   \h  Oniguruma: a hexadecimal digit; PCRE2: horizontal space.
//   \p{Script}  Oniguruma: the Script property; PCRE2 10.40+: Script_Extensions
//       (so \p{Katakana} would take U+30FC and the combining sound marks):
//       written \p{sc:Script}, which PCRE2 reads as the Script property.
//   \d  both \p{Nd} (written so, for the differences below).
// And the Unicode data differ: the library's Oniguruma has Unicode 15.1 and
// later characters (CJK Extension H and I, Kawi, ...) and a \w of its own.
// Every property (and \w) on which the two engines disagree is written as
// PCRE2's class plus the code points Oniguruma adds, less those it does not
// count (regex_properties.h, asked of both engines over every code point).
#include "anatomy/data/tokenizer/regex.h"

#include <pcre2.h>

#include <cctype>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/regex_properties.h"

namespace anatomy::data::tok {

namespace {

constexpr const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";
constexpr const char* kHex = "0-9a-fA-F";
constexpr const char* kSpace =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// The general categories and PCRE2's own properties, which \p{...} keeps as they are.
bool is_category(std::string_view name) {
  static const char* const kNames[] = {
      "L",  "Lu", "Ll", "Lt", "Lm", "Lo", "L&", "M",  "Mn",  "Mc",  "Me",  "N",   "Nd",     "Nl",   "No",
      "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S",   "Sm",  "Sc",  "Sk",  "So",     "Z",    "Zs",
      "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn", "Any", "Xan", "Xps", "Xsp", "Xwd",    "Xuc",  "Letter",
      "Mark", "Number", "Punctuation", "Symbol", "Separator", "Other"};
  for (const char* known : kNames)
    if (name == known) return true;
  return name.find_first_of("=:") != std::string_view::npos;
}

// The differences of a property (loose name, as PCRE2 compares them), or of "\w"; nullptr when the engines agree.
const PropertyDifference* difference(std::string_view name) {
  if (name.find_first_of("=:") != std::string_view::npos) return nullptr;
  std::string loose;
  for (const char c : name)
    if (c != ' ' && c != '-' && c != '_') loose += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < kPropertyDifferenceCount; ++i)
    if (loose == kPropertyDifferences[i].name) return &kPropertyDifferences[i];
  return nullptr;
}

// Ranges as the inside of a character class.
std::string class_ranges(const RangeList& list) {
  std::string out;
  for (size_t i = 0; i < list.count; ++i) {
    const CodePointRange& r = list.ranges[i];
    out += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first));
    if (r.last != r.first) out += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(r.last));
  }
  return out;
}

// A class escape (\p{...}, \w) as PCRE2 must read it to mean what Oniguruma means: `body` the inside of a
// class of its code points but `removed` (the inside of a class, empty for none); `negated` for \P, \W.
struct ClassEscape {
  std::string body, removed;
  bool negated = false;
  std::string outside() const {  // as a pattern item of its own
    if (removed.empty()) return (negated ? "[^" : "[") + body + "]";
    return negated ? "(?:[" + removed + "]|[^" + body + "])" : "(?:(?![" + removed + "])[" + body + "])";
  }
};

ClassEscape class_escape(std::string body, const PropertyDifference* diff, bool negated) {
  ClassEscape e{std::move(body), "", negated};
  if (diff != nullptr) {
    e.body += class_ranges(diff->added);
    e.removed = class_ranges(diff->removed);
  }
  return e;
}

// The pattern with \w \W \s \S \h \H \d \D spelled out for PCRE2, each property with Oniguruma's code points
// (regex_properties.h), and (with `scripts`) \p{Name} of a script as \p{sc:Name}. A character class holding a
// property with code points to remove becomes an alternation: [items] | (?![removed])[property], and a
// negated one (?!that)(?s:.).
std::string translate(std::string_view pattern, bool scripts) {
  std::string out;
  bool in_class = false, class_negated = false;
  std::string items;                 // the inside of the class being read
  std::vector<std::string> alternatives;  // its parts that a class cannot hold
  const auto add = [&](const ClassEscape& e) {
    if (!in_class) {
      out += e.outside();
    } else if (!e.negated && e.removed.empty()) {
      items += e.body;
    } else if (!e.negated) {
      alternatives.push_back("(?![" + e.removed + "])[" + e.body + "]");
    } else {
      if (!e.removed.empty()) alternatives.push_back("[" + e.removed + "]");
      alternatives.push_back("[^" + e.body + "]");
    }
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    std::string& sink = in_class ? items : out;
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if ((e == 'p' || e == 'P') && i + 1 < pattern.size() && pattern[i + 1] == '{') {
        const size_t close = pattern.find('}', i + 2);
        if (close != std::string_view::npos) {
          std::string_view name = pattern.substr(i + 2, close - i - 2);
          const bool caret = !name.empty() && name[0] == '^';
          if (caret) name.remove_prefix(1);
          i = close;
          const bool negated = (e == 'P') != caret;
          const std::string positive =
              std::string("\\p{") + (scripts && !is_category(name) ? "sc:" : "") + std::string(name) + "}";
          const PropertyDifference* diff = difference(name);
          if (diff == nullptr) {  // both engines agree: as written
            sink += negated ? "\\P{" + positive.substr(3) : positive;
            continue;
          }
          add(class_escape(positive, diff, negated));
          continue;
        }
      }
      if (e == 'w' || e == 'W') {
        // Oniguruma's \w alone also takes the Latin-1 superscripts and fractions; inside brackets it does not.
        add(class_escape(kWord, difference(in_class ? "[\\w]" : "\\w"), e == 'W'));
        continue;
      }
      if (e == 'd' || e == 'D') {
        add(class_escape("\\p{Nd}", difference("nd"), e == 'D'));
        continue;
      }
      const char* set = e == 'h' || e == 'H' ? kHex : e == 's' || e == 'S' ? kSpace : nullptr;
      if (set == nullptr) {
        sink += '\\';
        sink += e;
        continue;
      }
      add(class_escape(set, nullptr, e == 'H' || e == 'S'));
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_negated = false;
      items.clear();
      alternatives.clear();
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') {
        class_negated = true;
        ++i;
      }
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') items += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // A POSIX bracket [:alpha:] stays inside the class.
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string_view::npos) {
        items.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') {
      in_class = false;
      if (alternatives.empty()) {
        out += (class_negated ? "[^" : "[") + items + "]";
        continue;
      }
      std::string positive = "(?:";
      if (!items.empty()) positive += "[" + items + "]|";
      for (size_t k = 0; k < alternatives.size(); ++k) positive += (k ? "|" : "") + alternatives[k];
      positive += ")";
      out += class_negated ? "(?:(?!" + positive + ")(?s:.))" : positive;
      continue;
    }
    sink += c;
  }
  // An unclosed class: as written, for PCRE2 to report.
  if (in_class) out += (class_negated ? "[^" : "[") + items;
  return out;
}

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern) : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // Scripts as \p{sc:...} first; a property that is no script (a binary
  // property such as Alphabetic) fails that, and is then kept as written.
  for (const bool scripts : {true, false}) {
    std::string translated;
    try {
      translated = translate(pattern, scripts);
    } catch (const Error& e) {
      fail("regular expression \"{}\": {}", pattern, e.what());
    }
    compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                    PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (compiled_->code != nullptr) break;
  }
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("regular expression \"{}\": {} (at offset {})", pattern, reinterpret_cast<const char*>(message),
         error_offset);
  }
  // The JIT is an optimisation: without it (no support, no memory) matching still works.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<PatternMatch> Regex::find_matches(std::string_view text) const {
  if (text.empty()) return {{0, 0, false}};
  // One match data per thread and pattern size: a vector of two offsets is all we read.
  struct MatchData {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~MatchData() { pcre2_match_data_free(data); }
  };
  thread_local MatchData match;
  if (match.data == nullptr) fail("out of memory for a regular expression match");

  std::vector<PatternMatch> matches;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0, previous = 0;
  std::optional<size_t> last_match_end;
  while (search_from <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, match.data,
                               nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail("regular expression \"{}\": {}", pattern_, reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const size_t start = ovector[0], end = ovector[1];
    // As the library's iterator: an empty match right where the last one ended
    // is skipped by moving one character on.
    if (start == end && last_match_end == end) {
      if (search_from >= text.size()) break;
      size_t at = search_from;
      next_utf8(text, at);
      search_from = at;
      continue;
    }
    search_from = end;
    last_match_end = end;
    if (previous != start) matches.push_back({static_cast<uint32_t>(previous), static_cast<uint32_t>(start), false});
    matches.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(end), true});
    previous = end;
  }
  if (previous != text.size())
    matches.push_back({static_cast<uint32_t>(previous), static_cast<uint32_t>(text.size()), false});
  return matches;
}

}  // namespace anatomy::data::tok
