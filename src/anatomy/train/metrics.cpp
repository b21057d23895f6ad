// metrics.cpp: the evaluation metrics of metrics.h, in double precision.
#include "anatomy/train/metrics.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "anatomy/core/error.h"
#include "anatomy/train/seqeval.h"

namespace anatomy {

namespace {
// A row's cross-entropy from its log-sum-exp; with label smoothing ε, Trainer's
// LabelSmoother's (1 − ε)·(lse − x_y) + ε·mean_c(lse − x_c).
double row_loss(const float* x, int64_t C, int64_t label, double lse, double eps) {
  const double nll = lse - x[label];
  if (eps == 0.0) return nll;
  double mean = 0.0;
  for (int64_t c = 0; c < C; ++c) mean += x[c];
  mean /= static_cast<double>(C);
  return (1.0 - eps) * nll + eps * (lse - mean);
}
}  // namespace

std::map<std::string, double> classification_metrics(const std::vector<float>& logits, int64_t C, ProblemType type,
                                                     const Dataset& data, double label_smoothing) {
  ANATOMY_CHECK(static_cast<int64_t>(logits.size()) == data.size * C, "metrics: {} logits for {} examples of {}",
                logits.size(), data.size, C);
  ANATOMY_CHECK(data.has_labels(), "{}: metrics need labels", data.source);
  std::map<std::string, double> out;
  double loss = 0.0;
  int64_t counted = 0;
  switch (type) {
    case ProblemType::SingleLabel: {
      std::vector<int64_t> truth, predicted;
      for (int64_t i = 0; i < data.size; ++i) {
        const int64_t label = data.labels_i64[i];
        if (label == -100) continue;  // ignored, as torch's cross-entropy ignores it
        const float* x = logits.data() + i * C;
        const float max = *std::max_element(x, x + C);
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(x[c]) - max);
        loss += row_loss(x, C, label, std::log(sum) + max, label_smoothing);
        truth.push_back(label);
        predicted.push_back(std::max_element(x, x + C) - x);
        ++counted;
      }
      int64_t correct = 0;
      std::set<int64_t> classes;
      for (size_t i = 0; i < truth.size(); ++i) {
        correct += truth[i] == predicted[i];
        classes.insert(truth[i]);
        classes.insert(predicted[i]);
      }
      double f1_sum = 0.0;
      for (int64_t c : classes) {
        int64_t tp = 0, fp = 0, fn = 0;
        for (size_t i = 0; i < truth.size(); ++i) {
          tp += truth[i] == c && predicted[i] == c;
          fp += truth[i] != c && predicted[i] == c;
          fn += truth[i] == c && predicted[i] != c;
        }
        f1_sum += tp == 0 ? 0.0 : 2.0 * tp / static_cast<double>(2 * tp + fp + fn);
      }
      if (counted > 0) {
        out["eval_accuracy"] = static_cast<double>(correct) / static_cast<double>(counted);
        out["eval_f1"] = f1_sum / static_cast<double>(classes.size());
      }
      break;
    }
    case ProblemType::Regression: {
      double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
      for (int64_t i = 0; i < data.size; ++i) {
        for (int64_t c = 0; c < C; ++c) {
          const double x = logits[i * C + c], y = data.labels_f32[i * C + c];
          loss += (x - y) * (x - y) / static_cast<double>(C);
          sx += x, sy += y, sxx += x * x, syy += y * y, sxy += x * y;
        }
        ++counted;
      }
      out["eval_mse"] = counted > 0 ? loss / static_cast<double>(counted) : 0.0;
      if (C == 1 && counted > 1) {
        const double n = static_cast<double>(counted);
        const double cov = sxy - sx * sy / n, vx = sxx - sx * sx / n, vy = syy - sy * sy / n;
        out["eval_pearson"] = vx > 0 && vy > 0 ? cov / std::sqrt(vx * vy) : 0.0;
      }
      break;
    }
    case ProblemType::MultiLabel: {
      int64_t exact = 0;
      for (int64_t i = 0; i < data.size; ++i) {
        bool all = true;
        for (int64_t c = 0; c < C; ++c) {
          const double x = logits[i * C + c], y = data.labels_f32[i * C + c];
          loss += (std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)))) / static_cast<double>(C);
          all &= (x > 0.0) == (y > 0.5);
        }
        exact += all;
        ++counted;
      }
      if (counted > 0) out["eval_accuracy"] = static_cast<double>(exact) / static_cast<double>(counted);
      break;
    }
    case ProblemType::Unset: ANATOMY_CHECK(false, "metrics: problem type unresolved");
  }
  if (counted > 0) out["eval_loss"] = loss / static_cast<double>(counted);
  return out;
}

std::map<std::string, double> token_classification_metrics(const std::vector<float>& logits, int64_t C,
                                                           const Dataset& data, const std::vector<std::string>& names,
                                                           int64_t batch_size, double label_smoothing) {
  const int64_t L = data.seq_len;
  ANATOMY_CHECK(data.token_labels && static_cast<int64_t>(logits.size()) == data.size * L * C &&
                    static_cast<int64_t>(names.size()) == C && batch_size > 0,
                "token metrics: {} logits for {} x {} x {} ({} names)", logits.size(), data.size, L, C, names.size());
  std::vector<std::vector<std::string>> truth, predicted;
  double weighted_loss = 0.0;
  int64_t weighted_examples = 0;
  for (int64_t begin = 0; begin < data.size; begin += batch_size) {
    const int64_t end = std::min(data.size, begin + batch_size);
    double loss = 0.0;
    int64_t counted = 0;
    for (int64_t i = begin; i < end; ++i) {
      std::vector<std::string> t, p;
      for (int64_t j = 0; j < L; ++j) {
        const int64_t label = data.labels_i64[static_cast<size_t>(i * L + j)];
        if (label == -100) continue;
        const float* x = logits.data() + (i * L + j) * C;
        const float max = *std::max_element(x, x + C);
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(x[c]) - max);
        loss += row_loss(x, C, label, std::log(sum) + max, label_smoothing);
        ++counted;
        t.push_back(names[static_cast<size_t>(label)]);
        p.push_back(names[static_cast<size_t>(std::max_element(x, x + C) - x)]);
      }
      truth.push_back(std::move(t));
      predicted.push_back(std::move(p));
    }
    // A batch without labelled tokens has no loss (torch's mean over none is NaN): it is left out.
    if (counted > 0) {
      weighted_loss += loss / static_cast<double>(counted) * static_cast<double>(end - begin);
      weighted_examples += end - begin;
    }
  }
  std::map<std::string, double> out;
  if (weighted_examples == 0) fail("{}: no token has a label (all are -100)", data.source);
  out["eval_loss"] = weighted_loss / static_cast<double>(weighted_examples);
  const SeqevalResult scores = seqeval(truth, predicted);
  out["eval_precision"] = scores.precision;
  out["eval_recall"] = scores.recall;
  out["eval_f1"] = scores.f1;
  out["eval_accuracy"] = scores.accuracy;
  return out;
}

bool metric_greater_is_better(const std::string& metric) {
  static const std::set<std::string> greater = {"accuracy", "f1", "pearson", "precision", "recall"};
  static const std::set<std::string> smaller = {"loss", "mse"};
  const std::string name = metric.rfind("eval_", 0) == 0 ? metric.substr(5) : metric;
  if (greater.count(name)) return true;
  if (smaller.count(name)) return false;
  fail("--metric-for-best-model {}: expected loss, accuracy, f1, precision, recall, mse or pearson", metric);
}

}  // namespace anatomy
