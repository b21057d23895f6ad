// test_meta_backend.cpp: the meta backend (kernels/meta) runs the real model
// and Trainer without computing, and its ledger is the real backend's, byte
// for byte: peaks, the composition at the peak, the phase of the peak, the
// number of allocations, the timeline of phases and the buffers left live.
// Here against the CPU backend; tests/gpu/test_meta_backend_cuda.cpp does the
// same against the CUDA backend. Also: what the meta run reads back is zeros,
// never garbage, and its CUDA target works on a machine without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "anatomy/core/pool.h"
#include "anatomy/data/dataset.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda_memory.h"
#include "anatomy/kernels/meta/meta_backend.h"
#include "anatomy/model/bert/bert.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "meta_run_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

using test::RunCase;
using test::RunRecord;
using test::expect_same_run;
using test::preset;
using test::small_bert;
using test::train_on;

// The meta run read nothing: every loss is exactly 0 (losses return 0, and
// nothing it reads back is garbage).
void expect_zero_losses(const TrainResult& r, int64_t steps) {
  ASSERT_EQ(static_cast<int64_t>(r.losses.size()), steps);
  for (double loss : r.losses) {
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_EQ(loss, 0.0);
  }
  EXPECT_EQ(r.skipped_steps, 0);
}

std::vector<RunCase> cpu_cases() {
  std::vector<RunCase> cases;
  auto add = [&](std::string name, ModelConfig config, int64_t size, int64_t seq_len, int64_t batch, int64_t steps,
                 bool padding, bool token_types) {
    RunCase c;
    c.name = std::move(name);
    c.config = std::move(config);
    c.size = size;
    c.seq_len = seq_len;
    c.batch = batch;
    c.steps = steps;
    c.padding = padding;
    c.token_types = token_types;
    cases.push_back(std::move(c));
  };
  add("tiny_b2_l16", preset("bert-tiny"), 4, 16, 2, 2, false, false);
  add("tiny_b5_l33_padded", preset("bert-tiny"), 10, 33, 5, 2, true, true);
  add("mini_b2_l33", preset("bert-mini"), 4, 33, 2, 2, false, false);
  add("h64_b5_l16_ragged", small_bert(64, 4, 2, 128, 64), 7, 16, 5, 3, true, false);  // 5 then a last batch of 2
  ModelConfig regression = small_bert(64, 4, 2, 128, 64);
  regression.num_labels = 1;  // regression (MSE)
  add("h64_regression_b5_l33", regression, 10, 33, 5, 2, true, false);
  ModelConfig multi = small_bert(48, 4, 2, 96, 64);
  multi.num_labels = 3;
  multi.problem_type = ProblemType::MultiLabel;  // BCE with logits
  add("h48_multilabel_b2_l16", multi, 4, 16, 2, 2, false, true);
  return cases;
}

class MetaMatchesCpu : public ::testing::TestWithParam<RunCase> {};

