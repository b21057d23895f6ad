// bert_head.h: what a BERT-style model's task head does, as the model runs
// it after the encoder (bert.h): the sequence classification head over the
// first token (bert_classification_head.h) or the token classification head
// over every token (bert_token_classification_head.h) or the answer span's
// start and end (bert_question_answering_head.h) or the masked tokens
// (bert_masked_lm_head.h), as the layout's task says. What a head saves for backward is declared with the encoder's
// (bert_activations.h, LayerKind::Head).
#pragma once

#include <memory>
#include <optional>
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
  // `labels`: the batch's (undefined without); only a head that computes its
  // loss in forward reads them.
  virtual void forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) = 0;
  // After a forward with labels, the loss of a head that computed it there
  // (the masked-LM head's chunked loss, which keeps no whole logits); nullopt:
  // the model calls loss() on the logits.
  virtual std::optional<double> forward_loss() const { return std::nullopt; }
  // The last forward's logits (undefined where a head computed its loss without them).
  virtual Tensor logits(const SavedTensors& s) const { return s["logits"]; }
  // The problem type of labels of `labels_dtype`.
  virtual ProblemType problem_type(DType labels_dtype) const = 0;
  // The mean loss of `logits` against `labels`, its gradient into `dlogits`
  // (`label_smoothing`: ForwardOptions', where the head takes it).
  virtual double loss(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits,
              double label_smoothing) = 0;
  // From the (scaled) loss gradient: the head's parameter gradients, and the
  // gradient of the encoder's output, d_hidden [B, rows of its last layer, H]
  // in the compute dtype. `held`: temporaries the model keeps to the end of
  // its backward (as the memory plan has them).
  struct Gradients {
    Tensor d_hidden;
    std::vector<Tensor> held;
  };
  // `dlogits` comes scaled by `loss_scale`; a head with forward_loss() gets
  // none and applies `loss_scale` itself.
  virtual Gradients backward(const SavedTensors& s, const Tensor& dlogits, double loss_scale) = 0;
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
