// test_zero_sharding.cpp: ZeRO stages 2 and 3 on the CPU (the collectives go
// through the TCP store). Two ranks started by `anatomy launch`, each with
// batch b, train as one process with batch 2b: the same losses, gradient
// norms and final weights within 1e-5 (fp32, dropout off), with and without
// gradient accumulation, and at stage 3 with gradient checkpointing. Each
// rank's ledger holds the bytes the sharding implies — its shard of the
// gradients plus at most two units' staging buffers (stage 2), its shard of
// the weights plus at most two gathered units (stage 3) — and the memory
// plan each rank printed before training equals its ledger.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/analysis/memory_plan.h"
#include "anatomy/distributed/zero_sharding.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/config.h"
#include "test_process.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using test::free_port;

// A BERT of 6 layers (hidden 64, a vocabulary of 256) so that no unit
// outweighs the rest: the embeddings are smaller than one layer.
ModelConfig small_config() {
  ModelConfig c = load_model_config(test::fixture("bert-tiny-cls-padded") + "/config.json");
  c.num_hidden_layers = 6;
  c.vocab_size = 256;
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  return c;
}

// The model, initialised from a seed, as a Hugging Face directory.
std::string write_model(const test::TempDir& tmp, const ModelConfig& config) {
  const std::string dir = tmp.file("model");
  auto cpu = make_cpu_backend(1);
  BertStyleModel model(*cpu, config);
  init_weights(model, 7);
  save_pretrained(model, *cpu, dir);
  return dir;
}

// `examples` random sequences of 16 tokens with labels of 3 classes, as a tensor file.
std::string write_data(const test::TempDir& tmp, int64_t examples, int64_t vocab) {
  std::mt19937 rng(23);
  std::vector<int64_t> ids(static_cast<size_t>(examples * 16)), labels(static_cast<size_t>(examples));
  for (int64_t& id : ids) id = 1 + static_cast<int64_t>(rng() % static_cast<unsigned>(vocab - 1));
  for (int64_t& label : labels) label = static_cast<int64_t>(rng() % 3);
  const std::string path = tmp.file("train.safetensors");
  io::write_safetensors(path, {{"input_ids", io::StDType::I64, {examples, 16}, ids.data()},
                               {"labels", io::StDType::I64, {examples}, labels.data()}});
  return path;
}

// What the sharding over 2 ranks implies, in elements.
struct Sharding {
  int64_t flat = 0;      // the whole flat layout
  int64_t shard = 0;     // one rank's chunks of every unit
  int64_t max_pair = 0;  // the largest two neighbouring units, padded: the most lent at once
  int64_t max_unit = 0;  // the largest unit, padded
};

Sharding sharding_of(const ModelConfig& config) {
  auto cpu = make_cpu_backend(1);
  ParameterSet set(*cpu, bert_parameter_specs(config), Category::Weights, "");
  const auto units = bert_parameter_units(set, config);
  Sharding s;
  s.flat = set.flat_elements();
  const distributed::UnitShards shards = distributed::unit_shards(units, s.flat, 0, 2);
  EXPECT_EQ(distributed::unit_shards(units, s.flat, 1, 2).shard_elements, shards.shard_elements) << "equal chunks";
  s.shard = shards.shard_elements;
  for (size_t u = 0; u < shards.units.size(); ++u) {
    const int64_t padded = 2 * shards.units[u].chunk;
    s.max_unit = std::max(s.max_unit, padded);
    if (u + 1 < shards.units.size()) s.max_pair = std::max(s.max_pair, padded + 2 * shards.units[u + 1].chunk);
  }
  return s;
}

