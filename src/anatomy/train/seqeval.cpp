// seqeval.cpp: the entity-level metrics of seqeval.h, step for step as seqeval
// 1.2.2 computes them (get_entities, precision_recall_fscore_support, the
// classification_report rows evaluate keeps, accuracy_score).
#include "anatomy/train/seqeval.h"

#include <set>
#include <string_view>
#include <utility>

#include "anatomy/core/error.h"

namespace anatomy {
namespace {

// get_entities' loop, one tag at a time. Python takes the tag's first character
// (a code point) as the prefix and compares it with ASCII letters only, so the
// first byte stands for it; the type is what follows the first code point, after
// its first '-' if it has one, "_" when empty. `type` views point into the tags,
// which outlive the chunker.
class Chunker {
 public:
  explicit Chunker(std::vector<Entity>& out) : out_(out) {}

  void push(std::string_view chunk) {
    const char tag = chunk[0];
    const unsigned char lead = static_cast<unsigned char>(tag);
    const size_t first = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    std::string_view type = chunk.substr(std::min(first, chunk.size()));
    if (const size_t dash = type.find('-'); dash != std::string_view::npos) type = type.substr(dash + 1);
    if (type.empty()) type = "_";
    if (ends(tag, type)) out_.push_back({std::string(prev_type_), begin_, index_ - 1});
    if (starts(tag, type)) begin_ = index_;
    prev_tag_ = tag;
    prev_type_ = type;
    ++index_;
  }

 private:
  // end_of_chunk: whether a chunk ended between the previous tag and this one.
  bool ends(char tag, std::string_view type) const {
    const char p = prev_tag_;
    if (p == 'E' || p == 'S') return true;
    if ((p == 'B' || p == 'I') && (tag == 'B' || tag == 'S' || tag == 'O')) return true;
    return p != 'O' && p != '.' && prev_type_ != type;
  }
  // start_of_chunk: whether a chunk starts at this tag.
  bool starts(char tag, std::string_view type) const {
    const char p = prev_tag_;
    if (tag == 'B' || tag == 'S') return true;
    if ((p == 'E' || p == 'S' || p == 'O') && (tag == 'E' || tag == 'I')) return true;
    return tag != 'O' && tag != '.' && prev_type_ != type;
  }

  std::vector<Entity>& out_;
  char prev_tag_ = 'O';
  std::string_view prev_type_ = "";
  int64_t begin_ = 0, index_ = 0;
};

// get_entities over a corpus: the sentences joined, each followed by "O", then
// the final "O" that get_entities appends.
std::vector<Entity> corpus_entities(const std::vector<std::vector<std::string>>& sentences) {
  std::vector<Entity> out;
  Chunker chunker(out);
  for (const auto& sentence : sentences) {
    for (const std::string& tag : sentence) chunker.push(tag);
    chunker.push("O");
  }
  chunker.push("O");
  return out;
}

void check_tags(const std::vector<std::string>& tags, size_t sentence) {
  for (size_t i = 0; i < tags.size(); ++i)
    if (tags[i].empty()) fail("seqeval: sentence {} has an empty tag (position {})", sentence, i);
}

// _prf_divide with zero_division "warn": 0 where the denominator is 0.
double divide(int64_t numerator, int64_t denominator) {
  return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
}

// _precision_recall_fscore_support's F-score, beta = 1: (1 + β²)·p·r / (β²·p + r), 0 when the denominator is.
double f_score(double precision, double recall) {
  const double denominator = 1.0 * precision + recall;
  return denominator == 0.0 ? 0.0 : 2.0 * precision * recall / denominator;
}

}  // namespace

std::vector<Entity> seqeval_entities(const std::vector<std::string>& tags) {
  check_tags(tags, 0);
  std::vector<Entity> out;
  Chunker chunker(out);
  for (const std::string& tag : tags) chunker.push(tag);
  chunker.push("O");
  return out;
}

SeqevalResult seqeval(const std::vector<std::vector<std::string>>& truth,
                      const std::vector<std::vector<std::string>>& predicted) {
  if (truth.empty()) fail("seqeval: no sentences");
  if (truth.size() != predicted.size())
    fail("seqeval: {} true sentences but {} predicted", truth.size(), predicted.size());
  int64_t tags = 0, correct = 0;
  for (size_t s = 0; s < truth.size(); ++s) {
    if (truth[s].size() != predicted[s].size())
      fail("seqeval: sentence {} has {} true tags but {} predicted", s, truth[s].size(), predicted[s].size());
    check_tags(truth[s], s);
    check_tags(predicted[s], s);
    for (size_t i = 0; i < truth[s].size(); ++i) correct += truth[s][i] == predicted[s][i];
    tags += static_cast<int64_t>(truth[s].size());
  }
  if (tags == 0) fail("seqeval: no tags in {} sentences (accuracy divides by the tag count)", truth.size());

  // Per type: the (begin, end) of its true and its predicted entities.
  using Spans = std::set<std::pair<int64_t, int64_t>>;
  std::map<std::string, std::pair<Spans, Spans>> by_type;
  for (Entity& e : corpus_entities(truth)) by_type[std::move(e.type)].first.insert({e.begin, e.end});
  for (Entity& e : corpus_entities(predicted)) by_type[std::move(e.type)].second.insert({e.begin, e.end});

  SeqevalResult result;
  int64_t tp_sum = 0, pred_sum = 0, true_sum = 0;
  for (const auto& [type, entities] : by_type) {
    const auto& [true_set, pred_set] = entities;
    int64_t tp = 0;
    for (const auto& span : pred_set) tp += true_set.count(span) != 0;
    const int64_t n_true = static_cast<int64_t>(true_set.size()), n_pred = static_cast<int64_t>(pred_set.size());
    EntityScore& score = result.types[type];
    score.precision = divide(tp, n_pred);
    score.recall = divide(tp, n_true);
    score.f1 = f_score(score.precision, score.recall);
    score.number = n_true;
    tp_sum += tp, pred_sum += n_pred, true_sum += n_true;
  }
  result.precision = divide(tp_sum, pred_sum);
  result.recall = divide(tp_sum, true_sum);
  result.f1 = f_score(result.precision, result.recall);
  result.accuracy = divide(correct, tags);
  return result;
}

}  // namespace anatomy
