// test_accumulation.cpp: gradient accumulation (N batches of b are one batch
// of N·b) and gradient checkpointing (the same gradients as without it,
// dropout on, for less activation memory), on the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "anatomy/model/bert/bert.h"
#include "anatomy/analysis/memory_plan.h"
#include "anatomy/data/dataset.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "test_util.h"

namespace anatomy {
namespace {

ModelConfig small_config(bool dropout) {
  ModelConfig c = *model_preset("bert-tiny");
  c.vocab_size = 300;
  c.max_position_embeddings = 32;
  if (!dropout) c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.0;
  return c;
}

Dataset small_data(int64_t size, int64_t seq_len) {
  Dataset d = make_dummy_dataset(size, seq_len, 5);
  for (auto& id : d.input_ids) id %= 300;
  for (int64_t i = 0; i < size; ++i) d.labels_i64[i] = i % 2;  // something to learn
  return d;
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> weights;
  LedgerSnapshot memory;
};

Trained train(int64_t batch, int64_t accumulation, bool checkpointing, bool dropout, int64_t steps,
              const std::string& optim = "adamw", double lr = 1e-3) {
  auto backend = make_cpu_backend(1);
  BertStyleModel model(*backend, small_config(dropout));
  init_weights(model, 3);
  const Dataset data = small_data(32, 16);
  TrainingArguments args;
  args.per_device_train_batch_size = batch;
  args.gradient_accumulation_steps = accumulation;
  args.gradient_checkpointing = checkpointing;
  args.max_steps = steps;
  args.learning_rate = lr;
  args.optim = optim;
  args.progress = false;
  Trainer trainer(*backend, model, data, args);
  Trained t;
  const TrainResult r = trainer.train();
  t.losses = r.losses;
  t.memory = r.memory;
  t.weights.resize(model.weights().flat().numel());
  backend->copy_to_host(model.weights().flat(), t.weights.data());
  return t;
}

float max_abs(const std::vector<float>& a) {
  float m = 0.0f;
  for (float x : a) m = std::max(m, std::abs(x));
  return m;
}

double max_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return worst / scale;
}

// The losses under AdamW, and the weights under SGD. AdamW's update is
// m/sqrt(v): where an element's successive gradients nearly cancel, m is a
// small difference and float32 rounding in the gradients (sums in another
// order) moves the update by a visible part of the learning rate. After the
// query/key/value input gradient became one product instead of three, a
// position embedding landed 1.4e-5 (of the largest weight) apart under AdamW
// while every loss stayed within 1e-5. An SGD update is the gradient times
// the learning rate, so its weights show the accumulation itself.
TEST(GradientAccumulation, FourBatchesOfTwoAreOneBatchOfEight) {
  const Trained big = train(8, 1, false, false, 3);
  const Trained accumulated = train(2, 4, false, false, 3);
  ASSERT_EQ(accumulated.losses.size(), 3u);
  for (size_t i = 0; i < big.losses.size(); ++i)
    EXPECT_NEAR(accumulated.losses[i], big.losses[i], 1e-5 * std::abs(big.losses[i])) << "update " << i;
  // SGD at a learning rate that moves the weights well above their float32
  // resolution: what the three updates moved, against each other.
  const Trained big_sgd = train(8, 1, false, false, 3, "sgd", 0.1);
  const Trained accumulated_sgd = train(2, 4, false, false, 3, "sgd", 0.1);
  ASSERT_EQ(accumulated_sgd.losses.size(), 3u);
  for (size_t i = 0; i < big_sgd.losses.size(); ++i)
    EXPECT_NEAR(accumulated_sgd.losses[i], big_sgd.losses[i], 1e-5 * std::abs(big_sgd.losses[i])) << "update " << i;
  std::vector<float> start;
  {
    auto backend = make_cpu_backend(1);
    BertStyleModel model(*backend, small_config(false));
    init_weights(model, 3);  // train()'s
    start.resize(model.weights().flat().numel());
    backend->copy_to_host(model.weights().flat(), start.data());
  }
  std::vector<float> moved_big(start.size()), moved_accumulated(start.size());
  for (size_t i = 0; i < start.size(); ++i) {
    moved_big[i] = big_sgd.weights[i] - start[i];
    moved_accumulated[i] = accumulated_sgd.weights[i] - start[i];
  }
  EXPECT_GT(max_abs(moved_big), 1e-3f);
  EXPECT_LT(max_relative(moved_accumulated, moved_big), 1e-5);
  // and it trains on batches of two: less activation memory than the batch of eight
  const auto act = static_cast<size_t>(Category::Activations);
  EXPECT_LT(accumulated.memory.peak[act] * 3, big.memory.peak[act]);
}

TEST(GradientAccumulation, AnUnevenEpochEndsWithAShorterWindow) {
  // 32 examples in batches of 3: 11 batches an epoch, so windows of 4, 4 and 3, then a new epoch.
  auto backend = make_cpu_backend(1);
  BertStyleModel model(*backend, small_config(false));
  init_weights(model, 3);
  const Dataset data = small_data(32, 16);
  TrainingArguments args;
  args.per_device_train_batch_size = 3;
  args.gradient_accumulation_steps = 4;
  args.num_train_epochs = 2;
  args.progress = false;
  Trainer trainer(*backend, model, data, args);
  EXPECT_EQ(trainer.total_steps(), 6);
  const TrainResult r = trainer.train();
  EXPECT_EQ(r.samples, 64);
  EXPECT_EQ(r.losses.size(), 6u);
}

TEST(GradientCheckpointing, GivesTheSameGradientsWithDropoutOn) {
  auto backend = make_cpu_backend(1);
  // Four layers, not bert-tiny's two: the last layer keeps next to nothing
  // (it computes past attention for the first token only), and with one
  // other layer selective checkpointing's peak would fall below full
  // checkpointing's, which recomputes a whole layer.
  ModelConfig config = small_config(true);
  config.num_hidden_layers = 4;
  BertStyleModel model(*backend, config);
  init_weights(model, 9);
  const Dataset data = small_data(4, 16);
  const ModelInputs inputs = upload_dataset(*backend, data);
  auto gradients = [&](bool checkpointing, LedgerSnapshot* memory, bool selective = false) {
    backend->ledger().reset_peaks();
    model.zero_gradients();
    ForwardOptions options;
    options.training = true;
    options.save_for_backward = true;
    options.gradient_checkpointing = checkpointing;
    options.selective_checkpointing = selective;
    options.step = 7;
    const ForwardOutput out = model.forward(inputs, options);
    model.backward();
    *memory = backend->ledger().snapshot();
    std::vector<float> g(model.gradients().flat().numel());
    backend->copy_to_host(model.gradients().flat(), g.data());
    return std::make_pair(*out.loss, g);
  };
  LedgerSnapshot plain_memory, checkpointed_memory;
  const auto plain = gradients(false, &plain_memory);
  const auto checkpointed = gradients(true, &checkpointed_memory);
  EXPECT_EQ(plain.first, checkpointed.first);
  ASSERT_EQ(plain.second.size(), checkpointed.second.size());
  EXPECT_TRUE(plain.second == checkpointed.second) << "max relative difference "
                                                   << max_relative(checkpointed.second, plain.second);
  const auto act = static_cast<size_t>(Category::Activations);
  EXPECT_LT(checkpointed_memory.peak[act], plain_memory.peak[act]);
  EXPECT_NE(checkpointed_memory.peak_phase.find("layer"), std::string::npos);

  // Selective: the same gradients too, for an activation peak between the two.
  LedgerSnapshot selective_memory;
  const auto selective = gradients(true, &selective_memory, /*selective=*/true);
  EXPECT_EQ(plain.first, selective.first);
  EXPECT_TRUE(plain.second == selective.second) << "max relative difference "
                                                << max_relative(selective.second, plain.second);
  EXPECT_LT(selective_memory.peak[act], plain_memory.peak[act]);
  EXPECT_GT(selective_memory.peak[act], checkpointed_memory.peak[act]);
}

TEST(GradientCheckpointing, TrainingMatchesWithoutIt) {
  const Trained plain = train(4, 1, false, true, 3);
  const Trained checkpointed = train(4, 1, true, true, 3);
  EXPECT_EQ(plain.losses, checkpointed.losses);
  EXPECT_TRUE(plain.weights == checkpointed.weights);
}

TEST(MemoryPlan, CoversAccumulationAndCheckpointing) {
  for (const auto& [accumulation, policy] :
       {std::pair{3, ""}, std::pair{1, "full"}, std::pair{2, "full"}, std::pair{1, "selective"}}) {
    const bool checkpointing = std::string(policy) != "";
    const ModelConfig config = small_config(true);
    const Dataset data = small_data(32, 16);
    TrainingArguments args;
    args.per_device_train_batch_size = 5;
    args.gradient_accumulation_steps = accumulation;
    args.gradient_checkpointing = checkpointing;
    if (checkpointing) args.gradient_checkpointing_policy = policy;
    args.progress = false;
    PlanTarget cpu;
    cpu.gpu = false;
    const MemoryPlan plan = plan_training(config, args, DataShape::of(data), cpu);
    auto backend = make_cpu_backend(1);
    LedgerSnapshot measured;
    {
      BertStyleModel model(*backend, config);
      init_weights(model, 1);
      Trainer trainer(*backend, model, data, args);
      measured = trainer.train().memory;
    }
    EXPECT_EQ(plan.ledger.peak_total, measured.peak_total) << accumulation << " " << checkpointing;
    EXPECT_EQ(plan.ledger.at_peak, measured.at_peak);
    EXPECT_EQ(plan.ledger.peak_phase, measured.peak_phase);
  }
}

}  // namespace
}  // namespace anatomy
