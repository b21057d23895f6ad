// test_data_parallel_resume.cpp: checkpoints, resume and failures of
// data-parallel runs on the CPU (the collectives go through the TCP store).
// - Two ranks train 8 steps saving at 4; a second run resumes from
//   checkpoint-4: its losses 5-8, its checkpoint-8 and its final weights are
//   bitwise those of the uninterrupted run, at ZeRO stages 0 to 3 (stage 1:
//   one optimizer shard per rank, its range recorded; 2 and 3: each rank's
//   chunks of every unit, and a second uninterrupted run is bitwise the
//   first). Dropout on: the masks resume too.
// - A checkpoint of another world size or stage, or one without a rank's
//   shard, is one clear error.
// - --load-best-model-at-end and --save-total-limit with two ranks at stages 1 and 3.
// - SIGKILL of one rank while the ranks train and save every step: the other
//   ends within the timeout with an error naming the lost rank and a non-zero
//   exit, and every checkpoint-N left is whole; under `anatomy launch` and
//   with torchrun-style variables set by hand (rank 1 killed, and rank 0, the
//   store's host).
// - Two "nodes" on one host (two `anatomy launch --nnodes 2`) train as one
//   launch of two ranks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/distributed/store.h"
#include "anatomy/distributed/zero.h"
#include "anatomy/distributed/zero_sharding.h"
#include "anatomy/io/files.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/checkpointing.h"
#include "test_process.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using test::free_port;
using Clock = std::chrono::steady_clock;
using test::Process;

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }


