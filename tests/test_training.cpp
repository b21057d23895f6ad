// test_training.cpp: the training loop, the memory ledger, schedules, data and
// checkpoints: determinism, accounting that adds up, Hugging Face's rules.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/data/dataset.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/optim/optimizer.h"
#include "anatomy/train/trainer.h"
#include "test_util.h"

namespace anatomy {
namespace {

ModelConfig small_config() {
  ModelConfig c = *model_preset("bert-tiny");
  c.vocab_size = 30522;
  c.max_position_embeddings = 64;
  return c;
}

std::vector<float> host_copy(Backend& b, const Tensor& t) {
  std::vector<float> v(t.numel());
  b.copy_to_host(t, v.data());
  return v;
}

TrainResult train_once(uint64_t seed, std::vector<float>* final_weights, int threads = 0) {
  auto backend = make_cpu_backend(threads);
  BertStyleModel model(*backend, small_config());
  init_weights(model, seed);
  const Dataset data = make_dummy_dataset(24, 32, seed);
  TrainingArguments args;
  args.per_device_train_batch_size = 5;  // a ragged last batch
  args.max_steps = 7;                    // crosses an epoch boundary, so reshuffles
  args.seed = seed;
  args.learning_rate = 1e-3;
  args.progress = false;
  Trainer trainer(*backend, model, data, args);
  TrainResult r = trainer.train();
  if (final_weights) *final_weights = host_copy(*backend, model.weights().flat());
  return r;
}

TEST(Training, SameSeedGivesBitwiseIdenticalLossesAndWeights) {
  std::vector<float> w1, w2, w3;
  const TrainResult a = train_once(11, &w1);
  const TrainResult b = train_once(11, &w2);
  ASSERT_EQ(a.losses.size(), 7u);
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i;
  EXPECT_TRUE(w1 == w2);
  const TrainResult c = train_once(12, &w3);
  EXPECT_NE(a.losses, c.losses);
  EXPECT_FALSE(w1 == w3);
}

TEST(Training, LossDecreasesOnALearnableTask) {
  // Dummy labels are all 0: the classifier learns to predict 0 quickly.
  const TrainResult r = train_once(5, nullptr);
  EXPECT_LT(r.losses.back(), r.losses.front());
  EXPECT_EQ(r.samples, 5 + 5 + 5 + 5 + 4 + 5 + 5);  // ragged last batch of the first epoch
}

TEST(Training, SteadyStateRateLeavesTheFirstStepOut) {
  const TrainResult r = train_once(5, nullptr);  // batches of 5, 5, 5, 5, 4, 5, 5
  ASSERT_GT(r.steady_samples_per_second, 0.0);
  // The 30 samples after the first batch took at most the whole run's time.
  EXPECT_GE(r.steady_samples_per_second * r.seconds, 30.0 * (1.0 - 1e-9));

  auto backend = make_cpu_backend(0);
  BertStyleModel model(*backend, small_config());
  init_weights(model, 5);
  TrainingArguments args;
  args.per_device_train_batch_size = 4;
  args.max_steps = 1;
  args.progress = false;
  const TrainResult one = Trainer(*backend, model, make_dummy_dataset(8, 32, 5), args).train();
  EXPECT_EQ(one.steady_samples_per_second, 0.0) << "one step has no steady state";
  EXPECT_GT(one.samples_per_second, 0.0);
}

TEST(Training, CommandLineRunsAreBitwiseReproducible) {
  test::TempDir tmp;
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    const std::string out = tmp.file("run" + std::to_string(run));
    const auto r = test::run_anatomy("train --model bert-tiny --dummy-size 16 --dummy-seq-len 24 --max-steps 6 "
                                     "--logging-steps 1 --device cpu --no-progress --seed 3 --output-dir " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream log(out + "/log.jsonl");
    std::vector<double> losses;
    for (std::string line; std::getline(log, line);) losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    runs.push_back(losses);
  }
  ASSERT_EQ(runs[0].size(), 6u);
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(Ledger, CountsLivePeakAndCompositionByCategory) {
  Ledger ledger(Device::cpu(), make_cpu_allocator());
  ledger.set_phase("one");
  {
    Tensor w = Tensor::empty(ledger, {10, 10}, DType::F32, Category::Weights, "w");
    ledger.set_phase("two");
    {
      Tensor a = Tensor::empty(ledger, {50}, DType::BF16, Category::Activations, "a");
      const auto s = ledger.snapshot();
      EXPECT_EQ(s.live[static_cast<size_t>(Category::Weights)], 400);
      EXPECT_EQ(s.live[static_cast<size_t>(Category::Activations)], 100);
      EXPECT_EQ(s.live_total, 500);
      EXPECT_EQ(ledger.live_entries().size(), 2u);
    }
    Tensor t = Tensor::empty(ledger, {20}, DType::I64, Category::Temporary, "t");
    const auto s = ledger.snapshot();
    EXPECT_EQ(s.live_total, 560);
    EXPECT_EQ(s.peak_total, 560);
    EXPECT_EQ(s.peak_phase, "two");
    EXPECT_EQ(s.at_peak[static_cast<size_t>(Category::Activations)], 0);
    EXPECT_EQ(s.peak[static_cast<size_t>(Category::Activations)], 100);
    // A view shares its storage: no new bytes.
    Tensor view = w.slice(10, {5, 2});
    EXPECT_EQ(ledger.snapshot().live_total, 560);
  }
  const auto s = ledger.snapshot();
  EXPECT_EQ(s.live_total, 0);
  EXPECT_EQ(s.allocations, 3);
  EXPECT_TRUE(ledger.live_entries().empty());
}

TEST(Ledger, ATrainingStepAddsUpToTheDeclaredPlan) {
  auto backend = make_cpu_backend(1);
  Ledger& ledger = backend->ledger();
  const ModelConfig config = small_config();
  {
    BertStyleModel model(*backend, config);
    init_weights(model, 1);
    const int64_t weight_bytes = static_cast<int64_t>(model.weights().flat().nbytes());
    EXPECT_GE(weight_bytes, model.weights().parameter_count() * 4);
    EXPECT_LT(weight_bytes, model.weights().parameter_count() * 4 + 64 * 4 * 64);  // alignment padding only
    const Dataset data = make_dummy_dataset(6, 16, 1);
    TrainingArguments args;
    args.per_device_train_batch_size = 3;
    args.max_steps = 2;
    args.progress = false;
    Trainer trainer(*backend, model, data, args);
    ledger.reset_peaks();
    const TrainResult r = trainer.train();
    const auto& m = r.memory;
    auto cat = [](Category c) { return static_cast<size_t>(c); };
    EXPECT_EQ(m.live[cat(Category::Weights)], weight_bytes);
    EXPECT_EQ(m.live[cat(Category::Gradients)], weight_bytes);
    EXPECT_EQ(m.peak[cat(Category::OptimizerStates)], 2 * weight_bytes);
    EXPECT_EQ(m.live[cat(Category::Activations)], 0);  // all released by backward
    EXPECT_EQ(m.live[cat(Category::Temporary)], 0);

    // Peak activations are exactly what saved_for_backward() declares for one batch.
    int64_t declared = 0;
    auto add = [&](LayerKind kind, int64_t L, int64_t rows = 0) {
      for (const auto& s : saved_for_backward(kind, config, 3, L, {}, rows)) declared += shape_numel(s.shape) * 4;
    };
    add(LayerKind::Embeddings, 16);
    // The last layer computes past attention for the first token only.
    for (int64_t l = 0; l < config.num_hidden_layers; ++l)
      add(LayerKind::EncoderLayer, 16, l + 1 == config.num_hidden_layers ? 1 : 16);
    add(LayerKind::Head, 1);
    EXPECT_EQ(m.peak[cat(Category::Activations)], declared);
    EXPECT_FALSE(m.peak_phase.empty());
  }
  EXPECT_EQ(ledger.snapshot().live_total, 0);  // nothing leaks once the model and trainer are gone
}

TEST(Schedule, LinearWithWarmupAndConstant) {
  // transformers' get_linear_schedule_with_warmup: step/warmup, then a linear decay to 0.
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::Linear, 1.0, 0, 4, 12), 0.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::Linear, 1.0, 2, 4, 12), 0.5);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::Linear, 1.0, 4, 4, 12), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::Linear, 1.0, 8, 4, 12), 0.5);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::Linear, 1.0, 12, 4, 12), 0.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::Linear, 2.0, 0, 0, 10), 2.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::Constant, 3.0, 0, 5, 10), 3.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::ConstantWithWarmup, 1.0, 1, 4, 10), 0.25);
  EXPECT_DOUBLE_EQ(scheduled_lr(ScheduleKind::ConstantWithWarmup, 1.0, 9, 4, 10), 1.0);
}