// The flat layout puts each layer's query, key and value weights together and
// then their biases, so that the model's backward can run them as one [3H, H]
// product; the list keeps Hugging Face's order. Every tensor still starts on a
// 64-element boundary and no two overlap, and each unit starts at its layer's
// query weight.
TEST(ParameterLayout, QueryKeyValueLieTogether) {
  for (const char* fixture : {"bert-tiny-cls-padded", "bert-cls5-wide"}) {  // hidden 64, 96
    const ModelConfig config = load_model_config(test::fixture(fixture) + "/config.json");
    const int64_t H = config.hidden_size;
    auto cpu = make_cpu_backend(1);
    const auto specs = bert_parameter_specs(config);
    ParameterSet set(*cpu, specs, Category::Weights, "");
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const ParamSpec& spec : specs) {
      EXPECT_EQ(set.offset_of(spec.name) % 64, 0) << spec.name;
      spans.emplace_back(set.offset_of(spec.name), set.offset_of(spec.name) + shape_numel(spec.shape));
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 0; i + 1 < spans.size(); ++i) EXPECT_LE(spans[i].second, spans[i + 1].first);
    EXPECT_LE(spans.back().second, set.flat_elements());
    const std::string p = "bert.encoder.layer.1.attention.self.";
    EXPECT_EQ(specs[5].name, "bert.encoder.layer.0.attention.self.query.weight");  // Hugging Face's order
    EXPECT_EQ(specs[6].name, "bert.encoder.layer.0.attention.self.query.bias");
    EXPECT_EQ(set.offset_of(p + "key.weight"), set.offset_of(p + "query.weight") + H * H) << fixture;
    EXPECT_EQ(set.offset_of(p + "value.weight"), set.offset_of(p + "key.weight") + H * H) << fixture;
    EXPECT_EQ(set.offset_of(p + "query.bias"), set.offset_of(p + "value.weight") + H * H) << fixture;
    EXPECT_EQ(set.offset_of("bert.encoder.layer.1.attention.output.dense.weight"),
              set.offset_of(p + "value.bias") + (H + 63) / 64 * 64)
        << fixture;
    // The stacked views exist exactly where the three lie without padding between them.
    const BertTensors w = BertTensors::bind(set, config);
    ASSERT_TRUE(w.layers[1].qkv_w.defined()) << fixture;  // H·H is a multiple of 64 in both
    EXPECT_EQ(w.layers[1].qkv_w.shape(), Shape({3 * H, H}));
    EXPECT_EQ(w.layers[1].qkv_w.raw(), w.layers[1].query_w.raw());
    EXPECT_EQ(w.layers[1].qkv_b.defined(), H % 64 == 0) << fixture;
    if (H % 64 == 0) EXPECT_EQ(w.layers[1].qkv_b.raw(), w.layers[1].query_b.raw());
    // A unit begins at its layer's query weight, the first of the layer's tensors in the layout.
    const auto units = bert_parameter_units(set, config);
    EXPECT_EQ(units[2].begin, set.offset_of(p + "query.weight"));
    EXPECT_EQ(units[1].end, units[2].begin);
  }
}

// Tensor::adjacent: a view over tensors that follow one another in one storage, else none.
TEST(ParameterLayout, AdjacentViewsOnlyOverConsecutiveParts) {
  auto cpu = make_cpu_backend(1);
  Tensor flat = Tensor::empty(cpu->ledger(), {40}, DType::F32, Category::Temporary, "flat");
  Tensor other = Tensor::empty(cpu->ledger(), {40}, DType::F32, Category::Temporary, "other");
  const Tensor a = flat.slice(0, {2, 4}), b = flat.slice(8, {8}), c = flat.slice(16, {2, 4});
  const Tensor joined = Tensor::adjacent({a, b, c}, {6, 4}, "abc");
  ASSERT_TRUE(joined.defined());
  EXPECT_EQ(joined.raw(), a.raw());
  EXPECT_EQ(joined.shape(), Shape({6, 4}));
  EXPECT_EQ(joined.name(), "abc");
  EXPECT_FALSE(Tensor::adjacent({a, c}, {4, 4}, "gap").defined());                      // b's place between them
  EXPECT_FALSE(Tensor::adjacent({b, a}, {4, 4}, "order").defined());                    // out of order
  EXPECT_FALSE(Tensor::adjacent({a, b}, {3, 4}, "count").defined());                    // 16 elements, not 12
  EXPECT_FALSE(Tensor::adjacent({a, other.slice(8, {8})}, {4, 4}, "storage").defined());  // another buffer
  EXPECT_FALSE(Tensor::adjacent({a, Tensor()}, {2, 4}, "undefined").defined());
  EXPECT_FALSE(Tensor::adjacent({}, {0}, "none").defined());
}

TEST(ZeroSharding, UnitsCoverTheLayoutAndChunksCoverEachUnit) {
  const ModelConfig config = small_config();
  auto cpu = make_cpu_backend(1);
  ParameterSet set(*cpu, bert_parameter_specs(config), Category::Weights, "");
  const auto units = bert_parameter_units(set, config);
  ASSERT_EQ(units.size(), 8u);  // embeddings, 6 layers, head
  EXPECT_EQ(units.front().begin, 0);
  EXPECT_EQ(units.back().end, set.flat_elements());
  for (size_t u = 0; u + 1 < units.size(); ++u) EXPECT_EQ(units[u].end, units[u + 1].begin);
  EXPECT_EQ(units[1].begin, set.offset_of("bert.encoder.layer.0.attention.self.query.weight"));
  EXPECT_EQ(units.back().begin, set.offset_of("bert.pooler.dense.weight"));
  for (int world : {1, 2, 3}) {
    int64_t shard = -1;
    for (int r = 0; r < world; ++r) {
      const distributed::UnitShards s = distributed::unit_shards(units, set.flat_elements(), r, world);
      if (shard >= 0) {
        EXPECT_EQ(s.shard_elements, shard);
      }
      shard = s.shard_elements;
      int64_t offset = 0;
      for (size_t u = 0; u < units.size(); ++u) {
        EXPECT_EQ(s.units[u].chunk % 64, 0);
        EXPECT_GE(s.units[u].chunk * world, units[u].size());
        EXPECT_LT(s.units[u].chunk * world, units[u].size() + 64 * world);
        EXPECT_EQ(s.units[u].shard_offset, offset);
        offset += s.units[u].chunk;
      }
    }
    // The ranks' parts of each unit follow each other and cover it.
    for (size_t u = 0; u < units.size(); ++u) {
      const distributed::UnitShards s = distributed::unit_shards(units, set.flat_elements(), 0, world);
      int64_t at = units[u].begin;
      for (int r = 0; r < world; ++r) {
        const distributed::ShardRange part = s.owned(u, r);
        if (part.size() == 0) continue;
        EXPECT_EQ(part.begin, at);
        at = part.end;
      }
      EXPECT_EQ(at, units[u].end);
    }
  }
}

