// post_processors.cpp: see post_processors.h; processors/*.rs of Hugging Face tokenizers.
#include "anatomy/data/tokenizer/post_processors.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/data/tokenizer/pre_tokenizers.h"

namespace anatomy::data::tok {

void TokenSequence::append(const TokenSequence& other) {
  const auto shift = static_cast<uint32_t>(ids.size());
  for (size_t id = 0; id < ranges.size(); ++id)
    if (other.ranges[id].set) ranges[id] = {true, other.ranges[id].start + shift, other.ranges[id].end + shift};
  ids.insert(ids.end(), other.ids.begin(), other.ids.end());
  type_ids.insert(type_ids.end(), other.type_ids.begin(), other.type_ids.end());
  offsets.insert(offsets.end(), other.offsets.begin(), other.offsets.end());
  values.insert(values.end(), other.values.begin(), other.values.end());
  special.insert(special.end(), other.special.begin(), other.special.end());
}

void TokenSequence::set_sequence_id(int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= ranges.size()) fail("internal error: sequence id {}", id);
  ranges[static_cast<size_t>(id)] = {true, 0, static_cast<uint32_t>(ids.size())};
}

std::vector<int32_t> TokenSequence::sequence_ids(size_t length) const {
  std::vector<int32_t> out(length, -1);
  const auto set = std::count_if(ranges.begin(), ranges.end(), [](const SequenceRange& r) { return r.set; });
  const size_t count = std::max<size_t>(static_cast<size_t>(set), 1);
  for (size_t id = 0; id < count; ++id) {
    const SequenceRange& range = ranges[id];
    const size_t start = range.set ? std::min<size_t>(range.start, length) : 0;
    const size_t end = range.set ? std::min<size_t>(range.end, length) : length;
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(start), out.begin() + static_cast<std::ptrdiff_t>(end),
              static_cast<int32_t>(id));
  }
  return out;
}

PostProcessor::~PostProcessor() = default;

namespace {

// A special token added by a processor: one or several ids with their strings.
struct SpecialToken {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
};

TokenSequence special_sequence(const SpecialToken& token, int32_t type_id) {
  TokenSequence s;
  s.ids = token.ids;
  s.type_ids.assign(token.ids.size(), type_id);
  s.offsets.assign(token.ids.size(), Span{0, 0});
  s.values = token.tokens;
  s.special.assign(token.ids.size(), 1);
  return s;
}

// ByteLevel's offset trimming (process_offsets): leading and trailing spaces
// ('Ġ' or white space) of a token leave its span, except the one space that
// add_prefix_space put before the first word.
void trim_offsets(TokenSequence& s, bool add_prefix_space) {
  const char32_t space = byte_to_char(' ');
  const auto is_space = [&](char32_t c) { return c == space || is_white_space(c); };
  for (size_t i = 0; i < s.size(); ++i) {
    const std::vector<char32_t> chars = decode_utf8(s.values[i]);
    size_t leading = 0, trailing = 0;
    while (leading < chars.size() && is_space(chars[leading])) ++leading;
    while (trailing < chars.size() && is_space(chars[chars.size() - 1 - trailing])) ++trailing;
    Span& o = s.offsets[i];
    if (leading > 0) {
      const bool first = i == 0 || o.first == 0;
      if (first && add_prefix_space && leading == 1) leading = 0;
      o.first = std::min<uint32_t>(o.first + static_cast<uint32_t>(leading), o.second);
    }
    if (trailing > 0 && o.second >= trailing) o.second = std::max<uint32_t>(o.second - static_cast<uint32_t>(trailing), o.first);
  }
}

std::pair<std::string, int32_t> token_and_id(const nlohmann::json& object, const char* name, const std::string& where) {
  const nlohmann::json& field = required_field(object, name, where);
  if (!field.is_array() || field.size() != 2 || !field[0].is_string() || !field[1].is_number_integer() ||
      field[1].get<int64_t>() < 0 || field[1].get<int64_t>() > INT32_MAX)
    fail("{}: \"{}\" must be [\"token\", id], got {}", where, name, short_dump(field));
  return {field[0].get<std::string>(), static_cast<int32_t>(field[1].get<int64_t>())};
}

class BertProcessor : public PostProcessor {
 public:
  BertProcessor(std::pair<std::string, int32_t> cls, std::pair<std::string, int32_t> sep) {
    cls_ = {{cls.second}, {cls.first}};
    sep_ = {{sep.second}, {sep.first}};
  }
  size_t added_tokens(bool pair) const override { return pair ? 3 : 2; }
  void process(std::vector<TokenSequence>& sequences, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    for (size_t i = 0; i < sequences.size(); ++i) {
      TokenSequence out;
      const auto type = static_cast<int32_t>(i);
      if (i == 0) out = special_sequence(cls_, 0);
      out.append(sequences[i]);
      out.append(special_sequence(sep_, type));
      sequences[i] = std::move(out);
    }
  }

