// test_meta_backend_cuda.cpp: the meta backend with the CUDA target predicts
// a real CUDA training run's memory byte for byte: the same model and Trainer
// run two or three steps on the CUDA backend and on the meta backend, and the
// ledgers agree on every peak, the composition at the peak, the phase of the
// peak, the number of allocations, the timeline of phases, the buffers left
// live, and the bytes the pool reserved from the device. Float32, bf16 and
// fp16; head sizes the fused attention has and ones it has not (whose 16-bit
// path makes float32 copies); hidden sizes the fused LayerNorm takes and ones
// it does not; a sort of more tokens than CUB's single tile.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "anatomy/data/dataset.h"
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/kernels.cuh"
#include "anatomy/kernels/cuda_memory.h"
#include "anatomy/kernels/meta/meta_backend.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"

namespace anatomy {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU"

struct RunCase {
  std::string name;
  BertConfig config;
  int64_t size = 10, seq_len = 33, batch = 5, steps = 2;
  bool padding = true;
  DType compute = DType::F32;
};
// GoogleTest names a case by this (not by its bytes).
void PrintTo(const RunCase& c, std::ostream* os) { *os << c.name; }

BertConfig small_bert(int64_t hidden, int64_t heads, int64_t layers, int64_t intermediate) {
  BertConfig c;
  c.vocab_size = 500;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_hidden_layers = layers;
  c.intermediate_size = intermediate;
  c.max_position_embeddings = 512;
  return c;
}

// Deterministic classification data with ids in the vocabulary and, when
// asked, a mask whose tails are padding.
Dataset case_data(const RunCase& c) {
  Dataset d;
  d.source = "meta test data";
  d.size = c.size;
  d.seq_len = c.seq_len;
  const int64_t n = c.size * c.seq_len;
  d.input_ids.resize(n);
  for (int64_t i = 0; i < n; ++i) d.input_ids[i] = 1 + (i * 7919) % (c.config.vocab_size - 1);
  if (c.padding) {
    d.attention_mask.assign(n, 1);
    for (int64_t e = 0; e < c.size; ++e)
      for (int64_t t = c.seq_len - (e % 3) * 3; t < c.seq_len; ++t) {
        d.attention_mask[e * c.seq_len + t] = 0;
        d.input_ids[e * c.seq_len + t] = c.config.pad_token_id;
      }
  }
  d.label_dtype = DType::I64;
  d.label_width = 1;
  d.labels_i64.resize(c.size);
  for (int64_t i = 0; i < c.size; ++i) d.labels_i64[i] = i % c.config.num_labels;
  return d;
}

struct RunRecord {
  TrainResult result;
  std::vector<PhaseSample> timeline;
  std::vector<LedgerEntry> live_after;
  LedgerSnapshot after_teardown;
};

RunRecord train_on(Backend& backend, const RunCase& c) {
  RunRecord r;
  Ledger& ledger = backend.ledger();
  ledger.record_timeline(0, c.steps);
  const Dataset data = case_data(c);
  {
    BertForSequenceClassification model(backend, c.config, c.compute);
    init_weights(model, 7);
    model.refresh_half_weights();
    TrainingArguments args;
    args.per_device_train_batch_size = c.batch;
    args.max_steps = c.steps;
    args.learning_rate = 1e-3;
    args.progress = false;
    args.bf16 = c.compute == DType::BF16;
    args.fp16 = c.compute == DType::F16;
    Trainer trainer(backend, model, data, args);
    r.result = trainer.train();
    r.live_after = ledger.live_entries();
  }
  r.timeline = ledger.timeline();
  r.after_teardown = ledger.snapshot();
  return r;
}

void expect_same_snapshot(const LedgerSnapshot& real, const LedgerSnapshot& meta) {
  EXPECT_EQ(real.peak_total, meta.peak_total);
  EXPECT_EQ(real.live_total, meta.live_total);
  for (size_t i = 0; i < kCategoryCount; ++i) {
    const auto name = category_name(static_cast<Category>(i));
    EXPECT_EQ(real.at_peak[i], meta.at_peak[i]) << "at the peak: " << name;
    EXPECT_EQ(real.peak[i], meta.peak[i]) << "peak of " << name;
    EXPECT_EQ(real.live[i], meta.live[i]) << "live " << name;
  }
  EXPECT_EQ(real.peak_phase, meta.peak_phase);
  EXPECT_EQ(real.peak_step, meta.peak_step);
  EXPECT_EQ(real.allocations, meta.allocations);
  // The pool over cudaMalloc'd segments and the pool over simulated ones.
  EXPECT_EQ(real.reserved, meta.reserved);
  EXPECT_EQ(real.reserved_peak, meta.reserved_peak);
  EXPECT_EQ(real.reserved_at_peak, meta.reserved_at_peak);
}

TEST(CudaMemory, CubSortStorageIsWhatCubAsks) {
  SKIP_WITHOUT_GPU();
  for (int64_t T : {int64_t{1}, int64_t{100}, int64_t{2304}, int64_t{2305}, int64_t{5760}, int64_t{5761},
                    int64_t{11520}, int64_t{11521}, int64_t{65536}, int64_t{1000003}, (int64_t{1} << 28) + 5})
    EXPECT_EQ(cuda::cub_sort_pairs_query_bytes(T), cuda::cub_sort_pairs_bytes(T)) << T << " tokens";
}

std::vector<RunCase> gpu_cases() {
  std::vector<RunCase> cases;
  auto add = [&](std::string name, DType compute, BertConfig config) {
    RunCase c;
    c.name = std::move(name);
    c.compute = compute;
    c.config = std::move(config);
    cases.push_back(std::move(c));
    return &cases.back();
  };
  // Head size 64: flash attention in float32 and in 16 bits.
  add("f32_d64", DType::F32, small_bert(128, 2, 2, 512));
  add("bf16_d64", DType::BF16, small_bert(128, 2, 2, 512));
  add("fp16_d64", DType::F16, small_bert(128, 2, 2, 512));
  // Head size 32 in fp16, 128 in bf16 (fused) and float32 (materialised).
  add("fp16_d32", DType::F16, small_bert(64, 2, 2, 256));
  add("bf16_d128", DType::BF16, small_bert(256, 2, 1, 512));
  add("f32_d128", DType::F32, small_bert(256, 2, 1, 512));
  // Head size 12: no fused attention; 16 bits go through float32 copies.
  add("f32_d12", DType::F32, small_bert(48, 4, 2, 192));
  add("bf16_d12", DType::BF16, small_bert(48, 4, 2, 192));
  add("fp16_d12", DType::F16, small_bert(48, 4, 2, 192));
  // Hidden 36: not a multiple of 8, so LayerNorm and the bias sums are not fused.
  add("bf16_h36", DType::BF16, small_bert(36, 3, 2, 72));
  add("f32_h36", DType::F32, small_bert(36, 3, 2, 72));
  // A ragged last batch (5, 5, 2) and no mask.
  RunCase* ragged = add("bf16_ragged_unmasked", DType::BF16, small_bert(64, 2, 2, 256));
  ragged->size = 12;
  ragged->steps = 3;
  ragged->padding = false;
  // 8 × 300 tokens: more than CUB's single tile in the embedding backward.
  for (DType t : {DType::F32, DType::BF16}) {
    RunCase* longer = add(t == DType::F32 ? "f32_2400_tokens" : "bf16_2400_tokens", t, small_bert(64, 2, 1, 256));
    longer->size = 16;
    longer->seq_len = 300;
    longer->batch = 8;
  }
  // A full-size model at the seed's batch shape (4 × 512), in float32 and bf16
  // (bert-large, the seed's model, matched too, in 45 s on an H100: too long to keep).
  for (DType compute : {DType::F32, DType::BF16}) {
    RunCase* full = add(compute == DType::F32 ? "bert_base_4x512_f32" : "bert_base_4x512_bf16", compute,
                        *bert_preset("bert-base-uncased"));
    full->size = 8;
    full->seq_len = 512;
    full->batch = 4;
  }
  return cases;
}

class MetaMatchesCuda : public ::testing::TestWithParam<RunCase> {};

TEST_P(MetaMatchesCuda, LedgerOfTrainingStepsIsIdentical) {
  SKIP_WITHOUT_GPU();
  const RunCase& c = GetParam();
  RunRecord real;
  {
    auto gpu = cuda::make_cuda_backend(0);
    real = train_on(*gpu, c);
  }
  // The mirror assumes every step updates (an fp16 overflow that skips the
  // first update moves the AdamW chunk table to a later step).
  ASSERT_EQ(real.result.skipped_steps, 0) << "an fp16 step overflowed: pick a case that does not";
  for (double loss : real.result.losses) EXPECT_TRUE(std::isfinite(loss) && loss > 0.0);

  MetaOptions options;
  options.target = MetaTarget::Cuda;
  auto meta = make_meta_backend(options);
  EXPECT_EQ(meta->device(), Device::cuda(0));
  const RunRecord simulated = train_on(*meta, c);
  for (double loss : simulated.result.losses) EXPECT_EQ(loss, 0.0);

  {
    SCOPED_TRACE("ledger at the end of training");
    expect_same_snapshot(real.result.memory, simulated.result.memory);
  }
  {
    SCOPED_TRACE("ledger after teardown");
    expect_same_snapshot(real.after_teardown, simulated.after_teardown);
  }
  ASSERT_EQ(real.timeline.size(), simulated.timeline.size());
  for (size_t i = 0; i < real.timeline.size(); ++i) {
    const PhaseSample &a = real.timeline[i], &b = simulated.timeline[i];
    EXPECT_EQ(a.phase, b.phase) << "sample " << i;
    EXPECT_EQ(a.step, b.step) << "sample " << i << " " << a.phase;
    EXPECT_EQ(a.total, b.total) << "sample " << i << " " << a.phase;
    EXPECT_TRUE(a.live == b.live) << "sample " << i << " " << a.phase;
    EXPECT_EQ(a.reserved, b.reserved) << "sample " << i << " " << a.phase;
  }
  ASSERT_EQ(real.live_after.size(), simulated.live_after.size());
  for (size_t i = 0; i < real.live_after.size(); ++i) {
    EXPECT_EQ(real.live_after[i].name, simulated.live_after[i].name);
    EXPECT_EQ(real.live_after[i].category, simulated.live_after[i].category) << real.live_after[i].name;
    EXPECT_EQ(real.live_after[i].bytes, simulated.live_after[i].bytes) << real.live_after[i].name;
  }
  // Both attention paths agree on what attention saves.
  auto gpu = cuda::make_cuda_backend(0);
  const int64_t D = c.config.head_dim();
  EXPECT_EQ(gpu->attention_saves_probabilities(c.compute, D), meta->attention_saves_probabilities(c.compute, D));
}

INSTANTIATE_TEST_SUITE_P(Configurations, MetaMatchesCuda, ::testing::ValuesIn(gpu_cases()),
                         [](const ::testing::TestParamInfo<RunCase>& info) { return info.param.name; });

}  // namespace
}  // namespace anatomy
