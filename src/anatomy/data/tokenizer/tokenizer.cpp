// tokenizer.cpp: the pipeline of a tokenizer.json (see tokenizer.h), after
// tokenizers' tokenizer/mod.rs, added_vocabulary.rs and utils/truncation.rs.
#include "anatomy/data/tokenizer/tokenizer.h"

#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/parallel_encode.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/data/tokenizer/normalizers.h"
#include "anatomy/data/tokenizer/pre_tokenizers.h"
#include "anatomy/data/tokenizer/regex.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy::data::tok {

namespace {

// Rust regex's \w, for single_word added tokens.
bool is_word_char(char32_t c) {
  static const Regex word(R"(\w)");
  std::string text;
  append_utf8(text, c);
  const std::vector<PatternMatch> matches = word.find_matches(text);
  return matches.size() == 1 && matches[0].is_match;
}

char32_t last_char(std::string_view text) {
  size_t at = text.size() - 1;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return next_utf8(text, at);
}

// Byte offsets of `text` to character offsets (BytesToCharOffsetConverter).
class CharOffsets {
 public:
  explicit CharOffsets(std::string_view text) : char_of_byte_(text.size()) {
    uint32_t index = 0;
    for (size_t at = 0; at < text.size(); ++index) {
      const size_t start = at;
      next_utf8(text, at);
      for (size_t i = start; i < at; ++i) char_of_byte_[i] = index;
    }
  }
  Span convert(Span bytes) const {
    const size_t n = char_of_byte_.size();
    if (bytes.first >= n) return bytes;  // the library keeps byte offsets it cannot convert
    if (bytes.second < n) return {char_of_byte_[bytes.first], char_of_byte_[bytes.second]};
    if (bytes.second == 0) return bytes;
    return {char_of_byte_[bytes.first], char_of_byte_[bytes.second - 1] + 1};
  }

 private:
  std::vector<uint32_t> char_of_byte_;
};

// Keeps the first `length` tokens (direction right) or the last (left).
void truncate(TokenSequence& s, size_t length, bool left) {
  if (s.size() <= length) return;
  const auto cut = [&](auto& v) {
    if (v.empty()) return;
    if (left)
      v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(length));
    else
      v.resize(length);
  };
  cut(s.ids);
  cut(s.type_ids);
  cut(s.offsets);
  cut(s.values);
  cut(s.special);
  s.ranges = {};
}

// Truncation longest_first of one text or a pair to `truncate_to` tokens, `added` of them the special tokens
// (utils/truncation.rs: with n1 the shorter, keep max(n1, budget - n1) of the longer, or half each when both
// are long).
void truncate_longest_first(std::vector<TokenSequence>& sequences, size_t truncate_to, size_t added) {
  const bool pair = sequences.size() > 1;
  if (truncate_to < added)
    fail("cannot truncate to {} tokens: the tokenizer adds {} special tokens to {}", truncate_to, added,
         pair ? "a pair" : "a text");
  const size_t budget = truncate_to - added;
  if (!pair) {
    truncate(sequences[0], budget, false);
  } else if (sequences[0].size() + sequences[1].size() > budget) {
    size_t n1 = sequences[0].size(), n2 = sequences[1].size();
    if (budget == 0) {
      n1 = n2 = 0;
    } else {
      const bool swap = n1 > n2;
      if (swap) std::swap(n1, n2);
      n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
      if (n1 + n2 > budget) {
        n1 = budget / 2;
        n2 = n1 + budget % 2;
      }
      if (swap) std::swap(n1, n2);
    }
    truncate(sequences[0], n1, false);
    truncate(sequences[1], n2, false);
  }
}