std::vector<std::string> split(const std::string& flags) {
  std::istringstream in(flags);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// `anatomy launch` of two ranks on a fresh port, then `train <flags>`.
std::string launch_two(const std::string& flags) {
  return "launch --nproc-per-node 2 --rendezvous-timeout 30 --master-port " + std::to_string(free_port()) +
         " -- train " + flags;
}


// The small Hugging Face fixture model (hidden 64, vocab 1024), copied, with dropout `p`.
std::string small_model(const test::TempDir& tmp, double p) {
  const std::string dir = tmp.file("model");
  fs::copy(test::fixture("bert-tiny-cls-padded"), dir, fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["hidden_dropout_prob"] = p;
  config["attention_probs_dropout_prob"] = p;
  std::ofstream(dir + "/config.json") << config.dump(2);
  return dir;
}

// `examples` random sequences of 16 tokens of the small model's vocabulary,
// with labels of its 3 classes, as a tensor file for --train-file.
std::string small_data(const test::TempDir& tmp, int64_t examples) {
  std::mt19937 rng(17);
  std::vector<int64_t> ids(static_cast<size_t>(examples * 16)), labels(static_cast<size_t>(examples));
  for (int64_t& id : ids) id = 1 + static_cast<int64_t>(rng() % 1023);
  for (int64_t& label : labels) label = static_cast<int64_t>(rng() % 3);
  const std::string path = tmp.file("train.safetensors");
  io::write_safetensors(path, {{"input_ids", io::StDType::I64, {examples, 16}, ids.data()},
                               {"labels", io::StDType::I64, {examples}, labels.data()}});
  return path;
}

// The metadata of a safetensors file as numbers.
std::map<std::string, int64_t> shard_meta(const std::string& path) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  std::map<std::string, int64_t> out;
  for (const auto& [key, value] : file.metadata())
    if (key != "optimizer" && key != "parameter_layout") out[key] = std::stoll(value);
  return out;
}

// A checkpoint of a two-rank run is whole: its state parses with its step,
// world and stage; the model loads; the optimizer states are there, for
// stage 1 as two shards that cover the flat buffer in rank order.
void expect_whole_two_rank_checkpoint(const fs::path& dir, int stage) {
  const std::string name = dir.filename().string();
  const TrainerState s = read_trainer_state(dir.string());
  EXPECT_EQ("checkpoint-" + std::to_string(s.global_step), name);
  EXPECT_EQ(s.world_size, 2) << name;
  EXPECT_EQ(s.zero_stage, stage) << name;
  auto cpu = make_cpu_backend(1);
  const ModelSource source = resolve_model(dir.string());
  BertStyleModel model(*cpu, source.config);
  EXPECT_NO_THROW(load_weights(model, dir.string(), 0)) << name;
  const int64_t total = model.weights().flat().numel();
  if (stage == 0) {
    EXPECT_NO_THROW(io::SafetensorsFile::open((dir / "optimizer.safetensors").string())) << name;
    EXPECT_FALSE(fs::exists(dir / optimizer_shard_file(0, 2))) << name;
    return;
  }
  EXPECT_FALSE(fs::exists(dir / "optimizer.safetensors")) << name;
  if (stage >= 2) {  // each rank: its chunk of every unit, equal on every rank
    const distributed::UnitShards want =
        distributed::unit_shards(bert_parameter_units(model.weights(), source.config), total, 0, 2);
    for (int r = 0; r < 2; ++r) {
      const fs::path shard = dir / optimizer_shard_file(r, 2);
      ASSERT_TRUE(fs::exists(shard)) << shard;
      const auto meta = shard_meta(shard.string());
      EXPECT_EQ(meta.at("rank"), r);
      EXPECT_EQ(meta.at("world_size"), 2);
      EXPECT_EQ(meta.at("unit_chunks"), 1);
      EXPECT_EQ(meta.at("shard_total"), total);
      EXPECT_EQ(meta.at("shard_begin"), 0);
      EXPECT_EQ(meta.at("shard_end"), want.shard_elements);
      EXPECT_EQ(meta.at("steps"), s.updates);
      EXPECT_EQ(io::SafetensorsFile::open(shard.string()).info("exp_avg").shape,
                (std::vector<int64_t>{want.shard_elements}));
    }
    return;
  }
  int64_t covered = 0;
  for (int r = 0; r < 2; ++r) {
    const fs::path shard = dir / optimizer_shard_file(r, 2);
    ASSERT_TRUE(fs::exists(shard)) << shard;
    const auto meta = shard_meta(shard.string());
    const distributed::ShardRange want = distributed::shard_range(total, r, 2);
    EXPECT_EQ(meta.at("rank"), r);
    EXPECT_EQ(meta.at("world_size"), 2);
    EXPECT_EQ(meta.at("shard_total"), total);
    EXPECT_EQ(meta.at("shard_begin"), covered) << "the shards follow each other";
    EXPECT_EQ(meta.at("shard_begin"), want.begin);
    EXPECT_EQ(meta.at("shard_end"), want.end);
    EXPECT_EQ(meta.at("steps"), s.updates);
    EXPECT_EQ(io::SafetensorsFile::open(shard.string()).info("exp_avg").shape,
              (std::vector<int64_t>{want.end - want.begin}));
    covered = meta.at("shard_end");
  }
  EXPECT_EQ(covered, total) << "the shards cover the flat buffer";
}

// The checkpoint-N directories of `dir`, each checked whole; how many.
int expect_whole_checkpoints(const std::string& dir, int stage) {
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("checkpoint-", 0) != 0) continue;
    ++seen;
    expect_whole_two_rank_checkpoint(entry.path(), stage);
  }
  return seen;
}

