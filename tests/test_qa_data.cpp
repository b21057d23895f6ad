// test_qa_data.cpp: extractive question answering's data (data/qa_data.h): the SQuAD and JSON-lines readers
// and their errors, run_qa.py's training and validation features, and utils_qa.py's post-processing and the
// files it writes. References: Hugging Face's examples/pytorch/question-answering run on the fixture questions
// (tests/fixtures/qa-data, tests/tools/make_qa_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/qa_data.h"
#include "anatomy/io/files.h"
#include "test_util.h"

namespace anatomy {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string write(const test::TempDir& tmp, const std::string& name, const std::string& text) {
  std::ofstream(tmp.file(name), std::ios::binary) << text;
  return tmp.file(name);
}

std::string qa_fixture(const std::string& name) { return test::fixture("qa-data/" + name); }

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(io::read_text_file(path)); }

// The fixture tokenizers, as the fixture script's transformers loads them.
data::TextTokenizer tokenizer_named(const std::string& name) {
  if (name == "wordpiece-uncased-vocab")
    return data::TextTokenizer::load("", test::fixture("task-tokenizers/wordpiece-uncased-vocab/vocab.txt"), {});
  return data::TextTokenizer::load(test::fixture("tokenizers/" + name + "/tokenizer.json"), "", {});
}

// ---------------------------------------------------------------------------------------------------- reading
// A question's id is a JSON string and may hold a newline: the errors that name it stay one line.
TEST(QaData, AnIdWithANewlineStaysOnOneLine) {
  test::TempDir tmp;
  EXPECT_EQ(error_of([&] {
              read_qa_corpus(write(tmp, "id.jsonl",
                                   "{\"id\": \"a\\nb\", \"context\": \"The cat sat.\", \"question\": \"Who?\", "
                                   "\"answers\": {\"text\": [\"cat\"], \"answer_start\": [5]}}\n"));
            }),
            tmp.file("id.jsonl") +
                ":1: question 'a\\nb': answer 0 'cat' is not at answer_start 5 of the context, which has 'at ' there");
}


TEST(QaData, ReadsSquadAndJsonLinesAlike) {
  const QaCorpus nested = read_qa_corpus(qa_fixture("squad.json"));
  const QaCorpus flat = read_qa_corpus(qa_fixture("squad.jsonl"));
  EXPECT_EQ(nested.version, "v2.0");
  EXPECT_EQ(flat.version, "");
  ASSERT_EQ(nested.examples.size(), 50u);
  ASSERT_EQ(flat.examples.size(), nested.examples.size());
  EXPECT_TRUE(nested.has_unanswerable());
  const std::string text = io::read_text_file(qa_fixture("squad.json"));
  int64_t unanswerable = 0, non_ascii = 0;
  for (size_t i = 0; i < flat.examples.size(); ++i) {
    const QaExample& a = nested.examples[i];
    const QaExample& b = flat.examples[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.title, b.title);
    EXPECT_EQ(a.question, b.question);
    EXPECT_EQ(a.context, b.context);
    EXPECT_EQ(a.answer_texts, b.answer_texts);
    EXPECT_EQ(a.answer_starts, b.answer_starts);
    EXPECT_EQ(b.line, static_cast<int64_t>(i) + 1);
    // A question's line is its object's "{": two lines above its "id" in this file.
    const size_t at = text.find("\"id\": \"" + a.id + "\"");
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(a.line, std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1 - 2) << a.id;
    unanswerable += a.answer_texts.empty();
    non_ascii += std::any_of(a.context.begin(), a.context.end(), [](char c) { return c & 0x80; });
  }
  EXPECT_EQ(unanswerable, 7);
  EXPECT_GT(non_ascii, 5);
}