 private:
  SpecialToken cls_, sep_;
};

class RobertaProcessor : public PostProcessor {
 public:
  RobertaProcessor(std::pair<std::string, int32_t> cls, std::pair<std::string, int32_t> sep, bool trim,
                   bool add_prefix_space)
      : trim_(trim), add_prefix_space_(add_prefix_space) {
    cls_ = {{cls.second}, {cls.first}};
    sep_ = {{sep.second}, {sep.first}};
  }
  size_t added_tokens(bool pair) const override { return pair ? 4 : 2; }
  bool needs_token_text() const override { return trim_; }
  void process(std::vector<TokenSequence>& sequences, bool add_special_tokens) const override {
    for (TokenSequence& s : sequences) {
      if (trim_) trim_offsets(s, add_prefix_space_);
      std::fill(s.type_ids.begin(), s.type_ids.end(), 0);
    }
    if (!add_special_tokens) return;
    for (size_t i = 0; i < sequences.size(); ++i) {
      TokenSequence out = special_sequence(i == 0 ? cls_ : sep_, 0);
      out.append(sequences[i]);
      out.append(special_sequence(sep_, 0));
      sequences[i] = std::move(out);
    }
  }

 private:
  SpecialToken cls_, sep_;
  bool trim_, add_prefix_space_;
};

class ByteLevelProcessor : public PostProcessor {
 public:
  ByteLevelProcessor(bool trim, bool add_prefix_space) : trim_(trim), add_prefix_space_(add_prefix_space) {}
  size_t added_tokens(bool) const override { return 0; }
  bool needs_token_text() const override { return trim_; }
  void process(std::vector<TokenSequence>& sequences, bool) const override {
    if (trim_)
      for (TokenSequence& s : sequences) trim_offsets(s, add_prefix_space_);
  }

