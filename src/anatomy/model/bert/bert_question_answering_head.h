// bert_question_answering_head.h: the extractive question answering head of
// a BERT-style model (BertForQuestionAnswering, RobertaFor..., ElectraFor...,
// DistilBertFor...):
//   start_logits, end_logits = qa_outputs(dropout(sequence_output)).split(1, -1)   each [B, L]
// (dropout: DistilBERT's qa_dropout; none in the others) and the loss
// (CrossEntropy(start_logits, start_positions) + CrossEntropy(end_logits,
// end_positions)) / 2. The logits are one float32 tensor [2, B, L], the start
// logits then the end logits, each made by its row of qa_outputs (one product
// per row, so that each is contiguous); labels int64 [2, B], the start
// positions then the end positions. Under mixed precision the products run in
// the compute dtype from the 16-bit copy, the logits and loss in float32.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "anatomy/model/bert/bert_head.h"

namespace anatomy {

class BertQuestionAnsweringHead : public BertHead {
 public:
  BertQuestionAnsweringHead(Backend& backend, const ModelConfig& config, const BertLayout& layout, DType compute,
                            const BertTensors& wh, const BertTensors& g, BertEncoder& encoder);

  bool first_token_only() const override { return false; }
  void forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) override;
  ProblemType problem_type(DType labels_dtype) const override { return ProblemType::SingleLabel; }
  double loss(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits,
              double label_smoothing) override;
  Gradients backward(const SavedTensors& s, const Tensor& dlogits, double loss_scale) override;
  std::vector<std::pair<std::string, Tensor>> named_outputs(const Tensor& logits) const override;

 private:
  Backend& backend_;
  const ModelConfig& config_;
  const BertLayout& layout_;
  DType compute_;
  const BertTensors& wh_;
  const BertTensors& g_;
  BertEncoder& encoder_;
};

// Question answering's loss: logits [2, B, L] (start, end), labels int64
// [2, B] (start positions, end positions, each in [0, L)); the mean of the
// two cross-entropies, its gradient into `dlogits`.
double question_answering_loss(Backend& backend, const Tensor& logits, const Tensor& labels, const Tensor& dlogits);

// The start and end logits of logits [2, B, L], each [B, L].
std::vector<std::pair<std::string, Tensor>> answer_span_outputs(const Tensor& logits);

}  // namespace anatomy