// The trainer hands clipping's coefficient to Optimizer::step instead of
// scaling the gradients first: every optimizer must give the bits of
// clip_grad_norm's scaling followed by an unscaled step, over several steps
// (clipped and not), with a 16-bit copy; AdamW and SGD leave the gradients as
// they were (they multiply as they read).
TEST(Optimizer, ClippingCoefficientFoldedIntoTheStepGivesTheScaledStepsBits) {
  auto backend = make_cpu_backend(1);
  // A tensor of 5120 elements (8-bit AdamW quantizes it) and a small one (kept in float32).
  const std::vector<ParamSpec> specs = {{"w.weight", {64, 80}, true, ParamInit::Normal},
                                        {"w.bias", {80}, false, ParamInit::Zeros}};
  struct Case {
    const char* name;
    OptimizerOptions options;
  };
  std::vector<Case> cases;
  for (const char* name : {"adamw", "adamw_8bit", "sgd", "adafactor"}) {
    OptimizerOptions o;
    ASSERT_TRUE(parse_optimizer_kind(name, &o.kind));
    o.adam.weight_decay = 0.01;
    if (o.kind == OptimizerKind::Sgd) parse_optim_args("momentum=0.9,nesterov=True", &o);
    cases.push_back({name, o});
  }
  const double max_norm = 1.0;
  for (const Case& c : cases) {
    // [0]: clip_grad_norm then step(coefficient 1); [1]: gradient_norm, then step(coefficient).
    std::vector<std::unique_ptr<ParameterSet>> params, grads, halves;
    std::vector<std::unique_ptr<Optimizer>> opts;
    for (int k = 0; k < 2; ++k) {
      params.push_back(std::make_unique<ParameterSet>(*backend, specs, Category::Weights, ""));
      grads.push_back(std::make_unique<ParameterSet>(*backend, specs, Category::Gradients, "grad."));
      halves.push_back(std::make_unique<ParameterSet>(*backend, specs, Category::WeightsHalf, "half.", DType::BF16));
      std::mt19937 rng(5);
      std::normal_distribution<float> normal(0.0f, 0.05f);
      float* p = params[k]->flat().data<float>();
      for (int64_t i = 0; i < params[k]->flat().numel(); ++i) p[i] = normal(rng);
      opts.push_back(make_optimizer(*backend, *params[k], c.options));
    }
    std::mt19937 rng(9);
    for (int step = 0; step < 4; ++step) {
      // Steps 0 and 2 clip (norm well above 1), 1 and 3 do not.
      std::normal_distribution<float> normal(0.0f, step % 2 == 0 ? 0.1f : 1e-3f);
      std::vector<float> g(static_cast<size_t>(grads[0]->flat().numel()));
      for (float& x : g) x = normal(rng);
      for (int k = 0; k < 2; ++k) std::copy(g.begin(), g.end(), grads[k]->flat().data<float>());
      const double norm = clip_grad_norm(*backend, *grads[0], max_norm);
      opts[0]->step(*params[0], *grads[0], 1e-3, halves[0].get());
      const double folded_norm = gradient_norm(*backend, *grads[1]);
      const double coefficient = clip_coefficient(folded_norm, max_norm);
      EXPECT_EQ(norm, folded_norm);
      EXPECT_EQ(coefficient < 1.0, step % 2 == 0) << c.name << " step " << step;
      opts[1]->step(*params[1], *grads[1], 1e-3, halves[1].get(), coefficient);
      const Tensor a = params[0]->flat(), b = params[1]->flat();
      ASSERT_EQ(std::memcmp(a.data<float>(), b.data<float>(), a.numel() * sizeof(float)), 0)
          << c.name << ": the weights differ after step " << step;
      ASSERT_EQ(std::memcmp(halves[0]->flat().raw(), halves[1]->flat().raw(), a.numel() * 2), 0)
          << c.name << ": the 16-bit copies differ after step " << step;
      if (c.options.kind == OptimizerKind::AdamW || c.options.kind == OptimizerKind::Sgd ||
          c.options.kind == OptimizerKind::AdamW8bit)
        EXPECT_EQ(std::memcmp(grads[1]->flat().data<float>(), g.data(), g.size() * sizeof(float)), 0)
            << c.name << " changed the gradients it read";
    }
    const auto sa = opts[0]->state_tensors(), sb = opts[1]->state_tensors();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i)
      EXPECT_EQ(std::memcmp(sa[i].second.raw(), sb[i].second.raw(), sa[i].second.nbytes()), 0)
          << c.name << ": state " << sa[i].first << " differs";
  }
}

