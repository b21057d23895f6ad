// test_inference.cpp: the inference-only model (bert_inference.h) against
// Hugging Face's float64 logits of every fixture (whose batches are right
// padded): packed without padding and padded with a key mask, both float32 on
// the CPU backend; its memory (weights once, no gradients or optimizer); the
// variable-length dummy data and the lengths read from attention masks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/data/dataset.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/bert/bert_inference.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/registry.h"
#include "test_util.h"

namespace anatomy {
namespace {

using test::expect_relative;
using test::fixture;

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

class InferenceFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(InferenceFixture, PackedAndPaddedLogitsMatchHuggingFace) {
  const std::string dir = fixture(GetParam());
  auto host = make_cpu_backend(1);
  const ModelSource source = test::fixture_source(dir);
  const auto built = make_model(*host, source.config);
  Model& loaded = *built;
  load_weights(loaded, dir, 0);
  // Multiple choice: a sequence per choice, its logits [examples, choices] in that order.
  const Dataset data = test::choices_as_rows(load_tensor_dataset(dir + "/reference.safetensors"));
  const std::vector<double> expected =
      io::SafetensorsFile::open(dir + "/reference.safetensors").read_f64("logits");

  auto backend = make_cpu_backend(1);
  const auto inference = make_inference_model(*backend, source.config, DType::F32);
  InferenceModel& model = *inference;
  model.load_from(loaded);
  for (const int64_t pad_to : {int64_t{0}, data.seq_len}) {
    const InferenceBatch batch = batch_of(data, pad_to);
    if (pad_to == 0) {
      int64_t real = 0;
      for (int64_t len : batch.lengths) real += len;
      EXPECT_EQ(batch.rows(), real) << "a packed batch holds the real tokens only";
    }
    const Tensor logits = model.forward(batch);
    std::vector<float> got(logits.numel());
    backend->copy_to_host(logits, got.data());
    if (model_task(source.config) == kQuestionAnswering) {
      // [2, rows]: the real tokens' start and end logits (padded: the padding rows hold padding id 0's).
      const std::vector<float> real =
          pad_to == 0 ? got : test::real_span_rows(got, data);
      test::expect_close_at_scale(real, test::real_span_rows(expected, data), 1e-5,
                                  pad_to == 0 ? "packed logits" : "padded logits");
      continue;
    }
    if (model_task(source.config) == kTokenClassification || model_task(source.config) == kMaskedLm) {
      // A token classifier's logits: the real tokens' rows (packed: only
      // those; padded: the padding rows hold the batch's padding id 0's, not the data's).
      test::expect_close_at_scale(pad_to == 0 ? got : test::real_token_rows(got, data),
                                  test::real_token_rows(expected, data), 1e-5,
                                  pad_to == 0 ? "packed logits" : "padded logits");
      continue;
    }
    expect_relative(got, expected, 1e-5, pad_to == 0 ? "packed logits" : "padded logits");
  }
}

INSTANTIATE_TEST_SUITE_P(HuggingFace, InferenceFixture, ::testing::ValuesIn(test::kHuggingFaceFixtures),
                         [](const auto& info) { return test::test_name(info.param); });

TEST(Inference, HoldsTheWeightsOnceAndNothingElseBetweenBatches) {
  auto host = make_cpu_backend(1);
  ModelConfig config = *model_preset("bert-tiny");
  BertStyleModel source(*host, config);
  init_weights(source, 3);
  auto backend = make_cpu_backend(1);
  Ledger& ledger = backend->ledger();
  BertInference model(*backend, config, DType::F32);
  model.load_from(source);
  const int64_t weights = ledger.snapshot().live[static_cast<size_t>(Category::Weights)];
  EXPECT_EQ(weights, static_cast<int64_t>(source.weights().flat().nbytes())) << "one float32 copy, no more";
  const Dataset data = make_dummy_varlen_dataset(6, 5, 40, 9);
  {
    const Tensor logits = model.forward(batch_of(data, 0));
    EXPECT_EQ(logits.shape(), (Shape{6, config.num_labels}));
  }
  EXPECT_EQ(ledger.snapshot().live[static_cast<size_t>(Category::Gradients)], 0);
  EXPECT_EQ(ledger.snapshot().peak[static_cast<size_t>(Category::Gradients)], 0);
  EXPECT_EQ(ledger.snapshot().peak[static_cast<size_t>(Category::OptimizerStates)], 0);
  EXPECT_EQ(ledger.snapshot().live[static_cast<size_t>(Category::Temporary)], 0) << "every temporary is freed after the batch";
  EXPECT_EQ(ledger.snapshot().live[static_cast<size_t>(Category::Weights)], weights);
  EXPECT_GT(ledger.snapshot().peak[static_cast<size_t>(Category::Temporary)], 0);
}

TEST(Inference, SixteenBitModelKeepsTwoBytesAParameterPlusFloat32LayerNorm) {
  // Only the allocation is checked here (the CPU backend computes in float32;
  // the GPU tests run the 16-bit forward).
  // Expected: the parameters' flat buffer in bf16 and one of the LayerNorm
  // parameters in float32, each laid out as a ParameterSet lays them out.
  const ModelConfig config = *model_preset("bert-tiny");
  std::vector<ParamSpec> layernorm;
  for (const ParamSpec& spec : bert_parameter_specs(config))
    if (spec.name.find("LayerNorm") != std::string::npos) layernorm.push_back(spec);
  ASSERT_EQ(layernorm.size(), 2u + 4u * config.num_hidden_layers);
  auto other = make_cpu_backend(1);
  const ParameterSet half(*other, bert_parameter_specs(config), Category::Weights, "", DType::BF16);
  const ParameterSet norms(*other, layernorm, Category::Weights, "", DType::F32);
  EXPECT_LT(half.flat().nbytes(), 2 * static_cast<size_t>(half.parameter_count()) + 4096);

  auto backend = make_cpu_backend(1);
  BertInference model(*backend, config, DType::BF16);
  EXPECT_EQ(backend->ledger().snapshot().live[static_cast<size_t>(Category::Weights)],
            static_cast<int64_t>(half.flat().nbytes() + norms.flat().nbytes()));
}

TEST(Inference, VariableLengthDummyData) {
  const Dataset a = make_dummy_varlen_dataset(200, 64, 512, 42), b = make_dummy_varlen_dataset(200, 64, 512, 42);
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.attention_mask, b.attention_mask);
  EXPECT_EQ(a.seq_len, 512);
  const std::vector<int64_t> lengths = sequence_lengths(a);
  int64_t shortest = 512, longest = 0;
  for (int64_t i = 0; i < a.size; ++i) {
    shortest = std::min(shortest, lengths[i]);
    longest = std::max(longest, lengths[i]);
    for (int64_t t = 0; t < a.seq_len; ++t) {
      const int64_t id = a.input_ids[i * a.seq_len + t];
      if (t < lengths[i]) EXPECT_TRUE(id >= 100 && id < 30000);
      else EXPECT_EQ(id, 0);
    }
  }
  EXPECT_GE(shortest, 64);
  EXPECT_LE(longest, 512);
  EXPECT_LT(shortest, 100) << "200 uniform lengths in 64..512 reach near both ends";
  EXPECT_GT(longest, 470);
}

TEST(Inference, LengthsNeedRightPadding) {
  Dataset d;
  d.source = "batch.safetensors";
  d.size = 2;
  d.seq_len = 4;
  d.input_ids.assign(8, 101);
  d.attention_mask = {1, 1, 0, 0, 0, 1, 1, 1};
  try {
    sequence_lengths(d);
    FAIL() << "left padding accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("batch.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find("example 1"), std::string::npos) << message;
  }
  d.attention_mask = {1, 1, 0, 0, 0, 0, 0, 0};
  EXPECT_THROW(sequence_lengths(d), Error);
  d.attention_mask = {1, 1, 0, 0, 1, 1, 1, 1};
  EXPECT_EQ(sequence_lengths(d), (std::vector<int64_t>{2, 4}));
}

}  // namespace
}  // namespace anatomy