TEST(QaData, ReadsRunQaRowsAndCountsCharactersAsPython) {
  test::TempDir tmp;
  // run_qa's own .json: load_dataset("json", field="data") rows; answer starts count code points (ü is one, 😀 one).
  const std::string rows = write(
      tmp, "rows.json",
      "{\"version\": \"x\", \"data\": [\n"
      "  {\"id\": \"a\", \"context\": \"Zürich ist schön\", \"question\": \" Wie?\", "
      "\"answers\": {\"text\": [\"schön\"], \"answer_start\": [11]}},\n"
      "  {\"id\": 7, \"title\": null, \"context\": \"I 😀 you\", \"question\": \"Who?\", "
      "\"answers\": {\"text\": [\"you\", \"😀\"], \"answer_start\": [4, 2]}},\n"
      "  {\"id\": \"c\", \"context\": \"\", \"question\": \"?\", \"answers\": {\"text\": [], \"answer_start\": []}}\n"
      "]}\n");
  const QaCorpus c = read_qa_corpus(rows);
  ASSERT_EQ(c.examples.size(), 3u);
  EXPECT_EQ(c.examples[0].answer_starts, (std::vector<int64_t>{11}));
  EXPECT_EQ(c.examples[0].line, 2);
  EXPECT_EQ(c.examples[1].id, "7");
  EXPECT_EQ(c.examples[1].answer_texts, (std::vector<std::string>{"you", "😀"}));
  EXPECT_EQ(c.examples[1].line, 3);
  EXPECT_TRUE(c.examples[2].answer_texts.empty());
  // The byte offset of "schön" (12) is not its character offset.
  EXPECT_EQ(error_of([&] {
              read_qa_corpus(write(tmp, "bytes.jsonl",
                                   "{\"id\": \"a\", \"context\": \"Zürich ist schön\", \"question\": \"Wie?\", "
                                   "\"answers\": {\"text\": [\"schön\"], \"answer_start\": [12]}}\n"));
            }),
            tmp.file("bytes.jsonl") +
                ":1: question 'a': answer 0 'schön' at answer_start 12 runs past the end of the "
                "context (16 characters)");
}

TEST(QaData, BadFilesGetOneLineNamingTheFileAndQuestion) {
  test::TempDir tmp;
  const std::string good =
      "{\"id\": \"a\", \"context\": \"The cat sat.\", \"question\": \"Who?\", "
      "\"answers\": {\"text\": [\"cat\"], \"answer_start\": [4]}}\n";
  EXPECT_EQ(error_of([&] {
              read_qa_corpus(write(tmp, "at.jsonl",
                                   "{\"id\": \"a\", \"context\": \"The cat sat.\", \"question\": \"Who?\", "
                                   "\"answers\": {\"text\": [\"cat\"], \"answer_start\": [5]}}\n"));
            }),
            tmp.file("at.jsonl") +
                ":1: question 'a': answer 0 'cat' is not at answer_start 5 of the context, which "
                "has 'at ' there");
  EXPECT_EQ(error_of([&] {
              read_qa_corpus(write(tmp, "missing.jsonl",
                                   good + "\n{\"id\": \"b\", \"context\": \"x\", \"answers\": "
                                          "{\"text\": [], \"answer_start\": []}}\n"));
            }),
            tmp.file("missing.jsonl") + ":3: question 'b': no field 'question'");
  EXPECT_EQ(error_of([&] {
              read_qa_corpus(write(tmp, "twice.jsonl",
                                   good +
                                       "{\"id\": \"b\", \"context\": \"x\", \"question\": \"q\", \"answers\": "
                                       "{\"text\": [], \"answer_start\": []}}\n" +
                                       good));
            }),
            tmp.file("twice.jsonl") + ":3: question 'a': the id is repeated (first at line 1)");
  EXPECT_EQ(error_of([&] {
              read_qa_corpus(write(tmp, "count.jsonl",
                                   "{\"id\": \"a\", \"context\": \"x\", \"question\": \"q\", \"answers\": "
                                   "{\"text\": [\"x\"], \"answer_start\": []}}\n"));
            }),
            tmp.file("count.jsonl") + ":1: question 'a': answers has 1 text(s) and 0 answer_start value(s)");
  EXPECT_EQ(error_of([&] {
              read_qa_corpus(write(tmp, "empty.jsonl",
                                   "{\"id\": \"a\", \"context\": \"x\", \"question\": \"q\", \"answers\": "
                                   "{\"text\": [\"\"], \"answer_start\": [0]}}\n"));
            }),
            tmp.file("empty.jsonl") + ":1: question 'a': answer 0 is empty");
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "utf8.jsonl", good + "{\"id\": \"\xff\"}\n")); }),
            tmp.file("utf8.jsonl") + ":2: bytes that are not UTF-8 (byte 118 of the file)");
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "none.jsonl", "\n\n")); }),
            tmp.file("none.jsonl") + ": no questions");
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "a.txt", good)); }),
            tmp.file("a.txt") +
                ": unknown format '.txt' for question answering: expected .json (SQuAD, or run_qa's "
                "{\"data\": [rows]}) or .jsonl (a question a line)");

  // SQuAD: lines of the question objects; is_impossible must agree with the answers.
  const std::string squad =
      "{\"version\": \"v2.0\", \"data\": [{\"title\": \"T\", \"paragraphs\": [\n"
      "  {\"context\": \"The cat sat.\", \"qas\": [\n"
      "    {\"id\": \"a\", \"question\": \"Who?\", \"answers\": [{\"text\": \"cat\", \"answer_start\": 4}]},\n"
      "    {\"id\": \"b\", \"question\": \"Where?\", \"answers\": [], \"is_impossible\": true},\n"
      "    {\"question\": \"What?\", \"answers\": []}\n"
      "  ]}]}]}\n";
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "noid.json", squad)); }),
            tmp.file("noid.json") + ":5: no field 'id'");
  std::string impossible = squad;
  impossible.replace(impossible.find("\"answers\": [], \"is"), 13,
                     "\"answers\": [{\"text\": \"sat\", \"answer_start\": 8}]");
  impossible.replace(impossible.find("{\"question\": \"What?\""), 1, "{\"id\": \"c\", ");
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "impossible.json", impossible)); }),
            tmp.file("impossible.json") + ":4: question 'b': is_impossible is true, yet it has 1 answer(s)");
  std::string wrong = squad;
  wrong.replace(wrong.find("{\"question\": \"What?\""), 1, "{\"id\": \"c\", ");
  wrong.replace(wrong.find("\"answer_start\": 4"), 17, "\"answer_start\": 3");
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "wrong.json", wrong)); }),
            tmp.file("wrong.json") +
                ":3: question 'a': answer 0 'cat' is not at answer_start 3 of the context, "
                "which has ' ca' there");
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "list.json", "[1, 2]")); }),
            tmp.file("list.json") + ": expected a JSON object with a 'data' list (SQuAD), got a list");
  EXPECT_EQ(error_of([&] { read_qa_corpus(write(tmp, "type.jsonl", "{\"id\": \"a\", \"context\": 3}\n")); }),
            tmp.file("type.jsonl") + ":1: question 'a': field 'context' is an integer, expected a string");
}

