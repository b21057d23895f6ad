// bert_masked_lm_head.cpp: see bert_masked_lm_head.h.
#include "anatomy/model/bert/bert_masked_lm_head.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/core/ledger.h"

namespace anatomy {

namespace {
constexpr int64_t kChunkElements = int64_t{1} << 25;
constexpr int64_t kIgnored = -100;
// The masked rows are padded to a multiple of this (rows that ask for no
// prediction: label -100), and a chunk holds a multiple of it: the number of
// masked tokens changes from batch to batch, the products' shapes then do
// not (each new shape costs a search for the fastest matrix-product algorithm).
constexpr int64_t kRowGranule = 256;
}  // namespace

int64_t lm_chunk_rows(int64_t vocab, int64_t tokens) {
  const int64_t rows = kChunkElements / std::max<int64_t>(vocab, 1) / kRowGranule * kRowGranule;
  return std::max<int64_t>(1, std::min<int64_t>(tokens, std::max(rows, kRowGranule)));
}

std::string lm_logits_note(const ModelConfig& config, int64_t B, int64_t L, DType compute) {
  const int64_t V = config.vocab_size, chunk = lm_chunk_rows(V, B * L);
  const int64_t whole = B * L * V * 4, held = chunk * V * static_cast<int64_t>(dtype_size(compute));
  return fmt::format(
      "Masked-LM logits: kept whole, [{}, {}, {}] float32 would take {} and their gradient as much again ({} in "
      "all); the chunked loss over the masked tokens holds one [{}, {}] {} buffer at a time ({})",
      B, L, V, format_bytes(whole), format_bytes(2 * whole), chunk, V,
      compute == DType::F32 ? "float32" : compute == DType::BF16 ? "bf16" : "fp16", format_bytes(held));
}

BertMaskedLmHead::BertMaskedLmHead(Backend& backend, const ModelConfig& config, const BertLayout& layout,
                                   DType compute, const BertTensors& w, const BertTensors& wh, const BertTensors& g,
                                   BertEncoder& encoder)
    : backend_(backend),
      config_(config),
      layout_(layout),
      compute_(compute),
      w_(w),
      wh_(wh),
      g_(g),
      encoder_(encoder),
      activation_(layout.lm_gelu ? ActivationKind::GeluErf : activation_kind(config.hidden_act)) {
  const auto tie = config.extra.find("tie_word_embeddings");
  if (tie != config.extra.end() && tie->is_boolean() && !tie->get<bool>())
    fail("config.json: tie_word_embeddings is false: {} here always ties its decoder to the word embeddings",
         layout.architecture);
}

void BertMaskedLmHead::transform(const Tensor& x, int64_t rows, const SavedTensors& s) {
  const int64_t E = config_.embedding_width(), H = config_.hidden_size;
  const Tensor pre = s["lm_pre"].slice(0, {rows, E}), act = s["lm_norm_in"].slice(0, {rows, E});
  backend_.linear_forward(x.slice(0, {rows, H}), wh_.head_dense_w, &wh_.head_dense_b, pre);
  backend_.activation_forward(activation_, pre, act);
  backend_.layernorm_forward(act, w_.lm_norm_w, w_.lm_norm_b, config_.layer_norm_eps, s["lm_out"].slice(0, {rows, E}),
                             s["lm_norm_mean"].slice(0, {rows}), s["lm_norm_rstd"].slice(0, {rows}));
}

void BertMaskedLmHead::decode(const SavedTensors& s, int64_t begin, int64_t n, const Tensor& out) {
  const int64_t E = config_.embedding_width();
  backend_.linear_forward(s["lm_out"].slice(begin * E, {n, E}), wh_.word, &wh_.lm_bias, out);
}

void BertMaskedLmHead::forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) {
  const int64_t B = encoder_.batch(), L = encoder_.length(), T = B * L, H = config_.hidden_size;
  const int64_t V = config_.vocab_size, chunk = lm_chunk_rows(V, T);
  loss_.reset();
  logits_ = Tensor();
  masked_ = 0;
  const Tensor x = hidden.reshape({T, H});
  if (!labels.defined()) {
    // Every token's logits, as the output asks, made a chunk at a time.
    transform(x, T, s);
    logits_ = Tensor::empty(backend_.ledger(), {B, L, V}, DType::F32, Category::Temporary, "logits");
    Tensor rounded = compute_ == DType::F32 ? Tensor() : encoder_.temporary({chunk, V}, "logits_chunk", compute_);
    for (int64_t begin = 0; begin < T; begin += chunk) {
      const int64_t n = std::min(chunk, T - begin);
      const Tensor out = logits_.slice(begin * V, {n, V});
      if (compute_ == DType::F32) {
        decode(s, begin, n, out);
      } else {
        decode(s, begin, n, rounded.slice(0, {n, V}));
        backend_.cast(rounded.slice(0, {n, V}), out);
      }
    }
    return;
  }
  ANATOMY_CHECK(labels.dtype() == DType::I64 && labels.numel() == T, "masked-LM needs int64 labels [{}, {}]", B, L);
  // The masked tokens' rows and labels, read on the host (the loss reads the
  // result back anyway). The meta backend reads zeros: every row counts there,
  // the most a batch can mask.
  std::vector<int64_t> host(static_cast<size_t>(T));
  backend_.copy_to_host(labels, host.data());
  std::vector<int64_t> rows, targets;
  for (int64_t t = 0; t < T; ++t)
    if (host[static_cast<size_t>(t)] != kIgnored) {
      rows.push_back(t);
      targets.push_back(host[static_cast<size_t>(t)]);
    }
  masked_ = static_cast<int64_t>(rows.size());
  if (masked_ == 0) {
    // No masked token in the batch: nothing to predict; the loss and every
    // gradient of the head are 0 (torch's mean over no rows would be NaN).
    loss_ = 0.0;
    return;
  }
  // Padded to the granule with rows of token 0 that predict nothing.
  const int64_t M = std::min(T, (masked_ + kRowGranule - 1) / kRowGranule * kRowGranule);
  rows.resize(static_cast<size_t>(M), 0);
  targets.resize(static_cast<size_t>(M), kIgnored);
  padded_ = M;
  backend_.copy_from_host(s["lm_rows"].slice(0, {M}), rows.data());
  backend_.copy_from_host(s["lm_labels"].slice(0, {M}), targets.data());
  // The masked rows' hidden states: a gather of 16-bit rows widens to float32.
  if (compute_ == DType::F32) {
    backend_.embedding_forward(s["lm_rows"].slice(0, {M}), x, s["lm_in"].slice(0, {M, H}), false);
  } else {
    Tensor wide = encoder_.temporary({T, H}, "lm_in_f32");
    backend_.embedding_forward(s["lm_rows"].slice(0, {M}), x, wide.slice(0, {M, H}), false);
    backend_.cast(wide.slice(0, {M, H}), s["lm_in"].slice(0, {M, H}));
  }
  transform(s["lm_in"], M, s);
  Tensor buffer = encoder_.temporary({chunk, V}, "logits_chunk", compute_);
  double total = 0.0;
  for (int64_t begin = 0; begin < M; begin += chunk) {
    const int64_t n = std::min(chunk, M - begin);
    const Tensor logits = buffer.slice(0, {n, V});
    decode(s, begin, n, logits);
    total += backend_.cross_entropy_sum(logits, s["lm_labels"].slice(begin, {n}), Tensor(), 0.0);
  }
  loss_ = total / static_cast<double>(masked_);
}