// The tokens [start, end) of `s`, as a sequence of their own (no ranges, as Encoding::truncate leaves them).
TokenSequence slice(const TokenSequence& s, size_t start, size_t end) {
  const auto part = [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if (v.empty()) return V();
    return V(v.begin() + static_cast<std::ptrdiff_t>(start), v.begin() + static_cast<std::ptrdiff_t>(end));
  };
  TokenSequence out;
  out.ids = part(s.ids);
  out.type_ids = part(s.type_ids);
  out.offsets = part(s.offsets);
  out.values = part(s.values);
  out.special = part(s.special);
  return out;
}

// Sets add_prefix_space to `value` in `step` if its type is one of `types`, or in each of its steps (`list`) if it
// is a Sequence (the field's default is true); whether that changed anything.
bool set_add_prefix_space(nlohmann::json& step, bool value, const char* list,
                          std::initializer_list<const char*> types) {
  if (!step.is_object()) return false;
  const auto type = step.find("type");
  if (type == step.end() || !type->is_string()) return false;
  if (*type == "Sequence") {
    const auto steps = step.find(list);
    if (steps == step.end() || !steps->is_array()) return false;
    bool changed = false;
    for (nlohmann::json& inner : *steps) changed = set_add_prefix_space(inner, value, list, types) || changed;
    return changed;
  }
  if (std::none_of(types.begin(), types.end(), [&](const char* t) { return *type == t; })) return false;
  const auto field = step.find("add_prefix_space");
  if (field != step.end() && field->is_boolean() && field->get<bool>() == value) return false;
  if (field == step.end() && value) return false;
  step["add_prefix_space"] = value;
  return true;
}

}  // namespace

nlohmann::json Tokenizer::read_document(const std::string& path) {
  if (!io::path_exists(path)) fail("{}: no such file", path);
  if (io::is_directory(path)) fail("{}: a directory, not a tokenizer.json", path);
  return io::parse_json(io::read_text_file(path), path);
}

