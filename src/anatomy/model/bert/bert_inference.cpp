// bert_inference.cpp: the inference-only forward of bert_inference.h, the
// same steps as BertForSequenceClassification's forward with dropout off:
//   embeddings: LayerNorm(word[ids] + position[pos] + token_type[tt])  (float32 sum, then rounded;
//               the layout's positions, token types and projection as in training)
//   layer:      q,k,v = linear(x); ctx = attention per sequence
//               h1  = LayerNorm(linear(ctx) + x)
//               out = LayerNorm(linear(act(linear(h1))) + h1)
//   head:       pooled = act(linear(out[first token])); logits = linear(pooled)
//               (token classification: logits = linear(out), every row;
//               question answering: start and end logits [2, rows])
// every encoder product in the inference dtype; LayerNorm statistics and the
// small head in float32.
#include "anatomy/model/bert/bert_inference.h"

#include <cmath>

#include <fmt/format.h>

#include "anatomy/core/error.h"

namespace anatomy {

namespace {

std::vector<ParamSpec> layernorm_specs(const ModelConfig& config, const BertLayout& layout) {
  std::vector<ParamSpec> out;
  for (const ParamSpec& spec : bert_parameter_specs(config, layout))
    if (layout.is_layer_norm(spec.name)) out.push_back(spec);
  return out;
}

}  // namespace

BertInference::BertInference(Backend& backend, ModelConfig config, DType dtype, const BertLayout& layout)
    : backend_(backend),
      config_(std::move(config)),
      layout_(layout),
      dtype_(dtype),
      weights_(backend, bert_parameter_specs(config_, layout_), Category::Weights, "", dtype),
      w_(BertTensors::bind(weights_, config_, layout_)),
      norms_(backend, dtype == DType::F32 ? std::vector<ParamSpec>{} : layernorm_specs(config_, layout_),
             Category::Weights, "f32.", DType::F32),
      n_(w_),
      activation_(activation_kind(config_.hidden_act)) {
  ANATOMY_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
                "inference dtype {} is not float32, bf16 or fp16", dtype_name(dtype));
  if (dtype_ != DType::F32) {
    n_.emb_ln_w = norms_.get(layout_.prefix + layout_.embeddings_norm + ".weight");
    n_.emb_ln_b = norms_.get(layout_.prefix + layout_.embeddings_norm + ".bias");
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
      n_.layers[l].attn_ln_w = norms_.get(layout_.layer_name(l, layout_.attention_norm) + ".weight");
      n_.layers[l].attn_ln_b = norms_.get(layout_.layer_name(l, layout_.attention_norm) + ".bias");
      n_.layers[l].out_ln_w = norms_.get(layout_.layer_name(l, layout_.output_norm) + ".weight");
      n_.layers[l].out_ln_b = norms_.get(layout_.layer_name(l, layout_.output_norm) + ".bias");
    }
  }
}

void BertInference::load_from(const Model& source) {
  const ParameterSet& from = source.weights();
  ANATOMY_CHECK(from.specs().size() == weights_.specs().size() && from.flat().numel() == weights_.flat().numel() &&
                    from.flat().dtype() == DType::F32,
                "BertInference::load_from: the source model's parameters differ from this model's");
  Backend& host = source.backend();
  std::vector<float> values(from.flat().numel());
  host.copy_to_host(from.flat(), values.data());
  if (dtype_ == DType::F32) {
    backend_.copy_from_host(weights_.flat(), values.data());
    return;
  }
  std::vector<uint16_t> rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    rounded[i] = dtype_ == DType::BF16 ? float_to_bf16(values[i]) : float_to_f16(values[i]);
  backend_.copy_from_host(weights_.flat(), rounded.data());
  // Equal specs give equal layouts: each LayerNorm tensor's float32 values
  // start where it starts in the source's flat buffer.
  for (size_t i = 0; i < norms_.specs().size(); ++i) {
    const Tensor& t = from.get(norms_.specs()[i].name);
    const int64_t offset = (static_cast<const char*>(t.raw()) - static_cast<const char*>(from.flat().raw())) /
                           static_cast<int64_t>(sizeof(float));
    backend_.copy_from_host(norms_.tensors()[i], values.data() + offset);
  }
}

Tensor BertInference::temporary(Shape shape, const std::string& name, DType dtype) {
  return Tensor::empty(backend_.ledger(), std::move(shape), dtype, Category::Temporary, name);
}

Tensor BertInference::upload(const std::vector<int64_t>& host, const std::string& name) {
  Tensor t = Tensor::empty(backend_.ledger(), {static_cast<int64_t>(host.size())}, DType::I64, Category::Data, name);
  backend_.copy_from_host(t, host.data());
  return t;
}

