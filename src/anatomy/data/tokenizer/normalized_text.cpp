// normalized_text.cpp: the alignment bookkeeping of NormalizedText, step for
// step as tokenizers' normalizer.rs does it (see the header).
#include "anatomy/data/tokenizer/normalized_text.h"

#include <algorithm>

#include "anatomy/core/error.h"
#include "anatomy/data/wordpiece_unicode.h"

namespace anatomy::data::tok {

char32_t next_utf8(std::string_view text, size_t& at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) {
    ++at;
    return lead;
  }
  if (lead < 0xE0) {
    const char32_t c = ((lead & 0x1F) << 6) | (byte(at + 1) & 0x3F);
    at += 2;
    return c;
  }
  if (lead < 0xF0) {
    const char32_t c = ((lead & 0x0F) << 12) | ((byte(at + 1) & 0x3F) << 6) | (byte(at + 2) & 0x3F);
    at += 3;
    return c;
  }
  const char32_t c =
      ((lead & 0x07) << 18) | ((byte(at + 1) & 0x3F) << 12) | ((byte(at + 2) & 0x3F) << 6) | (byte(at + 3) & 0x3F);
  at += 4;
  return c;
}

std::vector<char32_t> decode_utf8(std::string_view text) {
  std::vector<char32_t> chars;
  chars.reserve(text.size());
  for (size_t at = 0; at < text.size();) chars.push_back(next_utf8(text, at));
  return chars;
}

bool is_white_space(char32_t c) { return (unicode::flags(c) & unicode::kSpace) != 0; }

NormalizedText::NormalizedText(std::string_view text) : original_(text), normalized_(text) {
  if (text.size() >= UINT32_MAX) fail("a text of {} bytes is longer than the tokenizer takes (4 GiB)", text.size());
  alignments_.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const size_t start = at;
    next_utf8(text, at);
    for (size_t i = start; i < at; ++i)
      alignments_.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(at)});
  }
}

std::optional<Span> NormalizedText::original_of(Span range) const {
  if (range.first == range.second) return range;
  if (range.first > range.second) return std::nullopt;
  if (normalized_.empty() && range == Span{0, 0}) return Span{0, static_cast<uint32_t>(original_.size())};
  if (range.second > alignments_.size()) return std::nullopt;
  return Span{alignments_[range.first].first, alignments_[range.second - 1].second};
}

std::optional<Span> NormalizedText::normalized_of(Span range) const {
  if (range.first == range.second) return range;
  if (range.first > range.second) return std::nullopt;
  if (original_.empty() && range == Span{0, 0}) return Span{0, static_cast<uint32_t>(normalized_.size())};
  std::optional<uint32_t> start, end;
  for (size_t i = 0; i < alignments_.size(); ++i) {
    const Span& a = alignments_[i];
    if (range.second < a.second) break;
    if (!start && range.first <= a.first && a.first != a.second) start = static_cast<uint32_t>(i);
    end = static_cast<uint32_t>(i + 1);
  }
  if (start && end) return Span{*start, *end};
  if (start) return Span{*start, *start};
  if (end) return Span{*end, *end};
  return std::nullopt;
}

void NormalizedText::transform_range(Span range, const std::vector<Change>& changes, size_t initial_offset) {
  // The characters being replaced, to know how many bytes each change consumes.
  std::vector<uint32_t> replaced_sizes;
  for (size_t at = range.first; at < range.second;) {
    const size_t start = at;
    next_utf8(normalized_, at);
    replaced_sizes.push_back(static_cast<uint32_t>(at - start));
  }
  size_t next_replaced = 0;
  const auto take = [&](size_t count) {
    size_t bytes = 0;
    for (; count > 0 && next_replaced < replaced_sizes.size(); --count) bytes += replaced_sizes[next_replaced++];
    return bytes;
  };
  size_t offset = range.first + take(initial_offset);

  std::string text;
  std::vector<Span> alignments;
  text.reserve(range.second - range.first);
  alignments.reserve(range.second - range.first);
  for (const Change& change : changes) {
    Span align;
    if (change.change > 0)
      align = offset < 1 ? Span{0, 0} : alignments_.at(offset - 1);
    else
      align = alignments_.at(offset);
    if (change.change <= 0) offset += take(1);
    if (change.change < 0) offset += take(static_cast<size_t>(-change.change));
    const size_t before = text.size();
    append_utf8(text, change.c);
    alignments.insert(alignments.end(), text.size() - before, align);
  }
  normalized_.replace(range.first, range.second - range.first, text);
  alignments_.erase(alignments_.begin() + range.first, alignments_.begin() + range.second);
  alignments_.insert(alignments_.begin() + range.first, alignments.begin(), alignments.end());
}