Tokenizer Tokenizer::from_file(const std::string& path) { return Tokenizer(read_document(path), path); }

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer::Tokenizer(const nlohmann::json& document, const std::string& source) : source_(source) {
  if (!document.is_object()) fail("{}: a tokenizer.json must be a JSON object, got {}", source, json_kind(document));
  if (const nlohmann::json* version = optional_field(document, "version");
      version && !(version->is_string() && version->get<std::string>() == "1.0"))
    fail("{}: unknown tokenizer.json version {} (this reader knows \"1.0\")", source, short_dump(*version));
  model_ = model_from_json(required_field(document, "model", source), source);
  if (const nlohmann::json* n = optional_field(document, "normalizer")) normalizer_ = normalizer_from_json(*n, source);
  if (const nlohmann::json* p = optional_field(document, "pre_tokenizer"))
    pre_tokenizer_ = pre_tokenizer_from_json(*p, source);
  if (const nlohmann::json* p = optional_field(document, "post_processor"))
    post_processor_ = post_processor_from_json(*p, source);
  for (const bool value : {false, true}) {
    if (const nlohmann::json* p = optional_field(document, "pre_tokenizer")) {
      nlohmann::json changed = *p;
      if (set_add_prefix_space(changed, value, "pretokenizers", {"ByteLevel"}))
        prefix_pre_tokenizers_[value] = pre_tokenizer_from_json(changed, source);
    }
    if (const nlohmann::json* p = optional_field(document, "post_processor")) {
      nlohmann::json changed = *p;
      if (set_add_prefix_space(changed, value, "processors", {"ByteLevel", "RobertaProcessing"}))
        prefix_post_processors_[value] = post_processor_from_json(changed, source);
    }
  }

  // Added tokens, as the library adds them: ids from the model's vocabulary or
  // the next free id (the file's "id" is only a hint it warns about).
  if (const nlohmann::json* list = optional_field(document, "added_tokens"); list && !list->is_null()) {
    if (!list->is_array()) fail("{}: \"added_tokens\" must be an array, got {}", source, json_kind(*list));
    int32_t next_id = static_cast<int32_t>(model_->vocab_size());
    for (size_t i = 0; i < list->size(); ++i) {
      const nlohmann::json& item = (*list)[i];
      const std::string where = fmt::format("{}: added token {}", source, i + 1);
      AddedToken token;
      token.content = string_field(item, "content", where, "");
      if (!optional_field(item, "content")) fail("{}: no \"content\"", where);
      token.single_word = bool_field(item, "single_word", where, false);
      token.lstrip = bool_field(item, "lstrip", where, false);
      token.rstrip = bool_field(item, "rstrip", where, false);
      token.special = bool_field(item, "special", where, false);
      token.normalized = bool_field(item, "normalized", where, !token.special);
      if (token.content.empty()) continue;
      if (const auto it = added_ids_.find(token.content); it != added_ids_.end()) {
        const AddedToken& known = *std::find_if(added_.begin(), added_.end(),
                                                [&](const AddedToken& a) { return a.id == it->second; });
        if (known.single_word == token.single_word && known.lstrip == token.lstrip && known.rstrip == token.rstrip &&
            known.normalized == token.normalized && known.special == token.special)
          continue;
        token.id = it->second;
      } else if (const int32_t id = model_->token_to_id(token.content); id >= 0) {
        token.id = id;
      } else {
        token.id = next_id++;
      }
      added_ids_[token.content] = token.id;
      // A later entry for the same id replaces the earlier one.
      const auto same = std::find_if(added_.begin(), added_.end(), [&](const AddedToken& a) { return a.id == token.id; });
      if (same != added_.end())
        *same = token;
      else
        added_.push_back(token);
    }
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& token = added_[i];
    std::string pattern = token.content;
    if (token.normalized && normalizer_) {
      NormalizedText text(token.content);
      normalizer_->normalize(text);
      pattern = text.get();
    }
    (token.normalized ? normalized_patterns_ : raw_patterns_).push_back({pattern, i});
  }
  for (auto* patterns : {&raw_patterns_, &normalized_patterns_})
    std::stable_sort(patterns->begin(), patterns->end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  if (const nlohmann::json* padding = optional_field(document, "padding"); padding && padding->is_object())
    if (const nlohmann::json* id = optional_field(*padding, "pad_id"); id && id->is_number_integer())
      pad_id_ = static_cast<int32_t>(id->get<int64_t>());
  for (const char* name : {"[PAD]", "<pad>"})
    if (pad_id_ < 0) pad_id_ = token_to_id(name);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  return model_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  for (const AddedToken& token : added_)
    if (token.id == id) return token.content;
  return model_->id_to_token(id);
}

size_t Tokenizer::vocab_size() const {
  size_t size = model_->vocab_size();
  for (const AddedToken& token : added_)
    if (model_->token_to_id(token.content) < 0) ++size;
  return size;
}

size_t Tokenizer::added_special_tokens(bool pair) const {
  return post_processor_ ? post_processor_->added_tokens(pair) : 0;
}

// Cuts the added tokens (raw ones, or normalized ones) out of every piece not yet tokenized
// (AddedVocabulary::find_matches: leftmost-longest, non-overlapping).
void Tokenizer::cut_added_tokens(std::vector<Piece>& pieces, bool normalized) const {
  const auto& patterns = normalized ? normalized_patterns_ : raw_patterns_;
  if (patterns.empty()) return;
  std::vector<Piece> out;
  for (Piece& piece : pieces) {
    if (piece.tokens) {
      out.push_back(std::move(piece));
      continue;
    }
    const std::string& s = piece.text.get();
    struct Cut {
      uint32_t start, end;
      int32_t id;  // -1: text between added tokens
    };
    std::vector<Cut> cuts;
    uint32_t start_offset = 0;
    for (size_t at = 0; at < s.size();) {
      const std::pair<std::string, size_t>* found = nullptr;
      for (const auto& p : patterns)
        if (s.compare(at, p.first.size(), p.first) == 0) {
          found = &p;
          break;
        }
      if (found == nullptr) {
        ++at;
        continue;
      }
      const AddedToken& token = added_[found->second];
      size_t start = at, stop = at + found->first.size();
      // An added token that normalizes to nothing matches, empty, at every
      // character: the search goes on one character later, as the library's.
      if (found->first.empty()) {
        if (at == s.size()) break;
        next_utf8(s, at);
      } else {
        at = stop;
      }
      if (token.single_word) {
        const bool start_space = start == 0 || !is_word_char(last_char(std::string_view(s).substr(0, start)));
        size_t after = stop;
        const bool stop_space = stop == s.size() || !is_word_char(next_utf8(s, after));
        if (!start_space || !stop_space) continue;
      }
      if (token.lstrip) {
        size_t new_start = start;
        while (new_start > 0) {
          size_t before = new_start - 1;
          while (before > 0 && (static_cast<unsigned char>(s[before]) & 0xC0) == 0x80) --before;
          size_t probe = before;
          if (!is_white_space(next_utf8(s, probe))) break;
          new_start = before;
        }
        start = std::max<size_t>(new_start, start_offset);
      }
      if (token.rstrip) {
        while (stop < s.size()) {
          size_t probe = stop;
          if (!is_white_space(next_utf8(s, probe))) break;
          stop = probe;
        }
      }
      if (start_offset < start) cuts.push_back({start_offset, static_cast<uint32_t>(start), -1});
      cuts.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), token.id});
      start_offset = static_cast<uint32_t>(stop);
      at = std::max(at, stop);
    }
    if (start_offset != s.size()) cuts.push_back({start_offset, static_cast<uint32_t>(s.size()), -1});
    if (s.empty()) cuts.push_back({0, 0, -1});
    for (const Cut& cut : cuts) {
      std::optional<NormalizedText> part = piece.text.slice({cut.start, cut.end});
      if (!part) fail("internal error: an added token cut at bytes {}..{} of a {}-byte text", cut.start, cut.end, s.size());
      if (part->empty()) continue;
      Piece next{std::move(*part), std::nullopt};
      if (cut.id >= 0) next.tokens = std::vector<ModelToken>{{cut.id, 0, static_cast<uint32_t>(next.text.size())}};
      out.push_back(std::move(next));
    }
  }
  pieces = std::move(out);
}

