// test_out_of_memory.cpp: the out-of-memory advice (analysis/out_of_memory.h):
// every setting it offers fits the device by the memory plan's own figures,
// the batch asked for is kept as micro-batches with gradient accumulation,
// and the report names the allocation, the ledger and the settings.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <fmt/format.h>

#include "anatomy/analysis/memory_plan.h"
#include "anatomy/analysis/out_of_memory.h"
#include "anatomy/model/config.h"

namespace anatomy {
namespace {

struct Case {
  ModelConfig config = *model_preset("bert-base-uncased");
  TrainingArguments args;
  DataShape shape;
  PlanTarget target;
  Case() {
    args.per_device_train_batch_size = 64;
    shape.size = 128;
    shape.seq_len = 512;
    target.gpu = true;
  }
};

// The batch of `flags` ("--per-device-train-batch-size N"), or -1.
int64_t batch_of(const std::string& flags) {
  std::smatch m;
  if (!std::regex_search(flags, m, std::regex("--per-device-train-batch-size (\\d+)"))) return -1;
  return std::stoll(m[1].str());
}

TEST(OutOfMemoryAdvice, EverySettingFitsAndTheBatchAskedForIsKept) {
  Case c;
  // A device a byte short of the batch of 64, on which (with the advice's
  // headroom) a batch of 16 fits.
  const int64_t asked = plan_training(c.config, c.args, c.shape, c.target).ledger.reserved_peak;
  TrainingArguments small = c.args;
  small.per_device_train_batch_size = 16;
  DataShape small_shape = c.shape;
  small_shape.size = 32;
  const int64_t fits16 = plan_training(c.config, small, small_shape, c.target).ledger.reserved_peak;
  c.target.capacity = asked - 1;
  ASSERT_LT(fits16, capacity_with_headroom(c.target.capacity));
  ASSERT_FALSE(plan_training(c.config, c.args, c.shape, c.target).fits);

  const std::vector<FittingSetting> settings = settings_that_fit(c.config, c.args, c.shape, c.target);
  ASSERT_FALSE(settings.empty());
  // Best first: the same effective batch of 64 in micro-batches that fit.
  const std::string& first = settings.front().flags;
  const int64_t micro = batch_of(first);
  ASSERT_GT(micro, 0) << first;
  EXPECT_EQ(64 % micro, 0) << first;
  EXPECT_NE(first.find(fmt::format("--gradient-accumulation-steps {}", 64 / micro)), std::string::npos) << first;
  for (const FittingSetting& s : settings) {
    EXPECT_GT(s.predicted, 0) << s.flags;
    EXPECT_LE(s.predicted, capacity_with_headroom(c.target.capacity)) << s.flags;
    EXPECT_LT(batch_of(s.flags), 64 + 1) << s.flags;
  }
}

TEST(OutOfMemoryAdvice, TheReportNamesTheAllocationTheLedgerAndTheSettings) {
  Case c;
  c.target.capacity = int64_t{64} << 20;  // far too small for anything but the smallest batches
  const MemoryPlan plan = plan_training(c.config, c.args, c.shape, c.target);
  ASSERT_FALSE(plan.fits);
  ASSERT_TRUE(plan.failure.has_value());
  const std::vector<FittingSetting> settings = {{"--per-device-train-batch-size 2", int64_t{50} << 20}};
  const std::string report = out_of_memory_report(*plan.failure, /*predicted=*/true, std::nullopt, settings, 0);
  EXPECT_EQ(report.rfind("error: this run does not fit (the memory plan, before allocating anything): ", 0), 0u)
      << report;
  EXPECT_NE(report.find("by category:"), std::string::npos) << report;
  EXPECT_NE(report.find("total"), std::string::npos) << report;
  EXPECT_NE(report.find("--per-device-train-batch-size 2 fits: predicted 50.0 MiB"), std::string::npos) << report;
  const std::string none = out_of_memory_report(*plan.failure, /*predicted=*/false, std::nullopt, {}, 0);
  EXPECT_NE(none.find("finds no batch size that fits"), std::string::npos) << none;
  EXPECT_EQ(none.find("memory plan, before allocating"), std::string::npos) << none;
}

}  // namespace
}  // namespace anatomy
