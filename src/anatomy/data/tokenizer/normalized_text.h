// normalized_text.h: a text being normalized, with the original span of every
// byte, as Hugging Face tokenizers' NormalizedString keeps it.
//
// The offsets an encoding reports (return_offsets_mapping) are spans of the
// original text, however the normalizers and pre-tokenizers changed it. So each
// byte of the normalized text carries the byte range [start, end) of the
// original text it came from; a character of the original text starts with
// its own range on each of its bytes. Every change is a `transform`: a list of
// (new character, change) where change 0 replaces the next character, +1
// inserts a character that shares the alignment of the byte before it, and -n
// replaces the next character and removes the n after it. The semantics are
// the library's, to the edge cases (an insertion at the very start aligns to
// (0, 0)), because offsets must agree with it exactly.
//
// A pre-tokenizer cuts a NormalizedText into pieces with `slice`/`split`; each
// piece remembers where its original starts in the whole text (`shift`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anatomy::data::tok {

// A byte range [first, second).
using Span = std::pair<uint32_t, uint32_t>;

// One character of a transform and how it changes the text (see above).
struct Change {
  char32_t c;
  int32_t change;
};

// A piece of a text that a pattern found: a match, or the text between matches.
struct PatternMatch {
  uint32_t start, end;  // bytes of the normalized text
  bool is_match;
};

// How a split treats the matches of its pattern (SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class NormalizedText {
 public:
  NormalizedText() = default;
  explicit NormalizedText(std::string_view text);

  const std::string& get() const { return normalized_; }
  const std::string& original() const { return original_; }
  const std::vector<Span>& alignments() const { return alignments_; }
  size_t size() const { return normalized_.size(); }
  bool empty() const { return normalized_.empty(); }
  // Where this piece's original lies in the whole original text (bytes).
  Span original_span() const { return {shift_, shift_ + static_cast<uint32_t>(original_.size())}; }

  // The original bytes (relative to this piece) behind normalized bytes [start, end).
  std::optional<Span> original_of(Span normalized) const;
  // The normalized bytes behind original bytes [start, end) of this piece.
  std::optional<Span> normalized_of(Span original) const;

  // Replaces normalized bytes `range` by `changes` (see above); the first
  // `initial_offset` characters of the range are removed before the first change.
  void transform_range(Span range, const std::vector<Change>& changes, size_t initial_offset);
  // The same over the whole text (the normalized range of the whole original).
  void transform(const std::vector<Change>& changes, size_t initial_offset);

  // The piece of normalized bytes `range`, with its own original; nullopt when
  // the range does not fall on character boundaries.
  std::optional<NormalizedText> slice(Span range) const;
  // The pieces that `matches` (covering the whole text, in order) cut, kept as `behavior` says.
  std::vector<NormalizedText> split(const std::vector<PatternMatch>& matches, SplitBehavior behavior) const;

  // The library's helpers, each one transform.
  void filter(bool (*keep)(char32_t));
  template <typename Keep>
  void filter_if(Keep keep);
  void prepend(std::string_view text);
  void append(std::string_view text);
  void lowercase();
  // Replaces each of `matches` that is_match by `content`.
  void replace(const std::vector<PatternMatch>& matches, std::string_view content);
  void strip(bool left, bool right);  // Unicode white space, as Rust's char::is_whitespace

 private:
  std::string original_;
  std::string normalized_;
  std::vector<Span> alignments_;  // one per normalized byte: original bytes, relative to this piece
  uint32_t shift_ = 0;
};

// The characters of UTF-8 `text` (which must be valid).
std::vector<char32_t> decode_utf8(std::string_view text);
inline size_t utf8_length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }
// Appends `c` (a code point, not a surrogate) in UTF-8.
inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}
// Decodes the character at `text[at]`, advancing `at`.
char32_t next_utf8(std::string_view text, size_t& at);

// Rust's char::is_whitespace (Unicode White_Space).
bool is_white_space(char32_t c);

// Matches of a character predicate (tokenizers' Pattern for Fn(char) -> bool):
// every matching character alone, the text between them as non-matches.
template <typename Predicate>
std::vector<PatternMatch> find_char_matches(std::string_view text, Predicate predicate) {
  std::vector<PatternMatch> matches;
  if (text.empty()) return {{0, 0, false}};
  uint32_t last = 0, seen = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t start = at;
    const char32_t c = next_utf8(text, at);
    seen = static_cast<uint32_t>(at);
    if (predicate(c)) {
      if (last < start) matches.push_back({last, static_cast<uint32_t>(start), false});
      matches.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(at), true});
      last = static_cast<uint32_t>(at);
    }
  }
  if (seen > last) matches.push_back({last, seen, false});
  return matches;
}

// Matches of a literal string (tokenizers' Pattern for &str): an empty pattern matches nothing.
std::vector<PatternMatch> find_string_matches(std::string_view text, std::string_view pattern);

template <typename Keep>
void NormalizedText::filter_if(Keep keep) {
  int32_t removed = 0;
  size_t removed_start = 0;
  std::vector<Change> changes;
  changes.reserve(normalized_.size());
  std::optional<char32_t> last;
  for (size_t at = 0; at < normalized_.size();) {
    const char32_t c = next_utf8(normalized_, at);
    if (keep(c)) {
      if (last)
        changes.push_back({*last, -removed});
      else
        removed_start = static_cast<size_t>(removed);
      last = c;
      removed = 0;
    } else {
      ++removed;
    }
  }
  if (last) changes.push_back({*last, -removed});
  transform(changes, removed_start);
}

}  // namespace anatomy::data::tok