namespace anatomy {
namespace {

// `anatomy evaluate` and `anatomy predict` on each fixture's batch 0: the loss
// Hugging Face computed, and the probabilities of its logits.
TEST_P(InferenceFixture, EvaluateAndPredictCommandsGiveHuggingFacesLossAndProbabilities) {
  const std::string dir = fixture(GetParam());
  const std::string reference = dir + "/reference.safetensors";
  const io::SafetensorsFile ref = io::SafetensorsFile::open(reference);
  const ModelSource source = test::fixture_source(dir);
  test::TempDir tmp;
  const std::string common = fmt::format("--model {} --input {} --device cpu --per-device-eval-batch-size 3 "
                                         "--no-progress --metrics {}", dir, reference, tmp.file("metrics.json"));
  // evaluate and predict do not serve masked-LM models (train's --validation-file reports their perplexity).
  if (model_task(source.config) == kMaskedLm) GTEST_SKIP() << "masked-LM: evaluate and predict do not serve it";
  if (model_task(source.config) == kMultipleChoice) {  // one line says what serves it instead
    const test::CommandResult refused = test::run_anatomy("evaluate " + common);
    EXPECT_EQ(refused.exit_code, 1) << refused.output;
    EXPECT_NE(refused.output.find("evaluate of a multiple-choice model is not served yet"), std::string::npos)
        << refused.output;
    return;
  }
  const test::CommandResult evaluate = test::run_anatomy("evaluate " + common);
  if (model_task(source.config) == kQuestionAnswering) {  // reads SQuAD questions, not tensors: one line says so
    EXPECT_EQ(evaluate.exit_code, 1) << evaluate.output;
    EXPECT_NE(evaluate.output.find("--input: evaluate of a question answering model reads SQuAD questions"),
              std::string::npos)
        << evaluate.output;
    return;
  }
  ASSERT_EQ(evaluate.exit_code, 0) << evaluate.output;
  const auto metrics = nlohmann::json::parse(std::ifstream(tmp.file("metrics.json")));
  expect_relative({metrics["eval_loss"].get<float>()}, ref.read_f64("loss"), 1e-5, "eval_loss");

  const test::CommandResult predict =
      test::run_anatomy("predict " + common + " --output " + tmp.file("predictions.jsonl"));
  ASSERT_EQ(predict.exit_code, 0) << predict.output;
  const std::vector<double> logits = ref.read_f64("logits");
  const int64_t C = source.config.num_labels;
  std::ifstream lines(tmp.file("predictions.jsonl"));
  int64_t n = 0;
  if (model_task(source.config) == kTokenClassification) {
    // A label per real token: the reference logits' largest.
    const Dataset data = load_tensor_dataset(reference);
    const std::vector<int64_t> lengths = sequence_lengths(data);
    for (std::string line; std::getline(lines, line); ++n) {
      const auto j = nlohmann::json::parse(line);
      std::vector<std::string> expected;
      for (int64_t t = 0; t < lengths[n]; ++t) {
        const double* x = logits.data() + (n * data.seq_len + t) * C;
        expected.push_back(fmt::format("LABEL_{}", std::max_element(x, x + C) - x));
      }
      EXPECT_EQ(j["token_labels"].get<std::vector<std::string>>(), expected) << "example " << n;
    }
    EXPECT_EQ(n, data.size);
    return;
  }
  for (std::string line; std::getline(lines, line); ++n) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["index"].get<int64_t>(), n);
    if (C == 1) {  // regression: the value itself
      expect_relative({j["value"].get<float>()}, {logits[n]}, 1e-5, "value");
      continue;
    }
    std::vector<double> expected(logits.begin() + n * C, logits.begin() + (n + 1) * C);
    if (j.contains("labels")) {  // multi-label: sigmoids
      for (double& x : expected) x = 1.0 / (1.0 + std::exp(-x));
    } else {
      const double max = *std::max_element(expected.begin(), expected.end());
      double sum = 0.0;
      for (double& x : expected) sum += x = std::exp(x - max);
      for (double& x : expected) x /= sum;
    }
    const auto got = j["probabilities"].get<std::vector<float>>();
    expect_relative(got, expected, 1e-5, "probabilities");
  }
  EXPECT_EQ(n * C, static_cast<int64_t>(logits.size()));
}