// ---------------------------------------------------------------------------------------------------- features

// One tokenizer's record of features.json (following "same_as").
const nlohmann::json& tokenizer_record(const nlohmann::json& features, const std::string& name) {
  const nlohmann::json& t = features["tokenizers"][name];
  return t.contains("same_as") ? features["tokenizers"][t["same_as"].get<std::string>()] : t;
}

QaFeatureOptions options_of(const nlohmann::json& setting, const nlohmann::json& record) {
  QaFeatureOptions o;
  o.max_seq_length = setting["max_seq_length"].get<int64_t>();
  o.doc_stride = setting["doc_stride"].get<int64_t>();
  o.pad_to_max_length = setting["pad_to_max_length"].get<bool>();
  o.cls_token_id = record["cls_token_id"].is_null() ? -1 : record["cls_token_id"].get<int32_t>();
  o.bos_token_id = record["bos_token_id"].is_null() ? -1 : record["bos_token_id"].get<int32_t>();
  o.threads = 2;
  return o;
}

// The features run_qa made, rebuilt from the fixture's pieces (see make_qa_fixtures.py).
struct Expected {
  int64_t seq_len = 0;
  std::vector<int64_t> input_ids, token_type_ids, attention_mask, labels, example_index;
  std::vector<std::pair<int32_t, int32_t>> offsets;
};

