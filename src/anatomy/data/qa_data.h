// qa_data.h: extractive question answering's data, read and prepared as Hugging Face's
// examples/pytorch/question-answering prepare it (run_qa.py's prepare_train_features and
// prepare_validation_features), and the model's start and end logits turned into answers as its
// utils_qa.postprocess_qa_predictions turns them.
//
// Files, by extension: .json is SQuAD v1.1/v2.0 ({"version", "data": [{"title", "paragraphs": [{"context",
// "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}), or, when its
// "data" holds flat rows, the file run_qa reads (load_dataset("json", field="data")); .jsonl is the rows the
// `datasets` library exports, one a line ({"id", "title", "context", "question", "answers": {"text": [...],
// "answer_start": [...]}}). Answer starts count characters (code points), as Python indexes a str.
//
// Features (run_qa): the question without its leading white space (str.lstrip()), then
// tokenizer(question, context, truncation="only_second", max_length, stride, return_overflowing_tokens,
// return_offsets_mapping, padding="max_length" or none): one feature per window of the context. Training
// labels each window with the first answer's token span, found through the offsets and sequence ids exactly
// as run_qa finds it, or with the CLS index when the question has no answer or the window does not hold all
// of it (its edge case included: an answer starting in the window's last context token gets the window's
// last token as start; a window without context tokens, which run_qa cannot label (IndexError), does not hold
// it). Validation keeps each window's example and the offsets of its context tokens, none
// for the others. The context is always the second text (run_qa's pad_on_right: right padding).
//
// Post-processing (utils_qa): per question, over its features, the n_best_size largest start and end logits,
// every pair that is a span of the context (offsets not none, end >= start, at most max_answer_length tokens)
// scored start + end in float32, the best n_best_size (a stable sort, as Python's sorted), with version 2 the
// smallest null score (logits at index 0) among them or added back, the texts cut from the context by the
// offsets, the "empty" entry when no span is left, the softmax of the scores, and the answer: the best entry,
// or with version 2 the empty answer when null score - the best non-empty entry's logits > the threshold
// (compared in float32, as numpy 2 compares a float32 with a Python float). run_qa's features carry no
// token_is_max_context, so utils_qa's check of it never applies and is not here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anatomy/data/dataset.h"
#include "anatomy/data/text_tokenizer.h"

