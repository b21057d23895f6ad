// wordpiece.cpp: the WordPiece tokenizer (see wordpiece.h). The order of the
// steps and every corner case follow Hugging Face tokenizers' Rust code
// (normalizers/bert.rs, pre_tokenizers/bert.rs, models/wordpiece,
// utils/truncation.rs, utils/padding.rs), which BertTokenizerFast runs.
#include "anatomy/data/wordpiece.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/core/hash.h"
#include "anatomy/data/parallel_encode.h"
#include "anatomy/data/tokenizer/normalized_text.h"
#include "anatomy/data/wordpiece_unicode.h"

namespace anatomy::data {

namespace unicode {

namespace {
const Mapping* find_mapping(const Mapping* table, size_t count, char32_t cp) {
  const Mapping* end = table + count;
  const Mapping* it = std::lower_bound(table, end, cp, [](const Mapping& m, char32_t c) { return m.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}
}  // namespace

std::span<const char32_t> decomposition(char32_t cp) {
  const Mapping* m = find_mapping(kDecompositions, kDecompositionsCount, cp);
  return m ? std::span<const char32_t>(kDecompositionsData + m->offset, m->length) : std::span<const char32_t>();
}

std::span<const char32_t> lowercase(char32_t cp) {
  const Mapping* m = find_mapping(kLowercaseMappings, kLowercaseMappingsCount, cp);
  return m ? std::span<const char32_t>(kLowercaseMappingsData + m->offset, m->length) : std::span<const char32_t>();
}

uint8_t combining_class(char32_t cp) {
  const CombiningClass* end = kCombiningClasses + kCombiningClassCount;
  const CombiningClass* it =
      std::lower_bound(kCombiningClasses, end, cp, [](const CombiningClass& c, char32_t x) { return c.cp < x; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

}  // namespace unicode

namespace {

inline size_t slot_of(uint64_t h) { return static_cast<size_t>(h ^ (h >> 29)); }

// The class of an ASCII byte after clean_text, for the fast path.
enum AsciiClass : uint8_t { kLetter, kSpaceChar, kPunctChar, kRemoved };

const std::array<uint8_t, 128>& ascii_classes() {
  static const std::array<uint8_t, 128> table = [] {
    std::array<uint8_t, 128> t{};
    for (char32_t c = 0; c < 128; ++c) {
      const uint8_t f = unicode::flags(c);
      t[c] = (f & unicode::kRemove) ? kRemoved : (f & unicode::kSpace) ? kSpaceChar
                                             : (f & unicode::kPunct)   ? kPunctChar
                                                                       : kLetter;
    }
    return t;
  }();
  return table;
}

using tok::append_utf8;

// Decodes the code point at text[i] (not ASCII), advancing i; returns
// char32_t(-1) on invalid UTF-8 (overlong forms, surrogates and values past
// U+10FFFF included), leaving i.
inline char32_t decode_utf8(std::string_view text, size_t& i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned char b0 = s[i];
  auto cont = [&](size_t k) { return i + k < n && (s[i + k] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return char32_t(-1);
    const char32_t c = (char32_t(b0 & 0x1F) << 6) | (s[i + 1] & 0x3F);
    i += 2;
    return c;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return char32_t(-1);
    const unsigned char b1 = s[i + 1];
    if ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 > 0x9F)) return char32_t(-1);
    const char32_t c = (char32_t(b0 & 0x0F) << 12) | (char32_t(b1 & 0x3F) << 6) | (s[i + 2] & 0x3F);
    i += 3;
    return c;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return char32_t(-1);
    const unsigned char b1 = s[i + 1];
    if ((b0 == 0xF0 && b1 < 0x90) || (b0 == 0xF4 && b1 > 0x8F)) return char32_t(-1);
    const char32_t c = (char32_t(b0 & 0x07) << 18) | (char32_t(b1 & 0x3F) << 12) | (char32_t(s[i + 2] & 0x3F) << 6) |
                       (s[i + 3] & 0x3F);
    i += 4;
    return c;
  }
  return char32_t(-1);
}

[[noreturn]] void invalid_utf8(std::string_view text, size_t at) {
  fail("invalid UTF-8 at byte {} of the text (0x{:02X})", at, static_cast<unsigned char>(text[at]));
}

// Rust's str::trim_end: white space (White_Space) off the end.
std::string_view trim_end(std::string_view line) {
  size_t end = line.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(line[start]) & 0xC0) == 0x80) --start;
    size_t at = start;
    const unsigned char b = static_cast<unsigned char>(line[start]);
    const char32_t c = b < 0x80 ? b : decode_utf8(line, at);
    if (c == char32_t(-1) || !(unicode::flags(c) & unicode::kSpace)) break;
    end = start;
  }
  return line.substr(0, end);
}

}  // namespace

size_t find_invalid_utf8(std::string_view bytes) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    // Eight ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, bytes.data() + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t at = i;
    if (decode_utf8(bytes, i) == char32_t(-1)) return at;
  }
  return std::string_view::npos;
}