 private:
  bool trim_, add_prefix_space_;
};

class TemplateProcessor : public PostProcessor {
 public:
  struct Item {
    bool is_sequence;
    int sequence;        // 0 for A, 1 for B
    std::string token;   // a special token's name
    int32_t type_id;
  };
  TemplateProcessor(std::vector<Item> single, std::vector<Item> pair, std::map<std::string, SpecialToken> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {}
  size_t added_tokens(bool pair) const override {
    size_t n = 0;
    for (const Item& item : pair ? pair_ : single_)
      if (!item.is_sequence) n += specials_.at(item.token).ids.size();
    return n;
  }
  void process(std::vector<TokenSequence>& sequences, bool add_special_tokens) const override {
    const std::vector<Item>& items = sequences.size() > 1 ? pair_ : single_;
    TokenSequence out;
    for (const Item& item : items) {
      if (item.is_sequence) {
        const auto index = static_cast<size_t>(item.sequence);
        if (index >= sequences.size()) continue;
        TokenSequence s = sequences[index];
        if (!s.overflow) std::fill(s.type_ids.begin(), s.type_ids.end(), item.type_id);
        out.append(s);
      } else if (add_special_tokens) {
        out.append(special_sequence(specials_.at(item.token), item.type_id));
      }
    }
    sequences.assign(1, std::move(out));
  }

 private:
  std::vector<Item> single_, pair_;
  std::map<std::string, SpecialToken> specials_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  size_t added_tokens(bool pair) const override {
    size_t n = 0;
    for (const auto& step : steps_) n += step->added_tokens(pair);
    return n;
  }
  bool needs_token_text() const override {
    return std::any_of(steps_.begin(), steps_.end(), [](const auto& s) { return s->needs_token_text(); });
  }
  void process(std::vector<TokenSequence>& sequences, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->process(sequences, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// A template item: {"SpecialToken": {"id": "[CLS]", "type_id": 0}} or {"Sequence": {"id": "A", "type_id": 0}}.
TemplateProcessor::Item template_item(const nlohmann::json& item, const std::string& where) {
  TemplateProcessor::Item out{};
  const nlohmann::json* body = nullptr;
  if ((body = optional_field(item, "Sequence")) != nullptr) {
    out.is_sequence = true;
    const std::string id = string_field(*body, "id", where, "");
    if (id != "A" && id != "B") fail("{}: a template sequence must be \"A\" or \"B\", got {}", where, short_dump(*body));
    out.sequence = id == "A" ? 0 : 1;
  } else if ((body = optional_field(item, "SpecialToken")) != nullptr) {
    const nlohmann::json& id = required_field(*body, "id", where);
    if (!id.is_string()) fail("{}: a template special token's \"id\" must be a string, got {}", where, short_dump(id));
    out.token = id.get<std::string>();
  } else {
    fail("{}: a template item must be {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}, got {}", where,
         short_dump(item));
  }
  const size_t type_id = size_field(*body, "type_id", where, 0);
  if (type_id > INT32_MAX) fail("{}: \"type_id\" {} is too large", where, type_id);
  out.type_id = static_cast<int32_t>(type_id);
  return out;
}

std::vector<TemplateProcessor::Item> template_items(const nlohmann::json& value, const char* name,
                                                    const std::string& where) {
  const nlohmann::json& list = required_field(value, name, where);
  if (!list.is_array()) fail("{}: \"{}\" must be an array, got {}", where, name, json_kind(list));
  std::vector<TemplateProcessor::Item> items;
  for (size_t i = 0; i < list.size(); ++i)
    items.push_back(template_item(list[i], fmt::format("{} \"{}\" item {}", where, name, i + 1)));
  return items;
}

}  // namespace

std::unique_ptr<PostProcessor> post_processor_from_json(const nlohmann::json& value, const std::string& where) {
  if (value.is_null()) return nullptr;
  if (!value.is_object()) fail("{}: a post-processor must be an object, got {}", where, json_kind(value));
  const std::string type = string_field(value, "type", where, "");
  const std::string at = where + " (post-processor " + type + ")";
  if (type == "BertProcessing")
    return std::make_unique<BertProcessor>(token_and_id(value, "cls", at), token_and_id(value, "sep", at));
  if (type == "RobertaProcessing")
    return std::make_unique<RobertaProcessor>(token_and_id(value, "cls", at), token_and_id(value, "sep", at),
                                              bool_field(value, "trim_offsets", at, true),
                                              bool_field(value, "add_prefix_space", at, true));
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelProcessor>(bool_field(value, "trim_offsets", at, true),
                                                bool_field(value, "add_prefix_space", at, true));
  if (type == "TemplateProcessing") {
    std::map<std::string, SpecialToken> specials;
    const nlohmann::json& table = required_field(value, "special_tokens", at);
    if (!table.is_object()) fail("{}: \"special_tokens\" must be an object, got {}", at, json_kind(table));
    for (const auto& [name, token] : table.items()) {
      const std::string here = fmt::format("{} special token \"{}\"", at, short_text(name));
      const nlohmann::json& ids = required_field(token, "ids", here);
      const nlohmann::json& tokens = required_field(token, "tokens", here);
      if (!ids.is_array() || !tokens.is_array() || ids.size() != tokens.size() || ids.empty())
        fail("{}: \"ids\" and \"tokens\" must be arrays of the same, non-zero length", here);
      SpecialToken special;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 || ids[i].get<int64_t>() > INT32_MAX)
          fail("{}: id {} must be a non-negative integer, got {}", here, i + 1, short_dump(ids[i]));
        if (!tokens[i].is_string()) fail("{}: token {} must be a string, got {}", here, i + 1, short_dump(tokens[i]));
        special.ids.push_back(static_cast<int32_t>(ids[i].get<int64_t>()));
        special.tokens.push_back(tokens[i].get<std::string>());
      }
      specials[name] = std::move(special);
    }
    std::vector<TemplateProcessor::Item> single = template_items(value, "single", at);
    std::vector<TemplateProcessor::Item> pair = template_items(value, "pair", at);
    for (const auto* items : {&single, &pair})
      for (const TemplateProcessor::Item& item : *items)
        if (!item.is_sequence && specials.find(item.token) == specials.end())
          fail("{}: the template uses \"{}\", which \"special_tokens\" does not define", at, short_text(item.token));
    return std::make_unique<TemplateProcessor>(std::move(single), std::move(pair), std::move(specials));
  }
  if (type == "Sequence") {
    const nlohmann::json& list = required_field(value, "processors", at);
    if (!list.is_array()) fail("{}: \"processors\" must be an array, got {}", at, json_kind(list));
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = post_processor_from_json(list[i], fmt::format("{} step {}", at, i + 1));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  if (type.empty()) fail("{}: a post-processor has no \"type\"", where);
  fail("{}: post-processor type \"{}\" is not one this tokenizer reads", where, short_text(type));
}

TokenSequence post_process(const PostProcessor* processor, std::vector<TokenSequence> sequences,
                           bool add_special_tokens) {
  // The library's process() marks each text's tokens as its own; without a processor, only a pair is
  // marked (default_process), and a single text keeps no ranges.
  for (size_t i = 0; i < sequences.size(); ++i) {
    std::fill(sequences[i].type_ids.begin(), sequences[i].type_ids.end(), static_cast<int32_t>(i));
    if (processor || sequences.size() > 1) sequences[i].set_sequence_id(static_cast<int32_t>(i));
  }
  if (processor) processor->process(sequences, add_special_tokens);
  TokenSequence out;
  for (const TokenSequence& s : sequences) out.append(s);
  return out;
}

}  // namespace anatomy::data::tok