Tensor BertInference::forward(const InferenceBatch& batch) {
  const int64_t B = batch.sequences(), T = batch.rows(), H = config_.hidden_size, I = config_.intermediate_size;
  const int64_t heads = config_.num_attention_heads, Lp = batch.padded_length;
  ANATOMY_CHECK(B > 0 && static_cast<int64_t>(batch.offsets.size()) == B + 1 &&
                    static_cast<int64_t>(batch.input_ids.size()) == T,
                "BertInference::forward: a batch of {} sequences with {} offsets and {} ids", B, batch.offsets.size(),
                batch.input_ids.size());
  ANATOMY_CHECK(Lp == 0 || T == B * Lp, "BertInference::forward: a padded batch of {} rows is not {} x {}", T, B, Lp);
  for (int64_t len : batch.lengths)
    ANATOMY_CHECK(len <= config_.max_sequence_length(), "a sequence of {} tokens is longer than the model's {}", len,
                  max_sequence_length_text(config_));
  Ledger& ledger = backend_.ledger();
  const DType dt = dtype_;

  // Inputs: positions restart at every sequence (RoBERTa's: past the padding
  // id, counting non-padding ids, as Backend::positions_past_padding); the
  // first token of each sequence feeds the head; a padded batch also has a key mask.
  std::vector<int64_t> positions(T), first(B), mask;
  const int64_t pad = config_.pad_token_id;
  for (int64_t b = 0; b < B; ++b) {
    first[b] = batch.offsets[b];
    int64_t seen = 0;
    const int64_t end = Lp > 0 ? batch.offsets[b] + Lp : batch.offsets[b + 1];
    for (int64_t t = batch.offsets[b]; t < end; ++t) {
      if (config_.position_ids == PositionIds::Sequential) {
        positions[t] = t - batch.offsets[b];
      } else {
        const bool real = batch.input_ids[t] != pad;
        seen += real;
        positions[t] = real ? pad + seen : pad;
      }
    }
  }
  if (Lp > 0) {
    mask.assign(T, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < batch.lengths[b]; ++t) mask[b * Lp + t] = 1;
  }
  ledger.set_phase("inputs");
  const Tensor ids = upload(batch.input_ids, "input_ids");
  const Tensor pos = upload(positions, "position_ids");
  Tensor types;
  if (config_.type_vocab_size == 0) {
    // no token types
  } else if (batch.token_type_ids.empty()) {
    types = Tensor::empty(ledger, {T}, DType::I64, Category::Data, "token_type_ids");
    backend_.zero(types);
  } else {
    types = upload(batch.token_type_ids, "token_type_ids");
  }
  const Tensor offsets = upload(batch.offsets, "sequence_offsets");
  const Tensor first_rows = upload(first, "first_token_rows");
  Tensor key_mask;
  if (Lp > 0) key_mask = upload(mask, "attention_mask").reshape({B, Lp});

  ledger.set_phase("embeddings");
  Tensor x = temporary({T, H}, "hidden", dt);
  {
    const int64_t E = config_.embedding_width();
    const bool projected = w_.projection_w.defined();
    Tensor embedded = projected ? temporary({T, E}, "embedded", dt) : x;
    Tensor sum = temporary({T, E}, "embeddings_sum", DType::F32);
    backend_.embedding_forward(ids, w_.word, sum, false);
    backend_.embedding_forward(pos, w_.position, sum, true);
    if (types.defined()) backend_.embedding_forward(types, w_.token_type, sum, true);
    Tensor mean = temporary({T}, "ln_mean", DType::F32), rstd = temporary({T}, "ln_rstd", DType::F32);
    Tensor normed = dt == DType::F32 ? embedded : temporary({T, E}, "embeddings_out", DType::F32);
    backend_.layernorm_forward(sum, n_.emb_ln_w, n_.emb_ln_b, config_.layer_norm_eps, normed, mean, rstd);
    if (dt != DType::F32) backend_.cast(normed, embedded);
    if (projected) backend_.linear_forward(embedded, w_.projection_w, &w_.projection_b, x);
  }

  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
  const bool probabilities = backend_.attention_saves_probabilities(dt, config_.head_dim());
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    ledger.set_phase(fmt::format("layer {}", l));
    const EncoderLayerTensors& w = w_.layers[l];
    const EncoderLayerTensors& norms = n_.layers[l];
    Tensor qkv = temporary({3, T, H}, "qkv", dt);
    const Tensor q = qkv.slice(0, {T, H}, "q"), k = qkv.slice(T * H, {T, H}, "k"), v = qkv.slice(2 * T * H, {T, H}, "v");
    backend_.linear_forward_n(x, {w.query_w, w.key_w, w.value_w}, {w.query_b, w.key_b, w.value_b}, {q, k, v});
    Tensor ctx = temporary({T, H}, "ctx", dt);
    if (Lp == 0) {
      backend_.attention_forward_packed(q, k, v, offsets, batch.offsets, heads, scale, ctx);
    } else {
      const Shape padded = {B, Lp, H};
      const Shape saved_shape = probabilities ? Shape{B, heads, Lp, Lp} : Shape{B, heads, Lp};
      Tensor saved = temporary(saved_shape, "attention_saved", DType::F32);
      backend_.attention_forward(q.reshape(padded), k.reshape(padded), v.reshape(padded), key_mask, heads, scale,
                                 DropoutSpec{}, saved, ctx.reshape(padded));
    }
    qkv = Tensor();
    Tensor projected = temporary({T, H}, "projected", dt);
    backend_.linear_forward(ctx, w.attn_out_w, &w.attn_out_b, projected);
    ctx = Tensor();
    Tensor sum = temporary({T, H}, "residual_sum", dt), h1 = temporary({T, H}, "h1", dt);
    Tensor mean = temporary({T}, "ln_mean", DType::F32), rstd = temporary({T}, "ln_rstd", DType::F32);
    backend_.residual_layernorm_forward(projected, x, DropoutSpec{}, norms.attn_ln_w, norms.attn_ln_b,
                                        config_.layer_norm_eps, sum, h1, mean, rstd);
    Tensor inter = temporary({T, I}, "intermediate", dt);
    backend_.linear_forward(h1, w.inter_w, &w.inter_b, inter);
    backend_.activation_forward(activation_, inter, inter);
    backend_.linear_forward(inter, w.out_w, &w.out_b, projected);
    inter = Tensor();
    Tensor out = temporary({T, H}, "hidden", dt);
    backend_.residual_layernorm_forward(projected, h1, DropoutSpec{}, norms.out_ln_w, norms.out_ln_b,
                                        config_.layer_norm_eps, sum, out, mean, rstd);
    x = out;
  }

  ledger.set_phase("head");
  const int64_t C = layout_.head_outputs(config_);
  if (layout_.task == kQuestionAnswering) {
    // Every row's start and end logits: [2, rows], each from its row of qa_outputs.
    const int64_t H = config_.hidden_size;
    Tensor logits = Tensor::empty(ledger, {2, T}, DType::F32, Category::Activations, "logits");
    for (int64_t o = 0; o < 2; ++o) {
      const Tensor w = w_.classifier_w.slice(o * H, {1, H}), b = w_.classifier_b.slice(o, {1});
      const Tensor y = logits.slice(o * T, {T, 1});
      if (dt == DType::F32) {
        backend_.linear_forward(x, w, &b, y);
      } else {
        Tensor rounded = temporary({T, 1}, "logits_half", dt);
        backend_.linear_forward(x, w, &b, rounded);
        backend_.cast(rounded, y);
      }
    }
    return logits;
  }
  if (layout_.task == kTokenClassification) {
    // Every row's logits (dropout off): the product in the inference dtype,
    // as the training model's under mixed precision.
    Tensor logits = Tensor::empty(ledger, {T, C}, DType::F32, Category::Activations, "logits");
    if (dt == DType::F32) {
      backend_.linear_forward(x, w_.classifier_w, &w_.classifier_b, logits);
    } else {
      Tensor rounded = temporary({T, C}, "logits_half", dt);
      backend_.linear_forward(x, w_.classifier_w, &w_.classifier_b, rounded);
      backend_.cast(rounded, logits);
    }
    return logits;
  }
  Tensor first_token = temporary({B, H}, "first_token", DType::F32);
  backend_.embedding_forward(first_rows, x, first_token, false);  // a gather of rows, widened to float32
  x = Tensor();
  // The head is small: it runs in float32 (as the training model's), from
  // the rounded first token and its weights widened for this batch.
  auto widened = [&](const Tensor& t, const char* name) {
    if (dt == DType::F32) return t;
    Tensor f = temporary(t.shape(), name, DType::F32);
    backend_.cast(t, f);
    return f;
  };
  const Tensor dense_w = widened(w_.head_dense_w, "head_dense_w_f32");
  const Tensor dense_b = widened(w_.head_dense_b, "head_dense_b_f32");
  const Tensor classifier_w = widened(w_.classifier_w, "classifier_w_f32");
  const Tensor classifier_b = widened(w_.classifier_b, "classifier_b_f32");
  Tensor pooled = temporary({B, H}, "pooled", DType::F32);
  backend_.linear_forward(first_token, dense_w, &dense_b, pooled);
  backend_.activation_forward(layout_.head_activation, pooled, pooled);
  Tensor logits = Tensor::empty(ledger, {B, C}, DType::F32, Category::Activations, "logits");
  backend_.linear_forward(pooled, classifier_w, &classifier_b, logits);
  return logits;
}

}  // namespace anatomy
