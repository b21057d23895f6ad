// pre_tokenizers.cpp: see pre_tokenizers.h; each one as pre_tokenizers/*.rs
// of Hugging Face tokenizers splits.
#include "anatomy/data/tokenizer/pre_tokenizers.h"

#include <array>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/data/tokenizer/regex.h"
#include "anatomy/data/tokenizer/unicode_scripts.h"
#include "anatomy/data/tokenizer/unicode_tables.h"
#include "anatomy/data/tokenizer/whitespace_classes.h"

namespace anatomy::data::tok {

PreTokenizer::~PreTokenizer() = default;

namespace {

std::vector<PatternMatch> invert(std::vector<PatternMatch> matches) {
  for (PatternMatch& m : matches) m.is_match = !m.is_match;
  return matches;
}

SplitBehavior behavior_from_json(const nlohmann::json& object, const std::string& where, SplitBehavior fallback) {
  const nlohmann::json* field = optional_field(object, "behavior");
  if (field == nullptr) return fallback;
  const std::string name = field->is_string() ? field->get<std::string>() : "";
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail("{}: \"behavior\" must be one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; got {}",
       where, short_dump(*field));
}

// A literal as a regular expression: ASCII other than letters and digits escaped.
std::string escape_literal(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

class BertPre : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [](const NormalizedText& t) {
      return t.split(find_char_matches(t.get(), is_white_space), SplitBehavior::kRemoved);
    });
    split_pieces(pieces, [](const NormalizedText& t) {
      return t.split(find_char_matches(t.get(), is_punctuation), SplitBehavior::kIsolated);
    });
  }
};

class WhitespaceSplitPre : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [](const NormalizedText& t) {
      return t.split(find_char_matches(t.get(), is_white_space), SplitBehavior::kRemoved);
    });
  }
};

// `\w+|[^\w\s]+` kept, the rest removed: runs of word characters and runs of
// other characters, white space dropped, with the Rust regex crate's classes.
class WhitespacePre : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [](const NormalizedText& t) {
      const std::string& s = t.get();
      std::vector<PatternMatch> runs;  // kept runs are non-matches, white space matches (removed)
      int previous = -1;               // 0 space, 1 word, 2 other
      for (size_t at = 0; at < s.size();) {
        const auto start = static_cast<uint32_t>(at);
        const char32_t c = next_utf8(s, at);
        const int kind = is_regex_word(c) ? 1 : is_regex_space(c) ? 0 : 2;
        if (kind == previous)
          runs.back().end = static_cast<uint32_t>(at);
        else
          runs.push_back({start, static_cast<uint32_t>(at), kind == 0});
        previous = kind;
      }
      return t.split(runs, SplitBehavior::kRemoved);
    });
  }
};

class RegexSplitPre : public PreTokenizer {
 public:
  RegexSplitPre(std::string_view pattern, SplitBehavior behavior, bool invert)
      : regex_(pattern), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const NormalizedText& t) {
      std::vector<PatternMatch> matches = regex_.find_matches(t.get());
      return t.split(invert_ ? invert(std::move(matches)) : matches, behavior_);
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class PunctuationPre : public PreTokenizer {
 public:
  explicit PunctuationPre(SplitBehavior behavior) : behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces,
                 [&](const NormalizedText& t) { return t.split(find_char_matches(t.get(), is_punctuation), behavior_); });
  }

 private:
  SplitBehavior behavior_;
};

class DigitsPre : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const NormalizedText& t) {
      return t.split(find_char_matches(t.get(), is_numeric),
                     individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
    });
  }

 private:
  bool individual_;
};

class CharDelimiterPre : public PreTokenizer {
 public:
  explicit CharDelimiterPre(char32_t delimiter) : delimiter_(delimiter) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const NormalizedText& t) {
      return t.split(find_char_matches(t.get(), [&](char32_t c) { return c == delimiter_; }), SplitBehavior::kRemoved);
    });
  }

 private:
  char32_t delimiter_;
};

