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
#include "../meta_run_util.h"

namespace anatomy {
namespace {

using test::RunCase;
using test::RunRecord;
using test::small_bert;
using test::train_on;

#define SKIP_WITHOUT_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU"

TEST(CudaMemory, CubSortStorageIsWhatCubAsks) {
  SKIP_WITHOUT_GPU();
  for (int64_t T : {int64_t{1}, int64_t{100}, int64_t{2304}, int64_t{2305}, int64_t{5760}, int64_t{5761},
                    int64_t{11520}, int64_t{11521}, int64_t{65536}, int64_t{1000003}, (int64_t{1} << 28) + 5})
    EXPECT_EQ(cuda::cub_sort_pairs_query_bytes(T), cuda::cub_sort_pairs_bytes(T)) << T << " tokens";
}

std::vector<RunCase> gpu_cases() {
  std::vector<RunCase> cases;
  auto add = [&](std::string name, DType compute, ModelConfig config) {
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
  // Split-TF32 products take kernel scratch for their split operands.
  for (const auto& [name, compute, config] :
       {std::tuple{"f32_d64_split_tf32", DType::F32, small_bert(128, 2, 2, 512)},
        std::tuple{"f32_h36_split_tf32", DType::F32, small_bert(36, 3, 2, 72)},
        std::tuple{"bf16_d64_split_tf32", DType::BF16, small_bert(128, 2, 2, 512)}})
    add(name, compute, config)->fp32_products = Fp32Products::SplitTf32;
  // A full-size model at the seed's batch shape (4 × 512), in float32 and bf16
  // (bert-large, the seed's model, matched too, in 45 s on an H100: too long to keep).
  for (DType compute : {DType::F32, DType::BF16}) {
    RunCase* full = add(compute == DType::F32 ? "bert_base_4x512_f32" : "bert_base_4x512_bf16", compute,
                        *model_preset("bert-base-uncased"));
    full->size = 8;
    full->seq_len = 512;
    full->batch = 4;
  }
  RunCase* full_split = add("bert_base_4x512_f32_split_tf32", DType::F32, *model_preset("bert-base-uncased"));
  full_split->size = 8;
  full_split->seq_len = 512;
  full_split->batch = 4;
  full_split->fp32_products = Fp32Products::SplitTf32;
  return cases;
}

class MetaMatchesCuda : public ::testing::TestWithParam<RunCase> {};

TEST_P(MetaMatchesCuda, LedgerOfTrainingStepsIsIdentical) {
  SKIP_WITHOUT_GPU();
  const RunCase& c = GetParam();
  RunRecord real;
  {
    auto gpu = cuda::make_cuda_backend(0, c.fp32_products);
    real = train_on(*gpu, c);
  }
  // The mirror assumes every step updates (an fp16 overflow that skips the
  // first update moves the AdamW chunk table to a later step).
  ASSERT_EQ(real.result.skipped_steps, 0) << "an fp16 step overflowed: pick a case that does not";
  for (double loss : real.result.losses) EXPECT_TRUE(std::isfinite(loss) && loss > 0.0);

  MetaOptions options;
  options.target = MetaTarget::Cuda;
  options.fp32_products = c.fp32_products;
  // As `anatomy train` tells the plan: whether this device runs the Hopper attention kernels.
  options.hopper_attention = cuda::make_cuda_backend(0)->attention_keeps_dropout_bits(DType::BF16, 64, 512);
  auto meta = make_meta_backend(options);
  EXPECT_EQ(meta->device(), Device::cuda(0));
  const RunRecord simulated = train_on(*meta, c);
  for (double loss : simulated.result.losses) EXPECT_EQ(loss, 0.0);

  // Every check, the bytes the pool reserved from the device included.
  test::expect_same_run(real, simulated, /*reserved=*/true);
  // Both attention paths agree on what attention saves.
  auto gpu = cuda::make_cuda_backend(0);
  const int64_t D = c.config.head_dim();
  EXPECT_EQ(gpu->attention_saves_probabilities(c.compute, D), meta->attention_saves_probabilities(c.compute, D));
  EXPECT_EQ(gpu->attention_keeps_dropout_bits(c.compute, D, c.seq_len),
            meta->attention_keeps_dropout_bits(c.compute, D, c.seq_len));
}

INSTANTIATE_TEST_SUITE_P(Configurations, MetaMatchesCuda, ::testing::ValuesIn(gpu_cases()),
                         [](const ::testing::TestParamInfo<RunCase>& info) { return info.param.name; });

}  // namespace
}  // namespace anatomy