Expected expected_features(const nlohmann::json& record, const nlohmann::json& rows, const QaFeatureOptions& o,
                           int32_t pad_id) {
  Expected x;
  for (const nlohmann::json& r : rows) x.seq_len = std::max(x.seq_len, r[3].get<int64_t>());
  for (const nlohmann::json& r : rows) {
    const nlohmann::json& ex = record["examples"][r[0].get<size_t>()];
    const nlohmann::json& context = record["contexts"][ex["context"].get<size_t>()];
    const auto first = r[1].get<size_t>(), count = r[2].get<size_t>();
    std::vector<int64_t> ids = ex["prefix"].get<std::vector<int64_t>>();
    std::vector<int64_t> types = ex["prefix_types"].get<std::vector<int64_t>>();
    std::vector<std::pair<int32_t, int32_t>> offsets(ids.size(), {-1, -1});
    for (size_t k = first; k < first + count; ++k) {
      ids.push_back(context["ids"][k].get<int64_t>());
      types.push_back(ex["context_type"].get<int64_t>());
      offsets.emplace_back(context["offsets"][2 * k].get<int32_t>(), context["offsets"][2 * k + 1].get<int32_t>());
    }
    for (const nlohmann::json& v : ex["suffix"]) ids.push_back(v.get<int64_t>());
    for (const nlohmann::json& v : ex["suffix_types"]) types.push_back(v.get<int64_t>());
    const size_t n = ids.size();
    EXPECT_EQ(o.pad_to_max_length ? static_cast<size_t>(o.max_seq_length) : n, r[3].get<size_t>());
    for (size_t t = 0; t < static_cast<size_t>(x.seq_len); ++t) {
      x.input_ids.push_back(t < n ? ids[t] : pad_id);
      x.token_type_ids.push_back(t < n ? types[t] : 0);
      x.attention_mask.push_back(t < n ? 1 : 0);
      x.offsets.push_back(t < n && t < offsets.size() ? offsets[t] : std::pair<int32_t, int32_t>{-1, -1});
    }
    x.labels.push_back(r[4].get<int64_t>());
    x.labels.push_back(r[5].get<int64_t>());
    x.example_index.push_back(r[0].get<int64_t>());
  }
  return x;
}

// The first position where two rows differ, for a readable failure.
template <typename T>
void expect_rows_equal(const std::vector<T>& got, const std::vector<T>& want, int64_t width, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) {
      ADD_FAILURE() << what << ": feature " << static_cast<int64_t>(i) / width << ", position "
                    << static_cast<int64_t>(i) % width << " differs";
      return;
    }
}

