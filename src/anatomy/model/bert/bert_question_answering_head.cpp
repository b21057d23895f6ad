// bert_question_answering_head.cpp: see bert_question_answering_head.h.
#include "anatomy/model/bert/bert_question_answering_head.h"

#include <fmt/format.h>

namespace anatomy {

BertQuestionAnsweringHead::BertQuestionAnsweringHead(Backend& backend, const ModelConfig& config,
                                                     const BertLayout& layout, DType compute, const BertTensors& wh,
                                                     const BertTensors& g, BertEncoder& encoder)
    : backend_(backend), config_(config), layout_(layout), compute_(compute), wh_(wh), g_(g), encoder_(encoder) {}

// Row o of qa_outputs (o = 0: start, 1: end) as its own [1, H] product.
namespace {
Tensor weight_row(const Tensor& w, int64_t o) { return w.slice(o * w.dim(1), {1, w.dim(1)}, w.name() + fmt::format("[{}]", o)); }
Tensor bias_row(const Tensor& b, int64_t o) { return b.slice(o, {1}, b.name() + fmt::format("[{}]", o)); }
}  // namespace

void BertQuestionAnsweringHead::forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) {
  const int64_t B = encoder_.batch(), L = encoder_.length(), H = config_.hidden_size;
  backend_.dropout(hidden, s["classifier_in"],
                   encoder_.dropout_at(layout_.head_dropout(config_), encoder_.dropout_sites()));
  const Tensor x = s["classifier_in"].reshape({B * L, H});
  for (int64_t o = 0; o < 2; ++o) {
    const Tensor y = s["logits"].slice(o * B * L, {B * L, 1}, o == 0 ? "start_logits" : "end_logits");
    const Tensor w = weight_row(wh_.classifier_w, o), b = bias_row(wh_.classifier_b, o);
    if (compute_ == DType::F32) {
      backend_.linear_forward(x, w, &b, y);
    } else {
      Tensor rounded = encoder_.temporary({B * L, 1}, "logits_half", compute_);
      backend_.linear_forward(x, w, &b, rounded);
      backend_.cast(rounded, y);
    }
  }
}

double question_answering_loss(Backend& backend, const Tensor& logits, const Tensor& labels, const Tensor& dlogits) {
  ANATOMY_CHECK(logits.rank() == 3 && logits.dim(0) == 2, "question answering logits must be [2, batch, seq]");
  const int64_t B = logits.dim(1), L = logits.dim(2);
  ANATOMY_CHECK(labels.dtype() == DType::I64 && labels.numel() == 2 * B,
                "question answering needs int64 start and end positions [2, {}]", B);
  double total = 0.0;
  for (int64_t o = 0; o < 2; ++o)
    total += backend.cross_entropy(logits.slice(o * B * L, {B, L}), labels.slice(o * B, {B}),
                                   dlogits.slice(o * B * L, {B, L}));
  backend.scale(dlogits, 0.5);
  return total / 2.0;
}

double BertQuestionAnsweringHead::loss(const Tensor& logits, const Tensor& labels, ProblemType type,
                                       const Tensor& dlogits, double) {
  return question_answering_loss(backend_, logits, labels, dlogits);
}

BertHead::Gradients BertQuestionAnsweringHead::backward(const SavedTensors& s, const Tensor& dlogits, double) {
  const int64_t B = encoder_.batch(), L = encoder_.length(), H = config_.hidden_size;
  Gradients out;
  out.d_hidden = encoder_.temporary({B, L, H}, "d_hidden", compute_);
  const Tensor x = s["classifier_in"].reshape({B * L, H});
  const Tensor dx = out.d_hidden.reshape({B * L, H});
  for (int64_t o = 0; o < 2; ++o) {
    Tensor dy = dlogits.slice(o * B * L, {B * L, 1}, o == 0 ? "d_start_logits" : "d_end_logits");
    if (compute_ != DType::F32) {
      Tensor rounded = encoder_.temporary({B * L, 1}, "dlogits_half", compute_);
      backend_.cast(dy, rounded);
      dy = rounded;
    }
    const Tensor db = bias_row(g_.classifier_b, o);
    backend_.linear_backward(dy, x, weight_row(wh_.classifier_w, o), &dx, weight_row(g_.classifier_w, o), &db,
                             /*accumulate_dx=*/o == 1);
  }
  backend_.dropout(out.d_hidden, out.d_hidden,
                   encoder_.dropout_at(layout_.head_dropout(config_), encoder_.dropout_sites()));
  return out;
}

std::vector<std::pair<std::string, Tensor>> answer_span_outputs(const Tensor& logits) {
  const int64_t B = logits.dim(1), L = logits.dim(2);
  return {{"start_logits", logits.slice(0, {B, L}, "start_logits")},
          {"end_logits", logits.slice(B * L, {B, L}, "end_logits")}};
}

std::vector<std::pair<std::string, Tensor>> BertQuestionAnsweringHead::named_outputs(const Tensor& logits) const {
  return answer_span_outputs(logits);
}

}  // namespace anatomy
