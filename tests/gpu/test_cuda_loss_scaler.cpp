// test_cuda_loss_scaler.cpp: fp16's dynamic loss scaling on the GPU, forced:
// non-finite gradients skip the update (the weights and the schedule stay
// where they were) and halve the scale; 2000 clean steps double it. (A
// resumed run continuing the scale bit for bit is test_cuda_resume.cpp's.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "anatomy/io/safetensors.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "../cli_error_util.h"
#include "../test_util.h"

namespace anatomy {
namespace {

// A classifier weight of 1e30 is finite in float32 and infinite in fp16: every
// fp16 step's gradients overflow.
TEST(CudaLossScaler, NonFiniteGradientsSkipTheUpdateAndHalveTheScale) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  test::TempDir tmp;
  const std::string model = test::copy_fixture(tmp, "bert-tiny-cls");
  const std::string weights = model + "/model.safetensors";
  std::string bytes = test::read_all_bytes(weights);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const float huge = 1e30f;
  std::memcpy(bytes.data() + 8 + n + header["classifier.weight"]["data_offsets"][0].get<uint64_t>(), &huge,
              sizeof huge);
  test::write_all_bytes(weights, bytes);
  const std::string out = tmp.file("out"), train_file = tmp.file("train.safetensors");
  test::write_i64_tensors(train_file, test::valid_train_tensors());
  const test::CommandResult r = test::run_anatomy(
      "train --model " + model + " --device cuda --fp16 --train-file " + train_file +
      " --per-device-train-batch-size 4 --max-steps 3 --logging-steps 1 --learning-rate 1e-3 --no-progress "
      "--output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = test::log_records(out);
  ASSERT_EQ(records.size(), 3u);
  double scale = 65536.0;
  for (int64_t step = 1; step <= 3; ++step) {
    const nlohmann::json& j = records.at(step);
    EXPECT_EQ(j["loss_scale"].get<double>(), scale) << "step " << step;  // the scale the step ran with
    EXPECT_EQ(j["skipped_steps"].get<int64_t>(), step) << "step " << step;
    EXPECT_EQ(j["learning_rate"].get<double>(), 1e-3) << "the schedule advanced at step " << step;
    scale /= 2.0;
  }
  // No update was made: the saved weights are the loaded ones.
  const io::SafetensorsFile before = io::SafetensorsFile::open(weights);
  const io::SafetensorsFile after = io::SafetensorsFile::open(out + "/model.safetensors");
  for (const std::string& name : before.names()) {
    if (!after.has(name)) continue;
    EXPECT_EQ(after.read_f32(name), before.read_f32(name)) << name;
  }
}

TEST(CudaLossScaler, TwoThousandCleanStepsDoubleTheScale) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  const test::CommandResult r = test::run_anatomy(
      "train --model bert-tiny --device cuda --fp16 --dummy-size 8 --dummy-seq-len 16 "
      "--per-device-train-batch-size 8 --max-steps 2001 --logging-steps 1 --learning-rate 1e-5 --no-progress "
      "--output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = test::log_records(out);
  ASSERT_EQ(records.size(), 2001u);
  EXPECT_EQ(records.at(2000)["skipped_steps"].get<int64_t>(), 0);
  EXPECT_EQ(records.at(2000)["loss_scale"].get<double>(), 65536.0);
  EXPECT_EQ(records.at(2001)["loss_scale"].get<double>(), 131072.0);
}

}  // namespace
}  // namespace anatomy