TEST(QaData, FeaturesAreRunQasForEveryTokenizerAndSetting) {
  const nlohmann::json features = read_json(qa_fixture("features.json"));
  const QaCorpus corpus = read_qa_corpus(qa_fixture("squad.json"));
  int64_t checked = 0;
  for (const auto& [name, unused] : features["tokenizers"].items()) {
    const data::TextTokenizer tokenizer = tokenizer_named(name);
    const nlohmann::json& record = tokenizer_record(features, name);
    for (const nlohmann::json& setting : features["settings"]) {
      const std::string what = name + " " + setting["name"].get<std::string>();
      SCOPED_TRACE(what);
      const QaFeatureOptions o = options_of(setting, record);
      const nlohmann::json& expected_setting = record["settings"][setting["name"].get<std::string>()];
      const Expected x = expected_features(record, expected_setting["features"], o, tokenizer.pad_id());
      const QaTrainFeatures train = prepare_train_features(corpus, tokenizer, o);
      const QaEvalFeatures eval = prepare_validation_features(corpus, tokenizer, o);
      for (const Dataset* d : {&train.data, &eval.data}) {
        ASSERT_EQ(d->size, static_cast<int64_t>(x.example_index.size()));
        ASSERT_EQ(d->seq_len, x.seq_len);
        EXPECT_EQ(d->pad_per_batch, !o.pad_to_max_length);
        expect_rows_equal(d->input_ids, x.input_ids, x.seq_len, what + " input_ids");
        expect_rows_equal(d->token_type_ids, x.token_type_ids, x.seq_len, what + " token_type_ids");
        expect_rows_equal(d->attention_mask, x.attention_mask, x.seq_len, what + " attention_mask");
      }
      EXPECT_EQ(train.example_index, x.example_index);
      EXPECT_EQ(eval.example_index, x.example_index);
      EXPECT_TRUE(train.data.span_labels);
      EXPECT_EQ(train.data.label_width, 2);
      expect_rows_equal(train.data.labels_i64, x.labels, 2, what + " start/end positions");
      EXPECT_FALSE(eval.data.has_labels());
      expect_rows_equal(eval.offsets, x.offsets, x.seq_len, what + " offsets");
      EXPECT_EQ(train.uncovered, expected_setting["uncovered"].get<std::vector<int64_t>>());
      EXPECT_EQ(train.answerable, 43);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9);
}

TEST(QaData, ClsIndexIsTheFirstClsTokenElseBosElseZero) {
  // prepare_train_features labels a window without the answer with input_ids.index(cls_token_id), else the index
  // of bos_token_id, else 0. Here [SEP] stands for the one or the other: its first index is the question's end
  // (the empty context's window has two in a row).
  const nlohmann::json features = read_json(qa_fixture("features.json"));
  const nlohmann::json& record = tokenizer_record(features, "wordpiece-uncased");
  const QaCorpus corpus = read_qa_corpus(qa_fixture("squad.json"));
  const data::TextTokenizer tokenizer = tokenizer_named("wordpiece-uncased");
  const auto sep = record["examples"][0]["prefix"].back().get<int32_t>();
  const auto cls = record["cls_token_id"].get<int32_t>();
  struct Case {
    int32_t cls, bos;
    bool at_sep;
  };
  for (const Case c : {Case{-1, -1, false}, Case{sep, cls, true}, Case{99999, sep, true}, Case{99999, 99998, false}}) {
    QaFeatureOptions o;
    o.max_seq_length = 64;
    o.doc_stride = 16;
    o.pad_to_max_length = false;
    o.cls_token_id = c.cls;
    o.bos_token_id = c.bos;
    const QaTrainFeatures train = prepare_train_features(corpus, tokenizer, o);
    int64_t checked = 0;
    for (size_t f = 0; f < train.example_index.size(); ++f) {
      const auto ex = static_cast<size_t>(train.example_index[f]);
      if (!corpus.examples[ex].answer_texts.empty()) continue;
      const std::vector<int32_t> prefix = record["examples"][ex]["prefix"].get<std::vector<int32_t>>();
      const int64_t want = c.at_sep ? std::find(prefix.begin(), prefix.end(), sep) - prefix.begin() : 0;
      EXPECT_EQ(train.data.labels_i64[2 * f], want) << c.cls << " " << c.bos << " feature " << f;
      EXPECT_EQ(train.data.labels_i64[2 * f + 1], want) << c.cls << " " << c.bos << " feature " << f;
      ++checked;
    }
    EXPECT_GT(checked, 30);
  }
}

TEST(QaData, FeatureErrorsNameTheQuestion) {
  test::TempDir tmp;
  const data::TextTokenizer tokenizer = tokenizer_named("wordpiece-uncased");
  const std::string path = write(
      tmp, "q.jsonl",
      "{\"id\": \"ok\", \"context\": \"The cat sat.\", \"question\": \"Who?\", \"answers\": {\"text\": [], "
      "\"answer_start\": []}}\n"
      "{\"id\": \"long\", \"context\": \"The cat sat on the mat again and again.\", \"question\": \"one two three "
      "four five six seven eight nine ten eleven twelve thirteen fourteen fifteen\", \"answers\": {\"text\": [], "
      "\"answer_start\": []}}\n");
  const QaCorpus c = read_qa_corpus(path);
  QaFeatureOptions o;
  o.max_seq_length = 16;
  o.doc_stride = 4;
  // The tokenizer's refusal (the question leaves the context no room), named by the question.
  const std::string e = error_of([&] { prepare_train_features(c, tokenizer, o); });
  EXPECT_EQ(e.rfind(path + ":2: question 'long': the first text's ", 0), 0u) << e;
  EXPECT_EQ(error_of([&] { prepare_validation_features(c, tokenizer, o); }), e);
  o.max_seq_length = 3;
  EXPECT_EQ(error_of([&] { prepare_train_features(c, tokenizer, o); }),
            "max_seq_length 3: too short for the 3 special tokens " + tokenizer.file() +
                " adds to a question and its context (at least 4)");
}

// ---------------------------------------------------------------------------------------------- post-processing

uint64_t splitmix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// make_qa_fixtures.py's base_row: a permutation of 0..width-1, less width / 2, over 64.
std::vector<float> base_row(uint64_t seed, int64_t feature, int which, int64_t width) {
  uint64_t state = seed * 1099511628211ull + static_cast<uint64_t>(2 * feature + which);
  std::vector<int64_t> perm(static_cast<size_t>(width));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = width - 1; i > 0; --i) {
    const uint64_t j = splitmix64(state) % static_cast<uint64_t>(i + 1);
    std::swap(perm[static_cast<size_t>(i)], perm[j]);
  }
  std::vector<float> out;
  for (const int64_t p : perm) out.push_back(static_cast<float>(p - width / 2) / 64.0f);
  return out;
}