class DataParallelResume : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelResume, ContinuesBitwiseFromCheckpoint4) {
  const int stage = GetParam();
  test::TempDir tmp;
  const std::string model = small_model(tmp, 0.1);
  // 20 examples: 10 per rank, batches of 4, 4 and 2: 8 steps cross two epochs (reshuffled).
  const std::string common = "--model " + model + " --train-file " + small_data(tmp, 20) +
                             " --device cpu --per-device-train-batch-size 4 "
                             "--max-steps 8 --logging-steps 1 --learning-rate 1e-3 --weight-decay 0.01 "
                             "--warmup-steps 2 --no-progress --seed 11 --save-strategy steps --save-steps 4 "
                             "--zero-stage " + std::to_string(stage);
  const std::string full = tmp.file("full"), resumed = tmp.file("resumed");
  const auto a = test::run_anatomy(launch_two(common + " --output-dir " + full));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(expect_whole_checkpoints(full, stage), 2);
  if (stage >= 2) {  // the same run again: the same bits (the order of every sum is fixed)
    const std::string again = tmp.file("again");
    const auto a2 = test::run_anatomy(launch_two(common + " --output-dir " + again));
    ASSERT_EQ(a2.exit_code, 0) << a2.output;
    const auto first = test::log_records(full), second = test::log_records(again);
    ASSERT_EQ(first.size(), second.size());
    for (const auto& [step, x] : first) {
      EXPECT_EQ(second.at(step)["loss"].get<double>(), x["loss"].get<double>()) << "step " << step;
      EXPECT_EQ(second.at(step)["grad_norm"].get<double>(), x["grad_norm"].get<double>()) << "step " << step;
    }
    EXPECT_EQ(io::read_file_bytes(full + "/model.safetensors"), io::read_file_bytes(again + "/model.safetensors"));
    // Stage 3's checkpoint holds the model gathered from the shards: the one the run ends with.
    EXPECT_EQ(io::read_file_bytes(full + "/checkpoint-8/model.safetensors"),
              io::read_file_bytes(full + "/model.safetensors"));
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(io::read_file_bytes(full + "/checkpoint-8/" + optimizer_shard_file(r, 2)),
                io::read_file_bytes(again + "/checkpoint-8/" + optimizer_shard_file(r, 2)));
  }

  fs::create_directories(resumed);
  fs::copy(full + "/checkpoint-4", resumed + "/checkpoint-4", fs::copy_options::recursive);
  const auto b = test::run_anatomy(launch_two(common + " --output-dir " + resumed + " --resume-from-checkpoint latest"));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "[rank 0] Resuming from")) << b.output;
  EXPECT_TRUE(contains(b.output, "[rank 1] Resuming from")) << b.output;

  const auto expected = test::log_records(full), got = test::log_records(resumed);
  ASSERT_EQ(expected.size(), 8u);
  for (int64_t step = 5; step <= 8; ++step) {
    ASSERT_TRUE(got.count(step)) << "step " << step;
    EXPECT_EQ(got.at(step)["loss"].get<double>(), expected.at(step)["loss"].get<double>()) << "step " << step;
    EXPECT_EQ(got.at(step)["grad_norm"].get<double>(), expected.at(step)["grad_norm"].get<double>())
        << "step " << step;
  }
  EXPECT_EQ(io::read_file_bytes(full + "/model.safetensors"), io::read_file_bytes(resumed + "/model.safetensors"))
      << "the final weights differ";
  // The optimizer states at step 8, shard by shard.
  for (const std::string file :
       stage == 0 ? std::vector<std::string>{"optimizer.safetensors"}
                  : std::vector<std::string>{optimizer_shard_file(0, 2), optimizer_shard_file(1, 2)})
    EXPECT_EQ(io::read_file_bytes(full + "/checkpoint-8/" + file), io::read_file_bytes(resumed + "/checkpoint-8/" + file))
        << file;
}

INSTANTIATE_TEST_SUITE_P(ZeroStage, DataParallelResume, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return "stage" + std::to_string(info.param); });

