// model.cpp: WordPiece, BPE and WordLevel as tokenizers' models/ run them.
#include "anatomy/data/tokenizer/model.h"

#include <algorithm>
#include <atomic>
#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/data/tokenizer/normalized_text.h"
#include "anatomy/data/tokenizer/unigram.h"

namespace anatomy::data::tok {

Model::~Model() = default;

namespace {

constexpr int64_t kMaxTokenId = 1 << 24;

int32_t lookup(const Vocabulary& vocab, std::string_view token) {
  const auto it = vocab.find(token);
  return it == vocab.end() ? -1 : it->second;
}

std::string by_id_lookup(const std::vector<std::string>& by_id, int32_t id) {
  return id >= 0 && static_cast<size_t>(id) < by_id.size() ? by_id[static_cast<size_t>(id)] : std::string();
}

}  // namespace

Vocabulary read_vocabulary(const nlohmann::json& vocab, const std::string& where, std::vector<std::string>& by_id) {
  if (!vocab.is_object()) fail("{}: \"vocab\" must be an object of token: id, got {}", where, json_kind(vocab));
  Vocabulary out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId)
      fail("{}: the id of \"{}\" in \"vocab\" must be an integer from 0 to {}, got {}", where, short_text(token),
           kMaxTokenId - 1, short_dump(id));
    const auto value = static_cast<int32_t>(id.get<int64_t>());
    out[token] = value;
    if (static_cast<size_t>(value) >= by_id.size()) by_id.resize(static_cast<size_t>(value) + 1);
    by_id[static_cast<size_t>(value)] = token;
  }
  return out;
}

// ---- WordPiece ---------------------------------------------------------------

std::unique_ptr<WordPieceModel> WordPieceModel::from_json(const nlohmann::json& model, const std::string& where) {
  auto out = std::make_unique<WordPieceModel>();
  out->vocab_ = read_vocabulary(required_field(model, "vocab", where), where, out->by_id_);
  out->unk_token_ = string_field(model, "unk_token", where, "[UNK]");
  out->prefix_ = string_field(model, "continuing_subword_prefix", where, "##");
  out->max_input_chars_per_word_ = size_field(model, "max_input_chars_per_word", where, 100);
  out->unk_id_ = lookup(out->vocab_, out->unk_token_);
  for (const auto& [token, id] : out->vocab_)
    if (token.size() > out->prefix_.size() && token.compare(0, out->prefix_.size(), out->prefix_) == 0)
      out->continuations_[token.substr(out->prefix_.size())] = id;
  for (const auto& [token, id] : out->vocab_) out->longest_word_ = std::max(out->longest_word_, token.size());
  for (const auto& [token, id] : out->continuations_)
    out->longest_continuation_ = std::max(out->longest_continuation_, token.size());
  return out;
}

void WordPieceModel::tokenize(std::string_view piece, std::vector<ModelToken>& out) const {
  const auto unknown = [&] {
    if (unk_id_ < 0) fail("the WordPiece model's unk_token \"{}\" is not in its vocabulary", unk_token_);
    out.push_back({unk_id_, 0, static_cast<uint32_t>(piece.size())});
  };
  size_t chars = 0;
  for (size_t at = 0; at < piece.size() && chars <= max_input_chars_per_word_; ++chars) next_utf8(piece, at);
  if (chars > max_input_chars_per_word_) return unknown();
  const size_t first = out.size();
  for (size_t start = 0; start < piece.size();) {
    const Vocabulary& table = start > 0 ? continuations_ : vocab_;
    int32_t id = -1;
    size_t end = std::min(piece.size(), start + (start > 0 ? longest_continuation_ : longest_word_));
    while (end > start && end < piece.size() && (static_cast<unsigned char>(piece[end]) & 0xC0) == 0x80) --end;
    while (start < end) {
      id = lookup(table, piece.substr(start, end - start));
      if (id >= 0) break;
      do --end;
      while (end > start && (static_cast<unsigned char>(piece[end]) & 0xC0) == 0x80);
    }
    if (id < 0) {
      out.resize(first);
      return unknown();
    }
    out.push_back({id, static_cast<uint32_t>(start), static_cast<uint32_t>(end)});
    start = end;
  }
}

int32_t WordPieceModel::token_to_id(std::string_view token) const { return lookup(vocab_, token); }
std::string WordPieceModel::id_to_token(int32_t id) const { return by_id_lookup(by_id_, id); }

