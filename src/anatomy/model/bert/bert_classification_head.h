// bert_classification_head.h: the sequence classification head of a
// BERT-style model over the encoder's first token, as the layout shapes it —
// BERT's pooler (dense + tanh) then dropout and the classifier; RoBERTa's and
// ELECTRA's dropout, dense, tanh or GELU, dropout, out_proj; DistilBERT's
// pre_classifier, ReLU, dropout, classifier — and the loss of the problem type
// (cross-entropy, MSE, or binary cross-entropy with logits), forward and
// backward. It reads the first token only, so the encoder's last layer may
// compute past attention for that token alone.
#pragma once

#include "anatomy/kernels/backend.h"
#include "anatomy/model/bert/bert_activations.h"
#include "anatomy/model/bert/bert_encoder.h"
#include "anatomy/model/bert/bert_parameters.h"

namespace anatomy {

class BertClassificationHead {
 public:
  // `w` (float32 weights) and `g` (gradients): the model's handles; the head
  // computes in float32 under mixed precision too (it is small).
  BertClassificationHead(Backend& backend, const ModelConfig& config, const BertLayout& layout, DType compute,
                         const BertTensors& w, const BertTensors& g, BertEncoder& encoder);

  // The logits of the encoder's output `hidden` into s["logits"] (s: the head's saved tensors).
  void forward(const Tensor& hidden, const SavedTensors& s);
  // The mean loss of `logits` against `labels`, its gradient into `dlogits`.
  double loss(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits);
  // From the (scaled) loss gradient: the head's parameter gradients, and the
  // gradient of the encoder's output, d_hidden: [B, rows of its last layer, H]
  // in the compute dtype (zero but for the first token). The head's
  // gradients are temporaries the model holds to the end of its backward.
  struct Gradients {
    Tensor d_pooled, d_first;
    Tensor d_hidden;
  };
  Gradients backward(const SavedTensors& s, const Tensor& dlogits);

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