double BertMaskedLmHead::loss(const Tensor&, const Tensor&, ProblemType, const Tensor&, double) {
  fail("{}: the masked-LM loss is computed in forward", layout_.architecture);
}

BertHead::Gradients BertMaskedLmHead::backward(const SavedTensors& s, const Tensor&, double loss_scale) {
  const int64_t B = encoder_.batch(), L = encoder_.length(), T = B * L, H = config_.hidden_size;
  const int64_t E = config_.embedding_width(), V = config_.vocab_size, chunk = lm_chunk_rows(V, T);
  Gradients out;
  out.d_hidden = encoder_.temporary({B, L, H}, "d_hidden", compute_);
  backend_.zero(out.d_hidden);  // the tokens not masked get no gradient from the loss
  if (masked_ == 0) return out;
  const int64_t M = padded_;  // the rows past masked_ predict nothing: their gradients are 0
  // The decoder, a chunk at a time: its logits again, their gradient in place,
  // then the input gradient and the tied weight's and the bias's gradients.
  Tensor d_out = encoder_.temporary({T, E}, "d_lm_out", compute_);
  {
    Tensor buffer = encoder_.temporary({chunk, V}, "logits_chunk", compute_);
    for (int64_t begin = 0; begin < M; begin += chunk) {
      const int64_t n = std::min(chunk, M - begin);
      const Tensor logits = buffer.slice(0, {n, V});
      decode(s, begin, n, logits);
      backend_.cross_entropy_sum(logits, s["lm_labels"].slice(begin, {n}), logits,
                                 loss_scale / static_cast<double>(masked_));
      const Tensor d_rows = d_out.slice(begin * E, {n, E});
      backend_.linear_backward(logits, s["lm_out"].slice(begin * E, {n, E}), wh_.word, &d_rows, g_.word,
                               &g_.lm_bias);
    }
  }
  // LayerNorm, activation, dense, on the masked rows.
  Tensor d_act = encoder_.temporary({T, E}, "d_lm_norm_in", compute_);
  backend_.layernorm_backward(d_out.slice(0, {M, E}), s["lm_norm_in"].slice(0, {M, E}),
                              s["lm_norm_mean"].slice(0, {M}), s["lm_norm_rstd"].slice(0, {M}), w_.lm_norm_w,
                              d_act.slice(0, {M, E}), g_.lm_norm_w, g_.lm_norm_b);
  d_out = Tensor();
  backend_.activation_backward(activation_, s["lm_pre"].slice(0, {M, E}), d_act.slice(0, {M, E}),
                               d_act.slice(0, {M, E}));
  Tensor d_in = encoder_.temporary({T, H}, "d_lm_in", compute_);
  const Tensor d_in_rows = d_in.slice(0, {M, H});
  backend_.linear_backward(d_act.slice(0, {M, E}), s["lm_in"].slice(0, {M, H}), wh_.head_dense_w, &d_in_rows,
                           g_.head_dense_w, &g_.head_dense_b);
  d_act = Tensor();
  // Back to the masked tokens' places (each row once: a scatter).
  const Tensor rows = s["lm_rows"].slice(0, {M});
  if (compute_ == DType::F32) {
    backend_.embedding_backward(rows, d_in_rows, out.d_hidden.reshape({T, H}), -1);
  } else {
    Tensor wide = encoder_.temporary({T, H}, "d_lm_in_f32");
    backend_.cast(d_in_rows, wide.slice(0, {M, H}));
    d_in = Tensor();
    Tensor placed = encoder_.temporary({T, H}, "d_hidden_f32");
    backend_.zero(placed);
    backend_.embedding_backward(rows, wide.slice(0, {M, H}), placed, -1);
    backend_.cast(placed, out.d_hidden);
  }
  return out;
}

}  // namespace anatomy