nlohmann::json anatomy_of(const std::string& dir) { return nlohmann::json::parse(std::ifstream(dir + "/anatomy.json")); }

struct Case {
  const char* name;
  int stage;
  int accumulation;
  bool checkpointing;
};

class ZeroShardedTraining : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroShardedTraining, TwoRanksTrainAsOneProcessHoldingTheirShards) {
  const Case c = GetParam();
  test::TempDir tmp;
  const ModelConfig config = small_config();
  const std::string model = write_model(tmp, config);
  // 24 examples: 12 per rank, batches of 4 (8 in one process) and, with accumulation 2, a short last window.
  const std::string common = " --device cpu --model " + model + " --train-file " + write_data(tmp, 24, 256) +
                             " --num-train-epochs 2 --logging-steps 1 --learning-rate 1e-3 --weight-decay 0.01 "
                             "--max-grad-norm 0.5 --no-progress --seed 5 --gradient-accumulation-steps " +
                             std::to_string(c.accumulation) + (c.checkpointing ? " --gradient-checkpointing" : "");
  const std::string one = tmp.file("one"), two = tmp.file("two");
  const auto single = test::run_anatomy("train" + common + " --per-device-train-batch-size 8 --output-dir " + one);
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto ranks = test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                                       " -- train" + common + " --zero-stage " + std::to_string(c.stage) +
                                       " --per-device-train-batch-size 4 --output-dir " + two);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;

  const auto a = test::log_records(one), b = test::log_records(two);
  ASSERT_EQ(a.size(), c.accumulation == 1 ? 6u : 4u);
  test::expect_records_within(a, b, 1e-5);
  const test::WeightDifference w = test::weight_difference(one, two);
  EXPECT_LT(w.worst / w.scale, 1e-5) << "the final weights differ by " << w.worst;

  // Memory: every byte the sharding implies, per rank.
  const Sharding s = sharding_of(config);
  const nlohmann::json plain = anatomy_of(one);
  EXPECT_EQ(plain["ledger"]["peak"]["gradients"].get<int64_t>(), 4 * s.flat) << "one process: the whole gradients";
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json j = anatomy_of(r == 0 ? two : two + "/rank-1");
    const nlohmann::json& ledger = j["ledger"];
    // The plan this rank made before training is its ledger, byte for byte.
    EXPECT_EQ(j["predicted"]["peak_total"], ledger["peak_total"]) << "rank " << r;
    EXPECT_EQ(j["predicted"]["at_peak"], ledger["at_peak"]) << "rank " << r;
    EXPECT_EQ(j["predicted"]["peak_phase"], ledger["peak_phase"]) << "rank " << r;
    // Gradients: the shard, and in backward the staging buffers of two neighbouring units at most.
    EXPECT_EQ(ledger["peak"]["gradients"].get<int64_t>(), 4 * (s.shard + s.max_pair)) << "rank " << r;
    EXPECT_LT(ledger["peak"]["gradients"].get<int64_t>(), 4 * s.flat) << "rank " << r;
    // AdamW's two moments of the shard; one reduced chunk or one gathered unit in flight.
    EXPECT_EQ(ledger["peak"]["optimizer_states"].get<int64_t>(), 8 * s.shard) << "rank " << r;
    if (c.stage == 2) {
      EXPECT_EQ(ledger["peak"]["weights"].get<int64_t>(), 4 * s.flat) << "stage 2 keeps the whole weights";
      EXPECT_EQ(ledger["peak"]["communication"].get<int64_t>(), 4 * s.max_unit) << "rank " << r;
    } else {
      // Stage 3: while training, the weight shard and two gathered units at most (the
      // whole model is only held before the first step, when it is sharded, and after the last).
      int64_t most = 0;
      for (const auto& sample : j["timeline"])
        if (sample["step"].get<int64_t>() >= 0) most = std::max(most, sample["live"]["weights"].get<int64_t>());
      EXPECT_EQ(most, 4 * (s.shard + s.max_pair)) << "rank " << r;
      EXPECT_LT(most, 4 * s.flat) << "rank " << r;
      EXPECT_EQ(ledger["peak"]["communication"].get<int64_t>(), 4 * s.max_unit / 2) << "one reduced chunk";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ZeroShardedTraining,
                         ::testing::Values(Case{"stage2", 2, 1, false}, Case{"stage2_accumulation", 2, 2, false},
                                           Case{"stage3", 3, 1, false}, Case{"stage3_accumulation", 3, 2, false},
                                           Case{"stage3_checkpointing", 3, 2, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Mixed precision (planned for a GPU on the meta backend, which allocates as
// the CUDA backend does: the CPU backend does not train in 16 bits): the
// float32 masters are sharded at stages 1 to 3. While training, a rank holds
// its shard of the masters plus, at stages 1 and 2, float32 copies of what the
// model reads in float32 (embeddings, LayerNorms, head) and the whole 16-bit
// copy; at stage 3 two gathered units in float32 and in 16 bits. Gradients:
// whole at stage 1, the shard and two units' staging at 2 and 3.
TEST(ZeroShardedPlan, MixedPrecisionShardsTheMasters) {
  const ModelConfig config = small_config();
  const Sharding s = sharding_of(config);
  int64_t float32_read = 0;  // the flat elements of the float32 subset
  {
    auto cpu = make_cpu_backend(1);
    const BertStyleModel model(*cpu, config);
    std::vector<ParamSpec> specs;
    for (const ParamSpec& spec : bert_parameter_specs(config))
      if (model.reads_float32_in_mixed_precision(spec.name)) specs.push_back(spec);
    float32_read = ParameterSet(*cpu, specs, Category::Weights, "").flat_elements();
    EXPECT_LT(float32_read, s.flat / 4) << "the encoder's dense layers are most of the model";
  }
  DataShape shape;
  shape.size = 16;
  shape.seq_len = 16;
  for (int stage : {1, 2, 3}) {
    for (int rank = 0; rank < 2; ++rank) {
      TrainingArguments args;
      args.per_device_train_batch_size = 4;
      args.bf16 = true;
      args.zero_stage = stage;
      args.progress = false;
      PlanTarget target;
      target.gpu = true;
      target.rank = rank;
      target.world = 2;
      const MemoryPlan plan = plan_training(config, args, shape, target);
      ASSERT_TRUE(plan.fits);
      int64_t weights = 0, half = 0, gradients = 0;
      for (const PhaseSample& sample : plan.timeline) {
        // Setup holds the loaded model before it is sharded, and the end gathers it whole again.
        if (sample.step < 0 || sample.phase == "gather weights") continue;
        weights = std::max(weights, sample.live[static_cast<size_t>(Category::Weights)]);
        half = std::max(half, sample.live[static_cast<size_t>(Category::WeightsHalf)]);
        gradients = std::max(gradients, sample.live[static_cast<size_t>(Category::Gradients)]);
      }
      if (stage < 3) {
        EXPECT_EQ(weights, 4 * (s.shard + float32_read)) << "stage " << stage << " rank " << rank;
        EXPECT_EQ(half, 2 * s.flat) << "stage " << stage << " rank " << rank;
      } else {
        EXPECT_EQ(weights, 4 * (s.shard + s.max_pair)) << "rank " << rank;
        EXPECT_EQ(half, 2 * s.max_pair) << "rank " << rank;
      }
      EXPECT_EQ(gradients, stage == 1 ? 4 * s.flat : 4 * (s.shard + s.max_pair)) << "stage " << stage;
      EXPECT_EQ(plan.ledger.peak[static_cast<size_t>(Category::OptimizerStates)], 8 * s.shard) << "rank " << rank;
    }
  }
}

TEST(ZeroShardedTraining, OtherOptimizersAreOneClearError) {
  test::TempDir tmp;
  const auto r = test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                                   " -- train --device cpu --model bert-tiny --dummy-size 8 --dummy-seq-len 8 "
                                   "--max-steps 1 --no-progress --optim adafactor --zero-stage 3 --output-dir " +
                                   tmp.file("out"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("error: --zero-stage 3 shards the states of adamw and sgd (updates element by element); "
                          "--optim adafactor keeps per-tensor states: use --zero-stage 0"),
            std::string::npos)
      << r.output;
  const auto bad = test::run_anatomy("train --device cpu --model bert-tiny --zero-stage 4");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--zero-stage"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace anatomy
