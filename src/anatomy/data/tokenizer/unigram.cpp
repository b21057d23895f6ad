// unigram.cpp: see unigram.h; the steps are models/unigram/model.rs'
// (encode_optimized, then tokenize), to its ties and its quirks.
#include "anatomy/data/tokenizer/unigram.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/json_fields.h"
#include "anatomy/data/tokenizer/normalized_text.h"

namespace anatomy::data::tok {

namespace {

constexpr double kUnknownPenalty = 10.0;  // K_UNK_PENALTY
constexpr size_t kMaxPieces = size_t{1} << 24;

}  // namespace

std::unique_ptr<UnigramModel> UnigramModel::from_json(const nlohmann::json& model, const std::string& where) {
  if (!model.is_object()) fail("{}: the model must be an object, got {}", where, json_kind(model));
  if (const nlohmann::json* type = optional_field(model, "type");
      type && !(type->is_string() && type->get<std::string>() == "Unigram"))
    fail("{}: \"type\" must be \"Unigram\", got {}", where, short_dump(*type));
  auto m = std::unique_ptr<UnigramModel>(new UnigramModel());
  m->where_ = where;
  const nlohmann::json& vocab = required_field(model, "vocab", where);
  if (!vocab.is_array()) fail("{}: \"vocab\" must be an array of [piece, score], got {}", where, json_kind(vocab));
  if (vocab.size() >= kMaxPieces) fail("{}: \"vocab\" has {} pieces, more than this reader takes", where, vocab.size());
  m->pieces_.reserve(vocab.size());
  m->scores_.reserve(vocab.size());
  m->ids_.reserve(vocab.size());
  m->min_score_ = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab.size(); ++i) {
    const nlohmann::json& entry = vocab[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
      fail("{}: \"vocab\" entry {} must be [piece, score], got {}", where, i, short_dump(entry));
    const double score = entry[1].get<double>();
    m->pieces_.push_back(entry[0].get<std::string>());
    m->scores_.push_back(score);
    m->ids_.insert_or_assign(m->pieces_.back(), static_cast<int32_t>(i));
    if (score < m->min_score_) m->min_score_ = score;
  }
  if (const nlohmann::json* unk = optional_field(model, "unk_id"); unk && !unk->is_null()) {
    if (!unk->is_number_unsigned() && !(unk->is_number_integer() && unk->get<int64_t>() >= 0))
      fail("{}: \"unk_id\" must be a non-negative integer or null, got {}", where, short_dump(*unk));
    if (vocab.empty()) fail("{}: \"vocab\" is empty, but an unk_id needs its piece", where);
    const uint64_t id = unk->get<uint64_t>();
    if (id >= vocab.size())
      fail("{}: \"unk_id\" {} is outside the vocabulary ({} pieces)", where, id, vocab.size());
    m->unk_id_ = static_cast<int32_t>(id);
  }
  m->byte_fallback_ = bool_field(model, "byte_fallback", where, false);
  for (int b = 0; b < 256; ++b) {
    const auto it = m->ids_.find(fmt::format("<0x{:02X}>", b));
    m->byte_ids_[b] = it == m->ids_.end() ? -1 : it->second;
  }
  m->build_trie();
  return m;
}

void UnigramModel::build_trie() {
  // The distinct pieces, sorted; each node's children take consecutive slots.
  std::vector<const std::string*> sorted;
  sorted.reserve(ids_.size());
  for (const auto& [piece, id] : ids_) sorted.push_back(&piece);
  std::sort(sorted.begin(), sorted.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  nodes_.assign(1, Node{});
  struct Range {
    int32_t node;
    size_t depth, begin, end;  // pieces [begin, end) of `sorted` share the node's prefix of `depth` bytes
  };
  std::vector<Range> stack{{0, 0, 0, sorted.size()}};
  while (!stack.empty()) {
    const Range r = stack.back();
    stack.pop_back();
    size_t begin = r.begin;
    if (begin < r.end && sorted[begin]->size() == r.depth) {
      nodes_[static_cast<size_t>(r.node)].id = ids_.find(*sorted[begin])->second;
      ++begin;
    }
    const size_t first = nodes_.size();
    std::vector<Range> children;
    for (size_t i = begin; i < r.end;) {
      const auto label = static_cast<unsigned char>((*sorted[i])[r.depth]);
      size_t j = i + 1;
      while (j < r.end && static_cast<unsigned char>((*sorted[j])[r.depth]) == label) ++j;
      Node node;
      node.label = label;
      nodes_.push_back(node);
      children.push_back({static_cast<int32_t>(nodes_.size() - 1), r.depth + 1, i, j});
      i = j;
    }
    nodes_[static_cast<size_t>(r.node)].first_child = static_cast<uint32_t>(first);
    nodes_[static_cast<size_t>(r.node)].child_count = static_cast<uint16_t>(nodes_.size() - first);
    stack.insert(stack.end(), children.begin(), children.end());
  }
  std::fill(std::begin(root_children_), std::end(root_children_), -1);
  const Node& root = nodes_[0];
  for (uint32_t i = root.first_child; i < root.first_child + root.child_count; ++i)
    root_children_[nodes_[i].label] = static_cast<int32_t>(i);
}

int32_t UnigramModel::child(int32_t node, uint8_t label) const {
  if (node == 0) return root_children_[label];
  const Node& n = nodes_[static_cast<size_t>(node)];
  const Node* begin = nodes_.data() + n.first_child;
  const Node* end = begin + n.child_count;
  const Node* it = std::lower_bound(begin, end, label, [](const Node& x, uint8_t l) { return x.label < l; });
  return it != end && it->label == label ? static_cast<int32_t>(it - nodes_.data()) : -1;
}

void UnigramModel::tokenize(std::string_view sentence, std::vector<ModelToken>& out) const {
  if (sentence.empty()) return;
  // The best path ending at each byte: its score, where its last token starts, and that token.
  struct Best {
    double score;
    int64_t starts_at;  // -1: none yet
    int32_t id;
  };
  thread_local std::vector<Best> best;
  thread_local std::vector<std::pair<uint32_t, uint32_t>> spans;
  const size_t size = sentence.size();
  best.assign(size + 1, Best{0.0, -1, 0});
  const double unk_score = min_score_ - kUnknownPenalty;
  for (size_t starts_at = 0; starts_at < size;) {
    const double here = best[starts_at].score;
    const auto lead = static_cast<unsigned char>(sentence[starts_at]);
    const size_t mblen = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    bool has_single_node = false;
    int32_t node = 0;
    for (size_t at = starts_at; at < size; ++at) {
      node = child(node, static_cast<uint8_t>(sentence[at]));
      if (node < 0) break;
      const int32_t id = nodes_[static_cast<size_t>(node)].id;
      if (id < 0) continue;
      Best& target = best[at + 1];
      const double candidate = scores_[static_cast<size_t>(id)] + here;
      if (target.starts_at < 0 || candidate > target.score) target = {candidate, static_cast<int64_t>(starts_at), id};
      if (at + 1 - starts_at == mblen) has_single_node = true;
    }
    if (!has_single_node) {
      Best& target = best[starts_at + mblen];
      const double candidate = unk_score + here;
      if (target.starts_at < 0 || candidate > target.score) {
        if (unk_id_ < 0)
          fail("{}: no piece covers \"{}\" and the model has no unk_id", where_,
               short_text(sentence.substr(starts_at, mblen)));
        target = {candidate, static_cast<int64_t>(starts_at), unk_id_};
      }
    }
    starts_at += mblen;
  }
  // Back from the end; consecutive unknown tokens become one.
  spans.clear();
  size_t ends_at = size, unknown_end = 0;
  bool in_unknown = false;
  while (ends_at > 0) {
    const Best& node = best[ends_at];
    const auto starts_at = static_cast<size_t>(node.starts_at);
    if (node.id == unk_id_) {
      if (!in_unknown) unknown_end = ends_at;
      in_unknown = true;
    } else {
      if (in_unknown) spans.push_back({static_cast<uint32_t>(ends_at), static_cast<uint32_t>(unknown_end)});
      in_unknown = false;
      spans.push_back({static_cast<uint32_t>(starts_at), static_cast<uint32_t>(ends_at)});
    }
    ends_at = starts_at;
  }
  if (in_unknown) spans.push_back({0, static_cast<uint32_t>(unknown_end)});
  // Each token's id is its string's (a fused unknown span may be a piece), else
  // its bytes' <0xNN> pieces with byte_fallback, else unk_id.
  for (auto span = spans.rbegin(); span != spans.rend(); ++span) {
    const auto [start, end] = *span;
    const std::string_view text = sentence.substr(start, end - start);
    if (const auto it = ids_.find(text); it != ids_.end()) {
      out.push_back({it->second, start, end});
      continue;
    }
    if (byte_fallback_ && std::all_of(text.begin(), text.end(), [&](char ch) {
          return byte_ids_[static_cast<unsigned char>(ch)] >= 0;
        })) {
      for (const char ch : text) out.push_back({byte_ids_[static_cast<unsigned char>(ch)], start, end});
      continue;
    }
    if (unk_id_ < 0)
      fail("{}: no piece covers \"{}\" and the model has no unk_id", where_, short_text(text));
    out.push_back({unk_id_, start, end});
  }
}

int32_t UnigramModel::token_to_id(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

std::string UnigramModel::id_to_token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < pieces_.size() ? pieces_[static_cast<size_t>(id)] : std::string();
}

}  // namespace anatomy::data::tok