enum class Prepend { kAlways, kFirst, kNever };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(char32_t replacement, Prepend prepend, bool split)
      : replacement_(replacement), prepend_(prepend), split_(split) {
    append_utf8(text_, replacement);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](NormalizedText& t) {
      t.replace(find_char_matches(t.get(), [](char32_t c) { return c == U' '; }), text_);
      const bool starts = t.get().compare(0, text_.size(), text_) == 0;
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && t.original_span().first == 0)))
        t.prepend(text_);
      if (!split_) return std::vector<NormalizedText>{t};
      return t.split(find_char_matches(t.get(), [&](char32_t c) { return c == replacement_; }),
                     SplitBehavior::kMergedWithNext);
    });
  }

 private:
  char32_t replacement_;
  Prepend prepend_;
  bool split_;
  std::string text_;
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::array<char32_t, 256> make_byte_chars() {
  std::array<char32_t, 256> chars{};
  char32_t n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    chars[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : 256 + n++;
  }
  return chars;
}
const std::array<char32_t, 256> kByteChars = make_byte_chars();

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_) regex_.emplace(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](NormalizedText& t) {
      if (add_prefix_space_ && (t.get().empty() || t.get()[0] != ' ')) t.prepend(" ");
      if (!use_regex_) return std::vector<NormalizedText>{t};
      return t.split(regex_->find_matches(t.get()), SplitBehavior::kIsolated);
    });
    std::vector<Change> changes;
    for (Piece& piece : pieces) {
      if (piece.tokens) continue;
      const std::string& s = piece.text.get();
      changes.clear();
      for (size_t at = 0; at < s.size();) {
        const size_t start = at;
        next_utf8(s, at);
        for (size_t i = start; i < at; ++i)
          changes.push_back({kByteChars[static_cast<unsigned char>(s[i])], i > start ? 1 : 0});
      }
      piece.text.transform(changes, 0);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::optional<Regex> regex_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

char32_t single_char(const nlohmann::json& object, const char* name, const std::string& where, char32_t fallback) {
  const nlohmann::json* field = optional_field(object, name);
  if (field == nullptr) return fallback;
  const std::string text = string_field(object, name, where, "");
  const std::vector<char32_t> chars = decode_utf8(text);
  if (chars.size() != 1) fail("{}: \"{}\" must be one character, got {}", where, name, short_dump(*field));
  return chars[0];
}

}  // namespace

char32_t byte_to_char(uint8_t byte) { return kByteChars[byte]; }

int char_to_byte(char32_t c) {
  for (int b = 0; b < 256; ++b)
    if (kByteChars[static_cast<size_t>(b)] == c) return b;
  return -1;
}

std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& value, const std::string& where) {
  if (value.is_null()) return nullptr;
  if (!value.is_object()) fail("{}: a pre-tokenizer must be an object, got {}", where, json_kind(value));
  const std::string type = string_field(value, "type", where, "");
  const std::string at = where + " (pre-tokenizer " + type + ")";
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  if (type == "UnicodeScripts") return make_unicode_scripts_pre_tokenizer();
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "Punctuation")
    return std::make_unique<PunctuationPre>(behavior_from_json(value, at, SplitBehavior::kIsolated));
  if (type == "Digits") return std::make_unique<DigitsPre>(bool_field(value, "individual_digits", at, false));
  if (type == "CharDelimiterSplit") {
    required_field(value, "delimiter", at);
    return std::make_unique<CharDelimiterPre>(single_char(value, "delimiter", at, U' '));
  }
  if (type == "Split") {
    const nlohmann::json& pattern = required_field(value, "pattern", at);
    const SplitBehavior behavior = behavior_from_json(value, at, SplitBehavior::kRemoved);
    const bool inverted = bool_field(value, "invert", at, false);
    if (const nlohmann::json* s = optional_field(pattern, "String"); s && s->is_string())
      return std::make_unique<RegexSplitPre>(escape_literal(s->get<std::string>()), behavior, inverted);
    if (const nlohmann::json* r = optional_field(pattern, "Regex"); r && r->is_string()) {
      try {
        return std::make_unique<RegexSplitPre>(r->get<std::string>(), behavior, inverted);
      } catch (const Error& e) {
        fail("{}: {}", at, e.what());
      }
    }
    fail("{}: \"pattern\" must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", at, short_dump(pattern));
  }
  if (type == "Metaspace") {
    const char32_t replacement = single_char(value, "replacement", at, U'\u2581');
    Prepend prepend = Prepend::kAlways;
    if (const nlohmann::json* scheme = optional_field(value, "prepend_scheme")) {
      const std::string name = scheme->is_string() ? scheme->get<std::string>() : "";
      if (name == "always") prepend = Prepend::kAlways;
      else if (name == "first") prepend = Prepend::kFirst;
      else if (name == "never") prepend = Prepend::kNever;
      else fail("{}: \"prepend_scheme\" must be \"always\", \"first\" or \"never\", got {}", at, short_dump(*scheme));
    }
    if (const nlohmann::json* add = optional_field(value, "add_prefix_space"); add && !add->is_null()) {
      if (!bool_field(value, "add_prefix_space", at, true)) {
        if (prepend != Prepend::kNever && optional_field(value, "prepend_scheme") != nullptr)
          fail("{}: add_prefix_space false does not match prepend_scheme", at);
        prepend = Prepend::kNever;
      }
    }
    return std::make_unique<MetaspacePre>(replacement, prepend, bool_field(value, "split", at, true));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(bool_field(value, "add_prefix_space", at, true),
                                          bool_field(value, "use_regex", at, true));
  if (type == "Sequence") {
    const nlohmann::json& list = required_field(value, "pretokenizers", at);
    if (!list.is_array()) fail("{}: \"pretokenizers\" must be an array, got {}", at, json_kind(list));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = pre_tokenizer_from_json(list[i], fmt::format("{} step {}", at, i + 1));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePre>(std::move(steps));
  }
  if (type.empty()) fail("{}: a pre-tokenizer has no \"type\"", where);
  fail("{}: pre-tokenizer type \"{}\" is not one this tokenizer reads", where, short_text(type));
}

}  // namespace anatomy::data::tok