TEST_P(MetaMatchesCpu, LedgerOfTwoTrainingStepsIsIdentical) {
  const RunCase& c = GetParam();
  auto cpu = make_cpu_backend(1);
  const RunRecord real = train_on(*cpu, c);
  MetaOptions options;
  options.target = MetaTarget::Cpu;
  auto meta = make_meta_backend(options);
  EXPECT_TRUE(meta->device().is_cpu());
  const RunRecord simulated = train_on(*meta, c);
  expect_same_run(real, simulated, /*reserved=*/true);
  expect_zero_losses(simulated.result, c.steps);
  // The real run computed something.
  for (double loss : real.result.losses) EXPECT_GT(loss, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Configurations, MetaMatchesCpu, ::testing::ValuesIn(cpu_cases()),
                         [](const ::testing::TestParamInfo<RunCase>& info) { return info.param.name; });

TEST(MetaBackend, CopyToHostWritesZerosAndOpsTouchNothing) {
  auto meta = make_meta_backend(MetaOptions{MetaTarget::Cpu});
  Tensor t = Tensor::empty(meta->ledger(), {3, 5}, DType::F32, Category::Temporary, "t");
  EXPECT_NE(t.raw(), nullptr);
  std::vector<float> host(15, 7.0f);
  meta->copy_from_host(t, host.data());
  meta->zero(t);
  meta->scale(t, 2.0);
  meta->copy_to_host(t, host.data());
  for (float v : host) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(meta->sum_of_squares(t), 0.0);
  EXPECT_TRUE(meta->attention_saves_probabilities(DType::F32, 64));  // as the CPU backend
  const auto s = meta->ledger().snapshot();
  EXPECT_EQ(s.live_total, 60);
  EXPECT_EQ(s.reserved, 60);  // the CPU's reserved bytes are its live bytes
}

TEST(MetaBackend, CpuTargetRunsOutOfMemoryAtItsCapacity) {
  MetaOptions options;
  options.target = MetaTarget::Cpu;
  options.device_capacity = 1000;
  auto meta = make_meta_backend(options);
  Tensor a = Tensor::empty(meta->ledger(), {200}, DType::F32, Category::Weights, "a");
  try {
    Tensor b = Tensor::empty(meta->ledger(), {100}, DType::F32, Category::Activations, "b");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& oom) {
    EXPECT_EQ(oom.name, "b");
    EXPECT_EQ(oom.bytes, 400);
  }
}

// The CUDA target needs no GPU: it runs the model, mixed precision included,
// with the CUDA backend's own buffers in its ledger and a pool's reserved bytes.
TEST(MetaBackend, CudaTargetRunsWithoutAGpu) {
  for (DType compute : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t heads : {2, 4}) {  // head size 32 (fused attention) and 16 (not)
      SCOPED_TRACE(std::string(dtype_name(compute)) + " heads " + std::to_string(heads));
      RunCase c;
      c.config = small_bert(64, heads, 2, 128, 64);
      c.size = 10;
      c.seq_len = 33;
      c.batch = 5;
      c.padding = true;
      c.compute = compute;
      MetaOptions options;
      options.target = MetaTarget::Cuda;
      auto meta = make_meta_backend(options);
      EXPECT_EQ(meta->device(), Device::cuda(0));
      EXPECT_EQ(meta->attention_saves_probabilities(compute, 64 / heads),
                !cuda::fused_attention(compute, 64 / heads));
      const RunRecord r = train_on(*meta, c);
      expect_zero_losses(r.result, c.steps);
      const LedgerSnapshot& m = r.result.memory;
      EXPECT_EQ(m.live[static_cast<size_t>(Category::Workspace)], static_cast<int64_t>(cuda::kCublasWorkspaceBytes));
      EXPECT_GT(m.peak[static_cast<size_t>(Category::Temporary)], 0);  // the kernel scratch at least
      EXPECT_GE(m.reserved_peak, m.peak_total);
      EXPECT_EQ(m.reserved_peak % static_cast<int64_t>(kSegmentGranularity), 0);
      bool scratch = false;
      for (const LedgerEntry& e : r.live_after) scratch = scratch || e.name == "kernel_scratch";
      EXPECT_TRUE(scratch);
      // A second run plans the same, to the byte.
      auto again = make_meta_backend(options);
      const RunRecord r2 = train_on(*again, c);
      expect_same_run(r, r2, /*reserved=*/true);
    }
  }
}

TEST(MetaBackend, CudaTargetRunsOutOfMemoryAtTheDeviceCapacity) {
  MetaOptions options;
  options.target = MetaTarget::Cuda;
  options.device_capacity = int64_t{40} << 20;  // the 32 MiB cuBLAS workspace fits, a 16 MiB buffer does not
  auto meta = make_meta_backend(options);
  EXPECT_THROW(Tensor::empty(meta->ledger(), {int64_t{4} << 20}, DType::F32, Category::Weights, "w"), OutOfMemory);
}

// Where the CUDA backend's first-query attention does not take the model's
// head size or longest sequence (cuda_memory.h), the model, and so the plan,
// computes its whole last layer; the CPU backend takes every shape.
TEST(MetaBackend, LastLayerIsWholeWhereTheFirstQueryKernelsDoNotFit) {
  MetaOptions options;
  options.target = MetaTarget::Cuda;
  auto meta = make_meta_backend(options);
  auto cpu = make_cpu_backend(1);
  struct Case {
    int64_t hidden, heads, positions;
    bool fits;
  };
  const int64_t longest = cuda::kFirstQueryMaxL, widest = cuda::kFirstQueryMaxHeadSize;
  for (const Case& c : {Case{2 * widest, 2, 64, true}, Case{2 * widest, 1, 64, false},
                        Case{64, 2, longest, true}, Case{64, 2, longest + 1, false}}) {
    SCOPED_TRACE("hidden " + std::to_string(c.hidden) + ", heads " + std::to_string(c.heads) + ", positions " +
                 std::to_string(c.positions));
    const ModelConfig config = small_bert(c.hidden, c.heads, 2, 2 * c.hidden, c.positions);
    EXPECT_EQ(BertStyleModel(*meta, config).first_token_last_layer(), c.fits);
    EXPECT_TRUE(BertStyleModel(*cpu, config).first_token_last_layer());
  }
  // The plan of a model whose head size the kernels do not take is that of
  // --last-layer all, to the byte (the first-token plan saves fewer
  // tensors and peaks lower).
  RunCase c;
  c.config = small_bert(2 * widest, 1, 2, 128, 64);
  c.size = 4;
  c.seq_len = 16;
  c.batch = 4;
  const RunRecord fallback = train_on(*make_meta_backend(options), c);
  auto all = make_meta_backend(options);
  EngineOptions whole_layer;
  whole_layer.last_layer = LastLayer::All;
  all->set_options(whole_layer);
  const RunRecord whole = train_on(*all, c);
  expect_same_run(fallback, whole, /*reserved=*/true);
}

