// test_text_training.cpp: training, evaluating and predicting on text files.
// - Text is tokenized as Hugging Face's tokenizer does it (the wordpiece
//   fixtures' pairs, truncated longest_first), from JSONL, CSV and TSV alike.
// - Dynamic padding cuts each batch to its longest example and trains as
//   padding to the longest of the set does; --group-by-length orders batches
//   as Hugging Face's LengthGroupedSampler (its algorithm run in Python).
// - The memory plan takes every batch at the longest length: never below the run.
// - A trained directory has id2label/label2id, the vocabulary and
//   tokenizer_config.json (also in each checkpoint); evaluate and predict on
//   text agree with the training run's own evaluation.
// - Bad text data: one error line naming file and line, nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/analysis/memory_plan.h"
#include "anatomy/data/loader.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/io/files.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "anatomy/train/training_data.h"
#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;

const std::string kVocab = test::fixture("wordpiece-uncased") + "/vocab.txt";

void write_file(const std::string& path, const std::string& text) { test::write_all_bytes(path, text); }

// A two-class task: the label says which word list the text draws from.
// Lengths vary from 3 to 14 words.
std::string sentiment_jsonl(int n, int offset = 0) {
  const std::vector<std::string> good = {"good", "great", "free", "open", "public", "general"};
  const std::vector<std::string> bad = {"without", "warranty", "liability", "damages", "limited", "any"};
  std::string out;
  for (int i = offset; i < offset + n; ++i) {
    const bool positive = i % 2 == 0;
    const auto& words = positive ? good : bad;
    std::string text;
    for (int w = 0; w < 3 + (i * 7) % 12; ++w) text += (w ? " " : "") + words[(i + w * 5) % words.size()];
    out += nlohmann::json({{"text", text}, {"label", positive ? "positive" : "negative"}}).dump() + "\n";
  }
  return out;
}

std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(io::read_text_file(path)); }

TEST(TextData, TokenizedAsHuggingFaceTruncatesPairs) {
  // The fixture's pairs: tokenizer(text, second, truncation="longest_first", max_length=M, padding="max_length").
  test::TempDir tmp;
  std::string jsonl;
  std::vector<nlohmann::json> cases;
  for (const auto& c : json_lines(test::fixture("wordpiece-uncased") + "/cases.jsonl")) {
    if (!c.contains("pair_ids") || c["text"].get<std::string>().find_first_not_of(" \t\n") == std::string::npos)
      continue;
    cases.push_back(c);
    jsonl += nlohmann::json({{"text", c["text"]}, {"second", c["pair_second"]}, {"label", "x"}}).dump() + "\n";
  }
  ASSERT_GE(cases.size(), 10u);
  const int64_t max_length = cases[0]["pair_max_length"].get<int64_t>();
  for (const auto& c : cases) ASSERT_EQ(c["pair_max_length"].get<int64_t>(), max_length);
  write_file(tmp.file("pairs.jsonl"), jsonl);
  const TextTable table = read_text_table(tmp.file("pairs.jsonl"), TextColumns{"text", "second", "label"});
  const auto tokenizer = data::WordPieceTokenizer::from_file(kVocab);
  TextDataOptions options;
  options.max_seq_length = max_length;
  const Dataset d = tokenize_text_table(table, tokenizer, nullptr, options);
  ASSERT_EQ(d.size, static_cast<int64_t>(cases.size()));
  EXPECT_TRUE(d.pad_per_batch);
  EXPECT_FALSE(d.has_labels());
  EXPECT_LE(d.seq_len, max_length);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = cases[i]["pair_ids"].get<std::vector<int64_t>>();
    const auto types = cases[i]["pair_token_type_ids"].get<std::vector<int64_t>>();
    const auto mask = cases[i]["pair_attention_mask"].get<std::vector<int64_t>>();
    const auto real = static_cast<int64_t>(std::accumulate(mask.begin(), mask.end(), int64_t{0}));
    for (int64_t t = 0; t < d.seq_len; ++t) {
      const size_t at = i * static_cast<size_t>(d.seq_len) + static_cast<size_t>(t);
      const bool in = t < real;
      EXPECT_EQ(d.attention_mask[at], in ? 1 : 0) << "case " << i << " position " << t;
      EXPECT_EQ(d.input_ids[at], in ? ids[t] : tokenizer.pad_id()) << "case " << i << " position " << t;
      EXPECT_EQ(d.token_type_ids[at], in ? types[t] : 0) << "case " << i << " position " << t;
    }
  }
}

