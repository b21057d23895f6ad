// test_training_run.cpp: the run below the command line (run/training_run.h),
// called directly: what it writes, the engine's choices recorded, a profile
// instead of a model, and the profiled window.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/run/training_run.h"
#include "test_util.h"

namespace anatomy {
namespace {

run::TrainingRequest tiny_cpu_run(const std::string& output_dir) {
  run::TrainingRequest r;
  r.device = "cpu";
  r.args.model = "bert-tiny";
  r.args.dummy_size = 16;
  r.args.dummy_seq_len = 32;
  r.args.per_device_train_batch_size = 4;
  r.args.max_steps = 2;
  r.args.progress = false;
  r.args.output_dir = output_dir;
  r.model_given = r.dummy_size_given = r.dummy_seq_len_given = true;
  return r;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(TrainingRun, WritesTheModelAndTheAnatomyWithTheEngineChoices) {
  test::TempDir tmp;
  run::TrainingRequest r = tiny_cpu_run(tmp.file("out"));
  r.options.last_layer = LastLayer::All;
  r.options.attention = AttentionKernels::Cudnn;
  ASSERT_EQ(run::run_training(r), 0);
  EXPECT_TRUE(std::filesystem::exists(tmp.file("out/model.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(tmp.file("out/config.json")));
  const nlohmann::json anatomy = read_json(tmp.file("out/anatomy.json"));
  EXPECT_EQ(anatomy["engine_options"]["last_layer"], "all");
  EXPECT_EQ(anatomy["engine_options"]["attention"], "cudnn");
  EXPECT_EQ(anatomy["device"], "cpu");
  EXPECT_GT(anatomy["ledger"]["peak_total"].get<int64_t>(), 0);
}

// The run's lines go where the request says, the seed's summary among them.
TEST(TrainingRun, WritesItsLinesToTheRequestsStream) {
  test::TempDir tmp;
  run::TrainingRequest r = tiny_cpu_run(tmp.file("out"));
  const std::string lines_path = tmp.file("lines.txt");
  std::FILE* lines = std::fopen(lines_path.c_str(), "w");
  ASSERT_NE(lines, nullptr);
  r.out = lines;
  ASSERT_EQ(run::run_training(r), 0);
  std::fclose(lines);
  std::ifstream in(lines_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Training bert-tiny ("), std::string::npos) << text;
  EXPECT_NE(text.find("\nTime: "), std::string::npos) << text;
  EXPECT_NE(text.find("\nSamples/second: "), std::string::npos) << text;
  EXPECT_NE(text.find("Memory anatomy"), std::string::npos) << text;
}

TEST(TrainingRun, AProfileWritesItsTimesAndNoModel) {
  test::TempDir tmp;
  run::TrainingRequest r = tiny_cpu_run(tmp.file("out"));
  r.profile = true;
  r.profile_steps = 1;
  r.profile_warmup = 1;
  ASSERT_EQ(run::run_training(r), 0);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("out/model.safetensors")));
  const nlohmann::json profile = read_json(tmp.file("out/profile.json"));
  EXPECT_FALSE(profile.empty());
  r.profile_steps = 0;
  EXPECT_THROW(run::run_training(r), Error);
}

TEST(TrainingRun, TheProfiledWindowMovesEarlierInAShortRun) {
  EXPECT_EQ(run::profile_window(3, 5, 20), std::make_pair(int64_t{3}, int64_t{5}));
  EXPECT_EQ(run::profile_window(3, 5, 6), std::make_pair(int64_t{1}, int64_t{5}));
  EXPECT_EQ(run::profile_window(3, 5, 4), std::make_pair(int64_t{0}, int64_t{4}));
}

}  // namespace
}  // namespace anatomy
