// test_data_parallel.cpp: data parallelism on the CPU. The sharding of each
// epoch (torch's DistributedSampler), the bucketed gradient reducer, and end
// to end: two ranks started by `anatomy launch`, each with batch b, train as
// one process with batch 2b — the same losses, gradient norms and final
// weights (dropout off, fp32; the collectives go through the TCP store).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/data/dataset.h"
#include "anatomy/data/loader.h"
#include "anatomy/distributed/data_parallel.h"
#include "anatomy/distributed/zero_sharding.h"
#include "anatomy/model/config.h"
#include "anatomy/io/files.h"
#include "anatomy/io/safetensors.h"
#include "test_process.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using test::free_port;

TEST(ShardOrder, RanksTogetherHoldTheSingleProcessBatches) {
  const std::vector<int64_t> order = epoch_order(23, /*shuffle=*/true, 7, 1);
  const int world = 3;
  std::vector<std::vector<int64_t>> shards;
  for (int r = 0; r < world; ++r) shards.push_back(shard_order(order, r, world));
  EXPECT_EQ(shard_size(23, world), 8);
  for (const auto& s : shards) EXPECT_EQ(s.size(), 8u);
  // Batch k of b per rank = batch k of world·b in one process (as a set).
  const int64_t b = 2;
  for (int64_t k = 0; k * b * world < 23; ++k) {
    std::multiset<int64_t> ranks, single;
    for (int r = 0; r < world; ++r)
      for (int64_t i = k * b; i < (k + 1) * b; ++i) ranks.insert(shards[r][i]);
    for (int64_t i = k * b * world; i < (k + 1) * b * world; ++i) single.insert(order[i % 23]);  // padded by wrapping
    EXPECT_EQ(ranks, single) << "batch " << k;
  }
  // The padding repeats the epoch's first entries: 24 slots hold 23 examples and order[0] once more.
  std::multiset<int64_t> all;
  for (const auto& s : shards) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.count(order[0]), 2u);
  EXPECT_EQ(shard_order(order, 0, 1), order);
  EXPECT_THROW(shard_order(order, 3, 3), Error);
}

TEST(ShardOrder, LoaderServesThisRanksShard) {
  Dataset d = make_dummy_dataset(10, 4, 1);
  LoaderOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  o.rank = 1;
  o.world_size = 2;
  BatchLoader loader(d, o);
  EXPECT_EQ(loader.batches_per_epoch(), 3);  // 5 examples per rank
  const HostBatch first = loader.next();
  ASSERT_EQ(first.batch, 2);
  // Examples 1 and 3 (rank 1 takes the odd positions of the unshuffled order).
  EXPECT_EQ(std::vector<int64_t>(first.input_ids.begin(), first.input_ids.begin() + 4),
            std::vector<int64_t>(d.input_ids.begin() + 4, d.input_ids.begin() + 8));
  EXPECT_EQ(std::vector<int64_t>(first.input_ids.begin() + 4, first.input_ids.end()),
            std::vector<int64_t>(d.input_ids.begin() + 12, d.input_ids.begin() + 16));
  loader.next();
  EXPECT_EQ(loader.next().batch, 1);  // the shard's last example
}

// A communicator that records what it is asked to reduce.
class RecordingCommunicator final : public distributed::Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string describe() const override { return "recording"; }
  void all_reduce_sum(const Tensor& t) override { reduced.push_back(t.numel()); }
  void reduce_scatter_sum(const Tensor&, const Tensor&) override {}
  void all_gather(const Tensor&, const Tensor&) override {}
  void broadcast(const Tensor&, int) override {}
  void wait() override { ++waits; }
  std::vector<double> sum_host(const std::vector<double>& v) override { return v; }
  std::vector<int64_t> reduced;
  int waits = 0;
};

TEST(GradientReducer, BucketsCoverTheBufferOnceFromTheEnd) {
  Ledger ledger(Device::cpu(), make_cpu_allocator());
  Tensor flat = Tensor::zeros(ledger, {100}, DType::F32, Category::Gradients, "grads");
  RecordingCommunicator comm;
  distributed::GradientReducer reducer(comm, flat, /*bucket_elements=*/30);
  reducer.ready(90);  // not armed: accumulation's earlier micro-batches reduce nothing
  reducer.finish();
  EXPECT_TRUE(comm.reduced.empty());
  reducer.arm();
  reducer.ready(90);  // 10 ready: below a bucket
  reducer.ready(65);  // 35: one bucket
  reducer.ready(50);
  reducer.ready(20);  // 45
  reducer.ready(0);   // the rest
  reducer.finish();
  EXPECT_EQ(comm.reduced, (std::vector<int64_t>{35, 45, 20}));
  EXPECT_EQ(std::accumulate(comm.reduced.begin(), comm.reduced.end(), int64_t{0}), 100);
  EXPECT_EQ(comm.waits, 1);
  reducer.arm();
  reducer.ready(40);
  EXPECT_THROW(reducer.ready(60), Error) << "gradients become final from the end downwards";
}



