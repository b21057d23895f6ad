// test_cuda_auto_batch.cpp: --auto-find-batch-size on the GPU takes the
// largest batch the memory plan says fits this device less the 2% headroom it
// keeps (analysis/memory_plan.h: capacity_with_headroom), so at most the
// batch `anatomy estimate` reports as the largest that fits and only a few
// percent below it, and trains with it without running out of memory.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "../test_util.h"

namespace anatomy {
namespace {

int64_t number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stoll(m[1].str());
}

TEST(CudaAutoBatch, TrainsTheLargestBatchThePlanSaysFits) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  test::TempDir tmp;
  const std::string run = "--model bert-large-uncased --bf16 --dummy-size 1024 --dummy-seq-len 512 "
                          "--per-device-train-batch-size 1024 --max-steps 2 --no-progress";
  const test::CommandResult plan = test::run_anatomy("estimate " + run);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const int64_t largest = number_after(plan.output, "Largest batch that fits: ([0-9]+) plain");
  ASSERT_GT(largest, 0) << plan.output;
  const test::CommandResult r =
      test::run_anatomy("train " + run + " --auto-find-batch-size --device cuda --output-dir " + tmp.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int64_t used = number_after(r.output, "batch 1024 does not fit; using ([0-9]+)");
  EXPECT_LE(used, largest) << r.output;
  EXPECT_GE(used, largest * 95 / 100) << "more than the headroom's worth below the plan's largest batch\n"
                                      << r.output;
  EXPECT_EQ(r.output.find("ran out of memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Samples/second"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace anatomy
