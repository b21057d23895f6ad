// test_lr_plateau.cpp: --lr-scheduler-type reduce_lr_on_plateau.
// - PlateauSchedule gives torch's ReduceLROnPlateau learning rates, as
//   transformers' get_scheduler builds it, after each metric of a sequence
//   (tests/fixtures/lr-plateau, made by tests/tools/make_plateau.py).
// - A run steps it at each evaluation with eval_loss: the rate stays until the
//   11th evaluation without a relative improvement of 1e-4 (patience 10), then
//   drops tenfold for the updates after it.
// - Without evaluation it is refused, as TrainingArguments refuses it.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "anatomy/io/files.h"
#include "anatomy/optim/plateau.h"
#include "test_util.h"

namespace anatomy {
namespace {

TEST(LrPlateau, RatesEqualTorchsReduceLROnPlateau) {
  const auto ref = nlohmann::json::parse(io::read_text_file(test::fixture("lr-plateau/reference.json")));
  PlateauSchedule schedule(ref["base_lr"].get<double>());
  const auto& metrics = ref["metrics"];
  const auto& rates = ref["learning_rates"];
  ASSERT_EQ(metrics.size(), rates.size());
  int reductions = 0;
  double last = schedule.lr;
  for (size_t i = 0; i < metrics.size(); ++i) {
    schedule.step(metrics[i].get<double>());
    EXPECT_EQ(schedule.lr, rates[i].get<double>()) << "after metric " << i;
    reductions += schedule.lr != last;
    last = schedule.lr;
  }
  EXPECT_EQ(reductions, 4) << "the sequence exercises several reductions";
}

TEST(LrPlateau, ARunStepsItAtEachEvaluation) {
  const std::string fixture = test::fixture("bert-tiny-cls-padded");
  const std::string data = fixture + "/reference.safetensors";
  test::TempDir tmp;
  // 1e-7: the validation loss moves by less than the threshold (1e-4 relative; at 1e-6 AdamW's first
  // steps, about the rate per weight whatever the gradient, moved it by 1.2e-4 in three steps), so every
  // evaluation after the first is "no improvement": the 12th (patience 10 exceeded) cuts the rate tenfold.
  // (At 1e-8 the cut would be below torch's eps of 1e-8 and is skipped, as torch skips it.)
  const test::CommandResult r = test::run_anatomy(
      "train --model " + fixture + " --train-file " + data + " --validation-file " + data +
      " --device cpu --per-device-train-batch-size 2 --max-steps 16 --learning-rate 1e-7 --warmup-steps 4 "
      "--logging-steps 1 --eval-strategy steps --eval-steps 1 --no-progress --lr_scheduler_type "
      "reduce_lr_on_plateau --output-dir " + tmp.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<int64_t, double> rate, eval_loss;
  std::ifstream in(tmp.file("run/log.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("learning_rate")) rate[j["step"].get<int64_t>()] = j["learning_rate"].get<double>();
    if (j.contains("eval_loss")) eval_loss[j["step"].get<int64_t>()] = j["eval_loss"].get<double>();
  }
  ASSERT_EQ(rate.size(), 16u);
  ASSERT_EQ(eval_loss.size(), 16u);
  for (int64_t s = 2; s <= 16; ++s)  // the premise: no evaluation improves on the first by the threshold
    ASSERT_GE(eval_loss[s], eval_loss[1] * (1 - 1e-4)) << "step " << s;
  // Trainer ignores the warmup under this schedule: the base rate from the first step.
  for (int64_t s = 1; s <= 12; ++s) EXPECT_EQ(rate[s], 1e-7) << "step " << s;
  for (int64_t s = 13; s <= 16; ++s) EXPECT_DOUBLE_EQ(rate[s], 1e-8) << "step " << s;
}

TEST(LrPlateau, NeedsAnEvaluationStrategy) {
  const test::CommandResult r = test::run_anatomy(
      "train --model bert-tiny --device cpu --dummy-size 4 --dummy-seq-len 8 --max-steps 2 --no-progress "
      "--lr-scheduler-type reduce_lr_on_plateau");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--lr-scheduler-type reduce_lr_on_plateau: needs an evaluation (--eval-strategy steps or "
                          "epoch), as Trainer's"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace anatomy