void NormalizedText::transform(const std::vector<Change>& changes, size_t initial_offset) {
  const std::optional<Span> range = normalized_of({0, static_cast<uint32_t>(original_.size())});
  if (!range) return;
  transform_range(*range, changes, initial_offset);
}

std::optional<NormalizedText> NormalizedText::slice(Span range) const {
  const auto boundary = [&](uint32_t at) {
    return at == normalized_.size() || (at < normalized_.size() && (normalized_[at] & 0xC0) != 0x80);
  };
  if (range.first > range.second || !boundary(range.first) || !boundary(range.second)) return std::nullopt;
  const std::optional<Span> original = original_of(range);
  if (!original) return std::nullopt;
  NormalizedText piece;
  // An empty range maps to itself, in normalized bytes: its original may lie
  // outside this one, and is then empty (the library's get() returns None).
  const auto boundary_of_original = [&](uint32_t at) {
    return at == original_.size() || (at < original_.size() && (original_[at] & 0xC0) != 0x80);
  };
  if (original->first <= original->second && boundary_of_original(original->first) &&
      boundary_of_original(original->second))
    piece.original_ = original_.substr(original->first, original->second - original->first);
  piece.normalized_ = normalized_.substr(range.first, range.second - range.first);
  piece.alignments_.reserve(range.second - range.first);
  for (uint32_t i = range.first; i < range.second; ++i)
    piece.alignments_.push_back({alignments_[i].first - original->first, alignments_[i].second - original->first});
  piece.shift_ = shift_ + original->first;
  return piece;
}

