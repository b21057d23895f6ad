// Hugging Face's command-line syntax (cli/hf_arguments.h): underscores, `--flag True/False`, TrainingArguments
// names that are known but not supported, one clear line for an unknown flag; and a run_glue-style command
// line through the binary, with a transformers schedule whose rates log.jsonl must show.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "anatomy/cli/hf_arguments.h"
#include "anatomy/core/error.h"
#include "anatomy/optim/optimizer.h"
#include "test_util.h"

namespace anatomy::cli {
namespace {

struct Flags {
  int64_t batch = 0;
  bool fp16 = false, progress_off = false;
  std::string model, output;
};

// A command with the kinds of flags the real ones have.
struct TestApp {
  CLI::App app;
  Flags f;
  TestApp() {
    auto* train = app.add_subcommand("train");
    train->add_option("--per-device-train-batch-size", f.batch);
    train->add_flag("--fp16", f.fp16);
    train->add_flag("--no-progress,--disable-tqdm", f.progress_off);
    train->add_option("--model,--model_name_or_path", f.model);
    train->add_option("--output-dir", f.output);
  }
  std::vector<std::string> normalized(const std::vector<std::string>& args) {
    return normalize_hf_arguments(app, args);
  }
  void parse(const std::vector<std::string>& args) {
    std::vector<std::string> a = normalized(args);
    std::reverse(a.begin(), a.end());
    app.parse(a);
  }
};

std::string error_of(const std::vector<std::string>& args) {
  TestApp t;
  try {
    t.normalized(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfArguments, UnderscoresAndBooleanWords) {
  TestApp t;
  t.parse({"train", "--per_device_train_batch_size", "8", "--fp16", "True", "--disable_tqdm", "false",
           "--model_name_or_path", "m", "--output_dir=o"});
  EXPECT_EQ(t.f.batch, 8);
  EXPECT_TRUE(t.f.fp16);
  EXPECT_FALSE(t.f.progress_off);
  EXPECT_EQ(t.f.model, "m");
  EXPECT_EQ(t.f.output, "o");
  EXPECT_EQ(t.normalized({"train", "--fp16=no", "--disable-tqdm", "--fp16", "Y", "--fp16"}),
            (std::vector<std::string>{"train", "--disable-tqdm", "--fp16", "--fp16"}));
  // After a lone "--" nothing is touched (launch's command).
  EXPECT_EQ(t.normalized({"train", "--", "--fp16_x", "True"}),
            (std::vector<std::string>{"train", "--", "--fp16_x", "True"}));
}

TEST(HfArguments, ErrorsNameTheFlag) {
  EXPECT_EQ(error_of({"train", "--fp16=maybe"}), "--fp16=maybe: expected true or false");
  EXPECT_THAT(error_of({"train", "--deepspeed", "ds.json", "--nonsense", "3"}),
              testing::StartsWith("--deepspeed: a Hugging Face TrainingArguments (or run_glue) option that "
                                  "`anatomy train` does not support"));
  EXPECT_THAT(error_of({"train", "--per_device_train_batch_size", "4", "--nonsense_flag", "3", "--other"}),
              testing::StartsWith("--nonsense_flag: unknown flag of `anatomy train`"));
}

// A run_glue-style command line, pasted: underscores, True/False, transformers 5's ratio warmup, a cosine
// schedule; log.jsonl's learning rates are transformers' (scheduled_lr, checked against it in
// test_lr_schedules.cpp) at every step.
TEST(HfArguments, RunGlueCommandLineTrains) {
  const test::TempDir dir;
  const auto r = test::run_anatomy(
      "train --use_cpu True --model_name_or_path bert-tiny --do_train --per_device_train_batch_size 4 "
      "--dummy_size 40 --dummy_seq_len 16 --num_train_epochs 1 --learning_rate 3e-4 --lr_scheduler_type cosine "
      "--warmup_steps 0.2 --logging_steps 1 --disable_tqdm True --report_to none --bf16 False "
      "--gradient_checkpointing False --output_dir " + dir.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream log(dir.file("out/log.jsonl"));
  std::string line;
  std::vector<double> rates;
  while (std::getline(log, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("learning_rate") && j.contains("step")) rates.push_back(j["learning_rate"].get<double>());
  }
  ASSERT_EQ(rates.size(), 10u) << r.output;  // 40 examples, batch 4: 10 steps, warmup ceil(10 * 0.2) = 2
  for (size_t step = 0; step < rates.size(); ++step)
    EXPECT_NEAR(rates[step], scheduled_lr(ScheduleKind::Cosine, 3e-4, static_cast<int64_t>(step), 2, 10), 1e-12)
        << step;
  EXPECT_EQ(rates[0], 0.0);
  EXPECT_GT(rates[2], rates[9]);
}

}  // namespace
}  // namespace anatomy::cli
