// activations.cpp: the saved-for-backward declaration of every BERT layer.
#include "anatomy/model/activations.h"

namespace anatomy {

std::vector<SavedSpec> saved_for_backward(LayerKind kind, const BertConfig& c, int64_t B, int64_t L) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, N = c.num_attention_heads, T = B * L;
  switch (kind) {
    case LayerKind::Embeddings:
      return {
          {"ln_in", {B, L, H}, "LayerNorm backward (word + position + token type)"},
          {"ln_mean", {T}, "LayerNorm backward"},
          {"ln_rstd", {T}, "LayerNorm backward"},
          {"out", {B, L, H}, "input of encoder layer 0 (query/key/value backward, residual)"},
      };
    case LayerKind::EncoderLayer:
      return {
          {"q", {B, L, H}, "attention backward"},
          {"k", {B, L, H}, "attention backward"},
          {"v", {B, L, H}, "attention backward"},
          {"probs", {B, N, L, L}, "attention backward (softmax output)"},
          {"ctx", {B, L, H}, "attention output dense backward"},
          {"attn_ln_in", {B, L, H}, "attention LayerNorm backward"},
          {"attn_ln_mean", {T}, "attention LayerNorm backward"},
          {"attn_ln_rstd", {T}, "attention LayerNorm backward"},
          {"h1", {B, L, H}, "intermediate dense backward"},
          {"inter_pre", {B, L, I}, "activation backward"},
          {"inter_act", {B, L, I}, "output dense backward"},
          {"out_ln_in", {B, L, H}, "output LayerNorm backward"},
          {"out_ln_mean", {T}, "output LayerNorm backward"},
          {"out_ln_rstd", {T}, "output LayerNorm backward"},
          {"out", {B, L, H}, "input of the next layer"},
      };
    case LayerKind::Head:
      return {
          {"first_token", {B, H}, "pooler dense backward"},
          {"pooled", {B, H}, "tanh backward"},
          {"classifier_in", {B, H}, "classifier backward (pooled after dropout)"},
          {"logits", {B, c.num_labels}, "loss"},
      };
  }
  return {};
}

SavedTensors::SavedTensors(Backend& backend, const std::vector<SavedSpec>& specs, Category category,
                           const std::string& prefix) {
  for (const auto& s : specs)
    tensors_.emplace(s.name, Tensor::empty(backend.ledger(), s.shape, DType::F32, category, prefix + s.name));
}

const Tensor& SavedTensors::operator[](const std::string& name) const {
  auto it = tensors_.find(name);
  ANATOMY_CHECK(it != tensors_.end(), "no saved tensor named {}", name);
  return it->second;
}

int64_t SavedTensors::bytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : tensors_) total += static_cast<int64_t>(t.nbytes());
  return total;
}

}  // namespace anatomy