Tokenizer::Pipeline Tokenizer::pipeline(std::optional<bool> add_prefix_space) const {
  Pipeline p{pre_tokenizer_.get(), post_processor_.get()};
  if (add_prefix_space) {
    if (const auto& pre = prefix_pre_tokenizers_[*add_prefix_space]) p.pre_tokenizer = pre.get();
    if (const auto& post = prefix_post_processors_[*add_prefix_space]) p.post_processor = post.get();
  }
  return p;
}

TokenSequence Tokenizer::encode_text(std::string_view text, const Pipeline& pipeline) const {
  const bool fill_values = pipeline.post_processor && pipeline.post_processor->needs_token_text();
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail("invalid UTF-8 (byte 0x{:02X} at byte {})", static_cast<unsigned char>(text[bad]), bad);
  std::vector<Piece> pieces;
  pieces.push_back({NormalizedText(text), std::nullopt});
  cut_added_tokens(pieces, /*normalized=*/false);
  for (Piece& piece : pieces)
    if (!piece.tokens && normalizer_) normalizer_->normalize(piece.text);
  cut_added_tokens(pieces, /*normalized=*/true);
  // The library drops pieces that normalization emptied.
  std::erase_if(pieces, [](const Piece& p) { return !p.tokens && p.text.empty(); });
  if (pipeline.pre_tokenizer) pipeline.pre_tokenizer->pre_tokenize(pieces);

  TokenSequence out;
  const CharOffsets chars(text);
  std::vector<ModelToken> tokens;
  for (Piece& piece : pieces) {
    const bool added = piece.tokens.has_value();
    if (!added) {
      tokens.clear();
      model_->tokenize(piece.text.get(), tokens);
      piece.tokens = tokens;
    }
    const uint32_t shift = piece.text.original_span().first;
    for (const ModelToken& token : *piece.tokens) {
      Span bytes{token.start, token.end};
      if (const std::optional<Span> original = piece.text.original_of(bytes))
        bytes = {shift + original->first, shift + original->second};
      out.ids.push_back(token.id);
      out.offsets.push_back(chars.convert(bytes));
      // An added token's value is its text as cut (with the spaces lstrip/rstrip took).
      if (fill_values) out.values.push_back(added ? piece.text.get() : model_->id_to_token(token.id));
    }
  }
  out.type_ids.assign(out.ids.size(), 0);
  out.special.assign(out.ids.size(), 0);
  return out;
}

