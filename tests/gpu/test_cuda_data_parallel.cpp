// test_cuda_data_parallel.cpp: data parallelism over NCCL on a machine with
// at least two GPUs (skipped otherwise): two ranks, each with batch b, train
// as one GPU with batch 2b (dropout off, float32: within 1e-5 relative), for
// ZeRO stages 0 to 3 (at 2 and 3 also the final weights, and each rank's
// ledger peak equal to the plan it printed); in bf16, stages 1-3 give stage 0's
// losses and weights bit for bit; killing a rank ends the other within the timeout with a
// message naming it; two "nodes" on one host (two launches, one GPU each) give
// the single launch's losses.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/io/safetensors.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "../test_process.h"

extern char** environ;

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using test::free_port;
using Clock = std::chrono::steady_clock;


// `anatomy <args>` with extra environment variables, stdout and stderr into `log`.
pid_t spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars,
            const std::string& log) {
  std::vector<std::string> argv_text = {test::anatomy_binary()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string text = *e, name = text.substr(0, text.find('='));
    if (vars.count(name) || name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" ||
        name == "LOCAL_WORLD_SIZE" || name == "MASTER_ADDR" || name == "MASTER_PORT")
      continue;
    env_text.push_back(text);
  }
  for (const auto& [k, v] : vars) env_text.push_back(k + "=" + v);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv, envp;
    for (std::string& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// The exit code, or -signal; -1000 when it did not end within `seconds` (then it is killed).
int wait_for(pid_t pid, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (Clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1000;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Each logged step's loss, in step order.
std::vector<double> losses(const std::string& dir) {
  std::vector<double> out;
  for (const auto& [step, record] : test::log_records(dir)) out.push_back(record["loss"].get<double>());
  return out;
}

// A bert-mini directory with dropout off, made by one step of training.
std::string no_dropout_model(const test::TempDir& tmp) {
  const std::string dir = tmp.file("model");
  const auto made = test::run_anatomy("train --device cuda --model bert-mini --dummy-size 4 --dummy-seq-len 32 "
                                      "--max-steps 1 --no-progress --output-dir " + dir);
  EXPECT_EQ(made.exit_code, 0) << made.output;
  nlohmann::json config = nlohmann::json::parse(read_file(dir + "/config.json"));
  config["hidden_dropout_prob"] = 0.0;
  config["attention_probs_dropout_prob"] = 0.0;
  std::ofstream(dir + "/config.json") << config.dump(2);
  return dir;
}

bool two_gpus() { return cuda::device_count() >= 2; }

const std::string kCommon = " --device cuda --dummy-size 96 --dummy-seq-len 64 --max-steps 6 --logging-steps 1 "
                            "--learning-rate 1e-3 --no-progress --seed 3";

class CudaDataParallel : public ::testing::TestWithParam<int> {};

TEST_P(CudaDataParallel, TwoGpusTrainAsOneWithTheWholeBatch) {
  if (!two_gpus()) GTEST_SKIP() << "fewer than two GPUs";
  test::TempDir tmp;
  const std::string model = no_dropout_model(tmp);
  const std::string one = tmp.file("one"), two = tmp.file("two");
  const auto a = test::run_anatomy("train --model " + model + kCommon + " --per-device-train-batch-size 16 "
                                   "--output-dir " + one);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto b = test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                                   " -- train --model " + model + kCommon + " --per-device-train-batch-size 8 "
                                   "--zero-stage " + std::to_string(GetParam()) + " --output-dir " + two);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("NCCL"), std::string::npos) << b.output;
  const std::vector<double> x = losses(one), y = losses(two);
  ASSERT_EQ(x.size(), 6u);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], x[i], 1e-5 * std::abs(x[i])) << "step " << i + 1;
  if (GetParam() < 2) return;
  // ZeRO 2/3: the weights the ranks end with (gathered from the shards) are the single GPU's.
  const test::WeightDifference w = test::weight_difference(one, two);
  EXPECT_LT(w.worst / w.scale, 1e-5) << "the final weights differ by " << w.worst;
  // Each rank's plan (printed before training) is its ledger's peak.
  for (const std::string& dir : {two, two + "/rank-1"}) {
    const auto j = nlohmann::json::parse(read_file(dir + "/anatomy.json"));
    EXPECT_EQ(j["predicted"]["peak_total"], j["ledger"]["peak_total"]) << dir;
    EXPECT_EQ(j["predicted"]["at_peak"], j["ledger"]["at_peak"]) << dir;
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStage, CudaDataParallel, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return "stage" + std::to_string(info.param); });