TEST(TextData, JsonlCsvAndTsvGiveTheSameExamples) {
  test::TempDir tmp;
  write_file(tmp.file("a.jsonl"), "{\"text\": \"Hello, world!\", \"label\": \"b\"}\n"
                                  "{\"text\": \"a \\\"quoted\\\" word\\nover two lines\", \"label\": \"a\"}\n");
  write_file(tmp.file("a.csv"), "label,text\nb,\"Hello, world!\"\r\na,\"a \"\"quoted\"\" word\nover two lines\"\r\n");
  write_file(tmp.file("a.tsv"), "text\tlabel\nHello, world!\tb\n\"a \"\"quoted\"\" word\nover two lines\"\ta\n");
  const auto tokenizer = data::WordPieceTokenizer::from_file(kVocab);
  std::vector<Dataset> sets;
  for (const char* name : {"a.jsonl", "a.csv", "a.tsv"}) {
    const TextTable t = read_text_table(tmp.file(name), TextColumns{});
    const LabelVocabulary labels = LabelVocabulary::from(t);
    sets.push_back(tokenize_text_table(t, tokenizer, &labels, TextDataOptions{}));
  }
  for (size_t k = 1; k < sets.size(); ++k) {
    EXPECT_EQ(sets[k].input_ids, sets[0].input_ids) << k;
    EXPECT_EQ(sets[k].attention_mask, sets[0].attention_mask) << k;
    EXPECT_EQ(sets[k].labels_i64, sets[0].labels_i64) << k;
  }
  EXPECT_EQ(sets[0].labels_i64, (std::vector<int64_t>{1, 0}));  // names sorted: a = 0, b = 1
  // [CLS] hello , world ! [SEP]: the fixture vocabulary's ids (wordpiece-uncased/cases.jsonl's first case).
  EXPECT_EQ(std::vector<int64_t>(sets[0].input_ids.begin(), sets[0].input_ids.begin() + 7),
            (std::vector<int64_t>{2, 1560, 847, 16, 2274, 5, 3}));
}

TEST(TextData, LengthGroupedOrderIsHuggingFaces) {
  // Expected orders: transformers' get_length_grouped_indices (trainer_pt_utils.py) run in Python on these
  // lengths, with torch.randperm's permutation replaced by `perm`.
  const std::vector<int64_t> lengths = {8, 5, 9, 3,  4, 11, 4, 8, 12, 3, 11, 6, 3, 4, 9, 9, 4, 6, 4,
                                        11, 9, 3, 12, 4, 6, 12, 3, 12, 12, 9, 3, 6, 3, 11, 5, 7, 9};
  const std::vector<int64_t> perm = {21, 26, 28, 12, 8, 24, 0, 16, 23, 25, 4, 5, 14, 36, 35, 10, 13, 15, 27,
                                     33, 1, 29, 2, 22, 17, 3, 32, 31, 20, 30, 18, 6, 11, 19, 7, 34, 9};
  EXPECT_EQ(length_grouped_order(perm, lengths, 2),
            (std::vector<int64_t>{28, 8, 0, 24, 16, 21, 26, 12, 25, 5, 10, 14, 36, 35, 23, 4, 27, 22, 33,
                                  15, 29, 2, 1, 13, 20, 17, 31, 18, 6, 3, 32, 30, 19, 7, 11, 34, 9}));
  EXPECT_EQ(length_grouped_order(perm, lengths, 3),
            (std::vector<int64_t>{28, 8, 0, 24, 16, 23, 21, 26, 12, 25, 5, 10, 14, 36, 15, 35, 4, 13, 27,
                                  22, 33, 29, 2, 17, 1, 3, 32, 19, 20, 7, 31, 11, 34, 18, 6, 30, 9}));
  // By hand: megabatches of one batch of 2 (10 / 8 = 1), the longest (9, index 3) swapped to the front.
  std::vector<int64_t> identity(10);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(length_grouped_order(identity, {3, 7, 2, 9, 5, 5, 1, 8, 4, 6}, 2),
            (std::vector<int64_t>{3, 0, 1, 2, 4, 5, 7, 6, 9, 8}));
}

