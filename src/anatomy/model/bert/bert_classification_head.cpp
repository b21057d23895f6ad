// bert_classification_head.cpp: the head and the loss, per Hugging Face's
// BertForSequenceClassification (pooled = tanh(dense(out[:, 0])); logits =
// classifier(dropout(pooled))), RobertaClassificationHead and
// ElectraClassificationHead (dropout first, then the same with tanh or GELU),
// and DistilBertForSequenceClassification (pre_classifier, ReLU, dropout,
// classifier).
#include "anatomy/model/bert/bert_classification_head.h"

namespace anatomy {

namespace {

// The activation keeps its output for tanh, its input otherwise (Backend::activation_backward).
const char* activation_saved(ActivationKind kind) { return kind == ActivationKind::Tanh ? "pooled" : "head_pre"; }

}  // namespace

BertClassificationHead::BertClassificationHead(Backend& backend, const ModelConfig& config, const BertLayout& layout,
                                               DType compute, const BertTensors& w, const BertTensors& g,
                                               BertEncoder& encoder)
    : backend_(backend), config_(config), layout_(layout), compute_(compute), w_(w), g_(g), encoder_(encoder) {}

// The head's dropout sites follow the encoder's: after the activation, then before the dense layer.
void BertClassificationHead::forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) {
  const int64_t B = encoder_.batch(), H = config_.hidden_size;
  const double p = layout_.head_dropout(config_);
  if (compute_ == DType::F32) {
    backend_.select_row(hidden, 0, s["first_token"]);
  } else {  // the head is small: it runs in float32 from the rounded first token
    Tensor first = encoder_.temporary({B, H}, "first_token_half", compute_);
    backend_.select_row(hidden, 0, first);
    backend_.cast(first, s["first_token"]);
  }
  if (layout_.dropout_before_head_dense)
    backend_.dropout(s["first_token"], s["first_token"],
                     encoder_.dropout_at(layout_.head_dense_dropout(config_), encoder_.dropout_sites() + 1));
  const ActivationKind act = layout_.head_activation;
  const bool tanh = act == ActivationKind::Tanh;
  Tensor pre = tanh ? encoder_.temporary({B, H}, "head_pre") : s["head_pre"];
  Tensor pooled = tanh ? s["pooled"] : encoder_.temporary({B, H}, "pooled");
  backend_.linear_forward(s["first_token"], w_.head_dense_w, &w_.head_dense_b, pre);
  backend_.activation_forward(act, pre, pooled);
  backend_.dropout(pooled, s["classifier_in"], encoder_.dropout_at(p, encoder_.dropout_sites()));
  backend_.linear_forward(s["classifier_in"], w_.classifier_w, &w_.classifier_b, s["logits"]);
}

ProblemType BertClassificationHead::problem_type(DType labels_dtype) const {
  // Multiple choice: one logit per choice, a cross-entropy over an example's choices.
  if (layout_.task == kMultipleChoice) return ProblemType::SingleLabel;
  return resolve_problem_type(config_, labels_dtype);
}

double BertClassificationHead::loss(const Tensor& logits, const Tensor& labels, ProblemType type,
                                    const Tensor& dlogits, double label_smoothing) {
  return sequence_classification_loss(backend_, logits, labels, type, dlogits, label_smoothing);
}

BertHead::Gradients BertClassificationHead::backward(const SavedTensors& head, const Tensor& dlogits, double) {
  const int64_t B = encoder_.batch(), H = config_.hidden_size;
  const double p = layout_.head_dropout(config_);
  Gradients out;
  Tensor d_pooled = encoder_.temporary({B, H}, "d_pooled");
  backend_.linear_backward(dlogits, head["classifier_in"], w_.classifier_w, &d_pooled, g_.classifier_w,
                           &g_.classifier_b);
  backend_.dropout(d_pooled, d_pooled, encoder_.dropout_at(p, encoder_.dropout_sites()));
  const ActivationKind act = layout_.head_activation;
  backend_.activation_backward(act, head[activation_saved(act)], d_pooled, d_pooled);
  Tensor d_first = encoder_.temporary({B, H}, "d_first_token");
  backend_.linear_backward(d_pooled, head["first_token"], w_.head_dense_w, &d_first, g_.head_dense_w,
                           &g_.head_dense_b);
  if (layout_.dropout_before_head_dense)
    backend_.dropout(d_first, d_first,
                     encoder_.dropout_at(layout_.head_dense_dropout(config_), encoder_.dropout_sites() + 1));
  const int64_t layers = config_.num_hidden_layers;
  const int64_t last_rows = layers > 0 ? encoder_.rows_after_attention(layers - 1) : encoder_.length();
  Tensor& d_hidden = out.d_hidden;
  d_hidden = encoder_.temporary({B, last_rows, H}, "d_hidden", compute_);
  backend_.zero(d_hidden);
  if (compute_ == DType::F32) {
    backend_.select_row_backward(d_first, 0, d_hidden);
  } else {
    Tensor d_first_half = encoder_.temporary({B, H}, "d_first_token_half", compute_);
    backend_.cast(d_first, d_first_half);
    backend_.select_row_backward(d_first_half, 0, d_hidden);
  }
  out.held = {d_pooled, d_first};
  return out;
}

}  // namespace anatomy
