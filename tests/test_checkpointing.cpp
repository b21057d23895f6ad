// test_checkpointing.cpp: checkpoints and resume through `anatomy train`.
// - Train 20 steps saving at 10; resume a second run from checkpoint-10: its
//   losses 11-20 and final weights are bitwise those of the uninterrupted run
//   (two epochs with shuffling, weight decay, warmup, for every optimizer, and
//   with gradient accumulation).
// - A run killed with SIGKILL while it saves leaves only whole checkpoints.
// - A checkpoint of other settings, or none at all, is one clear error.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/io/files.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/checkpointing.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;

// step -> loss, from a run's log.jsonl (logging every step).
std::map<int64_t, double> losses(const std::string& dir) {
  std::map<int64_t, double> out;
  std::ifstream in(dir + "/log.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

struct ResumeCase {
  std::string name, flags;
};

class Resume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(Resume, ContinuesBitwiseWhereItStopped) {
  test::TempDir tmp;
  const std::string common =
      "train --model bert-tiny --device cpu --dummy-size 40 --dummy-seq-len 32 --per-device-train-batch-size 4 "
      "--max-steps 20 --logging-steps 1 --learning-rate 1e-3 --weight-decay 0.01 --warmup-steps 3 --no-progress "
      "--seed 7 " + GetParam().flags;
  const std::string full = tmp.file("full"), resumed = tmp.file("resumed");
  const test::CommandResult a =
      test::run_anatomy(common + " --save-strategy steps --save-steps 10 --output-dir " + full);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_TRUE(fs::exists(full + "/checkpoint-10/optimizer.safetensors"));
  ASSERT_TRUE(fs::exists(full + "/checkpoint-20/trainer_state.json"));
  const TrainerState state = read_trainer_state(full + "/checkpoint-10");
  EXPECT_EQ(state.global_step, 10);

  fs::create_directories(resumed);
  fs::copy(full + "/checkpoint-10", resumed + "/checkpoint-10", fs::copy_options::recursive);
  const test::CommandResult b =
      test::run_anatomy(common + " --output-dir " + resumed + " --resume-from-checkpoint latest");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("Resuming from"), std::string::npos) << b.output;

  const auto expected = losses(full), got = losses(resumed);
  ASSERT_EQ(expected.size(), 20u);
  for (int64_t step = 11; step <= 20; ++step) {
    ASSERT_TRUE(got.count(step)) << "step " << step;
    EXPECT_EQ(got.at(step), expected.at(step)) << "step " << step << " (bitwise)";
  }
  EXPECT_EQ(io::read_file_bytes(full + "/model.safetensors"), io::read_file_bytes(resumed + "/model.safetensors"))
      << "the final weights differ";
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, Resume,
    ::testing::Values(ResumeCase{"adamw", ""}, ResumeCase{"sgd_momentum", "--optim sgd --optim-args momentum=0.9"},
                      ResumeCase{"adafactor", "--optim adafactor"}, ResumeCase{"adamw_8bit", "--optim adamw_8bit"},
                      ResumeCase{"accumulation", "--gradient-accumulation-steps 3"},
                      ResumeCase{"workers", "--dataloader-num-workers 2"}),
    [](const auto& info) { return info.param.name; });

// Every checkpoint-N present is whole: its state parses with step N, the
// optimizer file and the model load.
void expect_whole_checkpoints(const std::string& dir, int* seen) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) != 0) continue;
    ++*seen;
    const TrainerState s = read_trainer_state(entry.path().string());
    EXPECT_EQ("checkpoint-" + std::to_string(s.global_step), name);
    auto cpu = make_cpu_backend(1);
    const ModelSource source = resolve_model(entry.path().string());
    BertStyleModel model(*cpu, source.config);
    EXPECT_NO_THROW(load_weights(model, entry.path().string(), 0)) << name;
    EXPECT_NO_THROW(io::SafetensorsFile::open(entry.path().string() + "/optimizer.safetensors")) << name;
  }
}

TEST(Checkpointing, KilledWhileSavingLeavesOnlyWholeCheckpoints) {
  test::TempDir tmp;
  std::mt19937 rng(5);
  int whole = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::string out = tmp.file("run" + std::to_string(attempt));
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // A checkpoint every step: the process is saving much of the time.
      const std::string binary = test::anatomy_binary();
      execl(binary.c_str(), binary.c_str(), "train", "--model", "bert-mini", "--device", "cpu", "--dummy-size", "64",
            "--dummy-seq-len", "16", "--per-device-train-batch-size", "2", "--max-steps", "200", "--save-strategy",
            "steps", "--save-steps", "1", "--save-total-limit", "2", "--no-progress", "--output-dir", out.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 + rng() % 2000));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before it was killed; make it longer";
    if (fs::exists(out)) expect_whole_checkpoints(out, &whole);
  }
  EXPECT_GT(whole, 0) << "no checkpoint was written before the kills: the test proved nothing";
}

