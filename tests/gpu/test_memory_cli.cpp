// test_memory_cli.cpp: the memory anatomy end to end on a GPU, through the
// program: a run's anatomy adds up to NVML and its plan predicted it; a batch
// that cannot fit ends with the out-of-memory report and exit code 3, and the
// first setting that report suggests then trains.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy {
namespace {

#define REQUIRE_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

TEST(MemoryCli, TheAnatomyAddsUpToNvmlAndThePlanPredictedIt) {
  REQUIRE_GPU();
  test::TempDir dir;
  const auto r = test::run_anatomy("train --model bert-base-uncased --bf16 --per-device-train-batch-size 8 "
                                   "--dummy-seq-len 128 --max-steps 3 --no-progress --output-dir " + dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir.file("anatomy.json"));
  ASSERT_TRUE(in) << "anatomy.json written";
  const nlohmann::json a = nlohmann::json::parse(in);
  const auto& ledger = a["ledger"];
  const auto& predicted = a["predicted"];
  // The plan is the estimate: the ledger's peak and composition exactly, the pool's segments exactly.
  EXPECT_EQ(predicted["peak_total"].get<int64_t>(), ledger["peak_total"].get<int64_t>());
  EXPECT_EQ(predicted["reserved_peak"].get<int64_t>(), ledger["reserved_peak"].get<int64_t>());
  // The rows add up to what NVML says the process uses (unattributed is the remainder, shown).
  int64_t rows = 0, unattributed = 0;
  for (const auto& row : a["rows"]) {
    if (row["key"] == "unattributed") unattributed = row["at_peak"].get<int64_t>();
    else if (row["at_peak"].get<int64_t>() > 0) rows += row["at_peak"].get<int64_t>();
  }
  const int64_t nvml = a["nvml_used"].get<int64_t>();
  ASSERT_GT(nvml, 0) << "NVML unavailable?";
  EXPECT_EQ(rows + unattributed, nvml);
  EXPECT_LE(std::abs(unattributed), std::max<int64_t>(nvml / 100, int64_t{64} << 20));
  // Predicted NVML use within 2% of the measurement.
  const double error = std::abs(static_cast<double>(predicted["nvml_total"].get<int64_t>() - nvml)) / nvml;
  EXPECT_LT(error, 0.02);
}

TEST(MemoryCli, ABatchThatCannotFitEndsWithTheReportAndExitCode3AndASuggestionRuns) {
  REQUIRE_GPU();
  test::TempDir dir;
  const auto r = test::run_anatomy("train --per-device-train-batch-size 512 --max-steps 2 --no-progress --output-dir " +
                                   dir.path().string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("does not fit"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("free of"), std::string::npos) << "the GPU's free and total memory";
  EXPECT_FALSE(std::filesystem::exists(dir.file("log.jsonl"))) << "nothing half-written";
  std::smatch m;
  // The first suggestion: the same effective batch in micro-batches that fit.
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(\n    (--[^\n]*?) fits: predicted)"))) << r.output;
  EXPECT_NE(m[1].str().find("--gradient-accumulation-steps"), std::string::npos) << m[1].str();
  const auto ok = test::run_anatomy("train " + m[1].str() + " --max-steps 1 --no-progress");
  EXPECT_EQ(ok.exit_code, 0) << m[1].str() << "\n" << ok.output;
}

}  // namespace
}  // namespace anatomy