Encoding Tokenizer::assemble(std::vector<TokenSequence> sequences, const Pipeline& pipeline, bool add_special_tokens,
                             const std::vector<int32_t>* words, size_t pad_to, int32_t& pad_sequence_id) const {
  TokenSequence all = post_process(pipeline.post_processor, std::move(sequences), add_special_tokens);
  Encoding e;
  // The sequence id one token past the end is the one padding takes.
  e.sequence_ids = all.sequence_ids(all.size() + 1);
  pad_sequence_id = e.sequence_ids.back();
  e.sequence_ids.pop_back();
  e.input_ids = std::move(all.ids);
  e.token_type_ids = std::move(all.type_ids);
  e.offsets = std::move(all.offsets);
  e.attention_mask.assign(e.input_ids.size(), 1);
  if (words) {
    // The texts' tokens keep their order through post-processing: the k-th one not added is word token k.
    e.word_ids.assign(e.input_ids.size(), -1);
    size_t k = 0;
    for (size_t i = 0; i < e.word_ids.size(); ++i)
      if (!all.special[i]) {
        if (k == words->size()) fail("internal error: more text tokens than the {} of the words", words->size());
        e.word_ids[i] = (*words)[k++];
      }
  }
  pad(e, pad_to, pad_sequence_id, words != nullptr);
  return e;
}

void Tokenizer::pad(Encoding& e, size_t length, int32_t pad_sequence_id, bool words) const {
  if (e.input_ids.size() >= length) return;
  if (pad_id_ < 0) fail("{}: padding needs a pad token, and the tokenizer has none ([PAD] or <pad>)", source_);
  e.input_ids.resize(length, pad_id_);
  e.token_type_ids.resize(length, 0);
  e.attention_mask.resize(length, 0);
  e.offsets.resize(length, {0, 0});
  e.sequence_ids.resize(length, pad_sequence_id);
  if (words) e.word_ids.resize(length, -1);
}

Encoding Tokenizer::encode(const TextInput& input, const EncodeOptions& options, bool add_special_tokens,
                           int32_t& pad_sequence_id) const {
  const Pipeline p = pipeline(options.add_prefix_space);
  std::vector<TokenSequence> sequences;
  try {
    sequences.push_back(encode_text(input.text, p));
    if (input.pair) sequences.push_back(encode_text(*input.pair, p));
  } catch (const Error& e) {
    fail("{}: {}", source_, e.what());
  }
  if (options.truncate_to > 0)
    truncate_longest_first(sequences, options.truncate_to,
                           add_special_tokens ? added_special_tokens(input.pair.has_value()) : 0);
  return assemble(std::move(sequences), p, add_special_tokens, /*words=*/nullptr,
                  options.padding == Padding::kMaxLength ? options.pad_to : 0, pad_sequence_id);
}

Encoding Tokenizer::encode(const TextInput& input, const EncodeOptions& options, bool add_special_tokens) const {
  int32_t pad_sequence_id = -1;
  return encode(input, options, add_special_tokens, pad_sequence_id);
}