// A text dataset of 12 examples of 3..14 words.
Dataset small_text_set(const test::TempDir& tmp, const std::string& name = "train.jsonl") {
  write_file(tmp.file(name), sentiment_jsonl(12));
  const TextTable t = read_text_table(tmp.file(name), TextColumns{});
  const LabelVocabulary labels = LabelVocabulary::from(t);
  return tokenize_text_table(t, data::WordPieceTokenizer::from_file(kVocab), &labels, TextDataOptions{});
}

TEST(TextData, DynamicPaddingCutsEachBatchToItsLongest) {
  test::TempDir tmp;
  const Dataset d = small_text_set(tmp);
  const std::vector<int64_t> lengths = sequence_lengths(d);
  EXPECT_EQ(*std::max_element(lengths.begin(), lengths.end()), d.seq_len);
  const std::vector<int64_t> order = epoch_order(d.size, true, 5, 0);
  for (int64_t begin = 0; begin < d.size; begin += 5) {
    const int64_t end = std::min(d.size, begin + 5);
    const HostBatch b = gather_batch(d, order, begin, end);
    int64_t longest = 0;
    for (int64_t i = begin; i < end; ++i) longest = std::max(longest, lengths[order[i]]);
    ASSERT_EQ(b.seq_len, longest);
    ASSERT_EQ(b.input_ids.size(), static_cast<size_t>(b.batch * longest));
    for (int64_t i = begin; i < end; ++i)
      for (int64_t t = 0; t < longest; ++t) {
        const size_t from = static_cast<size_t>(order[i] * d.seq_len + t), to = static_cast<size_t>((i - begin) * longest + t);
        ASSERT_EQ(b.input_ids[to], d.input_ids[from]);
        ASSERT_EQ(b.attention_mask[to], d.attention_mask[from]);
        ASSERT_EQ(b.token_type_ids[to], d.token_type_ids[from]);
      }
  }
  // --group-by-length: the loader's first batch holds the longest example.
  LoaderOptions o;
  o.batch_size = 4;
  o.group_by_length = true;
  BatchLoader loader(d, o);
  EXPECT_EQ(loader.next().seq_len, d.seq_len);
}

TEST(TextData, DynamicPaddingTrainsAsPaddingToTheLongest) {
  // Without dropout, a batch cut to its longest example and the same batch padded further (masked) give the
  // same losses: only float32 rounding of products of other shapes differs.
  test::TempDir tmp;
  const Dataset dynamic = small_text_set(tmp);
  Dataset full = dynamic;
  full.pad_per_batch = false;
  ModelConfig config = *model_preset("bert-tiny");
  config.vocab_size = 3000;
  config.num_labels = 2;
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0;
  TrainingArguments args;
  args.per_device_train_batch_size = 5;
  args.max_steps = 6;
  args.learning_rate = 1e-3;
  args.progress = false;
  args.group_by_length = true;
  std::vector<std::vector<double>> losses;
  for (const Dataset* d : {&dynamic, static_cast<const Dataset*>(&full)}) {
    auto backend = make_cpu_backend(1);
    BertStyleModel model(*backend, config);
    init_weights(model, 3);
    Trainer trainer(*backend, model, *d, args);
    losses.push_back(trainer.train().losses);
  }
  ASSERT_EQ(losses[0].size(), 6u);
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[0][i], losses[1][i], 1e-5 * losses[1][i]) << i;
}