TEST(InferenceCommand, BadInputIsOneErrorLineAndNothingWritten) {
  test::TempDir tmp;
  // Left padding cannot be packed: the error names the file and the example.
  const std::vector<int64_t> ids = {101, 7, 0, 0, 0, 101, 7, 8};
  const std::vector<int64_t> mask = {1, 1, 0, 0, 0, 1, 1, 1};
  io::write_safetensors(tmp.file("left.safetensors"),
                        {{"input_ids", io::StDType::I64, {2, 4}, ids.data()},
                         {"attention_mask", io::StDType::I64, {2, 4}, mask.data()}},
                        {});
  const test::CommandResult r = test::run_anatomy("predict --model bert-tiny --device cpu --input " +
                                                  tmp.file("left.safetensors") + " --output " + tmp.file("p.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("left.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("example 1"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("p.jsonl")));
  // evaluate without labels, 16 bits on the CPU, an inverted length range.
  const test::CommandResult no_labels = test::run_anatomy("evaluate --model bert-tiny --device cpu --input " +
                                                          tmp.file("left.safetensors"));
  EXPECT_NE(no_labels.exit_code, 0);
  EXPECT_NE(no_labels.output.find("labels"), std::string::npos) << no_labels.output;
  const test::CommandResult bf16 = test::run_anatomy("evaluate --model bert-tiny --device cpu --bf16");
  EXPECT_EQ(bf16.exit_code, 1);
  EXPECT_NE(bf16.output.find("--bf16"), std::string::npos) << bf16.output;
  const test::CommandResult lengths =
      test::run_anatomy("evaluate --model bert-tiny --device cpu --dummy-min-len 100 --dummy-max-len 50");
  EXPECT_EQ(lengths.exit_code, 1);
  EXPECT_NE(lengths.output.find("--dummy-min-len"), std::string::npos) << lengths.output;
}

}  // namespace
}  // namespace anatomy