struct Outputs {
  std::vector<std::pair<std::string, std::string>> predictions;
  std::vector<std::pair<std::string, double>> null_odds;
  std::vector<std::pair<std::string, std::vector<QaNbestEntry>>> nbest;
};

Outputs outputs_of(const nlohmann::json& record) {
  Outputs o;
  for (const nlohmann::json& p : record["predictions"]) o.predictions.emplace_back(p[0], p[1]);
  if (record.contains("null_odds"))
    for (const nlohmann::json& p : record["null_odds"]) o.null_odds.emplace_back(p[0], p[1].get<double>());
  if (record.contains("nbest"))
    for (const nlohmann::json& item : record["nbest"]) {
      std::vector<QaNbestEntry> list;
      for (const nlohmann::json& e : item[1])
        list.push_back(
            {e[0].get<std::string>(), e[1].get<double>(), e[2].get<double>(), e[3].get<double>(), e[4].get<bool>()});
      o.nbest.emplace_back(item[0], std::move(list));
    }
  return o;
}

// utils_qa's nbest_predictions.json as Outputs::nbest (the fallback entry: the one whose first key is "text").
std::vector<std::pair<std::string, std::vector<QaNbestEntry>>> nbest_file(const std::string& path) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(io::read_text_file(path));
  std::vector<std::pair<std::string, std::vector<QaNbestEntry>>> out;
  for (const auto& [id, list] : j.items()) {
    std::vector<QaNbestEntry> entries;
    for (const auto& e : list)
      entries.push_back({e["text"].get<std::string>(), e["start_logit"].get<double>(), e["end_logit"].get<double>(),
                         e["probability"].get<double>(), e.begin().key() == "text"});
    out.emplace_back(id, std::move(entries));
  }
  return out;
}

void expect_outputs(const QaPredictions& got, const Outputs& want, bool v2, const std::string& what) {
  EXPECT_EQ(got.predictions, want.predictions) << what;
  if (v2) EXPECT_EQ(got.null_odds, want.null_odds) << what;
  else EXPECT_TRUE(got.null_odds.empty()) << what;
  if (want.nbest.empty()) return;
  ASSERT_EQ(got.nbest.size(), want.nbest.size()) << what;
  for (size_t i = 0; i < want.nbest.size(); ++i) {
    const std::vector<QaNbestEntry>& g = got.nbest[i];
    const std::vector<QaNbestEntry>& w = want.nbest[i].second;
    ASSERT_EQ(got.predictions[i].first, want.nbest[i].first) << what;
    ASSERT_EQ(g.size(), w.size()) << what << " " << want.nbest[i].first;
    for (size_t k = 0; k < w.size(); ++k) {
      const std::string where = what + " " + want.nbest[i].first + " entry " + std::to_string(k);
      EXPECT_EQ(g[k].text, w[k].text) << where;
      EXPECT_EQ(g[k].start_logit, w[k].start_logit) << where;
      EXPECT_EQ(g[k].end_logit, w[k].end_logit) << where;
      EXPECT_EQ(g[k].empty_fallback, w[k].empty_fallback) << where;
      EXPECT_LE(test::relative(g[k].probability, w[k].probability), 1e-6)
          << where << ": " << g[k].probability << " vs " << w[k].probability;
    }
  }
}

QaPostprocessOptions postprocess_options(const nlohmann::json& run) {
  QaPostprocessOptions o;
  o.version_2_with_negative = run["version_2_with_negative"].get<bool>();
  o.n_best_size = run["n_best_size"].get<int64_t>();
  o.max_answer_length = run["max_answer_length"].get<int64_t>();
  o.null_score_diff_threshold = run["null_score_diff_threshold"].get<double>();
  return o;
}

