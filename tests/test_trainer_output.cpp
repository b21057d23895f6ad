// test_trainer_output.cpp: what a run prints and writes as Hugging Face Trainer does.
// - Progress with stderr a file: one line per logging step, ETA as h:mm:ss; the
//   final metrics block at the end.
// - log.jsonl's loss is Trainer's mean of the step losses since the previous
//   record (under gradient accumulation too), checked against the step losses
//   of the same run logged at every step; train_loss is their mean over the run.
// - trainer_state.json's log_history has Trainer's keys and values; a resumed
//   run continues it; train/eval/all_results.json as run_glue writes them.
// - The metrics block and the runtimes are character for character what
//   transformers prints (tests/tools/make_metrics_block.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <set>

#include <nlohmann/json.hpp>

#include "anatomy/io/files.h"
#include "anatomy/train/trainer_output.h"
#include "test_util.h"

namespace anatomy {
namespace {

std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(io::read_text_file(path)); }

const std::string kRun =
    "train --model bert-tiny --device cpu --dummy-size 24 --dummy-seq-len 16 --per-device-train-batch-size 2 "
    "--learning-rate 1e-3 --seed 5 ";

TEST(TrainerOutput, ClockAndTimedeltaAsTrainerPrintsThem) {
  EXPECT_EQ(format_clock(0), "0:00:00");
  EXPECT_EQ(format_clock(3725.4), "1:02:05");
  EXPECT_EQ(format_clock(45296), "12:34:56");
  // transformers' _secs2timedelta (tests/tools/make_metrics_block.py).
  EXPECT_EQ(format_timedelta(0.0), "0:00:00.00");
  EXPECT_EQ(format_timedelta(7.999), "0:00:07.99");
  EXPECT_EQ(format_timedelta(83.4567), "0:01:23.45");
  EXPECT_EQ(format_timedelta(3725.019), "1:02:05.01");
  EXPECT_EQ(format_timedelta(90061.5), "1 day, 1:01:01.50");
}

TEST(TrainerOutput, MetricsBlockIsTrainers) {
  // Printed by transformers 5.24's Trainer.log_metrics (tests/tools/make_metrics_block.py).
  const std::map<std::string, double> train{{"epoch", 3.0},           {"train_loss", 0.41234567},
                                            {"train_runtime", 83.4567}, {"train_samples", 3668},
                                            {"train_samples_per_second", 131.853}, {"train_steps_per_second", 4.122}};
  EXPECT_EQ(format_metrics("train", train),
            "***** train metrics *****\n"
            "  epoch                    =        3.0\n"
            "  train_loss               =     0.4123\n"
            "  train_runtime            = 0:01:23.45\n"
            "  train_samples            =       3668\n"
            "  train_samples_per_second =    131.853\n"
            "  train_steps_per_second   =      4.122\n");
  const std::map<std::string, double> eval{{"epoch", 3.0},           {"eval_accuracy", 0.8602941176470589},
                                           {"eval_loss", 0.36},      {"eval_runtime", 3725.019},
                                           {"eval_samples", 408},    {"eval_samples_per_second", 1e-05},
                                           {"eval_steps_per_second", 12.0}};
  EXPECT_EQ(format_metrics("eval", eval),
            "***** eval metrics *****\n"
            "  epoch                   =        3.0\n"
            "  eval_accuracy           =     0.8603\n"
            "  eval_loss               =       0.36\n"
            "  eval_runtime            = 1:02:05.01\n"
            "  eval_samples            =        408\n"
            "  eval_samples_per_second =        0.0\n"
            "  eval_steps_per_second   =       12.0\n");
}

TEST(TrainerOutput, ProgressLinePerLoggingStepWhenStderrIsAFile) {
  test::TempDir tmp;
  const std::string err = tmp.file("stderr.txt"), out = tmp.file("stdout.txt");
  // 200 steps logged every 20: stderr (a file) gets 10 lines; stdout ends with the metrics.
  const test::CommandResult r = test::run_anatomy(
      kRun + "--max-steps 200 --logging-steps 20 --output-dir " + tmp.file("run") + " > " + out + " 2> " + err +
      "; exit $?; ");
  ASSERT_EQ(r.exit_code, 0) << io::read_text_file(err);
  const std::string text = io::read_text_file(err);
  static const std::regex line_re(
      R"(^step (\d+)/200 \(\d+%\) \| epoch [0-9.]+ \| loss [0-9.]+ \| learning_rate [0-9.e+-]+ \| grad_norm [0-9.e+-]+ \| [0-9.]+ samples/s \| elapsed \d+:\d\d:\d\d \| ETA \d+:\d\d:\d\d$)");
  std::vector<int64_t> steps;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) steps.push_back(std::stoll(m[1]));
    EXPECT_EQ(line.find('\r'), std::string::npos) << "no bar redraws in a file: " << line;
  }
  std::vector<int64_t> expected;
  for (int64_t s = 20; s <= 200; s += 20) expected.push_back(s);
  EXPECT_EQ(steps, expected) << text;
  // The last lines of stdout: Trainer's train metrics block, with the final loss and runtime.
  const std::string printed = io::read_text_file(out);
  const size_t block = printed.find("***** train metrics *****\n");
  ASSERT_NE(block, std::string::npos) << printed;
  for (const char* key : {"epoch", "train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second"})
    EXPECT_NE(printed.find(std::string("  ") + key, block), std::string::npos) << key;
  EXPECT_TRUE(std::regex_search(printed.substr(block), std::regex(R"(train_runtime += \d+:\d\d:\d\d\.\d\d)")));
}