// bf16 on two GPUs, dropout off, no clipping: ZeRO stages 1-3 (the float32
// masters sharded, the 16-bit copy and the float32 embeddings, LayerNorms and
// head refreshed from them after each update; at 2 and 3 the gradients
// reduce-scattered, at 3 the weights gathered unit by unit) compute what plain
// data parallelism computes, bit for bit: a sum of two ranks is the same in
// any order, and every update is element by element.
TEST_P(CudaDataParallel, MixedPrecisionStagesAreTheDataParallelRunBitForBit) {
  if (GetParam() == 0) GTEST_SKIP() << "stage 0 is the reference";
  if (!two_gpus()) GTEST_SKIP() << "fewer than two GPUs";
  test::TempDir tmp;
  const std::string model = no_dropout_model(tmp);
  auto launch = [&](int stage, const std::string& dir) {
    return test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                             " -- train --model " + model + kCommon +
                             " --bf16 --max-grad-norm 0 --per-device-train-batch-size 8 --zero-stage " +
                             std::to_string(stage) + " --output-dir " + dir);
  };
  const std::string plain = tmp.file("plain"), sharded = tmp.file("sharded");
  const auto a = launch(0, plain);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto b = launch(GetParam(), sharded);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<double> x = losses(plain), y = losses(sharded);
  ASSERT_EQ(x.size(), 6u);
  EXPECT_EQ(y, x);
  EXPECT_EQ(read_file(sharded + "/model.safetensors"), read_file(plain + "/model.safetensors"));
}

// On one GPU: ANATOMY_DIST_FORCE=1 takes a world of one through the NCCL path
// (store, communicator, bucketed all-reduce, ZeRO-1's update and broadcast,
// ZeRO-2/3's reduce-scatter and gathers unit by unit),
// which must give the plain run's losses bit for bit (dropout on).
TEST_P(CudaDataParallel, NcclWorldOfOneIsThePlainRun) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  test::TempDir tmp;
  const std::string flags = " --device cuda --model bert-mini --dummy-size 48 --dummy-seq-len 64 --max-steps 6 "
                            "--logging-steps 1 --per-device-train-batch-size 8 --bf16 --no-progress";
  const auto plain = test::run_anatomy("train" + flags + " --output-dir " + tmp.file("plain"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ::setenv("ANATOMY_DIST_FORCE", "1", 1);
  const auto forced = test::run_anatomy("train" + flags + " --zero-stage " + std::to_string(GetParam()) +
                                        " --output-dir " + tmp.file("forced"));
  ::unsetenv("ANATOMY_DIST_FORCE");
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("NCCL"), std::string::npos) << forced.output;
  EXPECT_NE(forced.output.find("per rank on 1 ranks"), std::string::npos) << forced.output;
  const std::vector<double> x = losses(tmp.file("plain")), y = losses(tmp.file("forced"));
  ASSERT_EQ(x.size(), 6u);
  EXPECT_EQ(y, x);
}

TEST(CudaDataParallelFailure, KillingARankEndsTheOther) {
  if (!two_gpus()) GTEST_SKIP() << "fewer than two GPUs";
  test::TempDir tmp;
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r)
    pids.push_back(spawn({"train", "--device", "cuda", "--model", "bert-mini", "--dummy-size", "100000",
                          "--dummy-seq-len", "64", "--per-device-train-batch-size", "8", "--logging-steps", "1",
                          "--no-progress", "--output-dir", tmp.file("run")},
                         {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r)},
                          {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
                          {"ANATOMY_DIST_TIMEOUT", "20"}},
                         tmp.file("rank" + std::to_string(r) + ".log")));
  // Wait until both train (rank 0 has logged a step), then kill rank 1.
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && losses(tmp.file("run")).size() < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(losses(tmp.file("run")).size(), 3u) << read_file(tmp.file("rank0.log"));
  ::kill(pids[1], SIGKILL);
  const auto killed = Clock::now();
  EXPECT_EQ(wait_for(pids[1], 10), -SIGKILL);
  const int code = wait_for(pids[0], 60);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_NE(code, -1000) << "rank 0 still ran 60 s after rank 1 was killed";
  EXPECT_NE(code, 0);
  EXPECT_LT(seconds, 60.0);
  const std::string log = read_file(tmp.file("rank0.log"));
  EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
}

TEST(CudaDataParallelNodes, TwoLaunchesOnOneHostAsTwoNodes) {
  if (!two_gpus()) GTEST_SKIP() << "fewer than two GPUs";
  test::TempDir tmp;
  const std::string model = no_dropout_model(tmp);
  const std::string flags = " -- train --model " + model + kCommon + " --per-device-train-batch-size 8";
  const auto single = test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                                        flags + " --output-dir " + tmp.file("single"));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> nodes;
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> args = {"launch", "--nnodes", "2", "--node-rank", std::to_string(node),
                                     "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port,
                                     "--", "train", "--model", model};
    std::istringstream rest(kCommon + " --per-device-train-batch-size 8 --output-dir " + tmp.file("nodes"));
    for (std::string w; rest >> w;) args.push_back(w);
    nodes.push_back(spawn(args, {{"CUDA_VISIBLE_DEVICES", std::to_string(node)}},
                          tmp.file("node" + std::to_string(node) + ".log")));
  }
  EXPECT_EQ(wait_for(nodes[0], 300), 0) << read_file(tmp.file("node0.log"));
  EXPECT_EQ(wait_for(nodes[1], 60), 0) << read_file(tmp.file("node1.log"));
  const std::vector<double> x = losses(tmp.file("single")), y = losses(tmp.file("nodes"));
  ASSERT_EQ(x.size(), 6u);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-6 * std::abs(x[i])) << "step " << i + 1;
}

}  // namespace
}  // namespace anatomy