TEST(QaData, PostprocessingIsUtilsQas) {
  const nlohmann::json features = read_json(qa_fixture("features.json"));
  const nlohmann::json post = read_json(qa_fixture("postprocess.json"));
  const QaCorpus corpus = read_qa_corpus(qa_fixture("squad.jsonl"));
  const std::vector<std::string> modes = post["modes"].get<std::vector<std::string>>();
  test::TempDir tmp;
  for (const nlohmann::json& run : post["runs"]) {
    const std::string name = run["name"].get<std::string>();
    SCOPED_TRACE(name);
    const std::string tokenizer_name = run["tokenizer"].get<std::string>();
    const data::TextTokenizer tokenizer = tokenizer_named(tokenizer_name);
    const nlohmann::json& record = tokenizer_record(features, tokenizer_name);
    const nlohmann::json* setting = nullptr;
    for (const nlohmann::json& s : features["settings"])
      if (s["name"] == run["setting"]) setting = &s;
    ASSERT_NE(setting, nullptr);
    const QaEvalFeatures eval = prepare_validation_features(corpus, tokenizer, options_of(*setting, record));
    const nlohmann::json& rows = record["settings"][run["setting"].get<std::string>()]["features"];
    ASSERT_EQ(rows.size(), eval.example_index.size());

    // make_qa_fixtures.py's logits: a permutation per row, 8 added by the example's mode, -100 past the feature.
    const int64_t width = eval.data.seq_len;
    const auto seed = run["seed"].get<uint64_t>();
    const auto salt = run["salt"].get<int64_t>();
    std::vector<float> start, end;
    for (size_t f = 0; f < rows.size(); ++f) {
      std::vector<float> s = base_row(seed, static_cast<int64_t>(f), 0, width);
      std::vector<float> e = base_row(seed, static_cast<int64_t>(f), 1, width);
      const int64_t example = rows[f][0].get<int64_t>(), length = rows[f][3].get<int64_t>();
      const int64_t sp = rows[f][4].get<int64_t>(), ep = rows[f][5].get<int64_t>();
      const std::string& mode = modes[static_cast<size_t>((example + salt) % 4)];
      if (mode == "gold" && (sp != 0 || ep != 0)) {
        s[static_cast<size_t>(sp)] += 8;
        e[static_cast<size_t>(ep)] += 8;
      } else if (mode == "cls") {
        s[0] += 8;
        e[0] += 8;
      } else if (mode == "question") {
        for (int64_t k = 0; k < length; ++k)
          if (eval.offsets[f * static_cast<size_t>(width) + static_cast<size_t>(k)].first < 0) {
            s[static_cast<size_t>(k)] += 8;
            e[static_cast<size_t>(k)] += 8;
          }
      }
      for (int64_t k = length; k < width; ++k) s[static_cast<size_t>(k)] = e[static_cast<size_t>(k)] = -100;
      start.insert(start.end(), s.begin(), s.end());
      end.insert(end.end(), e.begin(), e.end());
    }
    const QaPostprocessOptions o = postprocess_options(run);
    const QaPredictions got = postprocess_qa_predictions(corpus, eval, start, end, width, o);
    Outputs want = outputs_of(run);
    if (!run.contains("nbest")) {
      // The run whose files the fixture keeps: its n-best lists are there; the files must come out the same.
      want.nbest = nbest_file(qa_fixture("eval_nbest_predictions.json"));
      write_qa_predictions(got, tmp.path().string(), "eval", o.version_2_with_negative);
      EXPECT_EQ(io::read_text_file(tmp.file("eval_predictions.json")),
                io::read_text_file(qa_fixture("eval_predictions.json")));
      EXPECT_EQ(io::read_text_file(tmp.file("eval_null_odds.json")),
                io::read_text_file(qa_fixture("eval_null_odds.json")));
      // Line for line, but for the probabilities' last digits.
      std::istringstream ours(io::read_text_file(tmp.file("eval_nbest_predictions.json")));
      std::istringstream theirs(io::read_text_file(qa_fixture("eval_nbest_predictions.json")));
      std::string a, b;
      int64_t lines = 0, probabilities = 0;
      while (std::getline(theirs, b)) {
        ASSERT_TRUE(std::getline(ours, a)) << "line " << lines;
        ++lines;
        const std::string key = "\"probability\": ";
        const size_t at = b.find(key);
        if (at != std::string::npos && a.compare(0, at + key.size(), b, 0, at + key.size()) == 0) {
          EXPECT_LE(test::relative(std::stod(a.substr(at + key.size())), std::stod(b.substr(at + key.size()))), 1e-6)
              << "line " << lines;
          ++probabilities;
        } else {
          ASSERT_EQ(a, b) << "line " << lines;
        }
      }
      EXPECT_FALSE(std::getline(ours, a));
      EXPECT_GT(probabilities, 500);
    }
    expect_outputs(got, want, o.version_2_with_negative, name);
  }
}