TEST(DataParallelResumeErrors, AnotherWorldStageOrAMissingShardIsOneClearError) {
  test::TempDir tmp;
  const std::string model = small_model(tmp, 0.0);
  const std::string out = tmp.file("out");
  const std::string common = "--model " + model + " --train-file " + small_data(tmp, 8) +
                             " --device cpu --per-device-train-batch-size 2 "
                             "--max-steps 3 --no-progress --output-dir " + out;
  const auto made = test::run_anatomy(launch_two(common + " --zero-stage 1 --save-strategy steps --save-steps 2"));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  ASSERT_EQ(expect_whole_checkpoints(out, 1), 1);

  const auto single = test::run_anatomy("train " + common + " --zero-stage 1 --resume-from-checkpoint latest");
  EXPECT_EQ(single.exit_code, 1) << single.output;
  EXPECT_TRUE(contains(single.output, "the checkpoint was made by 2 ranks with ZeRO stage 1, this run is 1 process "
                                      "with ZeRO stage 0"))
      << single.output;
  const auto stage0 = test::run_anatomy(launch_two(common + " --zero-stage 0 --resume-from-checkpoint latest"));
  EXPECT_EQ(stage0.exit_code, 1) << stage0.output;
  EXPECT_TRUE(contains(stage0.output, "the checkpoint was made by 2 ranks with ZeRO stage 1, this run is 2 ranks "
                                      "with ZeRO stage 0"))
      << stage0.output;

  // Stage 0 too: every rank holds the whole states, but the data position
  // counts batches of each rank's shard, so another world is refused.
  const std::string out0 = tmp.file("out0");
  const std::string common0 = common.substr(0, common.find("--output-dir")) + "--output-dir " + out0;
  const auto made0 = test::run_anatomy(launch_two(common0 + " --save-strategy steps --save-steps 2"));
  ASSERT_EQ(made0.exit_code, 0) << made0.output;
  const auto log_before = io::read_file_bytes(out0 + "/log.jsonl");
  const auto single0 = test::run_anatomy("train " + common0 + " --resume-from-checkpoint latest");
  EXPECT_EQ(single0.exit_code, 1) << single0.output;
  EXPECT_TRUE(contains(single0.output, "error: --resume-from-checkpoint " + out0 + "/checkpoint-2: the checkpoint "
                                       "was made by 2 ranks with ZeRO stage 0, this run is 1 process with ZeRO "
                                       "stage 0; resume with the same number of ranks and --zero-stage"))
      << single0.output;
  EXPECT_EQ(io::read_file_bytes(out0 + "/log.jsonl"), log_before) << "the refused run touched the log";

  // Rank 1's shard gone: rank 1 names the file, and the launcher names rank 1.
  const std::string broken = tmp.file("broken");
  fs::copy(out + "/checkpoint-2", broken, fs::copy_options::recursive);
  fs::remove(broken + "/" + optimizer_shard_file(1, 2));
  const auto missing = test::run_anatomy(launch_two(common + " --zero-stage 1 --resume-from-checkpoint " + broken));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(contains(missing.output, "[rank 1] error: " + broken + ": not a whole checkpoint (" +
                                           optimizer_shard_file(1, 2) + " is missing)"))
      << missing.output;
  EXPECT_TRUE(contains(missing.output, "error: rank 1 exited with code 1")) << missing.output;
}

class DataParallelCheckpoints : public ::testing::TestWithParam<int> {};