TEST(CudaMemory, SizesAreTheKernelsRules) {
  // The cub model: a single tile answers 1 byte; past it, one sweep over 8 passes.
  EXPECT_EQ(cuda::cub_sort_pairs_bytes(1), 1u);
  EXPECT_EQ(cuda::cub_sort_pairs_bytes(2304), 1u);
  // bins 8·256·4, lookback 256·4, keys 2305·8, values 2305·4, counters 8·4; each to 256, + 255.
  EXPECT_EQ(cuda::cub_sort_pairs_bytes(2305), 8192u + 1024u + 18688u + 9472u + 256u + 255u);
  EXPECT_EQ(cuda::embedding_backward_scratch_bytes(0), 0u);
  EXPECT_EQ(cuda::embedding_backward_scratch_bytes(10) % 256, 0u);
  EXPECT_TRUE(cuda::fused_attention(DType::BF16, 128));
  EXPECT_FALSE(cuda::fused_attention(DType::F32, 128));
  EXPECT_FALSE(cuda::fused_attention(DType::F16, 12));
  EXPECT_EQ(cuda::scratch_allocation_bytes(1), 256u);
  EXPECT_EQ(cuda::scratch_allocation_bytes(256), 256u);
  EXPECT_EQ(cuda::attention_scratch_bytes(2, 3, 5), size_t{2 * 3 * 5 * 5 * 4});
  EXPECT_EQ(cuda::sum_of_squares_scratch_bytes(1), 8u);
  EXPECT_EQ(cuda::sum_of_squares_scratch_bytes(int64_t{1} << 30), 1024u * 8u);
  std::vector<unsigned char> table;
  EXPECT_EQ(cuda::adamw_chunk_table({{0, 8192, true}, {8192, 8193, false}}, table), 3);
  EXPECT_EQ(table.size(), 3 * sizeof(cuda::AdamWChunk));
  EXPECT_EQ(cuda::adamw_chunk_table_floats(table.size()), 3 * 24 / 4 + 1);
}

// When the CUDA backend's batched weight gradients also sum their biases in
// one launch (and the meta backend mirrors that scratch): 16-bit output
// gradients at a constant stride, 16-byte aligned, float32 biases at a
// constant stride that keeps them apart. Anything else takes one bias at a time.
TEST(CudaMemory, BatchedBiasSumsTakeAlignedPlanesAndBiasesApart) {
  auto cpu = make_cpu_backend(1);
  const int64_t rows = 16, N = 24;
  Tensor dy = Tensor::empty(cpu->ledger(), {3 * rows * N + 8}, DType::BF16, Category::Temporary, "dy");
  Tensor dy32 = Tensor::empty(cpu->ledger(), {3 * rows * N}, DType::F32, Category::Temporary, "dy32");
  Tensor db = Tensor::empty(cpu->ledger(), {3 * (N + 8)}, DType::F32, Category::Temporary, "db");
  auto planes = [&](const Tensor& t, int64_t start, int64_t stride, Shape shape, int64_t count = 3) {
    std::vector<Tensor> v;
    for (int64_t i = 0; i < count; ++i) v.push_back(t.slice(start + i * stride, shape));
    return v;
  };
  const auto dys = planes(dy, 0, rows * N, {rows, N}), dbs = planes(db, 0, N + 8, {N});
  ASSERT_EQ(reinterpret_cast<uintptr_t>(dy.raw()) % 16, 0u);
  EXPECT_EQ(cuda::constant_stride(dys), rows * N);
  EXPECT_EQ(cuda::constant_stride(dbs), N + 8);
  EXPECT_TRUE(cuda::batched_bias_sums(dys, dbs));
  EXPECT_EQ(cuda::batched_bias_sums_scratch_bytes(dys, dbs), 3 * cuda::column_sums_scratch_bytes(rows, N));
  EXPECT_FALSE(cuda::batched_bias_sums(planes(dy, 0, rows * N, {rows, N}, 1), planes(db, 0, N + 8, {N}, 1)));
  EXPECT_FALSE(cuda::batched_bias_sums(dys, planes(db, 0, N / 2, {N})));  // biases overlap
  EXPECT_FALSE(cuda::batched_bias_sums(planes(dy, 1, rows * N, {rows, N}), dbs));   // 2 bytes off 16
  EXPECT_FALSE(cuda::batched_bias_sums(planes(dy32, 0, rows * N, {rows, N}), dbs));  // float32: one at a time
  EXPECT_FALSE(cuda::batched_bias_sums(dys, planes(db, 0, N + 8, {N + 1})));  // rows of N + 1 do not tile dy
  std::vector<Tensor> uneven = dys;
  uneven[2] = dy.slice(2 * rows * N + 8, {rows, N});
  EXPECT_FALSE(cuda::constant_stride(uneven).has_value());
  EXPECT_FALSE(cuda::batched_bias_sums(uneven, dbs));
}

}  // namespace
}  // namespace anatomy