// ---------------------------------------------------------------- the table

uint64_t WordPieceTokenizer::Table::hash(std::string_view key) { return fnv1a64(key); }

void WordPieceTokenizer::Table::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    const uint64_t h = hash(std::string_view(bytes_.data() + s.offset, s.length));
    size_t i = slot_of(h) & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void WordPieceTokenizer::Table::insert(std::string_view key, int32_t id) {
  const uint64_t h = hash(key);
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(h) & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.id < 0) {
      s = Slot{static_cast<uint32_t>(h >> 32), id, static_cast<uint32_t>(bytes_.size()), static_cast<uint32_t>(key.size())};
      bytes_.append(key);
      longest_ = std::max(longest_, key.size());
      // At most half full: a missing key meets an empty slot soon.
      if (++used_ * 2 > slots_.size()) grow();
      return;
    }
    if (s.tag == static_cast<uint32_t>(h >> 32) && s.length == key.size() &&
        std::memcmp(bytes_.data() + s.offset, key.data(), key.size()) == 0) {
      s.id = id;  // the later line wins, as in Hugging Face
      return;
    }
  }
}

int32_t WordPieceTokenizer::Table::find(uint64_t h, const char* key, size_t length) const {
  const size_t mask = slots_.size() - 1;
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = slot_of(h) & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return -1;
    if (s.tag == tag && s.length == length && std::memcmp(bytes_.data() + s.offset, key, length) == 0) return s.id;
  }
}

int32_t WordPieceTokenizer::Table::find(std::string_view key) const { return find(hash(key), key.data(), key.size()); }

std::vector<std::pair<std::string, int32_t>> WordPieceTokenizer::Table::entries() const {
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(used_);
  for (const Slot& s : slots_)
    if (s.id >= 0) out.emplace_back(std::string(bytes_.data() + s.offset, s.length), s.id);
  return out;
}

// ----------------------------------------------------------- the vocabulary

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& path, const WordPieceOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read the vocabulary {}", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("cannot read the vocabulary {}", path);
  const std::string bytes = buffer.str();
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    std::string_view line(bytes.data() + start, end - start);
    if (const size_t bad = find_invalid_utf8(line); bad != std::string_view::npos)
      fail("{}:{}: invalid UTF-8 (byte 0x{:02X} at column {})", path, lines.size() + 1,
           static_cast<unsigned char>(line[bad]), bad + 1);
    lines.emplace_back(line);
    start = end + 1;
  }
  return WordPieceTokenizer(lines, options, path);
}

WordPieceTokenizer::WordPieceTokenizer(const std::vector<std::string>& lines, const WordPieceOptions& options,
                                       const std::string& source)
    : options_(options), strip_accents_(options.strip_accents.value_or(options.lowercase)) {
  if (lines.empty()) fail("{}: the vocabulary is empty", source);
  if (lines.size() > 0x7FFFFFF0) fail("{}: too many tokens ({})", source, lines.size());
  if (options.max_input_chars_per_word == 0) fail("max_input_chars_per_word must be positive");
  tokens_.reserve(lines.size() + 4);
  Table all;  // every token, for the ids of the special ones
  size_t distinct = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // Rust's lines()
    const std::string_view token = trim_end(line);
    const int32_t id = static_cast<int32_t>(i);
    if (all.find(token) < 0) ++distinct;
    all.insert(token, id);
    words_.insert(token, id);
    if (token.size() > 2 && token.starts_with("##")) continuations_.insert(token.substr(2), id);
    tokens_.emplace_back(token);
  }
  unk_id_ = all.find("[UNK]");
  if (unk_id_ < 0) fail("{}: no [UNK] token in the vocabulary", source);
  // Special tokens missing from the vocabulary get the next ids, in the order
  // transformers adds them (unk, sep, pad, cls, mask).
  int32_t next = static_cast<int32_t>(distinct);
  auto special = [&](const char* text) {
    int32_t id = all.find(text);
    if (id < 0) {
      id = next++;
      if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(id + 1);
      tokens_[id] = text;
    }
    specials_.push_back({text, id});
    return id;
  };
  special("[UNK]");
  sep_id_ = special("[SEP]");
  pad_id_ = special("[PAD]");
  cls_id_ = special("[CLS]");
  mask_id_ = special("[MASK]");
  // tokenize() finds them by their '['.
  for (const Special& s : specials_) ANATOMY_CHECK(s.text.front() == '[', "special token {}", s.text);
}

