// test_memory_plan.cpp: the plan is the estimate. A plan computed without
// running (anatomy/memory_plan.h) must equal the ledger of a real CPU run over
// the whole dataset, partial last batch included, byte for byte; and
// `anatomy estimate` must report it, with the seed's textbook bytes per parameter.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <fmt/format.h>

#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/analysis/estimate.h"
#include "anatomy/analysis/memory_plan.h"
#include "anatomy/data/dataset.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/parameters.h"
#include "anatomy/train/trainer.h"
#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

struct Case {
  const char* name;
  int64_t layers, hidden, heads, batch, size, seq_len;
  bool mask, types;
  int64_t num_labels;
};

ModelConfig config_of(const Case& c) {
  ModelConfig config = *model_preset("bert-tiny");
  config.vocab_size = 500;
  config.max_position_embeddings = 64;
  config.num_hidden_layers = c.layers;
  config.hidden_size = c.hidden;
  config.num_attention_heads = c.heads;
  config.intermediate_size = 4 * c.hidden;
  config.num_labels = c.num_labels;
  return config;
}

Dataset data_of(const Case& c) {
  Dataset d = make_dummy_dataset(c.size, c.seq_len, 3);
  for (auto& id : d.input_ids) id %= 500;
  if (c.mask) {
    d.attention_mask.assign(d.input_ids.size(), 1);
    d.attention_mask[1] = 0;
  }
  if (c.types) d.token_type_ids.assign(d.input_ids.size(), 0);
  if (c.num_labels == 1) {
    d.label_dtype = DType::F32;
    d.labels_f32.assign(d.size, 0.5f);
    d.labels_i64.clear();
  }
  return d;
}

class PlanEqualsRun : public ::testing::TestWithParam<Case> {};

