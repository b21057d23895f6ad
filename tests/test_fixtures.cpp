// test_fixtures.cpp: the engine against Hugging Face's float64 references in
// tests/fixtures (logits, loss, every gradient, and 10 AdamW steps through the
// `anatomy train` command line, exactly as unseen fixtures will be run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "anatomy/model/registry.h"
#include "anatomy/data/dataset.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "test_util.h"

namespace anatomy {
namespace {

// The bound on a parameter's gradient against the reference: 1e-4 relative
// plus float32 rounding at the model's gradient scale; for a bias whose
// reference gradient is zero in exact arithmetic (multiple choice's
// classifier.bias: its logits' gradients sum to zero over each example's
// choices), rounding at the scale of its weight's gradient, as the GPU tests
// compare the key bias.
double gradient_bound(const io::SafetensorsFile& ref, const std::string& name, const std::vector<double>& expected,
                      double largest) {
  const double bound = 1e-4 * test::max_abs(expected) + 1e-7 * largest;
  const size_t bias = name.rfind(".bias");
  if (test::max_abs(expected) > 1e-12 * largest || bias == std::string::npos || bias + 5 != name.size())
    return bound;
  const std::string weight = name.substr(0, bias) + ".weight";
  return ref.has(weight) ? std::max(bound, 1e-4 * test::max_abs(ref.read_f64(weight))) : bound;
}

using test::expect_relative;
using test::fixture;

class Fixture : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return fixture(GetParam()); }
  std::string reference() const { return dir() + "/reference.safetensors"; }
};

TEST_P(Fixture, ForwardAndBackwardMatchHuggingFace) {
  auto backend = make_cpu_backend(1);
  const ModelSource source = test::fixture_source(dir());
  const auto built = make_model(*backend, source.config);
  Model& model = *built;
  const LoadReport report = load_weights(model, dir(), 0);
  EXPECT_TRUE(report.initialised.empty());

  const Dataset data = load_tensor_dataset(reference());  // batch 0: input_ids, token_type_ids, attention_mask, labels
  validate_dataset(data, source.config, model_task(source.config));
  const ModelInputs inputs = upload_dataset(*backend, data);
  // The masked-LM head's loss keeps no whole logits: they come from a forward without labels.
  std::vector<float> logits;
  if (model.task() == kMaskedLm) {
    ModelInputs bare = inputs;
    bare.labels = Tensor();
    const ForwardOutput whole = model.forward(bare, ForwardOptions{});
    logits.resize(static_cast<size_t>(whole.logits.numel()));
    backend->copy_to_host(whole.logits, logits.data());
  }
  ForwardOptions options;
  options.save_for_backward = true;
  const ForwardOutput out = model.forward(inputs, options);

  const io::SafetensorsFile ref = io::SafetensorsFile::open(reference());
  if (model.task() != kMaskedLm) {
    logits.resize(static_cast<size_t>(out.logits.numel()));
    backend->copy_to_host(out.logits, logits.data());
  } else {
    EXPECT_FALSE(out.logits.defined());
  }
  // Token classification's many logits, some near zero: at the output's scale.
  // (Question answering's: [2, B, L], the start logits then the end logits, as the reference stacks them.)
  if (model.task() != kSequenceClassification)
    test::expect_close_at_scale(logits, ref.read_f64("logits"), 1e-5, "logits");
  else expect_relative(logits, ref.read_f64("logits"), 1e-5, "logits");
  ASSERT_TRUE(out.loss.has_value());
  expect_relative({static_cast<float>(*out.loss)}, ref.read_f64("loss"), 1e-5, "loss");

  model.zero_gradients();
  model.backward();
  const double largest = test::largest_reference_gradient(ref);
  const ParameterSet& grads = model.gradients();
  for (size_t i = 0; i < grads.specs().size(); ++i) {
    const std::string& name = grads.specs()[i].name;
    const std::vector<double> expected = ref.read_f64("grad." + name, grads.specs()[i].shape);
    std::vector<float> got(grads.tensors()[i].numel());
    backend->copy_to_host(grads.tensors()[i], got.data());
    EXPECT_LE(test::max_abs_diff(got, expected), gradient_bound(ref, "grad." + name, expected, largest)) << name;
  }
}