TEST(Optimizer, ClippingAndAdamWFollowTorch) {
  auto backend = make_cpu_backend(1);
  std::vector<ParamSpec> specs = {{"a.weight", {2}, true, ParamInit::Normal}, {"a.bias", {1}, false, ParamInit::Zeros}};
  ParameterSet params(*backend, specs, Category::Weights, "");
  ParameterSet grads(*backend, specs, Category::Gradients, "grad.");
  const float g[] = {3.0f, 0.0f, 4.0f};
  std::copy(g, g + 2, grads.get("a.weight").data<float>());
  grads.get("a.bias").data<float>()[0] = g[2];
  // Norm 5 clipped to 1: every gradient times 1 / (5 + 1e-6).
  EXPECT_DOUBLE_EQ(clip_grad_norm(*backend, grads, 1.0), 5.0);
  EXPECT_NEAR(grads.get("a.weight").data<float>()[0], 3.0 / (5.0 + 1e-6), 1e-7);
  // Below the limit nothing changes.
  EXPECT_NEAR(clip_grad_norm(*backend, grads, 10.0), 1.0, 1e-6);
  EXPECT_NEAR(grads.get("a.bias").data<float>()[0], 4.0 / (5.0 + 1e-6), 1e-7);

  params.get("a.weight").data<float>()[0] = 1.0f;
  params.get("a.weight").data<float>()[1] = 1.0f;
  params.get("a.bias").data<float>()[0] = 1.0f;
  AdamW adam(*backend, params, AdamWOptions{0.9, 0.999, 1e-8, 0.1});
  adam.step(params, grads, 0.01);
  // First AdamW step: p·(1 − lr·wd) − lr·sign(g) (for |g| >> eps); zero gradient: decay only; no decay on biases.
  EXPECT_NEAR(params.get("a.weight").data<float>()[0], 1.0 * (1 - 0.001) - 0.01, 1e-6);
  EXPECT_NEAR(params.get("a.weight").data<float>()[1], 1.0 * (1 - 0.001), 1e-7);
  EXPECT_NEAR(params.get("a.bias").data<float>()[0], 1.0 - 0.01, 1e-6);
  EXPECT_EQ(adam.steps_taken(), 1);
}

