// bert_token_classification_head.cpp: see bert_token_classification_head.h.
#include "anatomy/model/bert/bert_token_classification_head.h"

namespace anatomy {

BertTokenClassificationHead::BertTokenClassificationHead(Backend& backend, const ModelConfig& config,
                                                         const BertLayout& layout, DType compute,
                                                         const BertTensors& wh, const BertTensors& g,
                                                         BertEncoder& encoder)
    : backend_(backend), config_(config), layout_(layout), compute_(compute), wh_(wh), g_(g), encoder_(encoder) {}

// The head's one dropout site follows the encoder's.
void BertTokenClassificationHead::forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) {
  const int64_t B = encoder_.batch(), L = encoder_.length(), C = config_.num_labels;
  backend_.dropout(hidden, s["classifier_in"], encoder_.dropout_at(layout_.head_dropout(config_),
                                                                   encoder_.dropout_sites()));
  if (compute_ == DType::F32) {
    backend_.linear_forward(s["classifier_in"], wh_.classifier_w, &wh_.classifier_b, s["logits"]);
  } else {
    Tensor logits = encoder_.temporary({B, L, C}, "logits_half", compute_);
    backend_.linear_forward(s["classifier_in"], wh_.classifier_w, &wh_.classifier_b, logits);
    backend_.cast(logits, s["logits"]);
  }
}

ProblemType BertTokenClassificationHead::problem_type(DType labels_dtype) const { return ProblemType::SingleLabel; }

double token_classification_loss(Backend& backend, const Tensor& logits, const Tensor& labels,
                                 const Tensor& dlogits, double label_smoothing) {
  ANATOMY_CHECK(logits.rank() == 3, "token classification logits must be [batch, seq, labels]");
  const int64_t B = logits.dim(0), L = logits.dim(1), C = logits.dim(2);
  ANATOMY_CHECK(labels.dtype() == DType::I64 && labels.numel() == B * L,
                "token classification needs int64 labels [{}, {}]", B, L);
  return backend.cross_entropy(logits.reshape({B * L, C}), labels.reshape({B * L}), dlogits.reshape({B * L, C}),
                               label_smoothing);
}

double BertTokenClassificationHead::loss(const Tensor& logits, const Tensor& labels, ProblemType type,
                                         const Tensor& dlogits, double label_smoothing) {
  return token_classification_loss(backend_, logits, labels, dlogits, label_smoothing);
}

BertHead::Gradients BertTokenClassificationHead::backward(const SavedTensors& s, const Tensor& dlogits, double) {
  const int64_t B = encoder_.batch(), L = encoder_.length(), H = config_.hidden_size, C = config_.num_labels;
  Gradients out;
  out.d_hidden = encoder_.temporary({B, L, H}, "d_hidden", compute_);
  Tensor dy = dlogits;
  if (compute_ != DType::F32) {
    dy = encoder_.temporary({B, L, C}, "dlogits_half", compute_);
    backend_.cast(dlogits, dy);
  }
  backend_.linear_backward(dy, s["classifier_in"], wh_.classifier_w, &out.d_hidden, g_.classifier_w,
                           &g_.classifier_b);
  backend_.dropout(out.d_hidden, out.d_hidden,
                   encoder_.dropout_at(layout_.head_dropout(config_), encoder_.dropout_sites()));
  return out;
}

}  // namespace anatomy
