// bert_head.h: what a BERT-style model's task head does, as the model runs
// it after the encoder (bert.h): the sequence classification head over the
// first token (bert_classification_head.h) or the token classification head
// over every token (bert_token_classification_head.h) or the answer span's
// start and end (bert_question_answering_head.h), as the layout's task says. What a head saves for backward is declared with the encoder's
// (bert_activations.h, LayerKind::Head).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/activations.h"
#include "anatomy/model/bert/bert_encoder.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/model.h"

namespace anatomy {

class BertHead {
 public:
  virtual ~BertHead() = default;
  // Whether it reads only the encoder's first token (the last layer may then
  // compute past attention for that token alone).
  virtual bool first_token_only() const = 0;
  // Its outputs of the encoder's `hidden` into s (s["logits"] among them).
  virtual void forward(const Tensor& hidden, const SavedTensors& s) = 0;
  // The problem type of labels of `labels_dtype`.
  virtual ProblemType problem_type(DType labels_dtype) const = 0;
  // The mean loss of `logits` against `labels`, its gradient into `dlogits`.
  virtual double loss(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits) = 0;
  // From the (scaled) loss gradient: the head's parameter gradients, and the
  // gradient of the encoder's output, d_hidden [B, rows of its last layer, H]
  // in the compute dtype. `held`: temporaries the model keeps to the end of
  // its backward (as the memory plan has them).
  struct Gradients {
    Tensor d_hidden;
    std::vector<Tensor> held;
  };
  virtual Gradients backward(const SavedTensors& s, const Tensor& dlogits) = 0;
  // Its outputs under Hugging Face's names (the logits, or their parts).
  virtual std::vector<std::pair<std::string, Tensor>> named_outputs(const Tensor& logits) const {
    return {{"logits", logits}};
  }
};

// The head of `layout.task`. `w`: the float32 weights, `wh`: what 16-bit
// products read (`w` or the 16-bit copy), `g`: the gradients — the model's handles.
std::unique_ptr<BertHead> make_bert_head(Backend& backend, const ModelConfig& config, const BertLayout& layout,
                                         DType compute, const BertTensors& w, const BertTensors& wh,
                                         const BertTensors& g, BertEncoder& encoder);

}  // namespace anatomy
