// test_label_smoothing.cpp: --label-smoothing-factor (Trainer's LabelSmoother).
// - The CPU backend's smoothed cross-entropy and its gradient equal PyTorch's
//   LabelSmoother under autograd (tests/fixtures/label-smoothing, made by
//   tests/tools/make_label_smoothing.py) for sequence classification, a wide
//   class count, token classification and multiple choice, rows labelled -100
//   left out; and the gradient equals central finite differences of the loss.
// - A training run's first step loss is the smoothed loss of the Hugging Face
//   fixture's logits (sequence classification, token classification, multiple
//   choice).
// - Regression, multi-label, question answering and masked-LM are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "anatomy/io/files.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/kernels/backend.h"
#include "test_util.h"

namespace anatomy {
namespace {

struct Case {
  std::string name;
  double epsilon;
  int64_t classes;
  std::vector<float> logits;
  std::vector<int64_t> labels;
  double loss;
  std::vector<double> grad;
};

std::vector<Case> cases() {
  const auto j = nlohmann::json::parse(io::read_text_file(test::fixture("label-smoothing/reference.json")));
  std::vector<Case> out;
  for (const auto& c : j["cases"]) {
    Case k;
    k.name = c["name"];
    k.epsilon = c["epsilon"];
    k.classes = c["classes"];
    for (double v : c["logits"]) k.logits.push_back(static_cast<float>(v));  // float32 values, exactly
    k.labels = c["labels"].get<std::vector<int64_t>>();
    k.loss = c["loss"];
    k.grad = c["grad"].get<std::vector<double>>();
    out.push_back(std::move(k));
  }
  return out;
}

// The backend's smoothed loss of rows [N, C] (and its gradient, when asked).
double smoothed(Backend& b, const std::vector<float>& logits, const std::vector<int64_t>& labels, int64_t C,
                double eps, std::vector<float>* grad) {
  const int64_t N = static_cast<int64_t>(labels.size());
  Tensor x = Tensor::empty(b.ledger(), {N, C}, DType::F32, Category::Data, "logits");
  Tensor y = Tensor::empty(b.ledger(), {N}, DType::I64, Category::Data, "labels");
  Tensor d = Tensor::empty(b.ledger(), {N, C}, DType::F32, Category::Temporary, "dlogits");
  b.copy_from_host(x, logits.data());
  b.copy_from_host(y, labels.data());
  const double loss = b.cross_entropy(x, y, d, eps);
  if (grad) {
    grad->resize(static_cast<size_t>(N * C));
    b.copy_to_host(d, grad->data());
  }
  return loss;
}

TEST(LabelSmoothing, CpuLossAndGradientEqualPyTorchsLabelSmoother) {
  auto backend = make_cpu_backend(1);
  const auto all = cases();
  ASSERT_EQ(all.size(), 4u);
  for (const Case& c : all) {
    std::vector<float> grad;
    const double loss = smoothed(*backend, c.logits, c.labels, c.classes, c.epsilon, &grad);
    // Both in float64 from the same float32 logits: agreement to float64 rounding.
    EXPECT_NEAR(loss, c.loss, 1e-12 * std::abs(c.loss)) << c.name;
    // The gradient is stored in float32: half an ulp of the largest value, 2^-24 relative, bounds each.
    double scale = 0;
    for (double g : c.grad) scale = std::max(scale, std::abs(g));
    for (size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(grad[i], c.grad[i], 0x1p-23 * scale) << c.name << " " << i;
    // The plain cross-entropy differs: the smoothing is really applied.
    EXPECT_GT(std::abs(smoothed(*backend, c.logits, c.labels, c.classes, 0.0, nullptr) - c.loss), 1e-3) << c.name;
  }
}

TEST(LabelSmoothing, GradientEqualsFiniteDifferences) {
  auto backend = make_cpu_backend(1);
  for (const Case& c : cases()) {
    std::vector<float> grad;
    smoothed(*backend, c.logits, c.labels, c.classes, c.epsilon, &grad);
    for (size_t i = 0; i < c.logits.size(); ++i) {
      // Steps of 2^-10 on float32 logits: the difference of the perturbed values as they are stored
      // divides, so the float32 rounding of x ± h does not enter; the loss is summed in float64, so
      // the error is the central difference's h²·f'''/6, below 1e-6 for these logits.
      std::vector<float> up = c.logits, down = c.logits;
      up[i] += 0x1p-10f;
      down[i] -= 0x1p-10f;
      const double step = static_cast<double>(up[i]) - static_cast<double>(down[i]);
      const double fd = (smoothed(*backend, up, c.labels, c.classes, c.epsilon, nullptr) -
                         smoothed(*backend, down, c.labels, c.classes, c.epsilon, nullptr)) /
                        step;
      EXPECT_NEAR(grad[i], fd, 1e-5) << c.name << " logit " << i;
    }
  }
}

// Trainer's LabelSmoother on float64 logits [N, C] and labels: (1-ε)·nll + ε·mean(-log_softmax) over the
// labelled rows.
double label_smoother(const std::vector<double>& logits, const std::vector<int64_t>& labels, int64_t C, double eps) {
  double nll = 0, smooth = 0;
  int64_t active = 0;
  for (size_t n = 0; n < labels.size(); ++n) {
    if (labels[n] == -100) continue;
    const double* x = logits.data() + n * C;
    double mx = x[0], sum = 0;
    for (int64_t c = 1; c < C; ++c) mx = std::max(mx, x[c]);
    for (int64_t c = 0; c < C; ++c) sum += std::exp(x[c] - mx);
    const double lse = mx + std::log(sum);
    nll += lse - x[labels[n]];
    for (int64_t c = 0; c < C; ++c) smooth += lse - x[c];
    ++active;
  }
  return (1 - eps) * nll / active + eps * smooth / (static_cast<double>(active) * C);
}

class LabelSmoothingRun : public ::testing::TestWithParam<std::string> {};

TEST_P(LabelSmoothingRun, FirstStepLossIsTheSmoothedLossOfTheFixturesLogits) {
  const std::string dir = test::fixture(GetParam());
  const io::SafetensorsFile ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  test::TempDir tmp;
  const std::string train_file = tmp.file("train.safetensors");
  const int64_t batch = test::write_reference_train_file(dir + "/reference.safetensors", train_file);
  const std::string out = tmp.file("out");
  const double eps = 0.1;
  const auto r = test::run_anatomy("train --model " + dir + test::fixture_task_flag(dir) + " --train-file " +
                                   train_file + " --max-steps 1 --per-device-train-batch-size " +
                                   std::to_string(batch) +
                                   " --no-shuffle --logging-steps 1 --no-progress --device cpu "
                                   "--label_smoothing_factor 0.1 --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream log(out + "/log.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(log, line));
  const double got = nlohmann::json::parse(line)["step_loss"].get<double>();
  const std::vector<double> logits = ref.read_f64("logits");
  const std::vector<int64_t> labels = ref.read_i64("labels");
  const int64_t C = static_cast<int64_t>(logits.size() / labels.size());
  const double want = label_smoother(logits, labels, C, eps);
  // The fixtures' tolerance for the float32 forward's loss against float64 PyTorch (test_fixtures.cpp).
  EXPECT_NEAR(got, want, 1e-5 * want);
  // The check tells the smoothed loss from the plain one: they differ by far more than its tolerance
  // (the tiny models' logits are near uniform, so by little in absolute terms: 3.6e-4 to 5.5e-4).
  EXPECT_GT(std::abs(want - ref.read_f64("loss")[0]), 10 * 1e-5 * want) << "the smoothed loss is not the plain one";
}

INSTANTIATE_TEST_SUITE_P(Heads, LabelSmoothingRun, ::testing::Values("bert-tiny-cls", "bert-tiny-token", "bert-tiny-mc"),
                         [](const auto& info) { return test::test_name(info.param); });

TEST(LabelSmoothing, RefusedByNameWhereTrainerDoesNotSmooth) {
  const std::pair<const char*, const char*> refused[] = {{"bert-regression-gelu-new", "regression labels"},
                                                         {"bert-multilabel-relu", "multi-label labels"},
                                                         {"bert-tiny-qa", "question answering"},
                                                         {"bert-tiny-mlm", "masked-LM"}};
  for (const auto& [fixture, why] : refused) {
    const std::string dir = test::fixture(fixture);
    test::TempDir tmp;
    const std::string train_file = tmp.file("train.safetensors");
    test::write_reference_train_file(dir + "/reference.safetensors", train_file);
    const auto r = test::run_anatomy("train --model " + dir + test::fixture_task_flag(dir) + " --train-file " +
                                     train_file + " --max-steps 1 --no-progress --device cpu "
                                     "--label-smoothing-factor 0.1");
    EXPECT_NE(r.exit_code, 0) << fixture;
    EXPECT_NE(r.output.find("error: --label-smoothing-factor"), std::string::npos) << fixture << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << fixture << ": " << r.output;
  }
}

}  // namespace
}  // namespace anatomy
