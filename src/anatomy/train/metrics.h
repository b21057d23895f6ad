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
// `label_smoothing` (--label-smoothing-factor): eval_loss is Trainer's smoothed
// loss, as its evaluation computes it with the LabelSmoother (single-label).
std::map<std::string, double> classification_metrics(const std::vector<float>& logits, int64_t num_labels,
                                                     ProblemType type, const Dataset& data,
                                                     double label_smoothing = 0.0);

// Token classification, as run_ner.py's compute_metrics and Trainer report it:
// - eval_loss: each evaluation batch's mean cross-entropy over its labelled
//   tokens (-100 ignored), weighted by the batch's examples (Trainer's mean of
//   the batch losses repeated per example); batches of `batch_size` in order;
// - eval_precision, eval_recall, eval_f1, eval_accuracy: seqeval's overall
//   figures (train/seqeval.h) over the labelled tokens' tags, `names` giving
//   each id's tag.
// `logits` holds data.size × data.seq_len × num_labels values (token labels).
std::map<std::string, double> token_classification_metrics(const std::vector<float>& logits, int64_t num_labels,
                                                           const Dataset& data, const std::vector<std::string>& names,
                                                           int64_t batch_size, double label_smoothing = 0.0);

// Whether a larger value of the metric is better (loss and mse: smaller);
// false with an error naming the flag for a metric of no problem type.
bool metric_greater_is_better(const std::string& metric);

}  // namespace anatomy