namespace anatomy {

struct QaExample {
  std::string id, title, question, context;
  std::vector<std::string> answer_texts;
  std::vector<int64_t> answer_starts;  // in characters (code points), as Python indexes
  int64_t line = 0;                    // 1-based line where the question's object starts
};

struct QaCorpus {
  std::string source;
  std::vector<QaExample> examples;
  // SQuAD's "version" when the file has one ("v2.0", "1.1"); empty otherwise.
  std::string version;
  bool has_unanswerable() const;
};

// Reads a .json (SQuAD, or run_qa's {"data": [rows]}) or .jsonl file. Every problem is one error naming the file
// and the line (and the question's id when it has one): bytes that are not UTF-8, not JSON, a missing field or one
// of the wrong type, an empty answer, an answer whose text is not at its answer_start in the context
// (context[start:start + len(text)] != text, by code points), answers with more texts than starts or the other
// way, is_impossible true with answers, an id seen before, a file without questions.
QaCorpus read_qa_corpus(const std::string& path);

struct QaFeatureOptions {
  int64_t max_seq_length = 384;   // tokens of a feature, special ones included (run_qa takes min(it, model_max_length))
  int64_t doc_stride = 128;       // context tokens a window shares with the one before it
  bool pad_to_max_length = true;  // run_qa's default; false: rows right-padded to the longest, pad_per_batch set
  // The CLS index of prepare_train_features: the first cls_token_id in the feature's ids, else the first
  // bos_token_id, else 0 (run_qa since April 2024, transformers PR #30580; before, input_ids.index(cls_token_id),
  // which fails where there is no CLS). -1: the tokenizer has no such token. Both -1 gives 0, the feature's first
  // token: the CLS of every BERT-family tokenizer.
  int32_t cls_token_id = -1;
  int32_t bos_token_id = -1;
  std::optional<bool> add_prefix_space;  // as data::EncodeOptions::add_prefix_space
  int threads = 0;                       // encoding threads (0: one per hardware thread)
};

// Training features. data: input_ids, token_type_ids, attention_mask [N, L] and span_labels (labels_i64 [N, 2]:
// start and end positions). With padding to max_length a label can be a padding token (run_qa's edge case above);
// HF's loss takes it as it is.
struct QaTrainFeatures {
  Dataset data;
  std::vector<int64_t> example_index;  // [N]: the corpus example of each feature
  int64_t answerable = 0;              // examples with an answer
  // Examples with an answer that no feature holds whole (every feature labelled with the CLS index), in
  // order: the answer is longer than a window's context, or no token covers it. run_qa trains on them as
  // unanswerable, silently; the caller says so, and decides.
  std::vector<int64_t> uncovered;
};

// Validation (and prediction) features: data without labels, the example of each feature and the offsets
// [N, L] of its context tokens ({-1, -1}: not of the context, which run_qa sets to None).
struct QaEvalFeatures {
  Dataset data;
  std::vector<int64_t> example_index;                // [N]
  std::vector<std::pair<int32_t, int32_t>> offsets;  // [N, L], character spans [start, end) of the context
};

// Errors: the tokenizer's (a question that leaves the context no room, a stride too large for the room), naming
// the file, the line and the first question it refuses; a max_seq_length too short for the special tokens; a
// negative doc_stride; a tokenizer without a pad token.
QaTrainFeatures prepare_train_features(const QaCorpus& corpus, const data::TextTokenizer& tokenizer,
                                       const QaFeatureOptions& options);
QaEvalFeatures prepare_validation_features(const QaCorpus& corpus, const data::TextTokenizer& tokenizer,
                                           const QaFeatureOptions& options);

struct QaPostprocessOptions {
  bool version_2_with_negative = false;
  int64_t n_best_size = 20;
  int64_t max_answer_length = 30;
  double null_score_diff_threshold = 0.0;
};

// An entry of a question's n-best list, as utils_qa writes it to nbest_predictions.json.
struct QaNbestEntry {
  std::string text;
  double start_logit = 0, end_logit = 0;  // the float32 logits (0 for the "empty" entry)
  double probability = 0;                 // the softmax of the scores: float32, or float64 with the "empty" entry
  bool empty_fallback = false;            // utils_qa's {"text": "empty", ...} when no span is left
};

struct QaPredictions {
  std::vector<std::pair<std::string, std::string>> predictions;  // id → answer, in the corpus' order
  // Version 2: id → null score - the best non-empty entry's start and end logits (utils_qa's
  // scores_diff_json, null_odds.json), in float32. run_qa gives the metric no_answer_probability 0 instead.
  std::vector<std::pair<std::string, double>> null_odds;
  std::vector<std::vector<QaNbestEntry>> nbest;  // per question

  std::map<std::string, std::string> prediction_map() const;
};

// `start_logits` and `end_logits` are [N, width] (N = features.example_index.size(); width the model's sequence
// length: positions past a feature's offsets are not spans). Errors: logits of the wrong size, a NaN logit, a
// negative n_best_size, and where utils_qa fails: with version 2, a question without a feature (no null score) or
// whose every n-best entry is empty (IndexError). Without version 2 a question without a feature gets the "empty"
// entry, as in utils_qa.
QaPredictions postprocess_qa_predictions(const QaCorpus& corpus, const QaEvalFeatures& features,
                                         std::span<const float> start_logits, std::span<const float> end_logits,
                                         int64_t width, const QaPostprocessOptions& options);

// Writes <prefix>_predictions.json, <prefix>_nbest_predictions.json and, with version 2, <prefix>_null_odds.json
// (no prefix: predictions.json...) into `directory`, byte for byte as utils_qa writes them: Python's
// json.dumps(indent=4) (ASCII with \u escapes, floats as repr) and a newline.
void write_qa_predictions(const QaPredictions& predictions, const std::string& directory, const std::string& prefix,
                          bool version_2_with_negative);

// Python's json.dumps of a string (ensure_ascii) and repr of a float, as the files above have them.
std::string python_json_string(std::string_view text);
std::string python_float_repr(double value);

}  // namespace anatomy