std::vector<Encoding> Tokenizer::encode_batch(std::span<const TextInput> inputs, const EncodeOptions& options,
                                              bool add_special_tokens, int threads) const {
  std::vector<Encoding> out(inputs.size());
  std::vector<int32_t> pad_sequence_ids(inputs.size(), -1);
  encode_in_parallel(inputs.size(), threads, [&] {
    return [&](size_t i) { out[i] = encode(inputs[i], options, add_special_tokens, pad_sequence_ids[i]); };
  });
  if (options.padding == Padding::kLongest) {
    size_t longest = 0;
    for (const Encoding& e : out) longest = std::max(longest, e.input_ids.size());
    for (size_t i = 0; i < out.size(); ++i) pad(out[i], longest, pad_sequence_ids[i], false);
  }
  return out;
}

// ------------------------------------------------------------ pre-split words

Encoding Tokenizer::encode_words(std::span<const std::string> words, const EncodeOptions& options) const {
  int32_t pad_sequence_id = -1;
  return encode_words(words, options, pad_sequence_id);
}

Encoding Tokenizer::encode_words(std::span<const std::string> words, const EncodeOptions& options,
                                 int32_t& pad_sequence_id) const {
  const Pipeline p = pipeline(options.add_prefix_space);
  std::vector<TokenSequence> sequences(1);
  std::vector<int32_t> token_words;  // the word of each token
  for (size_t i = 0; i < words.size(); ++i) {
    try {
      sequences[0].append(encode_text(words[i], p));
    } catch (const Error& e) {
      fail("{}: word {}: {}", source_, i + 1, e.what());
    }
    token_words.resize(sequences[0].size(), static_cast<int32_t>(i));
  }
  if (options.truncate_to > 0) truncate_longest_first(sequences, options.truncate_to, added_special_tokens(false));
  token_words.resize(sequences[0].size());
  return assemble(std::move(sequences), p, /*add_special_tokens=*/true, &token_words,
                  options.padding == Padding::kMaxLength ? options.pad_to : 0, pad_sequence_id);
}

std::vector<Encoding> Tokenizer::encode_words_batch(std::span<const std::vector<std::string>> examples,
                                                    const EncodeOptions& options, int threads) const {
  std::vector<Encoding> out(examples.size());
  std::vector<int32_t> pad_sequence_ids(examples.size(), -1);
  encode_in_parallel(examples.size(), threads, [&] {
    return [&](size_t i) { out[i] = encode_words(examples[i], options, pad_sequence_ids[i]); };
  });
  if (options.padding == Padding::kLongest) {
    size_t longest = 0;
    for (const Encoding& e : out) longest = std::max(longest, e.input_ids.size());
    for (size_t i = 0; i < out.size(); ++i) pad(out[i], longest, pad_sequence_ids[i], /*words=*/true);
  }
  return out;
}

// --------------------------------------------------------- overflowing windows

