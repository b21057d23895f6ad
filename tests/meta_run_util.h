// meta_run_util.h: the harness of the meta-backend tests (test_meta_backend.cpp
// against the CPU backend, gpu/test_meta_backend_cuda.cpp against the CUDA
// backend): a small training run, its data, what a run leaves in the ledger,
// and the checks that two runs' ledgers are the same byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "anatomy/model/bert/bert.h"
#include "anatomy/data/dataset.h"
#include "anatomy/kernels/fp32_products.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"

namespace anatomy::test {

// A small training run: the model, the data's shape and the arguments.
struct RunCase {
  std::string name;
  ModelConfig config;
  int64_t size = 10, seq_len = 33, batch = 5, steps = 2;
  bool padding = true;      // an attention mask with padded tails
  bool token_types = false; // token_type_ids given
  DType compute = DType::F32;
  Fp32Products fp32_products = Fp32Products::Float32;  // the CUDA backend's and the meta backend's
};
// GoogleTest names a case by this (not by its bytes).
inline void PrintTo(const RunCase& c, std::ostream* os) { *os << c.name; }

inline ModelConfig small_bert(int64_t hidden, int64_t heads, int64_t layers, int64_t intermediate,
                             int64_t max_positions = 512) {
  ModelConfig c;
  c.vocab_size = 500;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_hidden_layers = layers;
  c.intermediate_size = intermediate;
  c.max_position_embeddings = max_positions;
  return c;
}

inline ModelConfig preset(const char* name) {
  ModelConfig c = *model_preset(name);
  c.vocab_size = 500;
  c.max_position_embeddings = 64;
  return c;
}

// Deterministic data for the case: ids within the vocabulary, labels of the
// problem type the config asks for, optionally a padding mask and token types.
inline Dataset case_data(const RunCase& c) {
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
  if (c.token_types) {
    d.token_type_ids.resize(n);
    for (int64_t i = 0; i < n; ++i) d.token_type_ids[i] = (i % c.seq_len) >= c.seq_len / 2 ? 1 : 0;
  }
  const int64_t labels = c.config.num_labels;
  if (c.config.problem_type == ProblemType::Regression || c.config.problem_type == ProblemType::MultiLabel ||
      labels == 1) {
    d.label_dtype = DType::F32;
    d.label_width = labels;
    d.labels_f32.resize(c.size * labels);
    for (size_t i = 0; i < d.labels_f32.size(); ++i)
      d.labels_f32[i] = c.config.problem_type == ProblemType::MultiLabel ? static_cast<float>(i % 2) : 0.25f * i;
  } else {
    d.label_dtype = DType::I64;
    d.label_width = 1;
    d.labels_i64.resize(c.size);
    for (int64_t i = 0; i < c.size; ++i) d.labels_i64[i] = i % labels;
  }
  return d;
}

struct RunRecord {
  TrainResult result;
  std::vector<PhaseSample> timeline;
  std::vector<LedgerEntry> live_after;  // with the model still alive
  LedgerSnapshot after_teardown;        // once the model and the trainer are gone
};

inline RunRecord train_on(Backend& backend, const RunCase& c) {
  RunRecord r;
  Ledger& ledger = backend.ledger();
  ledger.record_timeline(0, c.steps);
  const Dataset data = case_data(c);
  {
    BertStyleModel model(backend, c.config, c.compute);
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

inline void expect_same_snapshot(const LedgerSnapshot& real, const LedgerSnapshot& meta, bool reserved) {
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
  if (reserved) {
    EXPECT_EQ(real.reserved, meta.reserved);
    EXPECT_EQ(real.reserved_peak, meta.reserved_peak);
    EXPECT_EQ(real.reserved_at_peak, meta.reserved_at_peak);
  }
}

inline void expect_same_run(const RunRecord& real, const RunRecord& meta, bool reserved) {
  {
    SCOPED_TRACE("ledger at the end of training");
    expect_same_snapshot(real.result.memory, meta.result.memory, reserved);
  }
  {
    SCOPED_TRACE("ledger after teardown");
    expect_same_snapshot(real.after_teardown, meta.after_teardown, reserved);
  }
  ASSERT_EQ(real.timeline.size(), meta.timeline.size());
  for (size_t i = 0; i < real.timeline.size(); ++i) {
    const PhaseSample &a = real.timeline[i], &b = meta.timeline[i];
    EXPECT_EQ(a.phase, b.phase) << "sample " << i;
    EXPECT_EQ(a.step, b.step) << "sample " << i << " " << a.phase;
    EXPECT_EQ(a.total, b.total) << "sample " << i << " " << a.phase;
    EXPECT_TRUE(a.live == b.live) << "sample " << i << " " << a.phase;
    if (reserved) {
      EXPECT_EQ(a.reserved, b.reserved) << "sample " << i << " " << a.phase;
    }
  }
  ASSERT_EQ(real.live_after.size(), meta.live_after.size());
  for (size_t i = 0; i < real.live_after.size(); ++i) {
    EXPECT_EQ(real.live_after[i].name, meta.live_after[i].name);
    EXPECT_EQ(real.live_after[i].category, meta.live_after[i].category) << real.live_after[i].name;
    EXPECT_EQ(real.live_after[i].bytes, meta.live_after[i].bytes) << real.live_after[i].name;
  }
  EXPECT_EQ(real.result.steps, meta.result.steps);
  EXPECT_EQ(real.result.samples, meta.result.samples);
}

}  // namespace anatomy::test