TEST(TextData, TheMemoryPlanTakesEveryBatchAtTheLongestLength) {
  test::TempDir tmp;
  const Dataset d = small_text_set(tmp);
  ModelConfig config = *model_preset("bert-tiny");
  config.vocab_size = 3000;
  TrainingArguments args;
  args.per_device_train_batch_size = 4;
  args.max_steps = 6;
  args.progress = false;
  PlanTarget cpu;
  cpu.gpu = false;
  const MemoryPlan plan = plan_training(config, args, DataShape::of(d), cpu);
  auto measure = [&](const Dataset& data) {
    auto backend = make_cpu_backend(1);
    BertStyleModel model(*backend, config);
    init_weights(model, 1);
    Trainer trainer(*backend, model, data, args);
    return trainer.train().memory;
  };
  const LedgerSnapshot measured = measure(d);
  Dataset full = d;
  full.pad_per_batch = false;
  const LedgerSnapshot padded = measure(full);
  EXPECT_EQ(plan.ledger.peak_total, padded.peak_total) << "every batch at the longest length: the plan exactly";
  EXPECT_LE(measured.peak_total, plan.ledger.peak_total) << "dynamic padding: the plan is the worst case";
}

// --- the command line ---

struct TextRun {
  test::TempDir tmp;
  std::string train, validation, out;
  TextRun() {
    train = tmp.file("train.jsonl");
    validation = tmp.file("validation.jsonl");
    out = tmp.file("run");
    write_file(train, sentiment_jsonl(24));
    write_file(validation, sentiment_jsonl(10, 100));
  }
  std::string base() const {
    return "train --model bert-tiny --device cpu --no-progress --vocab " + kVocab + " --train-file " + train +
           " --max-seq-length 16 --per-device-train-batch-size 4 --learning-rate 1e-3";
  }
};

TEST(TextTraining, SavesLabelsTokenizerAndEvaluatesAsTheRun) {
  TextRun run;
  const test::CommandResult r = test::run_anatomy(
      run.base() + " --validation-file " + run.validation + " --num-train-epochs 2 --eval-strategy epoch "
      "--save-strategy epoch --group-by-length --do-lower-case true --output-dir " + run.out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("each batch padded to its longest, grouped by length"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("vocab_size set to 3000"), std::string::npos) << r.output;
  for (const std::string& dir : {run.out, run.out + "/checkpoint-6", run.out + "/checkpoint-12"}) {
    SCOPED_TRACE(dir);
    const nlohmann::json config = read_json(dir + "/config.json");
    EXPECT_EQ(config["id2label"], (nlohmann::json{{"0", "negative"}, {"1", "positive"}}));
    EXPECT_EQ(config["label2id"], (nlohmann::json{{"negative", 0}, {"positive", 1}}));
    EXPECT_EQ(config["problem_type"], "single_label_classification");
    EXPECT_EQ(config["vocab_size"], 3000);
    EXPECT_EQ(io::read_file_bytes(dir + "/vocab.txt"), io::read_file_bytes(kVocab));
    const nlohmann::json tok = read_json(dir + "/tokenizer_config.json");
    EXPECT_EQ(tok["do_lower_case"], true);
    EXPECT_EQ(tok["tokenizer_class"], "BertTokenizer");
  }
  // Loading the directory reads the labels back.
  const ModelSource loaded = resolve_model(run.out);
  EXPECT_EQ(loaded.config.id2label, (std::map<int64_t, std::string>{{0, "negative"}, {1, "positive"}}));

  // anatomy evaluate on the text, with the directory's tokenizer, gives the run's last evaluation.
  const auto evals = json_lines(run.out + "/log.jsonl");
  nlohmann::json last;
  for (const auto& e : evals)
    if (e.contains("eval_accuracy")) last = e;
  ASSERT_EQ(last["step"], 12);
  const test::CommandResult ev =
      test::run_anatomy("evaluate --model " + run.out + " --validation-file " + run.validation +
                        " --max-seq-length 16 --device cpu --no-progress --metrics " + run.tmp.file("m.json"));
  ASSERT_EQ(ev.exit_code, 0) << ev.output;
  const nlohmann::json m = read_json(run.tmp.file("m.json"));
  for (const char* key : {"eval_loss", "eval_accuracy", "eval_f1"})
    EXPECT_NEAR(last[key].get<double>(), m[key].get<double>(), 1e-5 * std::max(1.0, std::abs(m[key].get<double>())))
        << key;

  // anatomy predict: label names and probabilities; their accuracy is evaluate's.
  const std::string preds = run.tmp.file("preds.jsonl");
  const test::CommandResult p = test::run_anatomy("predict --model " + run.out + " --input " + run.validation +
                                                  " --max-seq-length 16 --device cpu --no-progress --output " + preds);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto lines = json_lines(preds);
  const auto truth = json_lines(run.validation);
  ASSERT_EQ(lines.size(), truth.size());
  int correct = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto probs = lines[i]["probabilities"].get<std::vector<double>>();
    ASSERT_EQ(probs.size(), 2u);
    EXPECT_NEAR(probs[0] + probs[1], 1.0, 1e-12);
    const std::string label = lines[i]["label"];
    EXPECT_EQ(label, probs[1] > probs[0] ? "positive" : "negative");
    EXPECT_EQ(lines[i]["line"], static_cast<int64_t>(i + 1));
    correct += label == truth[i]["label"].get<std::string>();
  }
  EXPECT_NEAR(static_cast<double>(correct) / lines.size(), m["eval_accuracy"].get<double>(), 1e-12);
}

