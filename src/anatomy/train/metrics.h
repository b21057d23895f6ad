// metrics.h: evaluation metrics from float32 logits on the host, as Hugging
// Face's models compute the loss for the problem type and as the usual
// compute_metrics functions (scikit-learn's accuracy_score, f1_score with
// average="macro", mean_squared_error, scipy's pearsonr) define the rest.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "anatomy/data/dataset.h"
#include "anatomy/model/config.h"

namespace anatomy {

// Metrics named as Hugging Face Trainer reports them:
// - every problem type: eval_loss, the mean over examples (labels -100 ignored);
// - single-label: eval_accuracy, eval_f1 (macro over the classes that occur
//   in the labels or the predictions);
// - regression: eval_mse and, with a single output, eval_pearson;
// - multi-label: eval_accuracy as exact match of every label at 0.5.
// `logits` holds data.size × num_labels values, example after example.
std::map<std::string, double> classification_metrics(const std::vector<float>& logits, int64_t num_labels,
                                                     ProblemType type, const Dataset& data);

// Whether a larger value of the metric is better (loss and mse: smaller);
// false with an error naming the flag for a metric of no problem type.
bool metric_greater_is_better(const std::string& metric);

}  // namespace anatomy
