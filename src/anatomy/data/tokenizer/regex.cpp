// regex.cpp: Oniguruma patterns on PCRE2 (see regex.h).
//
// Both engines backtrack and take the leftmost match the same way, and both
// follow Unicode 14 in the versions the library and Debian ship (Oniguruma
// 6.9.8, PCRE2 10.42). What differs is the meaning of a few escapes with UTF-8
// text; they are rewritten before compiling:
//   \w  Oniguruma: Alphabetic, marks, decimal digits, connector punctuation and
//       the joiners (UTS #18's word); PCRE2 10.42: letters, numbers and '_'.
//   \s  Oniguruma: White_Space; PCRE2 also U+180E (its horizontal space list).
//   \h  Oniguruma: a hexadecimal digit; PCRE2: horizontal space.
//   \p{Script}  Oniguruma: the Script property; PCRE2 10.40+: Script_Extensions
//       (so \p{Katakana} would take U+30FC and the combining sound marks):
//       written \p{sc:Script}, which PCRE2 reads as the Script property.
//   \d  both \p{Nd}: kept.
// A negated class escape (\W, \S, \H) inside brackets has no rewrite and is refused.
#include "anatomy/data/tokenizer/regex.h"

#include <pcre2.h>

#include <optional>

#include "anatomy/core/error.h"

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

// The pattern with \w \W \s \S \h \H spelled out for PCRE2, and (with
// `scripts`) \p{Name} of a script as \p{sc:Name}.
std::string translate(std::string_view pattern, bool scripts) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if ((e == 'p' || e == 'P') && i + 1 < pattern.size() && pattern[i + 1] == '{') {
        const size_t close = pattern.find('}', i + 2);
        if (close != std::string_view::npos) {
          std::string_view name = pattern.substr(i + 2, close - i - 2);
          const bool caret = !name.empty() && name[0] == '^';
          if (caret) name.remove_prefix(1);
          out += '\\';
          out += e;
          out += caret ? "{^" : "{";
          if (scripts && !is_category(name)) out += "sc:";
          out.append(name);
          out += '}';
          i = close;
          continue;
        }
      }
      const char* set = e == 'w' || e == 'W'   ? kWord
                        : e == 'h' || e == 'H' ? kHex
                        : e == 's' || e == 'S' ? kSpace
                                               : nullptr;
      if (set == nullptr) {
        out += '\\';
        out += e;
        continue;
      }
      const bool negated = e == 'W' || e == 'H' || e == 'S';
      if (in_class && negated) fail("\\{} inside brackets is not supported", e);
      if (in_class)
        out += set;
      else
        out += std::string(negated ? "[^" : "[") + set + "]";
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // A POSIX bracket [:alpha:] stays inside the class.
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
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