TEST(Data, DummyDatasetIsTheSeeds) {
  const Dataset a = make_dummy_dataset(512, 512, 42);
  ASSERT_EQ(a.input_ids.size(), 512u * 512u);
  std::set<int64_t> distinct;
  for (int64_t id : a.input_ids) {
    ASSERT_GE(id, 100);
    ASSERT_LT(id, 30000);
    distinct.insert(id);
  }
  EXPECT_GT(distinct.size(), 29000u);  // uniform over 29 900 values, 262 144 draws
  for (int64_t label : a.labels_i64) EXPECT_EQ(label, 0);
  EXPECT_EQ(a.input_ids, make_dummy_dataset(512, 512, 42).input_ids);
  EXPECT_NE(a.input_ids, make_dummy_dataset(512, 512, 43).input_ids);
}

TEST(Data, EpochOrderIsASeededPermutation) {
  const auto order = epoch_order(100, true, 1, 0);
  std::set<int64_t> seen(order.begin(), order.end());
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 99);
  EXPECT_EQ(order, epoch_order(100, true, 1, 0));
  EXPECT_NE(order, epoch_order(100, true, 1, 1));
  EXPECT_NE(order, epoch_order(100, true, 2, 0));
  const auto identity = epoch_order(5, false, 1, 0);
  EXPECT_EQ(identity, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Checkpoint, SaveThenLoadRoundTripsAndHalfPrecisionLoads) {
  auto backend = make_cpu_backend(1);
  test::TempDir tmp;
  const ModelSource source = resolve_model(test::fixture("bert-tiny-cls-padded"));
  BertStyleModel model(*backend, source.config);
  load_weights(model, source.directory, 0);
  save_pretrained(model, *backend, tmp.file("saved"));
  const ModelSource again = resolve_model(tmp.file("saved"));
  EXPECT_EQ(again.config.num_labels, 3);
  EXPECT_EQ(again.config.hidden_size, source.config.hidden_size);
  BertStyleModel reloaded(*backend, again.config);
  const LoadReport report = load_weights(reloaded, again.directory, 0);
  EXPECT_TRUE(report.initialised.empty());
  EXPECT_TRUE(report.unused.empty());
  EXPECT_EQ(host_copy(*backend, model.weights().flat()), host_copy(*backend, reloaded.weights().flat()));

  // The same weights stored as BF16 load to the BF16-rounded values.
  const io::SafetensorsFile original = io::SafetensorsFile::open(source.directory + "/model.safetensors");
  std::vector<std::vector<uint16_t>> halves;
  std::vector<io::StWriteTensor> tensors;
  for (const auto& name : original.names()) {
    const auto values = original.read_f32(name);
    std::vector<uint16_t> h(values.size());
    for (size_t i = 0; i < values.size(); ++i) h[i] = float_to_bf16(values[i]);
    halves.push_back(std::move(h));
    tensors.push_back({name, io::StDType::BF16, original.info(name).shape, nullptr});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = halves[i].data();
  std::filesystem::create_directories(tmp.file("bf16"));
  std::filesystem::copy_file(source.directory + "/config.json", tmp.file("bf16/config.json"));
  io::write_safetensors(tmp.file("bf16/model.safetensors"), tensors);
  BertStyleModel half(*backend, source.config);
  load_weights(half, tmp.file("bf16"), 0);
  const auto w = original.read_f32("classifier.weight");
  const auto got = host_copy(*backend, half.weights().get("classifier.weight"));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(got[i], bf16_to_float(float_to_bf16(w[i])));
}

TEST(Checkpoint, PresetInitialisationFollowsHuggingFace) {
  auto backend = make_cpu_backend(1);
  ModelConfig c = small_config();
  BertStyleModel model(*backend, c);
  init_weights(model, 5);
  const auto word = host_copy(*backend, model.weights().get("bert.embeddings.word_embeddings.weight"));
  double sum = 0, sum2 = 0;
  for (float v : word) {
    sum += v;
    sum2 += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(word.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(sum2 / n), c.initializer_range, 2e-4);
  for (int64_t h = 0; h < c.hidden_size; ++h) EXPECT_EQ(word[c.pad_token_id * c.hidden_size + h], 0.0f);
  for (float v : host_copy(*backend, model.weights().get("bert.encoder.layer.0.output.LayerNorm.weight"))) EXPECT_EQ(v, 1.0f);
  for (float v : host_copy(*backend, model.weights().get("classifier.bias"))) EXPECT_EQ(v, 0.0f);
}

TEST(CommandLine, TrainWithNoFlagsPrintsTheSeedSummaryOnTheCpu) {
  const auto r = test::run_anatomy("train");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\nTime: [0-9]+\\.[0-9]{2}\n"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\nSamples/second: [0-9]+\\.[0-9]{2}\n"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\nSamples/second after the first step: [0-9]+\\.[0-9]{2}\n")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("memory occupied.*: [0-9]+ MB\\."))) << r.output;
  EXPECT_NE(r.output.find("scaled to the CPU"), std::string::npos);
  EXPECT_NE(r.output.find("Optimizer states"), std::string::npos);
  EXPECT_NE(r.output.find("Memory plan: ledger peak"), std::string::npos) << "the plan comes before the run";
}

}  // namespace
}  // namespace anatomy