// ---- BPE ---------------------------------------------------------------------

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& model, const std::string& where) {
  static std::atomic<uint64_t> next_id{1};
  auto out = std::make_unique<BpeModel>();
  out->id_ = next_id.fetch_add(1);
  out->vocab_ = read_vocabulary(required_field(model, "vocab", where), where, out->by_id_);
  if (const nlohmann::json* unk = optional_field(model, "unk_token"); unk && !unk->is_null())
    out->unk_token_ = string_field(model, "unk_token", where, "");
  out->prefix_ = string_field(model, "continuing_subword_prefix", where, "");
  out->suffix_ = string_field(model, "end_of_word_suffix", where, "");
  out->fuse_unk_ = bool_field(model, "fuse_unk", where, false);
  out->byte_fallback_ = bool_field(model, "byte_fallback", where, false);
  out->ignore_merges_ = bool_field(model, "ignore_merges", where, false);
  if (const nlohmann::json* dropout = optional_field(model, "dropout");
      dropout && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
    fail("{}: \"dropout\" is {}: BPE dropout is random, for training a tokenizer; encoding needs it null",
         where, short_dump(*dropout));
  for (int b = 0; b < 256; ++b) out->byte_ids_[b] = lookup(out->vocab_, fmt::format("<0x{:02X}>", b));

  const nlohmann::json& merges = required_field(model, "merges", where);
  if (!merges.is_array()) fail("{}: \"merges\" must be an array, got {}", where, json_kind(merges));
  out->merges_.reserve(merges.size());
  uint32_t rank = 0;
  for (const nlohmann::json& merge : merges) {
    std::string a, b;
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        fail("{}: merge {} (\"{}\") must be two tokens separated by one space", where, rank + 1, short_text(line));
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      fail("{}: merge {} must be \"a b\" or [\"a\", \"b\"], got {}", where, rank + 1, short_dump(merge));
    }
    const int32_t a_id = lookup(out->vocab_, a), b_id = lookup(out->vocab_, b);
    if (a_id < 0) fail("{}: merge {}: \"{}\" is not in the vocabulary", where, rank + 1, short_text(a));
    if (b_id < 0) fail("{}: merge {}: \"{}\" is not in the vocabulary", where, rank + 1, short_text(b));
    // As the library, the second part loses the continuing prefix's length.
    if (b.size() < out->prefix_.size())
      fail("{}: merge {}: \"{}\" is shorter than the continuing_subword_prefix", where, rank + 1, short_text(b));
    const std::string merged = a + b.substr(out->prefix_.size());
    const int32_t new_id = lookup(out->vocab_, merged);
    if (new_id < 0)
      fail("{}: merge {}: the merged token \"{}\" is not in the vocabulary", where, rank + 1, short_text(merged));
    out->merges_[pair_key(a_id, b_id)] = {rank, new_id};
    ++rank;
  }
  return out;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  const auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::merge_word(std::string_view word, std::vector<ModelToken>& out) const {
  struct Symbol {
    int32_t c;
    int32_t prev, next;
    uint32_t len;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int32_t c, uint32_t len) {
    const auto count = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = count;
    symbols.push_back({c, count - 1, -1, len});
  };
  int32_t unk_id = -1;  // a pending unknown token and its bytes
  uint32_t unk_len = 0;
  std::string s;
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    next_utf8(word, i);
    const auto byte_len = static_cast<uint32_t>(i - start);
    s.assign(word.substr(start, byte_len));
    if (start > 0 && !prefix_.empty()) s.insert(0, prefix_);
    if (i == word.size()) s += suffix_;
    if (const int32_t id = lookup(vocab_, s); id >= 0) {
      if (unk_id >= 0) add(unk_id, unk_len);
      unk_id = -1;
      add(id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char b : s) all = all && byte_ids_[static_cast<unsigned char>(b)] >= 0;
      if (all) {
        for (const char b : s) add(byte_ids_[static_cast<unsigned char>(b)], 1);
        continue;
      }
    }
    if (unk_token_) {
      const int32_t id = lookup(vocab_, *unk_token_);
      if (id < 0) fail("the BPE model's unk_token \"{}\" is not in its vocabulary", short_text(*unk_token_));
      if (unk_id >= 0 && fuse_unk_) {
        unk_len += byte_len;
      } else {
        if (unk_id >= 0) add(unk_id, unk_len);
        unk_id = id;
        unk_len = byte_len;
      }
    }
  }
  if (unk_id >= 0) add(unk_id, unk_len);

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& other) const {  // the top is the lowest rank, then the lowest position
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    if (const Merge* m = find_merge(symbols[i].c, symbols[i + 1].c))
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& current = symbols[static_cast<size_t>(top.pos)];
    if (current.len == 0 || current.next == -1) continue;
    const Symbol right = symbols[static_cast<size_t>(current.next)];
    const Merge* m = find_merge(current.c, right.c);
    if (m == nullptr || m->new_id != top.new_id) continue;
    symbols[static_cast<size_t>(current.next)].len = 0;
    current.c = top.new_id;
    current.len += right.len;
    current.next = right.next;
    if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size())
      symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (current.prev >= 0)
      if (const Merge* left = find_merge(symbols[static_cast<size_t>(current.prev)].c, current.c))
        queue.push({left->rank, current.prev, left->new_id});
    if (current.next >= 0 && static_cast<size_t>(current.next) < symbols.size())
      if (const Merge* next = find_merge(current.c, symbols[static_cast<size_t>(current.next)].c))
        queue.push({next->rank, top.pos, next->new_id});
  }
  uint32_t position = 0;
  for (const Symbol& symbol : symbols) {
    if (symbol.len == 0) continue;
    out.push_back({symbol.c, position, position + symbol.len});
    position += symbol.len;
  }
}

