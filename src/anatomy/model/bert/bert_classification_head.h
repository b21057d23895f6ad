// bert_classification_head.h: the sequence classification head of a
// BERT-style model over the encoder's first token, as the layout shapes it —
// BERT's pooler (dense + tanh) then dropout and the classifier; RoBERTa's and
// ELECTRA's dropout, dense, tanh or GELU, dropout, out_proj; DistilBERT's
// pre_classifier, ReLU, dropout, classifier — and the loss of the problem type
// (cross-entropy, MSE, or binary cross-entropy with logits), forward and
// backward. With one output it is the multiple-choice head (*ForMultipleChoice):
// a logit per choice, the model views them as [examples, choices] and the loss
// is single-label over the choices. It reads the first token only, so the encoder's last layer may
// compute past attention for that token alone.
#pragma once

#include "anatomy/model/bert/bert_head.h"

namespace anatomy {

class BertClassificationHead : public BertHead {
 public:
  // `w` (float32 weights) and `g` (gradients): the model's handles; the head
  // computes in float32 under mixed precision too (it is small).
  BertClassificationHead(Backend& backend, const ModelConfig& config, const BertLayout& layout, DType compute,
                         const BertTensors& w, const BertTensors& g, BertEncoder& encoder);

  bool first_token_only() const override { return true; }
  // The logits of the encoder's output `hidden` into s["logits"] (s: the head's saved tensors).
  void forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) override;
  // resolve_problem_type's rule.
  ProblemType problem_type(DType labels_dtype) const override;
  double loss(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits,
              double label_smoothing) override;
  // d_hidden is zero but for the first token; the gradients of the pooled
  // and first-token vectors are held.
  Gradients backward(const SavedTensors& s, const Tensor& dlogits, double loss_scale) override;

 private:
  Backend& backend_;
  const ModelConfig& config_;
  const BertLayout& layout_;
  DType compute_;
  const BertTensors& w_;
  const BertTensors& g_;
  BertEncoder& encoder_;
};

}  // namespace anatomy