TEST(QaData, PostprocessingEdgeCasesAreUtilsQas) {
  const nlohmann::json post = read_json(qa_fixture("postprocess.json"));
  for (const nlohmann::json& c : post["handmade"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    QaCorpus corpus;
    corpus.source = name;
    for (const nlohmann::json& e : c["examples"]) {
      QaExample x;
      x.id = e[0].get<std::string>();
      x.context = e[1].get<std::string>();
      corpus.examples.push_back(x);
    }
    QaEvalFeatures features;
    int64_t width = 0;
    for (const nlohmann::json& f : c["features"]) width = std::max<int64_t>(width, f["start"].size());
    std::vector<float> start, end;
    for (const nlohmann::json& f : c["features"]) {
      features.example_index.push_back(f["example"].get<int64_t>());
      for (int64_t k = 0; k < width; ++k) {
        const nlohmann::json& o = f["offsets"];
        features.offsets.push_back(k < static_cast<int64_t>(o.size()) && !o[k].is_null()
                                       ? std::pair<int32_t, int32_t>{o[k][0].get<int32_t>(), o[k][1].get<int32_t>()}
                                       : std::pair<int32_t, int32_t>{-1, -1});
        start.push_back(f["start"][k].get<float>());
        end.push_back(f["end"][k].get<float>());
      }
    }
    features.data.size = static_cast<int64_t>(features.example_index.size());
    features.data.seq_len = width;
    const QaPostprocessOptions o = postprocess_options(c);
    expect_outputs(postprocess_qa_predictions(corpus, features, start, end, width, o), outputs_of(c),
                   o.version_2_with_negative, name);
  }
}

TEST(QaData, PostprocessingRefusesWhatUtilsQaCannotDo) {
  QaCorpus corpus;
  corpus.source = "data.json";
  corpus.examples.push_back({"a", "", "q", "abc", {}, {}, 1});
  QaEvalFeatures features;
  features.example_index = {0};
  features.offsets = {{-1, -1}, {0, 3}};
  features.data.size = 1;
  features.data.seq_len = 2;
  std::vector<float> start = {0, 1}, end = {0, NAN};
  EXPECT_EQ(error_of([&] { postprocess_qa_predictions(corpus, features, start, end, 2, {}); }),
            "data.json: the end logits of feature 0 have a NaN at position 1");
  end[1] = 1;
  EXPECT_EQ(error_of([&] { postprocess_qa_predictions(corpus, features, start, end, 3, {}); }),
            "data.json: 2 start and 2 end logits for 1 features of 3 positions");
  // Version 2 without a feature: utils_qa has no null score for it.
  corpus.examples.push_back({"b", "", "q", "xyz", {}, {}, 2});
  QaPostprocessOptions v2;
  v2.version_2_with_negative = true;
  EXPECT_EQ(error_of([&] { postprocess_qa_predictions(corpus, features, start, end, 2, v2); }),
            "data.json: question 'b' has no feature, so no null score");
  // Every entry empty (a zero-width span and the null one): utils_qa's IndexError.
  corpus.examples.pop_back();
  features.offsets = {{-1, -1}, {1, 1}};
  EXPECT_EQ(error_of([&] { postprocess_qa_predictions(corpus, features, start, end, 2, v2); }),
            "data.json: question 'a': every entry of its n-best list is empty (utils_qa fails there with an "
            "IndexError)");
}

TEST(QaData, PythonJsonFormatting) {
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(python_float_repr(1e100), "1e+100");
  EXPECT_EQ(python_float_repr(5e-324), "5e-324");
  EXPECT_EQ(python_float_repr(static_cast<double>(0.1f)), "0.10000000149011612");
  EXPECT_EQ(python_float_repr(NAN), "NaN");
  EXPECT_EQ(python_float_repr(-INFINITY), "-Infinity");
  EXPECT_EQ(python_json_string("a\"b\\c\n\t\x1c\x7f"), "\"a\\\"b\\\\c\\n\\t\\u001c\\u007f\"");
  EXPECT_EQ(python_json_string("Zürich 東京 😀"), "\"Z\\u00fcrich \\u6771\\u4eac \\ud83d\\ude00\"");
}

}  // namespace
}  // namespace anatomy