TEST(TrainerOutput, LoggedLossIsTrainersMeanAndTheStateHasItsLogHistory) {
  test::TempDir tmp;
  // The same run twice (deterministic): logged every step, and every 3 steps, with 3 batches accumulated
  // per step (4 examples: steps of 3 batches and of 1) and an evaluation every 4 steps.
  const std::string data = test::fixture("bert-tiny-cls-padded") + "/reference.safetensors";
  const std::string flags = "train --model " + test::fixture("bert-tiny-cls-padded") + " --train-file " + data +
                            " --validation-file " + data +
                            " --device cpu --per-device-train-batch-size 1 --gradient-accumulation-steps 3 "
                            "--max-steps 10 --learning-rate 1e-3 --eval-strategy steps --eval-steps 4 "
                            "--no-progress --output-dir ";
  ASSERT_EQ(test::run_anatomy(flags + tmp.file("every") + " --logging-steps 1").exit_code, 0);
  const test::CommandResult r = test::run_anatomy(flags + tmp.file("three") + " --logging-steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<int64_t, double> step_loss;
  for (const auto& j : json_lines(tmp.file("every/log.jsonl")))
    if (j.contains("step_loss")) {
      step_loss[j["step"].get<int64_t>()] = j["step_loss"].get<double>();
      EXPECT_EQ(j["loss"], j["step_loss"]) << "logged every step, the mean is the step's";
    }
  ASSERT_EQ(step_loss.size(), 10u);
  // Records at 3, 6, 9 and 10: the means of steps 1-3, 4-6, 7-9 and 10.
  const std::vector<std::pair<int64_t, int64_t>> windows{{1, 3}, {4, 6}, {7, 9}, {10, 10}};
  std::vector<nlohmann::json> records;
  for (const auto& j : json_lines(tmp.file("three/log.jsonl")))
    if (j.contains("step_loss")) records.push_back(j);
  ASSERT_EQ(records.size(), windows.size());
  double total = 0;
  for (size_t i = 0; i < windows.size(); ++i) {
    double sum = 0;
    for (int64_t s = windows[i].first; s <= windows[i].second; ++s) sum += step_loss.at(s);
    const double mean = sum / static_cast<double>(windows[i].second - windows[i].first + 1);
    EXPECT_EQ(records[i]["step"].get<int64_t>(), windows[i].second);
    EXPECT_NEAR(records[i]["loss"].get<double>(), mean, 1e-12 * mean) << "record at step " << windows[i].second;
    EXPECT_EQ(records[i]["step_loss"].get<double>(), step_loss.at(windows[i].second));
    total += sum;
  }
  const double train_loss = total / 10.0;

  // trainer_state.json: Trainer's log_history, in order: train records, eval records, the final record.
  const nlohmann::json state = read_json(tmp.file("three/trainer_state.json"));
  for (const char* key : {"epoch", "global_step", "max_steps", "logging_steps", "eval_steps", "save_steps",
                          "train_batch_size", "num_train_epochs", "total_flos", "log_history", "best_metric",
                          "is_world_process_zero"})
    EXPECT_TRUE(state.contains(key)) << key;
  EXPECT_EQ(state["global_step"], 10);
  EXPECT_EQ(state["max_steps"], 10);
  const nlohmann::json& history = state["log_history"];
  std::vector<int64_t> order;
  size_t train_i = 0;
  for (const auto& h : history) {
    order.push_back(h["step"].get<int64_t>());
    std::set<std::string> keys;
    for (const auto& [k, v] : h.items()) keys.insert(k);
    if (h.contains("loss")) {
      EXPECT_EQ(keys, (std::set<std::string>{"loss", "grad_norm", "learning_rate", "epoch", "step"}));
      EXPECT_EQ(h["loss"], records[train_i]["loss"]);
      EXPECT_EQ(h["grad_norm"], records[train_i]["grad_norm"]);
      EXPECT_EQ(h["learning_rate"], records[train_i]["learning_rate"]);
      ++train_i;
    } else if (h.contains("eval_loss")) {
      EXPECT_EQ(keys, (std::set<std::string>{"eval_loss", "eval_accuracy", "eval_f1", "eval_runtime",
                                             "eval_samples_per_second", "eval_steps_per_second", "epoch", "step"}));
    } else {
      EXPECT_EQ(keys, (std::set<std::string>{"train_runtime", "train_samples_per_second", "train_steps_per_second",
                                             "train_loss", "epoch", "step"}));
      EXPECT_NEAR(h["train_loss"].get<double>(), train_loss, 1e-12 * train_loss);
    }
  }
  EXPECT_EQ(order, (std::vector<int64_t>{3, 4, 6, 8, 9, 10, 10}));

  // run_glue's results files: train_results.json, eval_results.json, and both in all_results.json.
  const nlohmann::json train = read_json(tmp.file("three/train_results.json"));
  const nlohmann::json eval = read_json(tmp.file("three/eval_results.json"));
  const nlohmann::json all = read_json(tmp.file("three/all_results.json"));
  EXPECT_NEAR(train["train_loss"].get<double>(), train_loss, 1e-12 * train_loss);
  EXPECT_EQ(train["train_samples"], 4);
  EXPECT_EQ(eval["eval_samples"], 4);
  for (const char* key : {"train_runtime", "train_samples_per_second", "train_steps_per_second", "epoch"})
    EXPECT_TRUE(train.contains(key)) << key;
  for (const char* key : {"eval_loss", "eval_accuracy", "eval_runtime", "eval_samples_per_second", "epoch"})
    EXPECT_TRUE(eval.contains(key)) << key;
  for (const auto& [k, v] : train.items()) EXPECT_EQ(all[k], v) << k;
  for (const auto& [k, v] : eval.items())
    if (k != "epoch") EXPECT_EQ(all[k], v) << k;
  EXPECT_NE(r.output.find("***** eval metrics *****"), std::string::npos) << r.output;
}

TEST(TrainerOutput, ResumeContinuesTheLogHistoryOfItsCheckpoint) {
  test::TempDir tmp;
  const std::string flags = kRun + "--max-steps 8 --logging-steps 2 --no-progress ";
  ASSERT_EQ(test::run_anatomy(flags + "--save-strategy steps --save-steps 4 --output-dir " + tmp.file("a")).exit_code,
            0);
  const nlohmann::json checkpoint = read_json(tmp.file("a/checkpoint-4/trainer_state.json"));
  ASSERT_EQ(checkpoint["log_history"].size(), 2u);  // steps 2 and 4
  const test::CommandResult r =
      test::run_anatomy(flags + "--resume-from-checkpoint " + tmp.file("a/checkpoint-4") + " --output-dir " +
                        tmp.file("b"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json a = read_json(tmp.file("a/trainer_state.json"))["log_history"];
  const nlohmann::json b = read_json(tmp.file("b/trainer_state.json"))["log_history"];
  ASSERT_EQ(a.size(), 5u);  // 2, 4, 6, 8, the final record
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b[i]["step"], a[i]["step"]);
    EXPECT_EQ(b[i]["loss"], a[i]["loss"]) << "step " << a[i]["step"];
  }
  // The resumed run's train_loss: the mean over its own steps (5-8), as Trainer's.
  const double own = (b[2]["loss"].get<double>() + b[3]["loss"].get<double>()) / 2.0;
  EXPECT_NEAR(b[4]["train_loss"].get<double>(), own, 1e-12 * own);
  // The output directory's state is Trainer's, not a checkpoint: a resume from it is refused by name.
  const test::CommandResult refused =
      test::run_anatomy(flags + "--resume-from-checkpoint " + tmp.file("b") + " --output-dir " + tmp.file("c"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("not a checkpoint-N's"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace anatomy