TEST(Checkpointing, OtherSettingsOrNoCheckpointAreClearErrors) {
  test::TempDir tmp;
  const std::string base =
      "train --model bert-tiny --device cpu --dummy-size 8 --dummy-seq-len 16 --max-steps 2 --no-progress "
      "--output-dir " + tmp.file("out");
  const test::CommandResult first =
      test::run_anatomy(base + " --per-device-train-batch-size 4 --save-strategy steps --save-steps 1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const test::CommandResult other_optimizer =
      test::run_anatomy(base + " --per-device-train-batch-size 4 --optim sgd --resume-from-checkpoint latest");
  EXPECT_EQ(other_optimizer.exit_code, 1);
  EXPECT_NE(other_optimizer.output.find("optimizer"), std::string::npos) << other_optimizer.output;
  const test::CommandResult other_batch = test::run_anatomy(
      base + " --per-device-train-batch-size 2 --resume-from-checkpoint " + tmp.file("out/checkpoint-1"));
  EXPECT_EQ(other_batch.exit_code, 1);
  EXPECT_NE(other_batch.output.find("batch size"), std::string::npos) << other_batch.output;
  const test::CommandResult none = test::run_anatomy(
      "train --model bert-tiny --device cpu --max-steps 1 --no-progress --output-dir " + tmp.file("empty") +
      " --resume-from-checkpoint latest");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.output.find("no checkpoint"), std::string::npos) << none.output;
  const test::CommandResult no_dir =
      test::run_anatomy("train --model bert-tiny --device cpu --max-steps 1 --save-strategy steps");
  EXPECT_EQ(no_dir.exit_code, 1);
  EXPECT_NE(no_dir.output.find("--output-dir"), std::string::npos) << no_dir.output;
  // --save-total-limit keeps the newest.
  const test::CommandResult limited = test::run_anatomy(
      "train --model bert-tiny --device cpu --dummy-size 8 --dummy-seq-len 16 --per-device-train-batch-size 2 "
      "--max-steps 4 --no-progress --save-strategy steps --save-steps 1 --save-total-limit 2 --output-dir " +
      tmp.file("limited"));
  ASSERT_EQ(limited.exit_code, 0) << limited.output;
  EXPECT_FALSE(fs::exists(tmp.file("limited/checkpoint-2")));
  EXPECT_TRUE(fs::exists(tmp.file("limited/checkpoint-3")));
  EXPECT_TRUE(fs::exists(tmp.file("limited/checkpoint-4")));
}


// Flat optimizer states hold each parameter where the saving build's layout
// put it: a checkpoint whose recorded layout differs, or (for flat states) is
// not recorded, as in checkpoints of builds before the record, is refused with
// one clear error instead of resuming with states under the wrong parameters.
TEST(Checkpointing, OptimizerStatesOfAnotherLayoutAreRefused) {
  test::TempDir tmp;
  const std::string base =
      "train --model bert-tiny --device cpu --dummy-size 8 --dummy-seq-len 16 --per-device-train-batch-size 4 "
      "--max-steps 2 --no-progress --output-dir " + tmp.file("out");
  const test::CommandResult first = test::run_anatomy(base + " --save-strategy steps --save-steps 1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string path = tmp.file("out/checkpoint-1/optimizer.safetensors");
  std::map<std::string, std::string> metadata;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<io::StWriteTensor> tensors;
  {
    const io::SafetensorsFile file = io::SafetensorsFile::open(path);
    metadata = file.metadata();
    ASSERT_EQ(metadata.count("parameter_layout"), 1u);
    for (const auto& name : file.names()) {
      const auto raw = file.raw(name);
      bytes.emplace_back(raw.begin(), raw.end());
    }
    size_t i = 0;
    for (const auto& name : file.names()) {
      const io::StTensorInfo& info = file.info(name);
      tensors.push_back({name, info.dtype, info.shape, bytes[i++].data()});
    }
  }
  const auto resume = [&] {
    return test::run_anatomy(base + " --resume-from-checkpoint " + tmp.file("out/checkpoint-1"));
  };
  ASSERT_EQ(resume().exit_code, 0);  // as saved, it resumes
  // Without its manifest, which would name the rewritten file first.
  fs::remove(tmp.file("out/checkpoint-1/checkpoint_files.json"));
  metadata["parameter_layout"] = "0123456789abcdef";
  io::write_safetensors(path, tensors, metadata);
  const test::CommandResult other = resume();
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.output.find("another layout of the parameters (0123456789abcdef"), std::string::npos)
      << other.output;
  metadata.erase("parameter_layout");
  io::write_safetensors(path, tensors, metadata);
  const test::CommandResult unrecorded = resume();
  EXPECT_EQ(unrecorded.exit_code, 1);
  EXPECT_NE(unrecorded.output.find("(not recorded"), std::string::npos) << unrecorded.output;
}

}  // namespace
}  // namespace anatomy