TEST(TextTraining, CsvTrainingAndRegressionLabels) {
  test::TempDir tmp;
  std::string csv = "sentence,score\n";
  for (int i = 0; i < 8; ++i) csv += fmt::format("\"the software, {} times\",{}\n", i, 0.25 * i + 0.5);
  write_file(tmp.file("reg.csv"), csv);
  const std::string out = tmp.file("run");
  const test::CommandResult r = test::run_anatomy(
      "train --model bert-tiny --device cpu --no-progress --vocab " + kVocab + " --train-file " + tmp.file("reg.csv") +
      " --text-column sentence --label-column score --max-steps 2 --per-device-train-batch-size 4 --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json config = read_json(out + "/config.json");
  EXPECT_EQ(config["problem_type"], "regression");
  EXPECT_EQ(config["id2label"].size(), 1u);  // Hugging Face writes num_labels as the size of id2label
  const test::CommandResult p = test::run_anatomy("predict --model " + out + " --input " + tmp.file("reg.csv") +
                                                  " --text-column sentence --device cpu --output " + tmp.file("p.jsonl"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto lines = json_lines(tmp.file("p.jsonl"));
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_TRUE(lines[0]["value"].is_number());
  const test::CommandResult e = test::run_anatomy("evaluate --model " + out + " --input " + tmp.file("reg.csv") +
                                                  " --text-column sentence --label-column score --device cpu");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("eval_mse"), std::string::npos) << e.output;
}

TEST(TextTraining, ResumeRefusesAnotherGroupByLength) {
  TextRun run;
  ASSERT_EQ(test::run_anatomy(run.base() + " --max-steps 4 --save-strategy steps --save-steps 2 --output-dir " +
                              run.out).exit_code, 0);
  const test::CommandResult r = test::run_anatomy(run.base() + " --max-steps 4 --group-by-length --output-dir " +
                                                  run.out + " --resume-from-checkpoint latest");
  EXPECT_TRUE(test::failed_cleanly(r, {"group_by_length"}));
}

TEST(TextTraining, BadTextFailsCleanlyNamingFileAndLine) {
  test::TempDir tmp;
  const std::string good = sentiment_jsonl(4);
  struct Case {
    std::string what, train, validation;
    std::string where, word;  // the error line names both
  };
  const std::vector<Case> cases = {
      {"invalid JSON", good + "{\"text\": \"x\", \"label\": \n", "", "train.jsonl:5", "JSON"},
      {"missing column", good + "{\"label\": \"positive\"}\n", "", "train.jsonl:5", "'text'"},
      {"empty text", good + "{\"text\": \"  \", \"label\": \"positive\"}\n", "", "train.jsonl:5", "empty"},
      {"not UTF-8", good + "{\"text\": \"caf\xe9\", \"label\": \"positive\"}\n", "", "train.jsonl:5", "UTF-8"},
      {"unknown validation label", good, sentiment_jsonl(2) + "{\"text\": \"good\", \"label\": \"neutral\"}\n",
       "validation.jsonl:3", "neutral"},
      {"not an object", good + "[1, 2]\n", "", "train.jsonl:5", "object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_file(tmp.file("train.jsonl"), c.train);
    std::string flags = "train --model bert-tiny --device cpu --no-progress --max-steps 1 --vocab " + kVocab +
                        " --train-file " + tmp.file("train.jsonl") + " --output-dir " + tmp.file("out");
    if (!c.validation.empty()) {
      write_file(tmp.file("validation.jsonl"), c.validation);
      flags += " --validation-file " + tmp.file("validation.jsonl") + " --eval-strategy steps";
    }
    const test::CommandResult r = test::run_anatomy(flags);
    EXPECT_TRUE(test::failed_cleanly(r, {c.where, c.word})) << c.what;
    EXPECT_TRUE(test::nothing_at(tmp.file("out")));
  }
  // Without a vocabulary: a preset has none.
  write_file(tmp.file("train.jsonl"), good);
  EXPECT_TRUE(test::failed_cleanly(
      test::run_anatomy("train --model bert-tiny --device cpu --max-steps 1 --train-file " + tmp.file("train.jsonl")),
      {"--vocab"}));
  EXPECT_TRUE(test::failed_cleanly(
      test::run_anatomy("train --model bert-tiny --device cpu --max-steps 1 --train-file " + tmp.file("train.jsonl") +
                        " --vocab " + tmp.file("nothing.txt")),
      {"nothing.txt"}));
  EXPECT_TRUE(test::failed_cleanly(
      test::run_anatomy("train --model bert-tiny --device cpu --max-steps 1 --vocab " + kVocab + " --train-file " +
                        tmp.file("train.jsonl") + " --max-seq-length 100000"),
      {"--max-seq-length", "max_position_embeddings"}));

  // evaluate and predict: the same errors, and no predictions file.
  TextRun run;
  ASSERT_EQ(test::run_anatomy(run.base() + " --max-steps 1 --output-dir " + run.out).exit_code, 0);
  write_file(tmp.file("eval.jsonl"), sentiment_jsonl(2) + "{\"text\": \"good\", \"label\": \"neutral\"}\n");
  EXPECT_TRUE(test::failed_cleanly(
      test::run_anatomy("evaluate --model " + run.out + " --device cpu --validation-file " + tmp.file("eval.jsonl")),
      {"eval.jsonl:3", "neutral"}));
  write_file(tmp.file("bad.jsonl"), "{\"text\": \"good\"}\nnot json\n");
  const std::string preds = tmp.file("preds.jsonl");
  EXPECT_TRUE(test::failed_cleanly(test::run_anatomy("predict --model " + run.out + " --device cpu --input " +
                                                     tmp.file("bad.jsonl") + " --output " + preds),
                                   {"bad.jsonl:2"}));
  EXPECT_TRUE(test::nothing_at(preds));
  EXPECT_TRUE(test::failed_cleanly(
      test::run_anatomy("predict --model bert-tiny --device cpu --input " + run.validation + " --output " + preds),
      {"--vocab"}));
  EXPECT_TRUE(test::nothing_at(preds));
}

}  // namespace
}  // namespace anatomy
