// test_evaluation.cpp: evaluation during training (--eval-strategy).
// - The metrics logged at a step equal those `anatomy evaluate` (the separate
//   inference model, packed batches) computes from that step's checkpoint.
// - --load-best-model-at-end leaves the final model equal to the checkpoint
//   of the best logged evaluation, and --save-total-limit keeps it.
// - The memory plan includes the evaluation: equal to the CPU run's ledger.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/analysis/memory_plan.h"
#include "anatomy/data/dataset.h"
#include "anatomy/io/files.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> evaluations(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/log.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) out.push_back(j);
  }
  return out;
}

TEST(Evaluation, LoggedMetricsEqualAnatomyEvaluateOnTheCheckpoint) {
  const std::string fixture = test::fixture("bert-tiny-cls-padded");
  const std::string data = fixture + "/reference.safetensors";
  test::TempDir tmp;
  const std::string out = tmp.file("run");
  const test::CommandResult r = test::run_anatomy(
      "train --model " + fixture + " --train-file " + data + " --validation-file " + data +
      " --device cpu --per-device-train-batch-size 2 --max-steps 4 --learning-rate 1e-3 --eval-strategy steps "
      "--eval-steps 2 --per-device-eval-batch-size 3 --save-strategy steps --save-steps 2 --logging-steps 1 "
      "--no-progress --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Evaluation at step 2"), std::string::npos) << r.output;
  const auto evals = evaluations(out);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0]["step"], 2);
  EXPECT_EQ(evals[1]["step"], 4);
  for (const auto& e : evals) {
    const std::string checkpoint = fmt::format("{}/checkpoint-{}", out, e["step"].get<int64_t>());
    const test::CommandResult ev = test::run_anatomy("evaluate --model " + checkpoint + " --input " + data +
                                                     " --device cpu --no-progress --metrics " + tmp.file("m.json"));
    ASSERT_EQ(ev.exit_code, 0) << ev.output;
    const auto m = nlohmann::json::parse(std::ifstream(tmp.file("m.json")));
    for (const char* key : {"eval_loss", "eval_accuracy", "eval_f1"}) {
      ASSERT_TRUE(e.contains(key)) << key;
      // Two float32 forwards (padded training model, packed inference model), float64 sums.
      EXPECT_NEAR(e[key].get<double>(), m[key].get<double>(), 1e-5 * std::max(1.0, std::abs(m[key].get<double>())))
          << key << " at step " << e["step"];
    }
  }
}

TEST(Evaluation, LoadBestModelAtEndKeepsAndReloadsTheBestCheckpoint) {
  const std::string fixture = test::fixture("bert-tiny-cls-padded");
  const std::string data = fixture + "/reference.safetensors";
  test::TempDir tmp;
  const std::string out = tmp.file("run");
  // A learning rate high enough that the validation loss goes up and down.
  const test::CommandResult r = test::run_anatomy(
      "train --model " + fixture + " --train-file " + data + " --validation-file " + data +
      " --device cpu --per-device-train-batch-size 1 --max-steps 8 --learning-rate 3e-2 --eval-strategy steps "
      "--eval-steps 1 --save-strategy steps --save-steps 1 --save-total-limit 1 --load-best-model-at-end "
      "--metric-for-best-model loss --no-progress --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto evals = evaluations(out);
  ASSERT_EQ(evals.size(), 8u);
  int64_t best = 0;
  double best_loss = 0;
  for (const auto& e : evals)
    if (best == 0 || e["eval_loss"].get<double>() < best_loss) {
      best = e["step"].get<int64_t>();
      best_loss = e["eval_loss"].get<double>();
    }
  const std::string best_dir = fmt::format("{}/checkpoint-{}", out, best);
  ASSERT_TRUE(fs::exists(best_dir)) << "the best checkpoint was deleted by --save-total-limit";
  EXPECT_TRUE(fs::exists(out + "/checkpoint-8"));
  EXPECT_NE(r.output.find("Loaded the best model from " + best_dir), std::string::npos) << r.output;
  EXPECT_EQ(io::read_file_bytes(out + "/model.safetensors"), io::read_file_bytes(best_dir + "/model.safetensors"));
  const test::CommandResult bad = test::run_anatomy(
      "train --model " + fixture + " --train-file " + data + " --device cpu --max-steps 1 --validation-file " + data +
      " --eval-strategy steps --load-best-model-at-end --output-dir " + tmp.file("bad"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("--load-best-model-at-end"), std::string::npos) << bad.output;
  const test::CommandResult no_file =
      test::run_anatomy("train --model bert-tiny --device cpu --max-steps 1 --eval-strategy steps");
  EXPECT_EQ(no_file.exit_code, 1);
  EXPECT_NE(no_file.output.find("--validation-file"), std::string::npos) << no_file.output;
}

TEST(Evaluation, TheMemoryPlanIncludesIt) {
  const ModelConfig config = *model_preset("bert-tiny");
  const Dataset data = make_dummy_dataset(6, 32, 1);
  const Dataset eval = make_dummy_dataset(20, 64, 2);  // longer sequences, a larger batch: the peak
  TrainingArguments args;
  args.per_device_train_batch_size = 2;
  args.per_device_eval_batch_size = 16;
  args.eval_strategy = "steps";
  args.eval_steps = 2;
  args.max_steps = 3;
  args.progress = false;
  PlanTarget cpu;
  cpu.gpu = false;
  const MemoryPlan plan = plan_training(config, args, DataShape::of(data, &eval), cpu);
  TrainingArguments without = args;
  without.eval_strategy = "no";
  const MemoryPlan plain = plan_training(config, without, DataShape::of(data, &eval), cpu);
  EXPECT_GT(plan.ledger.peak_total, plain.ledger.peak_total) << "a batch of 16 x 64 outweighs one of 2 x 32";

  auto backend = make_cpu_backend(1);
  LedgerSnapshot measured;
  {
    BertStyleModel model(*backend, config);
    init_weights(model, 1);
    Trainer trainer(*backend, model, data, args, &eval);
    measured = trainer.train().memory;
  }
  EXPECT_EQ(plan.ledger.peak_total, measured.peak_total);
  for (size_t k = 0; k < kCategoryCount; ++k)
    EXPECT_EQ(plan.ledger.peak[k], measured.peak[k]) << category_name(static_cast<Category>(k));
  EXPECT_EQ(plan.ledger.peak_phase, measured.peak_phase);
}

}  // namespace
}  // namespace anatomy