std::vector<Encoding> Tokenizer::windows(const TextInput& input, const OverflowOptions& options,
                                         std::vector<int32_t>& pad_sequence_ids) const {
  const size_t max_length = options.max_length, stride = options.stride;
  const bool pair = input.pair.has_value();
  const size_t added = added_special_tokens(pair), single_added = added_special_tokens(false);
  // The library subtracts the special tokens from max_length in unsigned arithmetic and wraps around, or with
  // max_length equal to them moves every token to a window of its own: neither makes windows.
  if (max_length <= added)
    fail("cannot cut {} into windows of {} tokens: the tokenizer adds {} special tokens to it",
         pair ? "a pair" : "a text", max_length, added);
  // TokenizerImpl::with_truncation, before any encoding.
  if (max_length - single_added < stride)
    fail("tokenizer stride set to {}, which is greater than or equal to its effective max length of {} (= {} original "
         "max length - {} added special tokens)",
         stride, max_length - single_added, max_length, single_added);
  const Pipeline p = pipeline(options.add_prefix_space);
  std::vector<TokenSequence> sequences;
  try {
    sequences.push_back(encode_text(input.text, p));
    if (pair) sequences.push_back(encode_text(*input.pair, p));
  } catch (const Error& e) {
    fail("{}: {}", source_, e.what());
  }
  const size_t budget = max_length - added;
  const size_t pad_to = options.padding == Padding::kMaxLength ? max_length : 0;
  std::vector<Encoding> out;
  int32_t pad_sequence_id = -1;
  const size_t n1 = sequences[0].size(), total = n1 + (pair ? sequences[1].size() : 0);
  if (total <= budget) {
    out.push_back(assemble(std::move(sequences), p, true, nullptr, pad_to, pad_sequence_id));
    pad_sequence_ids.push_back(pad_sequence_id);
    return out;
  }
  if (!pair)
    fail("truncation only_second needs a pair, and a text of {} tokens does not fit {} (Truncation error: Second "
         "sequence not provided)",
         n1, max_length);
  const TokenSequence second = std::move(sequences[1]);
  const size_t n2 = second.size(), to_remove = total - budget;
  if (n2 <= to_remove)
    fail("the first text's {} tokens and {} special tokens leave the second text no room in {} tokens (Truncation "
         "error: Sequence to truncate too short to respect the provided max_length)",
         n1, added, max_length);
  // Encoding::truncate: windows of `window` tokens every window - stride tokens, the last one ending with the text.
  const size_t window = n2 - to_remove;
  if (stride >= window)
    fail("`stride` must be strictly less than `max_len={}`: a window of {} tokens holds {} tokens of the second text "
         "beside the first text's {} and {} special tokens, and stride is {}",
         window, max_length, window, n1, added, stride);
  for (size_t start = 0;; start += window - stride) {
    const size_t end = std::min(start + window, n2);
    std::vector<TokenSequence> parts = {sequences[0], slice(second, start, end)};
    parts[1].overflow = start > 0;
    out.push_back(assemble(std::move(parts), p, true, nullptr, pad_to, pad_sequence_id));
    pad_sequence_ids.push_back(pad_sequence_id);
    if (end == n2) break;
  }
  return out;
}

std::vector<Encoding> Tokenizer::encode_overflowing(const TextInput& input, const OverflowOptions& options) const {
  std::vector<int32_t> pad_sequence_ids;
  std::vector<Encoding> out = windows(input, options, pad_sequence_ids);
  if (options.padding == Padding::kLongest) {
    size_t longest = 0;
    for (const Encoding& e : out) longest = std::max(longest, e.input_ids.size());
    for (size_t i = 0; i < out.size(); ++i) pad(out[i], longest, pad_sequence_ids[i], false);
  }
  return out;
}

OverflowingEncodings Tokenizer::encode_overflowing_batch(std::span<const TextInput> inputs,
                                                         const OverflowOptions& options, int threads) const {
  std::vector<std::vector<Encoding>> each(inputs.size());
  std::vector<std::vector<int32_t>> pad_sequence_ids(inputs.size());
  encode_in_parallel(inputs.size(), threads, [&] {
    return [&](size_t i) { each[i] = windows(inputs[i], options, pad_sequence_ids[i]); };
  });
  OverflowingEncodings out;
  std::vector<int32_t> pads;
  for (size_t i = 0; i < each.size(); ++i)
    for (size_t w = 0; w < each[i].size(); ++w) {
      out.features.push_back(std::move(each[i][w]));
      out.overflow_to_sample_mapping.push_back(static_cast<int32_t>(i));
      pads.push_back(pad_sequence_ids[i][w]);
    }
  if (options.padding == Padding::kLongest) {
    size_t longest = 0;
    for (const Encoding& e : out.features) longest = std::max(longest, e.input_ids.size());
    for (size_t i = 0; i < out.features.size(); ++i) pad(out.features[i], longest, pads[i], false);
  }
  return out;
}

}  // namespace anatomy::data::tok
