// seqeval.h: entity-level metrics of token classification (NER), as Hugging
// Face's run_ner.py reports them through evaluate.load("seqeval"): seqeval
// 1.2.2's classification_report and accuracy_score with evaluate's defaults
// (mode=None, scheme=None, suffix=False, zero_division="warn", which gives 0).
// Entities are found as seqeval.metrics.sequence_labeling.get_entities finds
// them, the lenient conlleval-style chunking: a chunk starts at B- and S-, at I-
// or E- after O (or after E-/S-), and at any change of type; it ends at E-, S-,
// before B-, S- or O, and at any change of type. A tag's first character is its
// prefix and what follows its first '-' its type ("_" when empty), so "B" and
// "I" are entities of type "_" and "PER" has prefix 'P' and type "ER".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace anatomy {

// An entity: its type and its first and last tag (inclusive).
struct Entity {
  std::string type;
  int64_t begin = 0, end = 0;
  bool operator==(const Entity&) const = default;
};

// One entity type's row of classification_report.
struct EntityScore {
  double precision = 0, recall = 0, f1 = 0;
  int64_t number = 0;  // the true entities of the type (support)
};

// evaluate's seqeval result: overall_precision, overall_recall, overall_f1
// (micro over entities), overall_accuracy (tags equal, over all tags), and a
// row per entity type found in the truth or the predictions.
struct SeqevalResult {
  double precision = 0, recall = 0, f1 = 0, accuracy = 0;
  std::map<std::string, EntityScore> types;
};

// The entities of one sentence, as get_entities(tags).
std::vector<Entity> seqeval_entities(const std::vector<std::string>& tags);

// The metrics of `predicted` against `truth`: one vector of tags per sentence,
// of the same lengths. As seqeval, the sentences are chunked as one sequence
// with an "O" after each, so entities are compared by their place in the corpus.
// Fails on no sentences, no tags at all, sentences of different lengths or an
// empty tag (where seqeval raises).
SeqevalResult seqeval(const std::vector<std::vector<std::string>>& truth,
                      const std::vector<std::vector<std::string>>& predicted);

}  // namespace anatomy
