// test_cuda_checkpointing.cpp: on the GPU, gradient checkpointing recomputes
// each layer with the same kernels and dropout masks, so its gradients are the
// same bits as without it, in float32 and bf16; and it holds less.
#include <gtest/gtest.h>

#include "anatomy/model/bert/bert.h"
#include "anatomy/data/dataset.h"
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"

namespace anatomy {
namespace {

class CudaCheckpointing : public ::testing::TestWithParam<DType> {};

TEST_P(CudaCheckpointing, SameGradientsLessMemory) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  auto backend = cuda::make_cuda_backend(0);
  ModelConfig config = *model_preset("bert-mini");
  BertStyleModel model(*backend, config, GetParam());
  init_weights(model, 4);
  model.refresh_half_weights();
  Dataset data = make_dummy_dataset(6, 128, 2);
  data.attention_mask.assign(data.input_ids.size(), 1);
  for (int64_t i = 100; i < 128; ++i) data.attention_mask[i] = 0;  // padding in the first sequence
  const ModelInputs inputs = upload_dataset(*backend, data);
  auto run = [&](bool checkpointing, int64_t* peak_activations, bool selective = false) {
    backend->ledger().reset_peaks();
    model.zero_gradients();
    ForwardOptions options;
    options.training = true;
    options.save_for_backward = true;
    options.gradient_checkpointing = checkpointing;
    options.selective_checkpointing = selective;
    options.step = 3;
    const double loss = *model.forward(inputs, options).loss;
    model.backward();
    std::vector<float> g(model.gradients().flat().numel());
    backend->copy_to_host(model.gradients().flat(), g.data());
    *peak_activations = backend->ledger().snapshot().peak[static_cast<size_t>(Category::Activations)];
    return std::make_pair(loss, g);
  };
  int64_t plain_act = 0, checkpointed_act = 0;
  const auto plain = run(false, &plain_act);
  const auto checkpointed = run(true, &checkpointed_act);
  EXPECT_EQ(plain.first, checkpointed.first);
  EXPECT_TRUE(plain.second == checkpointed.second);
  EXPECT_LT(checkpointed_act * 2, plain_act);
  int64_t selective_act = 0;
  const auto selective = run(true, &selective_act, /*selective=*/true);
  EXPECT_EQ(plain.first, selective.first);
  EXPECT_TRUE(plain.second == selective.second);
  EXPECT_LT(selective_act, plain_act);
  EXPECT_GT(selective_act, checkpointed_act);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaCheckpointing, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace anatomy