TEST_P(Fixture, TenTrainingStepsThroughTheCommandLineMatchHuggingFace) {
  test::TempDir tmp;
  const std::string train_file = tmp.file("train.safetensors");
  const int64_t batch = test::write_reference_train_file(reference(), train_file);
  const std::string out = tmp.file("out");
  const auto r = test::run_anatomy(
      "train --model " + dir() + test::fixture_task_flag(dir()) + " --train-file " + train_file +
      " --max-steps 10 --learning-rate 1e-3 --weight-decay 0.01 --lr-scheduler-type constant --warmup-steps 0"
      " --max-grad-norm 1.0 --per-device-train-batch-size " + std::to_string(batch) +
      " --no-shuffle --logging-steps 1 --output-dir " + out + " --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const io::SafetensorsFile ref = io::SafetensorsFile::open(reference());
  const std::vector<double> losses = ref.read_f64("train_losses");
  std::ifstream log(out + "/log.jsonl");
  std::string line;
  size_t i = 0;
  while (std::getline(log, line)) {
    const auto record = nlohmann::json::parse(line);
    ASSERT_LT(i, losses.size());
    EXPECT_EQ(record["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
    const double loss = record["step_loss"].get<double>();  // the step's own loss
    EXPECT_LE(std::abs(loss - losses[i]), 1e-5 * std::abs(losses[i])) << "step " << i + 1 << ": " << loss;
    for (const char* key : {"learning_rate", "grad_norm", "samples_per_second"}) EXPECT_TRUE(record.contains(key));
    ++i;
  }
  EXPECT_EQ(i, losses.size());

  const io::SafetensorsFile saved = io::SafetensorsFile::open(out + "/model.safetensors");
  // The saved config reads back as the family's, with the fixture's sizes.
  const ModelConfig saved_config = resolve_model(out).config;
  EXPECT_EQ(saved_config.model_type, resolve_model(dir()).config.model_type);
  EXPECT_EQ(saved_config.extra.count(kRequestedTaskKey), 0u) << "the run's --task is not the checkpoint's";
  EXPECT_EQ(saved_config.hidden_size, resolve_model(dir()).config.hidden_size);
  int checked = 0;
  const double largest = test::largest_reference_gradient(ref);
  for (const auto& name : ref.names()) {
    if (name.rfind("after.", 0) != 0) continue;
    const std::string param = name.substr(6);
    const std::vector<double> expected = ref.read_f64(name);
    const std::vector<float> got = saved.read_f32(param, ref.info(name).shape);
    // An element whose gradient is zero in exact arithmetic (question answering's qa_outputs.bias and last
    // LayerNorm bias; multiple choice's classifier.bias, and DistilBERT's pre_classifier.bias where a unit's ReLU
    // is on for all of an example's choices, whose logit gradients sum to zero) gets float32 rounding for a
    // gradient, which AdamW turns into steps of up to the learning rate (m / (sqrt(v) + eps) is at most about 1),
    // where float64 leaves it put: 10 steps of 1e-3 at most. (PyTorch's own float32 run misses
    // distilbert-tiny-mc's pre_classifier.bias by 5.4e-4.)
    const std::vector<double> gradient = ref.read_f64("grad." + param);
    double worst = 0.0, worst_zero = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = std::abs(static_cast<double>(got[i]) - expected[i]);
      if (std::abs(gradient[i]) <= 1e-12 * largest) worst_zero = std::max(worst_zero, diff);
      else worst = std::max(worst, diff);
    }
    EXPECT_LE(worst_zero, 10 * 1e-3) << param;
    EXPECT_LE(worst, 5e-5) << param;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(saved.names().size()));
}

TEST_P(Fixture, ForwardCommandWritesLogitsLossAndGradients) {
  test::TempDir tmp;
  const std::string out = tmp.file("out.safetensors");
  const auto r = test::run_anatomy("forward --model " + dir() + test::fixture_task_flag(dir()) + " --inputs " +
                                   reference() + " --output " + out +
                                   " --backward --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const io::SafetensorsFile got = io::SafetensorsFile::open(out);
  const io::SafetensorsFile ref = io::SafetensorsFile::open(reference());
  const std::string task = model_task(test::fixture_source(dir()).config);
  if (task == kQuestionAnswering) {  // Hugging Face's names
    for (const char* name : {"start_logits", "end_logits"})
      test::expect_close_at_scale(got.read_f32(name), ref.read_f64(name), 1e-5, name);
    EXPECT_FALSE(got.has("logits"));
  } else if (task == kTokenClassification || task == kMaskedLm) {
    test::expect_close_at_scale(got.read_f32("logits"), ref.read_f64("logits"), 1e-5, "logits");
  } else {
    expect_relative(got.read_f32("logits"), ref.read_f64("logits"), 1e-5, "logits");
  }
  expect_relative(got.read_f32("loss"), ref.read_f64("loss"), 1e-5, "loss");
  int grads = 0;
  const double largest = test::largest_reference_gradient(ref);
  for (const auto& name : ref.names()) {
    if (name.rfind("grad.", 0) != 0) continue;
    const std::vector<double> expected = ref.read_f64(name);
    EXPECT_LE(test::max_abs_diff(got.read_f32(name, ref.info(name).shape), expected),
              gradient_bound(ref, name, expected, largest))
        << name;
    ++grads;
  }
  int written = 0;
  for (const auto& name : got.names()) written += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(written, grads);  // one gradient per parameter, no more
  EXPECT_EQ(grads, static_cast<int>(model_parameter_specs(test::fixture_source(dir()).config).size()));
  EXPECT_EQ(got.info(task == kQuestionAnswering ? "start_logits" : "logits").dtype, io::StDType::F32);
}

INSTANTIATE_TEST_SUITE_P(HuggingFace, Fixture, ::testing::ValuesIn(test::kHuggingFaceFixtures),
                         [](const auto& info) { return test::test_name(info.param); });

}  // namespace
}  // namespace anatomy