TEST_P(PlanEqualsRun, LedgerPeakCompositionAndPhaseAreExact) {
  const Case c = GetParam();
  const ModelConfig config = config_of(c);
  const Dataset data = data_of(c);
  TrainingArguments args;
  args.per_device_train_batch_size = c.batch;
  args.progress = false;
  args.num_train_epochs = 2;

  PlanTarget cpu;
  cpu.gpu = false;
  const MemoryPlan plan = plan_training(config, args, DataShape::of(data), cpu);
  ASSERT_TRUE(plan.fits);

  auto backend = make_cpu_backend(1);
  LedgerSnapshot measured;
  {
    BertStyleModel model(*backend, config);
    init_weights(model, 1);
    Trainer trainer(*backend, model, data, args);
    measured = trainer.train().memory;
  }
  EXPECT_EQ(plan.ledger.peak_total, measured.peak_total);
  for (size_t k = 0; k < kCategoryCount; ++k) {
    EXPECT_EQ(plan.ledger.at_peak[k], measured.at_peak[k]) << category_name(static_cast<Category>(k));
    EXPECT_EQ(plan.ledger.peak[k], measured.peak[k]) << category_name(static_cast<Category>(k));
  }
  EXPECT_EQ(plan.ledger.peak_phase, measured.peak_phase);
  EXPECT_EQ(plan.ledger.peak_step, measured.peak_step);
  int64_t parameters = 0;
  for (const ParamSpec& spec : bert_parameter_specs(config)) parameters += shape_numel(spec.shape);
  EXPECT_EQ(plan.parameters, parameters);
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, PlanEqualsRun,
    ::testing::Values(Case{"tiny_b4_partial", 2, 32, 2, 4, 10, 16, false, false, 2},
                      Case{"mask_types_b3", 2, 48, 4, 3, 9, 24, true, true, 3},
                      Case{"regression_b5", 1, 64, 4, 5, 5, 33, true, false, 1},
                      Case{"batch_larger_than_data", 3, 32, 2, 8, 6, 12, false, true, 2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(MemoryPlan, ASimulatedDeviceTooSmallSaysItDoesNotFitAndNamesTheBuffer) {
  const Case c{"x", 2, 32, 2, 4, 8, 16, false, false, 2};
  TrainingArguments args;
  args.per_device_train_batch_size = 4;
  PlanTarget gpu;
  gpu.capacity = 1 << 20;  // 1 MiB: not even the cuBLAS workspace
  const MemoryPlan plan = plan_training(config_of(c), args, DataShape::of(data_of(c)), gpu);
  EXPECT_FALSE(plan.fits);
  EXPECT_NE(plan.out_of_memory.find("out of memory"), std::string::npos) << plan.out_of_memory;
}

// On a GPU that runs the Hopper attention kernels (the default, or
// --attention hopper), a bf16 layer's attention keeps its dropout mask as
// bits next to the log-sum-exp: each layer's activations grow by B·heads·L
// words of attention_keep_words(L) uint32. With --attention cudnn (cuDNN's
// attention) nothing changes.
TEST(MemoryPlan, HopperAttentionKeepsTheDropoutMaskAsBits) {
  const ModelConfig config = *model_preset("bert-base-uncased");
  TrainingArguments args;
  args.bf16 = true;
  args.per_device_train_batch_size = 2;
  DataShape shape;
  shape.size = 4;
  shape.seq_len = 128;
  PlanTarget plain;
  PlanTarget hopper;
  hopper.hopper_attention = true;
  const auto activations = static_cast<size_t>(Category::Activations);
  {
    PlanTarget hopper_cudnn = hopper, plain_cudnn = plain;
    hopper_cudnn.options.attention = plain_cudnn.options.attention = AttentionKernels::Cudnn;
    EXPECT_EQ(plan_training(config, args, shape, hopper_cudnn).ledger.peak[activations],
              plan_training(config, args, shape, plain_cudnn).ledger.peak[activations]);
  }
  const int64_t words = 4;  // L = 128: one block of 128 keys
  const int64_t per_layer = 2 * config.num_attention_heads * 128 * words * 4;
  {
    const MemoryPlan a = plan_training(config, args, shape, plain);
    const MemoryPlan b = plan_training(config, args, shape, hopper);
    // Every layer but the last, whose first-query attention keeps its probabilities instead.
    EXPECT_EQ(b.ledger.peak[activations] - a.ledger.peak[activations], (config.num_hidden_layers - 1) * per_layer);
  }
  // Without dropout nothing is kept.
  ModelConfig no_dropout = config;
  no_dropout.attention_probs_dropout_prob = 0.0;
  EXPECT_EQ(plan_training(no_dropout, args, shape, hopper).ledger.peak[activations],
            plan_training(no_dropout, args, shape, plain).ledger.peak[activations]);
}

// Whether batch b fits the target, as the batch search asks it (two full steps).
bool batch_fits(const ModelConfig& config, const TrainingArguments& args, const DataShape& shape,
                const PlanTarget& target, int64_t b) {
  TrainingArguments a = args;
  a.per_device_train_batch_size = b;
  a.max_steps = -1;
  DataShape s = shape;
  s.size = 2 * b;
  return plan_training(config, a, s, target).fits;
}

TEST(MemoryPlan, TheLargestFittingBatchFitsAndTheNextDoesNot) {
  const ModelConfig config = *model_preset("bert-base-uncased");
  TrainingArguments args;
  DataShape shape;
  shape.size = 64;
  shape.seq_len = 128;
  PlanTarget gpu;
  gpu.capacity = int64_t{6} << 30;
  const int64_t best = largest_fitting_batch(config, args, shape, gpu);
  ASSERT_GT(best, 1);
  EXPECT_TRUE(batch_fits(config, args, shape, gpu, best));
  EXPECT_FALSE(batch_fits(config, args, shape, gpu, best + 1));
}

// --auto-find-batch-size on the plan alone: the largest batch up to the one
// asked that fits the capacity less the headroom, and the next one does not.
TEST(MemoryPlan, TheAutoBatchFitsUnderTheHeadroomAndTheNextDoesNot) {
  const ModelConfig config = *model_preset("bert-base-uncased");
  TrainingArguments args;
  args.per_device_train_batch_size = 4096;
  DataShape shape;
  shape.size = 64;
  shape.seq_len = 128;
  PlanTarget gpu;
  gpu.capacity = int64_t{6} << 30;
  const int64_t batch = auto_batch_size(config, args, shape, gpu);
  ASSERT_GT(batch, 1);
  PlanTarget roomy = gpu;
  roomy.capacity = capacity_with_headroom(gpu.capacity);
  ASSERT_LT(roomy.capacity, gpu.capacity);
  EXPECT_TRUE(batch_fits(config, args, shape, roomy, batch));
  EXPECT_FALSE(batch_fits(config, args, shape, roomy, batch + 1));
  EXPECT_LE(batch, largest_fitting_batch(config, args, shape, gpu));
  // A batch that fits is kept as asked.
  TrainingArguments small = args;
  small.per_device_train_batch_size = 2;
  EXPECT_EQ(auto_batch_size(config, small, shape, gpu), 2);
}

// `anatomy estimate --auto-find-batch-size` reports the batch `train` would
// take on that GPU and plans it; without a device size it says what it needs.
TEST(Estimate, AutoFindBatchSizeReportsTheBatchTrainWouldTake) {
  const auto r = test::run_anatomy(
      "estimate --gpu h100-80gb --bf16 --dummy-seq-len 512 --per-device-train-batch-size 4096 --auto-find-batch-size");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch used, largest;
  ASSERT_TRUE(std::regex_search(r.output, used, std::regex(R"(--auto-find-batch-size: batch 4096 does not fit; using (\d+))")))
      << r.output;
  ASSERT_TRUE(std::regex_search(r.output, largest, std::regex(R"(Largest batch that fits: (\d+) plain)"))) << r.output;
  const int64_t b = std::stoll(used[1].str()), most = std::stoll(largest[1].str());
  EXPECT_LE(b, most);
  EXPECT_GE(b, most * 95 / 100) << "more than the headroom's worth below the largest batch";
  EXPECT_NE(r.output.find(fmt::format("batch {} x 512 tokens", b)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Fits:"), std::string::npos) << r.output;

  const auto kept = test::run_anatomy("estimate --gpu h100-80gb --bf16 --per-device-train-batch-size 8 "
                                      "--auto-find-batch-size");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_EQ(kept.output.find("--auto-find-batch-size:"), std::string::npos) << kept.output;

  const auto cpu = test::run_anatomy("estimate --device cpu --auto-find-batch-size");
  EXPECT_TRUE(test::failed_cleanly(cpu, {"--auto-find-batch-size", "--gpu-memory"})) << cpu.output;
}

TEST(Estimate, TheSeedSettingOnAV100ShowsTextbookBytesPerParameter) {
  const auto r = test::run_anatomy("estimate --gpu v100-16gb");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Weights, gradients and AdamW states at exactly 4 + 4 + 8 bytes per parameter.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(weights\s+4\s+4\.00)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(optimizer \(AdamW\)\s+8\s+8\.00)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(gradients\s+4\s+4\.00)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(Largest batch that fits: \d+)"))) << r.output;
}

TEST(Estimate, MixedPrecisionKeepsAHalfCopyOfTheWeights) {
  const auto r = test::run_anatomy("estimate --gpu h100-80gb --bf16 --per-device-train-batch-size 32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(weights\s+6\s+6\.00)"))) << r.output;
  EXPECT_NE(r.output.find("weights_half"), std::string::npos);
  EXPECT_NE(r.output.find("Fits"), std::string::npos);
}

TEST(Estimate, BadDeviceFlagsAreOneClearError) {
  auto r = test::run_anatomy("estimate --gpu z80");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("z80"), std::string::npos) << r.output;
  r = test::run_anatomy("estimate --gpu-memory 16 parsecs");
  EXPECT_NE(r.exit_code, 0);
}

// Several ranks on GPUs: NCCL's buffers, outside the ledger, join the context
// in the predicted NVML use and in what the pool may take, byte for byte; the
// default is the measured figure, --nccl-memory replaces it, and it is refused
// where no NCCL runs.
TEST(Estimate, SeveralGpusCountNcclsBuffersBesideTheContext) {
  EstimateRequest r;
  r.config = *model_preset("bert-base-uncased");
  r.args.per_device_train_batch_size = 8;
  r.args.zero_stage = 1;
  r.shape.size = 64;
  r.shape.seq_len = 128;
  r.nproc = 4;
  r.device_total = int64_t{16} << 30;
  r.context_bytes = int64_t{500} << 20;
  const Estimate without = estimate_training(r);
  r.nccl_bytes = int64_t{584} << 20;
  const Estimate with = estimate_training(r);
  EXPECT_EQ(with.plan.nvml_total() - without.plan.nvml_total(), r.nccl_bytes);
  EXPECT_EQ(without.capacity - with.capacity, r.nccl_bytes);
  EXPECT_EQ(with.plan.ledger.peak_total, without.plan.ledger.peak_total) << "NCCL's buffers are not the ledger's";

  auto nvml_line = [](const std::string& out) {
    std::smatch m;
    return std::regex_search(out, m, std::regex(R"(predicted NVML use\s+(\S+ \S+))")) ? m[1].str() : std::string();
  };
  const std::string flags = "estimate --gpu h100-80gb --bf16 --per-device-train-batch-size 8 --zero-stage 1 --nproc 2";
  auto r1 = test::run_anatomy(flags);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_TRUE(std::regex_search(r1.output, std::regex(R"(NCCL's own buffers\s+584\.0 MiB)"))) << r1.output;
  auto r2 = test::run_anatomy(flags + " --nccl-memory 2GiB");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_TRUE(std::regex_search(r2.output, std::regex(R"(NCCL's own buffers\s+2\.0 GiB\s+\(from --nccl-memory\))")))
      << r2.output;
  EXPECT_NE(nvml_line(r1.output), nvml_line(r2.output));
  auto one = test::run_anatomy("estimate --gpu h100-80gb --nccl-memory 2GiB");
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.output.find("--nccl-memory 2GiB"), std::string::npos) << one.output;
  EXPECT_EQ(test::run_anatomy("estimate --gpu h100-80gb").output.find("NCCL"), std::string::npos);
}

}  // namespace
}  // namespace anatomy