// Stage 1 (optimizer shards) and stage 3 (the weights sharded too: the
// checkpoints' models gathered to rank 0, the best one reloaded whole by every rank).
TEST_P(DataParallelCheckpoints, LoadBestModelAtEndAndSaveTotalLimitWithShards) {
  const int stage = GetParam();
  const std::string fixture = test::fixture("bert-tiny-cls-padded");
  const std::string data = fixture + "/reference.safetensors";
  test::TempDir tmp;
  const std::string out = tmp.file("run");
  // 4 examples, a batch of 1 on each of 2 ranks; a learning rate high enough
  // that the validation loss goes up and down.
  const auto r = test::run_anatomy(launch_two(
      "--model " + fixture + " --train-file " + data + " --validation-file " + data +
      " --device cpu --per-device-train-batch-size 1 --max-steps 8 --learning-rate 3e-2 --eval-strategy steps "
      "--eval-steps 1 --save-strategy steps --save-steps 1 --save-total-limit 1 --load-best-model-at-end "
      "--metric-for-best-model loss --no-progress --zero-stage " + std::to_string(stage) + " --output-dir " + out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int64_t best = 0;
  double best_loss = 0;
  std::ifstream log(out + "/log.jsonl");
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval_loss") && (best == 0 || j["eval_loss"].get<double>() < best_loss)) {
      best = j["step"].get<int64_t>();
      best_loss = j["eval_loss"].get<double>();
    }
  }
  ASSERT_GT(best, 0);
  const std::string best_dir = out + "/checkpoint-" + std::to_string(best);
  ASSERT_TRUE(fs::exists(best_dir)) << "the best checkpoint was deleted by --save-total-limit";
  EXPECT_TRUE(fs::exists(out + "/checkpoint-8"));
  EXPECT_EQ(expect_whole_checkpoints(out, stage), best == 8 ? 1 : 2) << "--save-total-limit 1 and the best one";
  // Both ranks reload the best weights (rank 0 then writes them as the model).
  EXPECT_TRUE(contains(r.output, "[rank 0] Loaded the best model from " + best_dir)) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 1] Loaded the best model from " + best_dir)) << r.output;
  EXPECT_EQ(io::read_file_bytes(out + "/model.safetensors"), io::read_file_bytes(best_dir + "/model.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(ZeroStage, DataParallelCheckpoints, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return "stage" + std::to_string(info.param); });

// The pid of the child of `launcher` whose environment has RANK=<rank>, or -1.
pid_t launched_rank(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  for (pid_t pid; children >> pid;) {
    std::ifstream environ_file("/proc/" + std::to_string(pid) + "/environ");
    std::string all((std::istreambuf_iterator<char>(environ_file)), std::istreambuf_iterator<char>());
    std::istringstream vars(all);
    for (std::string var; std::getline(vars, var, '\0');)
      if (var == "RANK=" + std::to_string(rank)) return pid;
  }
  return -1;
}

// Waits until `dir` holds a checkpoint-N with N >= `step` (false after `timeout` seconds).
bool wait_for_checkpoint(const std::string& dir, int64_t step, double timeout) {
  const auto start = Clock::now();
  while (seconds_since(start) < timeout) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("checkpoint-", 0) == 0 && std::stoll(name.substr(11)) >= step) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

struct KillCase {
  std::string name;
  bool launcher;  // under anatomy launch, or two processes started by hand
  int killed;     // the rank that gets SIGKILL
};

void PrintTo(const KillCase& c, std::ostream* os) { *os << c.name; }

class DataParallelKill : public ::testing::TestWithParam<KillCase> {};

// The ranks train bert-tiny and save a checkpoint every step (ZeRO stage 1:
// each writes its shard), so a kill often lands in a save.
TEST_P(DataParallelKill, TheOtherRankEndsNamingItAndEveryCheckpointIsWhole) {
  const KillCase c = GetParam();
  const int survivor = 1 - c.killed;
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  const std::string train = "train --model bert-tiny --device cpu --dummy-size 64 --dummy-seq-len 16 "
                            "--per-device-train-batch-size 2 --max-steps 100000 --save-strategy steps --save-steps 1 "
                            "--save-total-limit 2 --zero-stage 1 --no-progress --output-dir " + out;
  const std::string port = std::to_string(free_port());
  constexpr double kTimeout = 5.0;
  std::vector<std::unique_ptr<Process>> ranks;  // by hand: rank 0, rank 1; under the launcher: the launcher
  if (c.launcher) {
    std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--rendezvous-timeout", "5", "--master-port",
                                      port, "--"};
    for (const std::string& w : split(train)) args.push_back(w);
    ranks.push_back(std::make_unique<Process>(args, std::map<std::string, std::string>{}));
  } else {
    for (int r = 0; r < 2; ++r)
      ranks.push_back(std::make_unique<Process>(
          split(train), std::map<std::string, std::string>{{"RANK", std::to_string(r)},
                                                          {"WORLD_SIZE", "2"},
                                                          {"LOCAL_RANK", std::to_string(r)},
                                                          {"MASTER_ADDR", "127.0.0.1"},
                                                          {"MASTER_PORT", port},
                                                          {"ANATOMY_DIST_TIMEOUT", "5"}}));
  }
  ASSERT_TRUE(wait_for_checkpoint(out, 2, 120)) << "the run saved no checkpoint";
  std::mt19937 rng(static_cast<unsigned>(c.killed * 2 + c.launcher));
  std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 300));
  const pid_t victim = c.launcher ? launched_rank(ranks[0]->pid(), c.killed) : ranks[c.killed]->pid();
  ASSERT_GT(victim, 0) << "no child of the launcher with RANK=" << c.killed;
  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);

  Process& watched = c.launcher ? *ranks[0] : *ranks[survivor];
  const int code = watched.wait(60);
  const double took = seconds_since(killed_at);
  EXPECT_FALSE(watched.timed_out()) << watched.output();
  EXPECT_LT(took, kTimeout) << "the survivor must end within the timeout\n" << watched.output();
  EXPECT_NE(code, 0) << watched.output();
  const std::string lost = c.killed == 1 ? "error: rank 1 died (its connection to the store closed)"
                                         : "rank 0, which hosts it, died or is unreachable";
  const std::string prefix = c.launcher ? "[rank " + std::to_string(survivor) + "] " : "";
  EXPECT_TRUE(contains(watched.output(), prefix + "error: ")) << watched.output();
  EXPECT_TRUE(contains(watched.output(), lost)) << watched.output();
  if (c.launcher) {
    EXPECT_EQ(code, 128 + SIGKILL) << "the launcher exits with the killed rank's status\n" << watched.output();
    EXPECT_TRUE(contains(watched.output(), "error: rank " + std::to_string(c.killed) + " was killed by signal 9"))
        << watched.output();
  } else {
    EXPECT_EQ(code, distributed::kPeerFailureExitCode) << watched.output();
    ranks[c.killed]->wait(10);
  }
  const int whole = expect_whole_checkpoints(out, 1);
  EXPECT_GE(whole, 1);
  EXPECT_LE(whole, 2) << "--save-total-limit 2";
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, DataParallelKill,
    ::testing::Values(KillCase{"launch_rank1", true, 1}, KillCase{"by_hand_rank1", false, 1},
                      KillCase{"by_hand_rank0", false, 0}),
    [](const auto& info) { return info.param.name; });