int32_t WordPieceTokenizer::token_to_id(std::string_view token) const {
  for (const Special& s : specials_)
    if (s.text == token) return s.id;
  return words_.find(token);
}

std::vector<std::pair<std::string, int32_t>> WordPieceTokenizer::vocabulary() const {
  std::vector<std::pair<std::string, int32_t>> out = words_.entries();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return out;
}

const std::string& WordPieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) fail("token id {} is outside the vocabulary of {}", id, tokens_.size());
  return tokens_[id];
}

// ------------------------------------------------------------- normalizing

struct WordPieceTokenizer::Scratch {
  std::string word;            // the word being built, UTF-8
  std::vector<char32_t> run;   // combining marks waiting for canonical ordering
  std::vector<int32_t> first, second;
};

// Steps 2 and 3 of wordpiece.h on `text`: calls sink(word, characters) for each
// word. Code points take the path of Hugging Face's passes one by one (clean,
// CJK, NFD + canonical ordering + drop Mn, lowercase, split), which give the
// same result as the passes over the whole string: removed characters vanish
// before NFD sees their neighbours, and the marks after a starter are ordered
// when the next starter comes.
template <typename Sink>
void WordPieceTokenizer::split_words(std::string_view text, Scratch& scratch, Sink&& sink) const {
  using namespace unicode;
  const bool lower = options_.lowercase, strip = strip_accents_, chinese = options_.tokenize_chinese_chars;
  const std::array<uint8_t, 128>& ascii = ascii_classes();
  std::string& word = scratch.word;
  std::vector<char32_t>& run = scratch.run;
  word.clear();
  run.clear();
  size_t chars = 0;

  auto flush = [&] {
    if (!word.empty()) {
      sink(std::string_view(word), chars);
      word.clear();
      chars = 0;
    }
  };
  // A code point after normalization: the pre-tokenizer's split.
  auto put = [&](char32_t c) {
    const uint8_t f = flags(c);
    if (f & kSpace) {
      flush();
    } else if (f & kPunct) {
      flush();
      append_utf8(word, c);
      chars = 1;
      flush();
    } else {
      append_utf8(word, c);
      ++chars;
    }
  };
  auto lowered = [&](char32_t c, uint8_t f) {
    if (lower && (f & kLowercase)) {
      for (char32_t l : lowercase(c)) put(l);
    } else {
      put(c);
    }
  };
  auto flush_run = [&] {
    if (run.empty()) return;
    if (run.size() > 1)
      std::stable_sort(run.begin(), run.end(),
                       [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    for (char32_t c : run) {
      const uint8_t f = flags(c);
      if (!(f & kNonspacing)) lowered(c, f);
    }
    run.clear();
  };
  // A code point of NFD's output (strip_accents only).
  auto decomposed = [&](char32_t c) {
    const uint8_t f = flags(c);
    if (f & kCombining) {
      run.push_back(c);
      return;
    }
    flush_run();
    if (!(f & kNonspacing)) lowered(c, f);
  };
  // A code point after clean_text and the CJK spaces.
  auto cleaned = [&](char32_t c, uint8_t f) {
    if (!strip) {
      lowered(c, f);
    } else if (!(f & kDecomposes)) {
      decomposed(c);
    } else if (c >= kHangulFirst && c <= kHangulLast) {
      const char32_t s = c - kHangulFirst;
      decomposed(0x1100 + s / 588);
      decomposed(0x1161 + (s % 588) / 28);
      if (s % 28) decomposed(0x11A7 + s % 28);
    } else {
      for (char32_t d : decomposition(c)) decomposed(d);
    }
  };

  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      // ASCII: a starter that NFD keeps; only A-Z lowercase.
      if (!run.empty()) flush_run();
      switch (ascii[b]) {
        case kLetter: {
          // The whole run of such bytes at once.
          size_t end = i + 1;
          while (end < n && static_cast<unsigned char>(text[end]) < 0x80 &&
                 ascii[static_cast<unsigned char>(text[end])] == kLetter)
            ++end;
          const size_t at = word.size();
          word.append(text.data() + i, end - i);
          if (lower)
            for (size_t k = at; k < word.size(); ++k)
              if (word[k] >= 'A' && word[k] <= 'Z') word[k] = static_cast<char>(word[k] + 32);
          chars += end - i;
          i = end;
          continue;
        }
        case kSpaceChar:
          flush();
          break;
        case kPunctChar:
          flush();
          word.push_back(static_cast<char>(b));
          chars = 1;
          flush();
          break;
        default:
          break;
      }
      ++i;
      continue;
    }
    const size_t at = i;
    const char32_t c = decode_utf8(text, i);
    if (c == char32_t(-1)) invalid_utf8(text, at);
    const uint8_t f = flags(c);
    if (f & kRemove) continue;
    if (f & kSpace) {  // becomes ' ', a starter
      flush_run();
      flush();
      continue;
    }
    if (chinese && (f & kChinese)) {  // " c "
      flush_run();
      flush();
      cleaned(c, f);
      flush_run();
      flush();
      continue;
    }
    cleaned(c, f);
  }
  flush_run();
  flush();
}