int64_t optimizer_bytes(const std::string& dir) {
  std::ifstream in(dir + "/anatomy.json");
  const auto a = nlohmann::json::parse(in);
  for (const auto& row : a["rows"])
    if (row["key"] == "optimizer_states") return row["at_peak"].get<int64_t>();
  return -1;
}

class DataParallelCpu : public ::testing::TestWithParam<int> {};

// Stage 0 (every rank holds the optimizer states), stage 1 (each rank holds
// its half), stages 2 and 3 (each rank its chunk of every unit, padded).
TEST_P(DataParallelCpu, TwoRanksTrainAsOneProcessWithTheWholeBatch) {
  const int stage = GetParam();
  test::TempDir tmp;
  // A bert-tiny with dropout off (the ranks draw their own masks, so with
  // dropout on the runs would differ by design).
  const std::string model = tmp.file("model");
  const auto made = test::run_anatomy("train --device cpu --model bert-tiny --dummy-size 8 --dummy-seq-len 16 "
                                      "--max-steps 1 --no-progress --output-dir " + model);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  {
    std::ifstream in(model + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["hidden_dropout_prob"] = 0.0;
    config["attention_probs_dropout_prob"] = 0.0;
    std::ofstream(model + "/config.json") << config.dump(2);
  }
  // 36 examples: 18 per rank, so the last batch of each epoch is partial (2 of 8 per rank, 4 of 16 in one).
  const std::string common = " --device cpu --model " + model +
                             " --dummy-size 36 --dummy-seq-len 16 --num-train-epochs 2 --logging-steps 1 "
                             "--learning-rate 1e-3 --no-progress --seed 5";
  const std::string one = tmp.file("one"), two = tmp.file("two");
  const auto single = test::run_anatomy("train" + common + " --per-device-train-batch-size 16 --output-dir " + one);
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto ranks = test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                                       " -- train" + common + " --zero-stage " + std::to_string(stage) +
                                       " --per-device-train-batch-size 8 --output-dir " + two);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  EXPECT_NE(ranks.output.find("per rank on 2 ranks"), std::string::npos) << ranks.output;

  const auto a = test::log_records(one), b = test::log_records(two);
  ASSERT_EQ(a.size(), 6u);  // 3 updates an epoch (16 + 16 + 4), 2 epochs
  test::expect_records_within(a, b, 1e-5);
  // Rank 0 wrote the model; rank 1 only its own memory anatomy.
  ASSERT_TRUE(fs::exists(two + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(two + "/rank-1/anatomy.json"));
  EXPECT_FALSE(fs::exists(two + "/rank-1/model.safetensors"));
  const test::WeightDifference w = test::weight_difference(one, two);
  EXPECT_LT(w.worst / w.scale, 1e-5) << "the final weights differ by " << w.worst;

  // The optimizer states of each rank: all of AdamW's (stage 0) or half of them, to the shard's rounding (stage 1).
  const int64_t single_states = optimizer_bytes(one), rank0 = optimizer_bytes(two), rank1 = optimizer_bytes(two + "/rank-1");
  ASSERT_GT(single_states, 0);
  // ZeRO 2/3: the elements of one rank's chunks of every unit (equal on every rank).
  int64_t unit_shard = 0;
  {
    const ModelConfig config = load_model_config(model + "/config.json");
    auto cpu = make_cpu_backend(1);
    ParameterSet layout(*cpu, bert_parameter_specs(config), Category::Weights, "");
    unit_shard = distributed::unit_shards(bert_parameter_units(layout, config), layout.flat_elements(), 0, 2).shard_elements;
  }
  if (stage == 0) {
    EXPECT_EQ(rank0, single_states);
    EXPECT_EQ(rank1, single_states);
  } else if (stage == 1) {
    EXPECT_NEAR(static_cast<double>(rank0), single_states / 2.0, 64 * 8);
    EXPECT_NEAR(static_cast<double>(rank0 + rank1), static_cast<double>(single_states), 8.0);
  } else {
    EXPECT_EQ(rank0, 8 * unit_shard);
    EXPECT_EQ(rank1, 8 * unit_shard);
  }

  // The anatomy across the ranks: rank 0's table and ranks.json, each rank's
  // figures as its own anatomy.json has them, and the sums over the ranks.
  EXPECT_NE(ranks.output.find("[rank 0] Memory per rank"), std::string::npos) << ranks.output;
  EXPECT_EQ(ranks.output.find("[rank 1] Memory per rank"), std::string::npos) << "rank 0 alone prints it";
  const auto per_rank = nlohmann::json::parse(std::ifstream(two + "/ranks.json"));
  ASSERT_EQ(per_rank["world_size"], 2);
  EXPECT_EQ(per_rank["zero_stage"], stage);
  ASSERT_EQ(per_rank["ranks"].size(), 2u);
  int64_t peaks = 0;
  for (int r = 0; r < 2; ++r) {
    const auto own = nlohmann::json::parse(std::ifstream(r == 0 ? two + "/anatomy.json" : two + "/rank-1/anatomy.json"));
    const auto& row = per_rank["ranks"][r];
    EXPECT_EQ(row["rank"], r);
    EXPECT_EQ(row["peak"], own["ledger"]["peak_total"]) << "rank " << r;
    EXPECT_EQ(row["at_peak"], own["ledger"]["at_peak"]) << "rank " << r;
    peaks += row["peak"].get<int64_t>();
  }
  EXPECT_EQ(per_rank["total"]["peak"].get<int64_t>(), peaks);
  const int64_t states0 = per_rank["ranks"][0]["at_peak"]["optimizer_states"].get<int64_t>();
  const int64_t states1 = per_rank["ranks"][1]["at_peak"]["optimizer_states"].get<int64_t>();
  const int64_t states_total = per_rank["total"]["at_peak"]["optimizer_states"].get<int64_t>();
  EXPECT_EQ(states_total, states0 + states1);
  if (stage == 0) {
    EXPECT_EQ(states0, single_states);
    EXPECT_EQ(states1, single_states);
  } else if (stage >= 2) {
    EXPECT_EQ(states_total, 2 * 8 * unit_shard);
  } else {
    // Two shards of AdamW's moments: together exactly one process's states.
    EXPECT_EQ(states_total, single_states);
    EXPECT_GT(states1, 0);
    EXPECT_LT(states1, single_states);
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStage, DataParallelCpu, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return "stage" + std::to_string(info.param); });

// ANATOMY_DIST_FORCE=1: a world of one through the data-parallel path (the
// store's collectives, the reducer, ZeRO-1 with one shard, ZeRO-2/3 with
// one chunk per unit, gathered and reduce-scattered through the store) is the plain run, bit for bit.
TEST(DataParallelCpu, WorldOfOneIsThePlainRun) {
  test::TempDir tmp;
  const std::string flags = " --device cpu --model bert-tiny --dummy-size 24 --dummy-seq-len 16 --max-steps 4 "
                            "--logging-steps 1 --per-device-train-batch-size 8 --no-progress";
  const auto plain = test::run_anatomy("train" + flags + " --output-dir " + tmp.file("plain"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto a = test::log_records(tmp.file("plain"));
  ASSERT_EQ(a.size(), 4u);
  for (int stage = 1; stage <= 3; ++stage) {
    const std::string dir = tmp.file("forced" + std::to_string(stage));
    const auto forced = test::run_anatomy("train" + flags + " --force-distributed true --zero-stage " +
                                          std::to_string(stage) + " --output-dir " + dir);
    ASSERT_EQ(forced.exit_code, 0) << forced.output;
    EXPECT_NE(forced.output.find("per rank on 1 ranks"), std::string::npos) << forced.output;
    const auto b = test::log_records(dir);
    ASSERT_EQ(b.size(), a.size());
    for (const auto& [step, x] : a) {
      ASSERT_TRUE(b.count(step)) << "step " << step;
      EXPECT_EQ(b.at(step)["loss"].get<double>(), x["loss"].get<double>()) << "stage " << stage << " step " << step;
      EXPECT_EQ(b.at(step)["grad_norm"].get<double>(), x["grad_norm"].get<double>())
          << "stage " << stage << " step " << step;
    }
    EXPECT_EQ(io::read_file_bytes(tmp.file("plain") + "/model.safetensors"), io::read_file_bytes(dir + "/model.safetensors"))
        << "stage " << stage;
    // The plan simulated the same path (a world of one through the communicator): it is the ledger.
    const auto j = nlohmann::json::parse(std::ifstream(dir + "/anatomy.json"));
    EXPECT_EQ(j["predicted"]["peak_total"], j["ledger"]["peak_total"]) << "stage " << stage;
    EXPECT_EQ(j["predicted"]["at_peak"], j["ledger"]["at_peak"]) << "stage " << stage;
  }
}

TEST(DataParallelCpu, EstimateShowsTheZeroPaperBesideThePlan) {
  const auto plain = test::run_anatomy("estimate --device cpu --model bert-tiny --dummy-size 64 --dummy-seq-len 32");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto zero = test::run_anatomy(
      "estimate --device cpu --model bert-tiny --dummy-size 64 --dummy-seq-len 32 --nproc 4 --zero-stage 1");
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  EXPECT_NE(zero.output.find("Data parallel: 4 ranks, ZeRO stage 1"), std::string::npos) << zero.output;
  EXPECT_NE(zero.output.find("ZeRO paper, stage 3"), std::string::npos) << zero.output;
  // optimizer_states per parameter: 8 bytes plain, about 2 over 4 ranks.
  auto per_param = [](const std::string& text) {
    const size_t at = text.find("optimizer_states");
    EXPECT_NE(at, std::string::npos) << text;
    std::istringstream row(text.substr(at, text.find('\n', at) - at));
    std::string name, value, unit;
    double per = -1;
    row >> name >> value >> unit >> per;
    return per;
  };
  EXPECT_NEAR(per_param(plain.output), 8.0, 0.01);
  EXPECT_NEAR(per_param(zero.output), 2.0, 0.01);
  const auto bad = test::run_anatomy("estimate --device cpu --model bert-tiny --zero-stage 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--nproc"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace anatomy