TEST(DataParallelNodes, TwoNodesOnOneHostTrainAsOneLaunch) {
  // The fixture model has dropout off (each rank draws its own masks, which
  // the node split does not change, but the comparison then needs no masks).
  const std::string model = test::fixture("bert-tiny-cls-padded");
  test::TempDir tmp;
  const std::string train = "--model " + model + " --train-file " + small_data(tmp, 16) +
                            " --device cpu --per-device-train-batch-size 4 "
                            "--max-steps 4 --logging-steps 1 --learning-rate 1e-3 --no-progress --seed 3 "
                            "--output-dir ";
  const std::string one = tmp.file("one"), two = tmp.file("two");
  const auto single = test::run_anatomy(launch_two(train + one));
  ASSERT_EQ(single.exit_code, 0) << single.output;

  const std::string port = std::to_string(free_port());
  auto node = [&](int rank) {
    std::vector<std::string> args = {"launch",       "--nnodes",      "2",           "--node-rank",
                                     std::to_string(rank), "--nproc-per-node", "1", "--master-addr",
                                     "127.0.0.1",    "--master-port", port,          "--rendezvous-timeout",
                                     "30",           "--",            "train"};
    for (const std::string& w : split(train + two)) args.push_back(w);
    return std::make_unique<Process>(args, std::map<std::string, std::string>{});
  };
  auto node1 = node(1);  // the second node first: it waits for the master
  auto node0 = node(0);
  ASSERT_EQ(node0->wait(120), 0) << node0->output();
  ASSERT_EQ(node1->wait(120), 0) << node1->output();
  EXPECT_TRUE(contains(node0->output(), "[rank 0] Training")) << node0->output();
  EXPECT_TRUE(contains(node1->output(), "[rank 1] Training")) << node1->output();
  EXPECT_TRUE(contains(node0->output(), "per rank on 2 ranks")) << node0->output();

  const auto a = test::log_records(one), b = test::log_records(two);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), a.size());
  for (const auto& [step, record] : a) {
    const double x = record["loss"].get<double>(), y = b.at(step)["loss"].get<double>();
    EXPECT_LT(std::abs(x - y) / std::abs(x), 1e-6) << "step " << step;
  }
  EXPECT_TRUE(fs::exists(two + "/rank-1/anatomy.json"));
  EXPECT_TRUE(fs::exists(two + "/ranks.json"));
}

}  // namespace
}  // namespace anatomy