void BpeModel::tokenize(std::string_view piece, std::vector<ModelToken>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_)
    if (const int32_t id = lookup(vocab_, piece); id >= 0) {
      out.push_back({id, 0, static_cast<uint32_t>(piece.size())});
      return;
    }
  using Cache = std::unordered_map<std::string, std::vector<ModelToken>, StringHash, std::equal_to<>>;
  thread_local std::unordered_map<uint64_t, Cache> caches;
  Cache& cache = caches[id_];
  if (const auto hit = cache.find(piece); hit != cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  const size_t first = out.size();
  merge_word(piece, out);
  if (piece.size() < kCacheMaxWord && cache.size() < kCacheCapacity)
    cache.emplace(std::string(piece), std::vector<ModelToken>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

int32_t BpeModel::token_to_id(std::string_view token) const { return lookup(vocab_, token); }
std::string BpeModel::id_to_token(int32_t id) const { return by_id_lookup(by_id_, id); }

// ---- WordLevel -----------------------------------------------------------------

std::unique_ptr<WordLevelModel> WordLevelModel::from_json(const nlohmann::json& model, const std::string& where) {
  auto out = std::make_unique<WordLevelModel>();
  out->vocab_ = read_vocabulary(required_field(model, "vocab", where), where, out->by_id_);
  out->unk_token_ = string_field(model, "unk_token", where, "<unk>");
  return out;
}

void WordLevelModel::tokenize(std::string_view piece, std::vector<ModelToken>& out) const {
  int32_t id = lookup(vocab_, piece);
  if (id < 0) id = lookup(vocab_, unk_token_);
  if (id < 0) fail("the WordLevel model's unk_token \"{}\" is not in its vocabulary", short_text(unk_token_));
  out.push_back({id, 0, static_cast<uint32_t>(piece.size())});
}

int32_t WordLevelModel::token_to_id(std::string_view token) const { return lookup(vocab_, token); }
std::string WordLevelModel::id_to_token(int32_t id) const { return by_id_lookup(by_id_, id); }

// ---- The choice --------------------------------------------------------------

std::unique_ptr<Model> model_from_json(const nlohmann::json& model, const std::string& where) {
  if (!model.is_object()) fail("{}: \"model\" must be an object, got {}", where, json_kind(model));
  const nlohmann::json* type = optional_field(model, "type");
  std::string name;
  if (type != nullptr) {
    if (!type->is_string()) fail("{}: \"model\".\"type\" must be a string, got {}", where, short_dump(*type));
    name = type->get<std::string>();
  } else if (model.contains("merges")) {
    name = "BPE";  // files written before "type" existed
  } else if (model.contains("max_input_chars_per_word") || model.contains("continuing_subword_prefix")) {
    name = "WordPiece";
  } else {
    fail("{}: \"model\" has no \"type\"", where);
  }
  const std::string at = where + " (model " + name + ")";
  if (name == "WordPiece") return WordPieceModel::from_json(model, at);
  if (name == "BPE") return BpeModel::from_json(model, at);
  if (name == "WordLevel") return WordLevelModel::from_json(model, at);
  if (name == "Unigram") return UnigramModel::from_json(model, at);
  fail("{}: model type \"{}\" is not one this tokenizer reads (WordPiece, BPE, Unigram, WordLevel)", where,
       short_text(name));
}

}  // namespace anatomy::data::tok
