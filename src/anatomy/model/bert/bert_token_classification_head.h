// bert_token_classification_head.h: the token classification head of a
// BERT-style model (BertForTokenClassification, RobertaForTokenClassification,
// ElectraForTokenClassification, DistilBertForTokenClassification):
//   logits = classifier(dropout(sequence_output))   [B, L, num_labels]
// and the loss: cross-entropy over every token, labels -100 ignored, the mean
// over the others (CrossEntropyLoss on logits.view(-1, num_labels)). Under
// mixed precision the dropout and the product run in the compute dtype from
// the 16-bit copy of the classifier (as autocast runs the Linear), the logits
// and the loss in float32.
#pragma once

#include "anatomy/model/bert/bert_head.h"

namespace anatomy {

class BertTokenClassificationHead : public BertHead {
 public:
  BertTokenClassificationHead(Backend& backend, const ModelConfig& config, const BertLayout& layout, DType compute,
                              const BertTensors& wh, const BertTensors& g, BertEncoder& encoder);

  bool first_token_only() const override { return false; }
  void forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) override;
  ProblemType problem_type(DType labels_dtype) const override;
  double loss(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits,
              double label_smoothing) override;
  Gradients backward(const SavedTensors& s, const Tensor& dlogits, double loss_scale) override;

 private:
  Backend& backend_;
  const ModelConfig& config_;
  const BertLayout& layout_;
  DType compute_;
  const BertTensors& wh_;
  const BertTensors& g_;
  BertEncoder& encoder_;
};

// Token classification's loss: cross-entropy of logits [B, L, C] against
// int64 labels [B, L], -100 ignored, the mean over the others; its gradient
// into `dlogits`. Errors name the shapes.
double token_classification_loss(Backend& backend, const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                                 double label_smoothing = 0.0);

}  // namespace anatomy
