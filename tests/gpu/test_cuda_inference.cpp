// test_cuda_inference.cpp: inference on the GPU (bert_inference.h).
// - The packed flash forward (one launch over sequences of different lengths)
//   gives the same bits as the flash forward run on each sequence alone.
// - bf16 and fp16 inference against Hugging Face's float64 logits of every
//   fixture, packed and padded, with test_cuda_backend.cpp's mixed-precision
//   tolerance (5u relative L2 on the logits, u the format's unit roundoff: the
//   inference model rounds its embedding tables too, one more rounding than
//   the training model's, well inside the budget of about ten a layer).
// - A model whose heads take the flash kernel (bert-mini, 64 a head) on
//   variable-length data against the CPU backend's float32 inference.
// - Weights: 2 bytes a parameter plus the float32 LayerNorm parameters.
#include <gtest/gtest.h>

#include <cstdlib>

#include <bit>
#include <cmath>
#include <random>

#include "anatomy/model/bert/bert.h"
#include "anatomy/data/dataset.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/model/bert/bert_inference.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/registry.h"
#include "../test_util.h"

namespace anatomy {
namespace {

std::vector<float> download(Backend& backend, const Tensor& t) {
  std::vector<float> v(t.numel());
  backend.copy_to_host(t, v.data());
  return v;
}

template <typename T>
double relative_l2(const std::vector<float>& got, const std::vector<T>& expected) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - static_cast<double>(expected[i])) * (got[i] - static_cast<double>(expected[i]));
    norm += static_cast<double>(expected[i]) * static_cast<double>(expected[i]);
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

InferenceBatch batch_of(const Dataset& given, int64_t pad_to) {
  const Dataset data = test::choices_as_rows(given);  // multiple choice: a sequence per choice
  const std::vector<int64_t> lengths = sequence_lengths(data);
  std::vector<const int64_t*> ids, types;
  for (int64_t i = 0; i < data.size; ++i) {
    ids.push_back(data.input_ids.data() + i * data.seq_len);
    if (!data.token_type_ids.empty()) types.push_back(data.token_type_ids.data() + i * data.seq_len);
  }
  return make_inference_batch(ids, types, lengths, pad_to);
}

double unit_roundoff(DType t) { return t == DType::BF16 ? 0x1p-8 : 0x1p-11; }

struct PackedCase {
  DType dtype;
  int64_t head_dim;
};

class CudaPackedAttention : public ::testing::TestWithParam<PackedCase> {};

TEST_P(CudaPackedAttention, SameBitsAsEachSequenceAlone) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const auto [dtype, D] = GetParam();
  // Packed inference runs our flash kernel; the padded forward it is compared
  // with takes cuDNN by default (other bits, as correct): compare kernel with kernel.
  EngineOptions ours;
  ours.attention = AttentionKernels::Anatomy;
  auto backend = cuda::make_cuda_backend(0, Fp32Products::Float32, ours);
  ASSERT_FALSE(backend->attention_saves_probabilities(dtype, D)) << "the flash kernel has this head size";
  const int64_t heads = 3;
  const std::vector<int64_t> lengths = {1, 17, 64, 65, 128, 200, 333, 7};
  std::vector<int64_t> offsets = {0};
  for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
  const int64_t T = offsets.back(), width = heads * D;
  Ledger& ledger = backend->ledger();
  auto random_tensor = [&](const char* name, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> host(T * width);
    for (float& x : host) x = normal(rng);
    Tensor f = Tensor::empty(ledger, {T, width}, DType::F32, Category::Temporary, name);
    backend->copy_from_host(f, host.data());
    Tensor h = Tensor::empty(ledger, {T, width}, dtype, Category::Temporary, name);
    backend->cast(f, h);
    return h;
  };
  const Tensor q = random_tensor("q", 1), k = random_tensor("k", 2), v = random_tensor("v", 3);
  Tensor offsets_dev = Tensor::empty(ledger, {static_cast<int64_t>(offsets.size())}, DType::I64, Category::Data, "o");
  backend->copy_from_host(offsets_dev, offsets.data());
  const Tensor packed = Tensor::empty(ledger, {T, width}, dtype, Category::Temporary, "packed");
  const Tensor alone = Tensor::empty(ledger, {T, width}, dtype, Category::Temporary, "alone");
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  backend->attention_forward_packed(q, k, v, offsets_dev, offsets, heads, scale, packed);
  backend->attention_forward_packed_one_by_one(q, k, v, offsets_dev, offsets, heads, scale, alone);
  auto widened = [&](const Tensor& t) {  // exact: comparing the floats compares the 16-bit values
    Tensor f = Tensor::empty(ledger, t.shape(), DType::F32, Category::Temporary, "widened");
    backend->cast(t, f);
    return download(*backend, f);
  };
  const std::vector<float> a = widened(packed), b = widened(alone);
  ASSERT_EQ(a.size(), b.size());
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]);
  EXPECT_EQ(differ, 0) << "of " << a.size() << " elements";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaPackedAttention,
                         ::testing::Values(PackedCase{DType::BF16, 32}, PackedCase{DType::BF16, 64},
                                           PackedCase{DType::BF16, 128}, PackedCase{DType::F16, 64}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.dtype)) + "_d" +
                                  std::to_string(info.param.head_dim);
                         });

class CudaInferenceFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaInferenceFixture, SixteenBitLogitsNearHuggingFace) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const std::string dir = test::fixtures_dir() + "/" + GetParam();
  auto host = make_cpu_backend(1);
  const ModelSource source = test::fixture_source(dir);
  const auto built = make_model(*host, source.config);
  Model& loaded = *built;
  load_weights(loaded, dir, 0);
  // Multiple choice: a sequence per choice, its logits [examples, choices] in that order.
  const Dataset data = test::choices_as_rows(load_tensor_dataset(dir + "/reference.safetensors"));
  const std::vector<double> expected =
      io::SafetensorsFile::open(dir + "/reference.safetensors").read_f64("logits");
  auto backend = cuda::make_cuda_backend(0);
  for (const DType dtype : {DType::BF16, DType::F16}) {
    const auto inference = make_inference_model(*backend, source.config, dtype);
    InferenceModel& model = *inference;
    model.load_from(loaded);
    for (const int64_t pad_to : {int64_t{0}, data.seq_len}) {
      const std::vector<float> got = download(*backend, model.forward(batch_of(data, pad_to)));
      // A token classifier's logits: the real tokens' rows (padded: the padding rows hold padding id 0's).
      // Question answering's: [2, rows], the start and end logits.
      const std::string task = model_task(source.config);
      const auto rows = [&](const auto& v) {
        return task == kQuestionAnswering ? test::real_span_rows(v, data) : test::real_token_rows(v, data);
      };
      const bool by_rows = task != kSequenceClassification && task != kMultipleChoice;
      EXPECT_LE(relative_l2(by_rows && pad_to > 0 ? rows(got) : got, by_rows ? rows(expected) : expected),
                5 * unit_roundoff(dtype))
          << dtype_name(dtype) << (pad_to == 0 ? " packed" : " padded");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HuggingFace, CudaInferenceFixture, ::testing::ValuesIn(test::kHuggingFaceFixtures),
                         [](const auto& info) { return test::test_name(info.param); });

TEST(CudaInference, FlashHeadsOnVariableLengthsNearFloat32) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const ModelConfig config = *model_preset("bert-mini");  // 4 heads of 64: the flash kernel
  auto host = make_cpu_backend(0);
  BertStyleModel loaded(*host, config);
  init_weights(loaded, 11);
  const Dataset data = make_dummy_varlen_dataset(12, 8, 300, 5);
  BertInference reference(*host, config, DType::F32);
  reference.load_from(loaded);
  const std::vector<float> expected = download(*host, reference.forward(batch_of(data, 0)));

  auto backend = cuda::make_cuda_backend(0);
  for (const DType dtype : {DType::BF16, DType::F16}) {
    BertInference model(*backend, config, dtype);
    model.load_from(loaded);
    const std::vector<float> packed = download(*backend, model.forward(batch_of(data, 0)));
    const std::vector<float> padded = download(*backend, model.forward(batch_of(data, data.seq_len)));
    EXPECT_LE(relative_l2(packed, expected), 5 * unit_roundoff(dtype)) << dtype_name(dtype) << " packed";
    EXPECT_LE(relative_l2(padded, expected), 5 * unit_roundoff(dtype)) << dtype_name(dtype) << " padded";
  }
}

TEST(CudaInference, WeightsTwoBytesAParameterAndNoGradients) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const ModelConfig config = *model_preset("bert-base-uncased");
  auto backend = cuda::make_cuda_backend(0);
  BertInference model(*backend, config, DType::BF16);
  const LedgerSnapshot s = backend->ledger().snapshot();
  const double per_parameter = static_cast<double>(s.live[static_cast<size_t>(Category::Weights)]) /
                               static_cast<double>(model.parameter_count());
  EXPECT_GT(per_parameter, 2.0);
  EXPECT_LT(per_parameter, 2.01) << "16-bit weights and the float32 LayerNorm parameters only";
  // Besides the weights only the backend's own buffers are held: the cuBLAS
  // workspace and the small pinned-results block (functionality); no
  // gradients, optimizer states or activations.
  const auto live = [&](Category c) { return s.live[static_cast<size_t>(c)]; };
  EXPECT_EQ(live(Category::Gradients), 0);
  EXPECT_EQ(live(Category::OptimizerStates), 0);
  EXPECT_EQ(live(Category::Activations), 0);
  EXPECT_LT(live(Category::Functionality), int64_t{1} << 20) << "the backend's results block only";
  EXPECT_EQ(s.live_total, live(Category::Weights) + live(Category::Workspace) + live(Category::Functionality));
}

}  // namespace
}  // namespace anatomy