// ---------------------------------------------------------------- WordPiece

void WordPieceTokenizer::wordpiece(std::string_view word, size_t chars, std::vector<int32_t>& ids) const {
  if (chars > options_.max_input_chars_per_word) {
    ids.push_back(unk_id_);
    return;
  }
  const size_t mark = ids.size();
  const auto* s = reinterpret_cast<const unsigned char*>(word.data());
  const size_t n = word.size();
  // Hashes of the prefixes word[start, start + k) for k = 1..: FNV-1a is
  // incremental, so each candidate end costs one probe.
  std::array<uint64_t, 512> hashes;
  const Table* table = &words_;
  size_t start = 0;
  while (start < n) {
    const size_t limit = std::min({n, start + table->longest(), start + hashes.size()});
    uint64_t h = kFnv1aBasis;
    for (size_t e = start; e < limit; ++e) {
      h = fnv1a_step(h, s[e]);
      hashes[e - start] = h;
    }
    int32_t id = -1;
    size_t end = limit;
    for (; end > start; --end) {
      if (end < n && (s[end] & 0xC0) == 0x80) continue;  // not at a character boundary
      id = table->find(hashes[end - start - 1], word.data() + start, end - start);
      if (id >= 0) break;
    }
    if (id < 0) {
      ids.resize(mark);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(id);
    start = end;
    table = &continuations_;
  }
}

void WordPieceTokenizer::tokenize_piece(std::string_view text, Scratch& scratch, std::vector<int32_t>& ids) const {
  split_words(text, scratch, [&](std::string_view word, size_t chars) { wordpiece(word, chars, ids); });
}

void WordPieceTokenizer::tokenize(std::string_view text, Scratch& scratch, std::vector<int32_t>& ids) const {
  // Step 1: special tokens in the raw text (all start with '[' and none is
  // inside another, so the first match at each '[' is the leftmost-longest).
  size_t start = 0;
  for (size_t at = text.find('['); at != std::string_view::npos; at = text.find('[', at)) {
    const Special* match = nullptr;
    for (const Special& s : specials_)
      if (text.compare(at, s.text.size(), s.text) == 0 && (!match || s.text.size() > match->text.size())) match = &s;
    if (!match) {
      ++at;
      continue;
    }
    tokenize_piece(text.substr(start, at - start), scratch, ids);
    ids.push_back(match->id);
    at += match->text.size();
    start = at;
  }
  tokenize_piece(text.substr(start), scratch, ids);
}

void WordPieceTokenizer::tokenize(std::string_view text, std::vector<int32_t>& ids) const {
  Scratch scratch;
  tokenize(text, scratch, ids);
}

std::vector<int32_t> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> ids;
  tokenize(text, ids);
  return ids;
}

