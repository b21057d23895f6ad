// bert_activations.cpp: the saved-for-backward declaration of every layer of a BERT-style model.
#include "anatomy/model/bert/bert_activations.h"

namespace anatomy {

std::vector<SavedSpec> saved_for_backward(LayerKind kind, const ModelConfig& c, int64_t B, int64_t L,
                                          const ActivationPlan& plan, int64_t rows, const BertLayout& layout) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, N = c.num_attention_heads, T = B * L;
  const int64_t R = rows > 0 ? rows : L, TR = B * R;  // the rows after attention
  const DType x = plan.compute, f32 = DType::F32;
  switch (kind) {
    case LayerKind::Embeddings: {
      const int64_t E = c.embedding_width();
      const bool types = c.type_vocab_size > 0, positions = layout.has_position_table();
      const char* summed = positions ? (types ? "LayerNorm backward (word + position + token type)"
                                              : "LayerNorm backward (word + position)")
                                     : (types ? "LayerNorm backward (word + token type)" : "LayerNorm backward (word)");
      std::vector<SavedSpec> specs = {
          {"ln_in", {B, L, E}, f32, summed},
          {"ln_mean", {T}, f32, "LayerNorm backward"},
          {"ln_rstd", {T}, f32, "LayerNorm backward"},
      };
      if (E != H) specs.push_back({"embedded", {B, L, E}, x, "embeddings projection backward"});
      specs.push_back({"out", {B, L, H}, x, "input of encoder layer 0 (query/key/value backward, residual)"});
      if (layout.relative_attention) {
        const int64_t P = c.relative.rows();
        specs.push_back({"rel", {P, H}, x, "relative embeddings: every layer's position products"});
        if (c.relative.layer_norm) {
          specs.push_back({"rel_mean", {P}, f32, "relative embeddings' LayerNorm backward"});
          specs.push_back({"rel_rstd", {P}, f32, "relative embeddings' LayerNorm backward"});
        }
      }
      return specs;
    }
    case LayerKind::EncoderLayer: {
      std::vector<SavedSpec> specs;
      if (layout.relative_attention) {
        // DeBERTa: the position products of the layer's query and key
        // projections, and the probabilities, always materialised.
        specs = {
            {"qkv", {3, B, L, H}, x, "attention backward (query, key, value)"},
            {"pos_qk", {2, c.relative.rows(), H}, x, "relative attention backward (position products)"},
            {"attn_saved", {B, N, L, L}, f32, "attention backward (softmax output)"},
            {"ctx", {B, L, H}, x, "attention output dense backward"},
        };
      } else if (R < L) {
        // Only the first token past attention, so only its query and its
        // attention: the query of token 0, keys and values of all tokens, the
        // first query's probabilities [B, heads, L] (before dropout).
        specs = {
            {"q_first", {B, 1, H}, x, "first-query attention backward (query)"},
            {"kv", {2, B, L, H}, x, "first-query attention backward (key, value)"},
            {"attn_saved", {B, N, L}, f32, "first-query attention backward (softmax output)"},
            {"ctx", {B, R, H}, x, "attention output dense backward"},
        };
      } else {
        specs = {
            // query, key and value one after the other: one batched product makes them
            {"qkv", {3, B, L, H}, x, "attention backward (query, key, value)"},
            plan.attention_probabilities
                ? SavedSpec{"attn_saved", {B, N, L, L}, f32, "attention backward (softmax output)"}
            : plan.attention_keep_bits
                ? SavedSpec{"attn_saved", {B, N, L * (attention_keep_words(L) + 1)}, f32,
                            "attention backward (dropout mask bits, row log-sum-exp)"}
                : SavedSpec{"attn_saved", {B, N, L}, f32, "attention backward (row log-sum-exp)"},
            {"ctx", {B, L, H}, x, "attention output dense backward (and fused attention backward)"},
        };
      }
      // Past attention, R rows a sequence.
      const std::vector<SavedSpec> past_attention = {
          {"attn_ln_in", {B, R, H}, x, "attention LayerNorm backward"},
          {"attn_ln_mean", {TR}, f32, "attention LayerNorm backward"},
          {"attn_ln_rstd", {TR}, f32, "attention LayerNorm backward"},
          {"h1", {B, R, H}, x, "intermediate dense backward"},
          // The activation's output (the output dense layer's input) is not kept:
          // backward recomputes it from inter_pre, one element-wise pass, and
          // saves [B, L, intermediate] per layer (a quarter of bert-large's activations).
          {"inter_pre", {B, R, I}, x, "activation backward; recomputing the output dense layer's input"},
          {"out_ln_in", {B, R, H}, x, "output LayerNorm backward"},
          {"out_ln_mean", {TR}, f32, "output LayerNorm backward"},
          {"out_ln_rstd", {TR}, f32, "output LayerNorm backward"},
          {"out", {B, R, H}, x, R < L ? "the head's input" : "input of the next layer"},
      };
      specs.insert(specs.end(), past_attention.begin(), past_attention.end());
      return specs;
    }
    case LayerKind::Head:
      if (layout.masked_lm()) {
        // Sized for every token: a batch's masked rows fill the first of them.
        const int64_t E = c.embedding_width();
        return {
            {"lm_rows", {T}, DType::I64, "the masked tokens' places (gather, and scatter in backward)"},
            {"lm_labels", {T}, DType::I64, "the masked tokens' labels (the loss again in backward)"},
            {"lm_in", {T, H}, x, "LM dense backward (the masked tokens' hidden states)"},
            {"lm_pre", {T, E}, x, "LM activation backward"},
            {"lm_norm_in", {T, E}, x, "LM LayerNorm backward"},
            {"lm_norm_mean", {T}, f32, "LM LayerNorm backward"},
            {"lm_norm_rstd", {T}, f32, "LM LayerNorm backward"},
            {"lm_out", {T, E}, x, "decoder backward (and the chunked loss's logits again)"},
        };
      }
      if (layout.task == kQuestionAnswering)
        return {
            {"classifier_in", {B, L, H}, x, "qa_outputs backward (after dropout)"},
            {"logits", {2, B, L}, f32, "loss (start logits, then end logits)"},
        };
      if (layout.task == kTokenClassification)
        return {
            {"classifier_in", {B, L, H}, x, "classifier backward (after dropout)"},
            {"logits", {B, L, c.num_labels}, f32, "loss"},
        };
      return {
          {"first_token", {B, H}, f32, "head dense backward"},
          layout.head_activation == ActivationKind::Tanh
              ? SavedSpec{"pooled", {B, H}, f32, "tanh backward"}
              : SavedSpec{"head_pre", {B, H}, f32, "head activation backward"},
          {"classifier_in", {B, H}, f32, "classifier backward (after dropout)"},
          {"logits", {B, layout.head_outputs(c)}, f32, "loss"},
      };
  }
  return {};
}

const std::set<std::string>& selective_recomputed() {
  static const std::set<std::string> names = {"qkv", "q_first", "kv", "pos_qk", "attn_saved", "ctx", "inter_pre"};
  return names;
}

}  // namespace anatomy
