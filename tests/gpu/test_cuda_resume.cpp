// test_cuda_resume.cpp: on the GPU, a run resumed from its checkpoint gives
// the uninterrupted run's losses and weights bit for bit (the kernels are
// deterministic), in bf16 and in fp16 with its loss scaler's state.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "anatomy/io/files.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "../test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;


class CudaResume : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaResume, ContinuesBitwise) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  test::TempDir tmp;
  const std::string common =
      "train --model bert-mini --device cuda --dummy-size 48 --dummy-seq-len 64 --per-device-train-batch-size 8 "
      "--max-steps 12 --logging-steps 1 --learning-rate 1e-3 --warmup-steps 2 --no-progress --" + GetParam();
  const std::string full = tmp.file("full"), resumed = tmp.file("resumed");
  const test::CommandResult a =
      test::run_anatomy(common + " --save-strategy steps --save-steps 6 --output-dir " + full);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  fs::create_directories(resumed);
  fs::copy(full + "/checkpoint-6", resumed + "/checkpoint-6", fs::copy_options::recursive);
  const test::CommandResult b =
      test::run_anatomy(common + " --output-dir " + resumed + " --resume-from-checkpoint latest");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto expected = test::log_records(full), got = test::log_records(resumed);
  for (int64_t step = 7; step <= 12; ++step) {
    ASSERT_TRUE(got.count(step)) << step;
    EXPECT_EQ(got.at(step)["loss"].get<double>(), expected.at(step)["loss"].get<double>()) << "step " << step;
    if (GetParam() == "fp16")
      EXPECT_EQ(got.at(step)["loss_scale"], expected.at(step)["loss_scale"]) << "step " << step;
  }
  EXPECT_EQ(io::read_file_bytes(full + "/model.safetensors"), io::read_file_bytes(resumed + "/model.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaResume, ::testing::Values("bf16", "fp16"));

}  // namespace
}  // namespace anatomy