std::vector<std::string> WordPieceTokenizer::pre_tokenize(std::string_view text) const {
  Scratch scratch;
  std::vector<std::string> words;
  split_words(text, scratch, [&](std::string_view word, size_t) { words.emplace_back(word); });
  return words;
}

// --------------------------------------------------------------- encoding

Encoding WordPieceTokenizer::encode(const TextInput& input, const EncodeOptions& options, Scratch& scratch) const {
  std::vector<int32_t>& a = scratch.first;
  std::vector<int32_t>& b = scratch.second;
  a.clear();
  b.clear();
  tokenize(input.text, scratch, a);
  const bool pair = input.pair.has_value();
  if (pair) tokenize(*input.pair, scratch, b);
  size_t na = a.size(), nb = b.size();
  const size_t added = pair ? 3 : 2;
  if (options.truncate_to > 0) {
    if (options.truncate_to < added)
      fail("cannot truncate to {} tokens: {} has {} special tokens", options.truncate_to,
           pair ? "a pair ([CLS] A [SEP] B [SEP])" : "a text ([CLS] A [SEP])", added);
    // utils/truncation.rs, longest_first: with n1 the shorter, keep
    // max(n1, budget - n1) of the longer, or half each when both are long.
    const size_t budget = options.truncate_to - added;
    if (!pair) {
      na = std::min(na, budget);
    } else if (na + nb > budget) {
      if (budget == 0) {
        na = nb = 0;
      } else {
        size_t n1 = na, n2 = nb;
        const bool swap = n1 > n2;
        if (swap) std::swap(n1, n2);
        n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
        if (n1 + n2 > budget) {
          n1 = budget / 2;
          n2 = n1 + budget % 2;
        }
        if (swap) std::swap(n1, n2);
        na = std::min(na, n1);
        nb = std::min(nb, n2);
      }
    }
  }
  const size_t length = na + nb + added;
  const size_t padded = options.padding == Padding::kMaxLength ? std::max(length, options.pad_to) : length;
  Encoding e;
  e.input_ids.reserve(padded);
  e.input_ids.push_back(cls_id_);
  e.input_ids.insert(e.input_ids.end(), a.begin(), a.begin() + static_cast<std::ptrdiff_t>(na));
  e.input_ids.push_back(sep_id_);
  if (pair) {
    e.input_ids.insert(e.input_ids.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(nb));
    e.input_ids.push_back(sep_id_);
  }
  e.token_type_ids.assign(padded, 0);
  std::fill(e.token_type_ids.begin() + static_cast<std::ptrdiff_t>(na + 2),
            e.token_type_ids.begin() + static_cast<std::ptrdiff_t>(length), 1);
  e.attention_mask.assign(padded, 0);
  std::fill(e.attention_mask.begin(), e.attention_mask.begin() + static_cast<std::ptrdiff_t>(length), 1);
  // BertProcessing's sequence ids: the texts' tokens 0 and 1, [CLS], [SEP] and padding none (-1).
  e.sequence_ids.assign(padded, -1);
  std::fill(e.sequence_ids.begin() + 1, e.sequence_ids.begin() + static_cast<std::ptrdiff_t>(na + 1), 0);
  if (pair)
    std::fill(e.sequence_ids.begin() + static_cast<std::ptrdiff_t>(na + 2),
              e.sequence_ids.begin() + static_cast<std::ptrdiff_t>(length - 1), 1);
  e.input_ids.resize(padded, pad_id_);
  return e;
}

Encoding WordPieceTokenizer::encode(const TextInput& input, const EncodeOptions& options) const {
  Scratch scratch;
  return encode(input, options, scratch);
}

std::vector<Encoding> WordPieceTokenizer::encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                                       int threads) const {
  std::vector<Encoding> out(inputs.size());
  encode_in_parallel(inputs.size(), threads, [&] {
    return [&, scratch = Scratch()](size_t i) mutable { out[i] = encode(inputs[i], options, scratch); };
  });
  if (options.padding == Padding::kLongest) {
    size_t longest = 0;
    for (const Encoding& e : out) longest = std::max(longest, e.input_ids.size());
    for (Encoding& e : out) {
      e.input_ids.resize(longest, pad_id_);
      e.token_type_ids.resize(longest, 0);
      e.attention_mask.resize(longest, 0);
      e.sequence_ids.resize(longest, -1);
    }
  }
  return out;
}

}  // namespace anatomy::data
