// test_metrics.cpp: the evaluation metrics against values worked out by hand
// (scikit-learn's definitions: macro F1 over the classes present in labels or
// predictions; Pearson's r) and the loss against its formula.
#include <gtest/gtest.h>

#include <cmath>

#include "anatomy/core/error.h"
#include "anatomy/train/metrics.h"

namespace anatomy {
namespace {

Dataset labelled(std::vector<int64_t> labels) {
  Dataset d;
  d.source = "test";
  d.size = static_cast<int64_t>(labels.size());
  d.label_width = 1;
  d.labels_i64 = std::move(labels);
  return d;
}

TEST(Metrics, SingleLabelAccuracyMacroF1AndLoss) {
  // truth 0 0 1 1 2, predicted 0 1 1 1 0 (logits put 2.0 on the prediction).
  const Dataset d = labelled({0, 0, 1, 1, 2});
  const std::vector<int64_t> predicted = {0, 1, 1, 1, 0};
  std::vector<float> logits(15, 0.0f);
  for (int i = 0; i < 5; ++i) logits[i * 3 + predicted[i]] = 2.0f;
  const auto m = classification_metrics(logits, 3, ProblemType::SingleLabel, d);
  EXPECT_DOUBLE_EQ(m.at("eval_accuracy"), 3.0 / 5.0);
  // class 0: tp 1 fp 1 fn 1 -> 0.5; class 1: tp 2 fp 1 fn 0 -> 0.8; class 2: tp 0 -> 0.
  EXPECT_NEAR(m.at("eval_f1"), (0.5 + 0.8 + 0.0) / 3.0, 1e-15);
  const double right = -std::log(std::exp(2.0) / (std::exp(2.0) + 2.0));
  const double wrong = -std::log(1.0 / (std::exp(2.0) + 2.0));
  EXPECT_NEAR(m.at("eval_loss"), (3 * right + 2 * wrong) / 5.0, 1e-12);
}

TEST(Metrics, IgnoredLabelsDoNotCount) {
  const Dataset d = labelled({1, -100});
  const std::vector<float> logits = {0.0f, 1.0f, 5.0f, 0.0f};
  const auto m = classification_metrics(logits, 2, ProblemType::SingleLabel, d);
  EXPECT_DOUBLE_EQ(m.at("eval_accuracy"), 1.0);
}

TEST(Metrics, RegressionMseAndPearson) {
  Dataset d;
  d.source = "test";
  d.size = 4;
  d.label_width = 1;
  d.label_dtype = DType::F32;
  d.labels_f32 = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> logits = {2.0f, 4.0f, 6.0f, 8.0f};  // perfectly correlated, off by y
  const auto m = classification_metrics(logits, 1, ProblemType::Regression, d);
  EXPECT_DOUBLE_EQ(m.at("eval_mse"), (1.0 + 4.0 + 9.0 + 16.0) / 4.0);
  EXPECT_DOUBLE_EQ(m.at("eval_loss"), m.at("eval_mse"));
  EXPECT_NEAR(m.at("eval_pearson"), 1.0, 1e-15);
  const std::vector<float> reversed = {4.0f, 3.0f, 2.0f, 1.0f};
  EXPECT_NEAR(classification_metrics(reversed, 1, ProblemType::Regression, d).at("eval_pearson"), -1.0, 1e-15);
}

TEST(Metrics, GreaterIsBetter) {
  EXPECT_TRUE(metric_greater_is_better("accuracy"));
  EXPECT_TRUE(metric_greater_is_better("eval_f1"));
  EXPECT_FALSE(metric_greater_is_better("loss"));
  EXPECT_FALSE(metric_greater_is_better("eval_mse"));
  EXPECT_THROW(metric_greater_is_better("bleu"), Error);
}

}  // namespace
}  // namespace anatomy