std::vector<NormalizedText> NormalizedText::split(const std::vector<PatternMatch>& matches,
                                                  SplitBehavior behavior) const {
  struct Piece {
    uint32_t start, end;
    bool remove;
  };
  std::vector<Piece> pieces;
  pieces.reserve(matches.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const PatternMatch& m : matches) pieces.push_back({m.start, m.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const PatternMatch& m : matches) pieces.push_back({m.start, m.end, m.is_match});
      break;
    case SplitBehavior::kContiguous:
      for (const PatternMatch& m : matches) {
        if (m.is_match == previous_match && !pieces.empty())
          pieces.back().end = m.end;
        else
          pieces.push_back({m.start, m.end, false});
        previous_match = m.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const PatternMatch& m : matches) {
        if (m.is_match && !previous_match && !pieces.empty())
          pieces.back().end = m.end;
        else
          pieces.push_back({m.start, m.end, false});
        previous_match = m.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto m = matches.rbegin(); m != matches.rend(); ++m) {
        if (m->is_match && !previous_match && !pieces.empty())
          pieces.back().start = m->start;
        else
          pieces.push_back({m->start, m->end, false});
        previous_match = m->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
  }
  std::vector<NormalizedText> out;
  out.reserve(pieces.size());
  for (const Piece& piece : pieces) {
    if (piece.remove) continue;
    std::optional<NormalizedText> part = slice({piece.start, piece.end});
    if (!part) fail("internal error: a pre-tokenizer split at bytes {}..{} of a {}-byte text", piece.start, piece.end,
                    normalized_.size());
    out.push_back(std::move(*part));
  }
  return out;
}

void NormalizedText::filter(bool (*keep)(char32_t)) { filter_if(keep); }

void NormalizedText::prepend(std::string_view text) {
  if (normalized_.empty()) return;
  size_t at = 0;
  const char32_t next = next_utf8(normalized_, at);
  std::vector<Change> changes;
  bool first = true;
  for (size_t i = 0; i < text.size();) {
    changes.push_back({next_utf8(text, i), first ? 0 : 1});
    first = false;
  }
  changes.push_back({next, 1});
  transform_range({0, static_cast<uint32_t>(at)}, changes, 0);
}

void NormalizedText::append(std::string_view text) {
  std::vector<Change> changes;
  if (normalized_.empty()) {
    for (size_t i = 0; i < text.size();) changes.push_back({next_utf8(text, i), 1});
    transform_range({0, 0}, changes, 0);
    return;
  }
  size_t last = normalized_.size() - 1;
  while ((normalized_[last] & 0xC0) == 0x80) --last;
  size_t at = last;
  changes.push_back({next_utf8(normalized_, at), 0});
  for (size_t i = 0; i < text.size();) changes.push_back({next_utf8(text, i), 1});
  transform_range({static_cast<uint32_t>(last), static_cast<uint32_t>(normalized_.size())}, changes, 0);
}

void NormalizedText::lowercase() {
  std::vector<Change> changes;
  changes.reserve(normalized_.size());
  for (size_t at = 0; at < normalized_.size();) {
    const char32_t c = next_utf8(normalized_, at);
    const std::span<const char32_t> lower = unicode::lowercase(c);
    if (lower.empty()) {
      changes.push_back({c, 0});
      continue;
    }
    for (size_t i = 0; i < lower.size(); ++i) changes.push_back({lower[i], i > 0 ? 1 : 0});
  }
  transform(changes, 0);
}

void NormalizedText::replace(const std::vector<PatternMatch>& matches, std::string_view content) {
  std::string text;
  std::vector<Span> alignments;
  text.reserve(normalized_.size());
  alignments.reserve(alignments_.size());
  uint32_t last_end = 0;
  for (const PatternMatch& m : matches) {
    if (!m.is_match) continue;
    text.append(normalized_, last_end, m.start - last_end);
    alignments.insert(alignments.end(), alignments_.begin() + last_end, alignments_.begin() + m.start);
    // Every character of `content` is an insertion after the removed match: it
    // aligns to the byte before the match's end.
    const size_t offset = m.end;
    const Span align = offset < 1 ? Span{0, 0} : alignments_[offset - 1];
    for (size_t i = 0; i < content.size();) {
      const size_t before = text.size();
      append_utf8(text, next_utf8(content, i));
      alignments.insert(alignments.end(), text.size() - before, align);
    }
    last_end = m.end;
  }
  text.append(normalized_, last_end, std::string::npos);
  alignments.insert(alignments.end(), alignments_.begin() + last_end, alignments_.end());
  normalized_ = std::move(text);
  alignments_ = std::move(alignments);
}

void NormalizedText::strip(bool left, bool right) {
  const std::vector<char32_t> chars = decode_utf8(normalized_);
  size_t leading = 0, trailing = 0;
  if (left)
    while (leading < chars.size() && is_white_space(chars[leading])) ++leading;
  if (right)
    while (trailing < chars.size() && is_white_space(chars[chars.size() - 1 - trailing])) ++trailing;
  if (leading == 0 && trailing == 0) return;
  // As the library: the last kept character removes the trailing ones. Its
  // test compares a character index with the byte length, so with multi-byte
  // text the removal may attach to no character: the trailing characters are
  // then dropped without alignment effect, which is the same text.
  std::vector<Change> changes;
  const size_t count = chars.size();
  for (size_t i = 0; i < count; ++i) {
    if (i < leading || i + trailing >= count) continue;
    if (i + trailing + 1 == normalized_.size())
      changes.push_back({chars[i], -static_cast<int32_t>(trailing)});
    else
      changes.push_back({chars[i], 0});
  }
  transform(changes, leading);
}

std::vector<PatternMatch> find_string_matches(std::string_view text, std::string_view pattern) {
  if (pattern.empty()) {
    // The library answers the character count here, as a byte offset.
    size_t chars = 0;
    for (size_t at = 0; at < text.size(); ++chars) next_utf8(text, at);
    return {{0, static_cast<uint32_t>(chars), false}};
  }
  if (text.empty()) return {{0, 0, false}};
  std::vector<PatternMatch> matches;
  uint32_t previous = 0;
  for (size_t at = text.find(pattern); at != std::string_view::npos; at = text.find(pattern, at + pattern.size())) {
    if (previous != at) matches.push_back({previous, static_cast<uint32_t>(at), false});
    matches.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(at + pattern.size()), true});
    previous = static_cast<uint32_t>(at + pattern.size());
  }
  if (previous != text.size()) matches.push_back({previous, static_cast<uint32_t>(text.size()), false});
  return matches;
}

}  // namespace anatomy::data::tok
