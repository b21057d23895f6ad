// bert_encoder.cpp: a BERT-style model's embeddings and encoder layers,
// forward and backward, per Hugging Face's modeling_bert (and modeling_roberta,
// modeling_electra, modeling_distilbert, which differ where the layout says):
//   embeddings: LayerNorm(word[ids] + position[pos] + token_type[tt]) -> dropout
//               (no token types in DistilBERT; RoBERTa's positions start past
//               the padding id; ELECTRA then projects embedding_size -> hidden_size)
//   layer:      q,k,v = linear(x); ctx = attention(q,k,v, key mask, dropout on probs)
//               h1  = LayerNorm(dropout(linear(ctx)) + x)
//               out = LayerNorm(dropout(linear(act(linear(h1)))) + h1)
//   (residual + dropout + LayerNorm is one fused backend op; the activation's
//   output is recomputed in backward rather than saved)
// Backward walks the same steps in reverse, reading what saved_for_backward()
// declares, and replays every dropout mask from (seed, step, site).
//
// When the head reads only the first token of the last layer's output, that
// layer computes its query, its attention and everything after — the
// attention output dense layer, both LayerNorms, the MLP — for that token
// alone: [B, 1, H] instead of [B, L, H]. Keys and values still cover every
// token (the first token attends to all). The loss and every gradient are
// those of the whole layer (the other tokens' outputs have zero gradient, so
// their products only add zeros); the dropout masks of the pruned tensors are
// drawn over their own [B, 1, ·] elements.
#include "anatomy/model/bert/bert_encoder.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include <fmt/format.h>

namespace anatomy {

namespace {

// Query, key and value: the three [B, L, H] thirds of a [3, B, L, H] tensor.
std::tuple<Tensor, Tensor, Tensor> split_qkv(const Tensor& qkv) {
  const Shape one = {qkv.dim(1), qkv.dim(2), qkv.dim(3)};
  const int64_t n = shape_numel(one);
  return {qkv.slice(0, one, qkv.name() + "[q]"), qkv.slice(n, one, qkv.name() + "[k]"),
          qkv.slice(2 * n, one, qkv.name() + "[v]")};
}

// Key and value: the two [B, L, H] halves of a [2, B, L, H] tensor.
std::tuple<Tensor, Tensor> split_kv(const Tensor& kv) {
  const Shape one = {kv.dim(1), kv.dim(2), kv.dim(3)};
  const int64_t n = shape_numel(one);
  return {kv.slice(0, one, kv.name() + "[k]"), kv.slice(n, one, kv.name() + "[v]")};
}

// DeBERTa's position products through the query and key projections: the two
// [P, H] halves of a [2, P, H] tensor.
std::tuple<Tensor, Tensor> split_positions(const Tensor& pos) {
  const Shape one = {pos.dim(1), pos.dim(2)};
  const int64_t n = shape_numel(one);
  return {pos.slice(0, one, pos.name() + "[q]"), pos.slice(n, one, pos.name() + "[k]")};
}

// Dropout sites: each has its own random stream per training step.
constexpr int64_t kSitesPerLayer = 3;
int64_t site_embeddings() { return 0; }
int64_t site_attention_probs(int64_t layer) { return 1 + kSitesPerLayer * layer; }
int64_t site_attention_output(int64_t layer) { return 2 + kSitesPerLayer * layer; }
int64_t site_layer_output(int64_t layer) { return 3 + kSitesPerLayer * layer; }

}  // namespace

ActivationKind activation_kind(Activation a) {
  switch (a) {
    case Activation::Gelu: return ActivationKind::GeluErf;
    case Activation::GeluNew: return ActivationKind::GeluTanh;
    case Activation::Relu: return ActivationKind::Relu;
  }
  return ActivationKind::GeluErf;
}

BertEncoder::BertEncoder(Backend& backend, const ModelConfig& config, const BertLayout& layout, DType compute,
                         const BertTensors& w, const BertTensors& wh, const BertTensors& g)
    : backend_(backend),
      config_(config),
      layout_(layout),
      compute_(compute),
      w_(w),
      wh_(wh),
      g_(g),
      activation_(activation_kind(config.hidden_act)) {}

// DeBERTa's relative embeddings have a dropout site per layer after the layers' own.
int64_t BertEncoder::dropout_sites() const {
  return 1 + (kSitesPerLayer + (layout_.relative_attention ? 1 : 0)) * config_.num_hidden_layers;
}

DropoutSpec BertEncoder::relative_dropout(int64_t l) const {
  return dropout_at(config_.hidden_dropout_prob, 1 + kSitesPerLayer * config_.num_hidden_layers + l);
}

double BertEncoder::attention_scale() const {
  // DeBERTa scales every term by 1/sqrt(head_dim · (1 + the relative terms)).
  const RelativePositions& r = config_.relative;
  const double factor = layout_.relative_attention ? 1.0 + (r.c2p ? 1.0 : 0.0) + (r.p2c ? 1.0 : 0.0) : 1.0;
  return 1.0 / std::sqrt(static_cast<double>(config_.head_dim()) * factor);
}

ActivationPlan BertEncoder::activation_plan() const {
  ActivationPlan plan{compute_, backend_.attention_saves_probabilities(compute_, config_.head_dim())};
  plan.attention_keep_bits = dropout_at(config_.attention_probs_dropout_prob, 0).p > 0.0f &&
                             backend_.attention_keeps_dropout_bits(compute_, config_.head_dim(), L_);
  return plan;
}

int64_t BertEncoder::rows_after_attention(int64_t l) const {
  return first_token_last_layer_ && l == config_.num_hidden_layers - 1 ? 1 : L_;
}

DropoutSpec BertEncoder::dropout_at(double p, int64_t site) const {
  DropoutSpec spec;
  spec.p = options_.training ? static_cast<float>(p) : 0.0f;
  spec.seed = options_.seed;
  spec.stream = (options_.step << 16) | static_cast<uint64_t>(site);
  return spec;
}

DropoutSpec BertEncoder::attention_output_dropout(int64_t l) const {
  return dropout_at(layout_.attention_output_dropout ? config_.hidden_dropout_prob : 0.0, site_attention_output(l));
}

Tensor BertEncoder::temporary(Shape shape, const std::string& name, DType dtype) {
  return Tensor::empty(backend_.ledger(), std::move(shape), dtype, Category::Temporary, name);
}

void BertEncoder::prepare_inputs(const ModelInputs& in, const ForwardOptions& options) {
  options_ = options;
  ANATOMY_CHECK(in.input_ids.defined() && in.input_ids.rank() == 2 && in.input_ids.dtype() == DType::I64,
                "input_ids must be int64 [batch, seq]");
  const int64_t B = in.input_ids.dim(0), L = in.input_ids.dim(1);
  Ledger& ledger = backend_.ledger();
  ids_ = in.input_ids;
  if (!layout_.has_position_table()) {
    positions_ = Tensor();
    B_ = B;
    L_ = L;
  } else if (config_.position_ids == PositionIds::PastPadding) {
    // RoBERTa's positions depend on where the padding is: made from the ids on the device, every batch.
    positions_ = Tensor();
    positions_ = Tensor::empty(ledger, {B, L}, DType::I64, Category::Data, "position_ids");
    backend_.positions_past_padding(ids_, config_.pad_token_id, positions_);
    B_ = B;
    L_ = L;
  } else if (B != B_ || L != L_ || !positions_.defined()) {
    std::vector<int64_t> host(B * L);
    for (int64_t i = 0; i < B * L; ++i) host[i] = i % L;
    positions_ = Tensor::empty(ledger, {B, L}, DType::I64, Category::Data, "position_ids");
    backend_.copy_from_host(positions_, host.data());
    B_ = B;
    L_ = L;
  }
  if (config_.type_vocab_size == 0) {
    token_types_ = Tensor();
  } else if (in.token_type_ids.defined()) {
    token_types_ = in.token_type_ids;
  } else {
    token_types_ = Tensor::empty(ledger, {B, L}, DType::I64, Category::Data, "token_type_ids");
    backend_.zero(token_types_);
  }
  mask_ = in.attention_mask;
  if (layout_.relative_attention && L != rel_length_) {
    // The index of every distance i − j, and the distances of every index
    // (each a run: the index grows with the distance).
    const RelativePositions& r = config_.relative;
    const int64_t P = r.rows();
    std::vector<int64_t> index(static_cast<size_t>(2 * L - 1)), ranges(static_cast<size_t>(2 * P));
    for (int64_t r_i = 0; r_i < P; ++r_i) {
      ranges[2 * r_i] = L;
      ranges[2 * r_i + 1] = -L;
    }
    for (int64_t d = -(L - 1); d <= L - 1; ++d) {
      const int64_t at = r.index(d);
      index[static_cast<size_t>(d + L - 1)] = at;
      ranges[2 * at] = std::min(ranges[2 * at], d);
      ranges[2 * at + 1] = std::max(ranges[2 * at + 1], d);
    }
    rel_index_ = Tensor();
    rel_ranges_ = Tensor();
    rel_index_ = Tensor::empty(ledger, {2 * L - 1}, DType::I64, Category::Data, "relative_position_index");
    rel_ranges_ = Tensor::empty(ledger, {P, 2}, DType::I64, Category::Data, "relative_position_ranges");
    backend_.copy_from_host(rel_index_, index.data());
    backend_.copy_from_host(rel_ranges_, ranges.data());
    rel_length_ = L;
  }
}

void BertEncoder::embeddings_forward(const SavedTensors& s) {
  const Tensor& sum = s["ln_in"];
  // The embeddings compute in float32; under mixed precision their output is
  // rounded once for the encoder (or for ELECTRA's projection, which computes
  // in the encoder's dtype).
  const bool projected = w_.projection_w.defined();
  const Tensor& embedded = projected ? s["embedded"] : s["out"];
  const Tensor work = compute_ == DType::F32 ? embedded : temporary(sum.shape(), "embeddings_out");
  backend_.embeddings_layernorm_forward(ids_, positions_, token_types_, w_.word, w_.position, w_.token_type,
                                        w_.emb_ln_w, w_.emb_ln_b, config_.layer_norm_eps,
                                        dropout_at(config_.hidden_dropout_prob, site_embeddings()), sum,
                                        s["ln_mean"], s["ln_rstd"], work, embedded);
  if (projected) backend_.linear_forward(embedded, wh_.projection_w, &wh_.projection_b, s["out"]);
  if (layout_.mask_embeddings && mask_.defined()) backend_.mask_rows(s["out"], mask_);
  if (layout_.relative_attention) {
    // DeBERTa's relative embeddings, LayerNorm'd once a step in float32, then
    // in the products' dtype for every layer.
    const Tensor& rel = s["rel"];
    if (config_.relative.layer_norm) {
      const Tensor normed = compute_ == DType::F32 ? rel : temporary(rel.shape(), "rel_normed");
      backend_.layernorm_forward(w_.rel_embeddings, w_.rel_norm_w, w_.rel_norm_b, config_.layer_norm_eps, normed,
                                 s["rel_mean"], s["rel_rstd"]);
      if (compute_ != DType::F32) backend_.cast(normed, rel);
    } else if (compute_ == DType::F32) {
      backend_.copy(rel, w_.rel_embeddings);
    } else {
      backend_.cast(w_.rel_embeddings, rel);
    }
    rel_ = rel;
  }
}

Tensor BertEncoder::relative_embeddings_of(const DropoutSpec& dropout) {
  if (dropout.p <= 0.0f) return rel_;
  Tensor dropped = temporary(rel_.shape(), "rel_dropped", compute_);
  backend_.dropout(rel_, dropped, dropout);
  return dropped;
}

// q, k, v; the relative embeddings through this layer's query and key
// projections (Hugging Face's share_att_key), after the layer's dropout of
// them; the attention with both terms: s["qkv"], s["pos_qk"], s["attn_saved"], s["ctx"].
void BertEncoder::relative_attention_part(int64_t l, const Tensor& x, const SavedTensors& s) {
  const EncoderLayerTensors& w = wh_.layers[l];
  const RelativePositions& r = config_.relative;
  const auto [q, k, v] = split_qkv(s["qkv"]);
  backend_.linear_forward_n(x, {w.query_w, w.key_w, w.value_w}, {w.query_b, w.key_b, w.value_b}, {q, k, v});
  const auto [pos_q, pos_k] = split_positions(s["pos_qk"]);
  {
    const Tensor rel = relative_embeddings_of(relative_dropout(l));
    if (r.p2c) backend_.linear_forward(rel, w.query_w, &w.query_b, pos_q);
    if (r.c2p) backend_.linear_forward(rel, w.key_w, &w.key_b, pos_k);
  }
  backend_.attention_relative_forward(q, k, v, r.p2c ? pos_q : Tensor(), r.c2p ? pos_k : Tensor(), rel_index_,
                                      rel_ranges_, mask_, config_.num_attention_heads, attention_scale(),
                                      dropout_at(config_.attention_probs_dropout_prob, site_attention_probs(l)),
                                      s["attn_saved"], s["ctx"]);
}

Tensor BertEncoder::relative_attention_backward(int64_t l, const Tensor& x, const SavedTensors& s, const Tensor& d_ctx,
                                                Tensor d_x) {
  const EncoderLayerTensors& w = wh_.layers[l];
  const EncoderLayerTensors& g = g_.layers[l];
  const RelativePositions& r = config_.relative;
  const int64_t H = config_.hidden_size;
  const DType t = compute_;
  const auto [q, k, v] = split_qkv(s["qkv"]);
  const auto [pos_q, pos_k] = split_positions(s["pos_qk"]);
  const auto [dq, dk, dv] = split_qkv(temporary({3, B_, L_, H}, "d_qkv", t));
  const auto [dpos_q, dpos_k] = split_positions(temporary({2, r.rows(), H}, "d_pos_qk", t));
  backend_.attention_relative_backward(d_ctx, q, k, v, r.p2c ? pos_q : Tensor(), r.c2p ? pos_k : Tensor(), rel_index_,
                                       rel_ranges_, s["attn_saved"], config_.num_attention_heads, attention_scale(),
                                       dropout_at(config_.attention_probs_dropout_prob, site_attention_probs(l)), dq,
                                       dk, dv, r.p2c ? dpos_q : Tensor(), r.c2p ? dpos_k : Tensor());
  backend_.linear_backward(dq, x, w.query_w, &d_x, Tensor(), nullptr, /*accumulate_dx=*/true);
  backend_.linear_backward(dk, x, w.key_w, &d_x, Tensor(), nullptr, /*accumulate_dx=*/true);
  backend_.linear_backward(dv, x, w.value_w, &d_x, Tensor(), nullptr, /*accumulate_dx=*/true);
  backend_.linear_backward_weights_n({dq, dk, dv}, x, {w.query_w, w.key_w, w.value_w}, {g.query_w, g.key_w, g.value_w},
                                     {g.query_b, g.key_b, g.value_b});
  if (!r.p2c && !r.c2p) return d_x;
  // The position products' share of the query and key projections' gradients,
  // and the relative embeddings' gradient, summed over the layers in float32.
  const DropoutSpec dropout = relative_dropout(l);
  const Tensor rel = relative_embeddings_of(dropout);
  Tensor d_rel = temporary({r.rows(), H}, "d_rel", t);
  if (r.p2c) backend_.linear_backward(dpos_q, rel, w.query_w, &d_rel, g.query_w, &g.query_b);
  if (r.c2p) backend_.linear_backward(dpos_k, rel, w.key_w, &d_rel, g.key_w, &g.key_b, /*accumulate_dx=*/r.p2c);
  backend_.dropout(d_rel, d_rel, dropout);
  if (!d_rel_sum_.defined()) {
    d_rel_sum_ = Tensor::empty(backend_.ledger(), {r.rows(), H}, DType::F32, Category::Temporary,
                               "d_relative_embeddings");
    backend_.zero(d_rel_sum_);
  }
  if (t == DType::F32) {
    backend_.add_inplace(d_rel_sum_, d_rel);
  } else {
    Tensor wide = temporary({r.rows(), H}, "d_rel_f32");
    backend_.cast(d_rel, wide);
    backend_.add_inplace(d_rel_sum_, wide);
  }
  return d_x;
}

// Query, key, value and the attention of every token: s["qkv"], s["attn_saved"], s["ctx"].
void BertEncoder::attention_part(int64_t l, const Tensor& x, const SavedTensors& s) {
  if (layout_.relative_attention) return relative_attention_part(l, x, s);
  const EncoderLayerTensors& w = wh_.layers[l];
  const auto [q, k, v] = split_qkv(s["qkv"]);
  backend_.linear_forward_n(x, {w.query_w, w.key_w, w.value_w}, {w.query_b, w.key_b, w.value_b}, {q, k, v});
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
  backend_.attention_forward(q, k, v, mask_, config_.num_attention_heads, scale,
                             dropout_at(config_.attention_probs_dropout_prob, site_attention_probs(l)), s["attn_saved"],
                             s["ctx"]);
}

// x's first token's row, [B, 1, H]: the last layer's query input and residual.
Tensor BertEncoder::first_token_row(const Tensor& x) {
  Tensor x0 = temporary({B_, 1, config_.hidden_size}, "input_first_token", compute_);
  backend_.select_row(x, 0, x0);
  return x0;
}

// The first token's query and attention over every token's key and value
// (x0: first_token_row(x)): s["q_first"], s["kv"], s["attn_saved"], s["ctx"].
void BertEncoder::first_query_attention_part(int64_t l, const Tensor& x, const Tensor& x0,
                                                               const SavedTensors& s) {
  const EncoderLayerTensors& w = wh_.layers[l];
  const auto [k, v] = split_kv(s["kv"]);
  backend_.linear_forward(x0, w.query_w, &w.query_b, s["q_first"]);
  backend_.linear_forward_n(x, {w.key_w, w.value_w}, {w.key_b, w.value_b}, {k, v});
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
  backend_.attention_first_query_forward(s["q_first"], k, v, mask_, config_.num_attention_heads, scale,
                                         dropout_at(config_.attention_probs_dropout_prob, site_attention_probs(l)),
                                         s["attn_saved"], s["ctx"]);
}

void BertEncoder::layer_forward(int64_t l, const Tensor& x, const SavedTensors& s) {
  const EncoderLayerTensors& w = wh_.layers[l];
  const EncoderLayerTensors& masters = w_.layers[l];  // LayerNorm parameters stay float32
  const int64_t H = config_.hidden_size;
  // The rows this layer computes past attention (all, or the first token's).
  const int64_t R = rows_after_attention(l);
  Tensor residual = x;
  if (R == L_) {
    attention_part(l, x, s);
  } else {
    residual = first_token_row(x);
    first_query_attention_part(l, x, residual, s);
  }
  const Tensor& ctx = s["ctx"];
  Tensor projected = temporary({B_, R, H}, "projected", compute_);
  backend_.linear_forward(ctx, w.attn_out_w, &w.attn_out_b, projected);
  backend_.residual_layernorm_forward(projected, residual, attention_output_dropout(l),
                                      masters.attn_ln_w, masters.attn_ln_b, config_.layer_norm_eps, s["attn_ln_in"],
                                      s["h1"], s["attn_ln_mean"], s["attn_ln_rstd"]);
  backend_.linear_forward(s["h1"], w.inter_w, &w.inter_b, s["inter_pre"]);
  Tensor act = temporary({B_, R, config_.intermediate_size}, "intermediate_act", compute_);
  backend_.activation_forward(activation_, s["inter_pre"], act);
  backend_.linear_forward(act, w.out_w, &w.out_b, projected);
  backend_.residual_layernorm_forward(projected, s["h1"], dropout_at(config_.hidden_dropout_prob, site_layer_output(l)),
                                      masters.out_ln_w, masters.out_ln_b, config_.layer_norm_eps, s["out_ln_in"],
                                      s["out"], s["out_ln_mean"], s["out_ln_rstd"]);
}

void BertEncoder::recompute_selective(int64_t l, const Tensor& x, SavedTensors& s) {
  // The same products and attention kernel on the same inputs, with the same
  // dropout masks: the same bits as the forward computed.
  std::vector<SavedSpec> specs;
  for (const SavedSpec& spec :
       saved_for_backward(LayerKind::EncoderLayer, config_, B_, L_, activation_plan(), rows_after_attention(l), layout_))
    if (selective_recomputed().count(spec.name) != 0) specs.push_back(spec);
  SavedTensors again(backend_, specs, Category::Activations, fmt::format("layer.{}.", l));
  const EncoderLayerTensors& w = wh_.layers[l];
  if (rows_after_attention(l) == L_) {
    attention_part(l, x, again);
  } else {
    first_query_attention_part(l, x, first_token_row(x), again);
  }
  backend_.linear_forward(s["h1"], w.inter_w, &w.inter_b, again["inter_pre"]);
  s.absorb(std::move(again));
}

Tensor BertEncoder::layer_backward(int64_t l, const Tensor& x, const SavedTensors& s,
                                                       const Tensor& dout) {
  const EncoderLayerTensors& w = wh_.layers[l];
  const EncoderLayerTensors& masters = w_.layers[l];
  const EncoderLayerTensors& g = g_.layers[l];
  const int64_t H = config_.hidden_size, I = config_.intermediate_size;
  const DType t = compute_;
  const int64_t R = rows_after_attention(l);  // the rows past attention (dout's)

  // out = LayerNorm(dropout(output.dense(inter_act)) + h1): d_h1 gets the
  // residual's share, d_branch the dense layer's (through the dropout mask).
  Tensor d_h1 = temporary({B_, R, H}, "d_h1", t);
  Tensor d_branch = temporary({B_, R, H}, "d_branch", t);
  // The bias gradients of the dense layers are summed inside the passes that
  // write their output gradients (this one, the activation's, the next LayerNorm's).
  backend_.residual_layernorm_backward(dout, s["out_ln_in"], s["out_ln_mean"], s["out_ln_rstd"], masters.out_ln_w,
                                       dropout_at(config_.hidden_dropout_prob, site_layer_output(l)), d_h1, d_branch,
                                       g.out_ln_w, g.out_ln_b, &g.out_b);
  // The output dense layer's input act(inter_pre) was not saved: its input
  // gradient comes first, then one pass recomputes act and applies act' to
  // that gradient, then the weight gradient reads the recomputed act.
  Tensor d_inter = temporary({B_, R, I}, "d_intermediate", t);
  {
    Tensor act = temporary({B_, R, I}, "intermediate_act", t);
    backend_.linear_backward(d_branch, act, w.out_w, &d_inter, Tensor(), nullptr);
    backend_.activation_backward_recompute(activation_, s["inter_pre"], d_inter, d_inter, act, &g.inter_b);
    backend_.linear_backward(d_branch, act, w.out_w, nullptr, g.out_w, nullptr);
  }
  backend_.linear_backward(d_inter, s["h1"], w.inter_w, &d_h1, g.inter_w, nullptr, /*accumulate_dx=*/true);
  d_inter = Tensor();

  // h1 = LayerNorm(dropout(attention.output.dense(ctx)) + x)
  Tensor d_x = dout;  // dout is consumed: its buffer now collects the input gradient
  backend_.residual_layernorm_backward(d_h1, s["attn_ln_in"], s["attn_ln_mean"], s["attn_ln_rstd"], masters.attn_ln_w,
                                       attention_output_dropout(l), d_x,
                                       d_branch, g.attn_ln_w, g.attn_ln_b, &g.attn_out_b);
  Tensor d_ctx = d_h1;  // d_h1 is consumed too
  backend_.linear_backward(d_branch, s["ctx"], w.attn_out_w, &d_ctx, g.attn_out_w, nullptr);
  d_branch = Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
  const DropoutSpec probs_dropout = dropout_at(config_.attention_probs_dropout_prob, site_attention_probs(l));
  if (R != L_) {
    // The first query's attention: the query's gradient reaches the first
    // token's row of the input (with the residual's share, in d_x), the keys'
    // and values' every row.
    const auto [k, v] = split_kv(s["kv"]);
    Tensor d_q = temporary({B_, 1, H}, "d_q_first", t);
    const auto [dk, dv] = split_kv(temporary({2, B_, L_, H}, "d_kv", t));
    backend_.attention_first_query_backward(d_ctx, s["q_first"], k, v, s["attn_saved"], config_.num_attention_heads,
                                            scale, probs_dropout, d_q, dk, dv);
    const Tensor x0 = first_token_row(x);
    backend_.linear_backward(d_q, x0, w.query_w, &d_x, g.query_w, &g.query_b, /*accumulate_dx=*/true);
    Tensor d_x_all = temporary({B_, L_, H}, "d_x", t);
    backend_.linear_backward(dk, x, w.key_w, &d_x_all, Tensor(), nullptr);
    backend_.linear_backward(dv, x, w.value_w, &d_x_all, Tensor(), nullptr, /*accumulate_dx=*/true);
    backend_.linear_backward_weights_n({dk, dv}, x, {w.key_w, w.value_w}, {g.key_w, g.value_w}, {g.key_b, g.value_b});
    backend_.select_row_backward(d_x, 0, d_x_all);
    return d_x_all;
  }
  if (layout_.relative_attention) return relative_attention_backward(l, x, s, d_ctx, d_x);
  const auto [q, k, v] = split_qkv(s["qkv"]);
  if (w.qkv_w.defined() && g.qkv_w.defined() && g.qkv_b.defined()) {
    // Query, key and value lie together: their gradients interleaved per token
    // make one [T, 3H] matrix, so one product gives the input gradient (the
    // three added in its depth) and the weight and bias gradients of all three.
    Tensor d_qkv = temporary({B_, L_, 3 * H}, "d_qkv", t);
    backend_.attention_backward_interleaved(d_ctx, q, k, v, s["ctx"], s["attn_saved"], mask_,
                                            config_.num_attention_heads, scale, probs_dropout, d_qkv);
    backend_.linear_backward(d_qkv, x, w.qkv_w, &d_x, g.qkv_w, &g.qkv_b, /*accumulate_dx=*/true);
    return d_x;
  }
  const auto [dq, dk, dv] = split_qkv(temporary({3, B_, L_, H}, "d_qkv", t));
  backend_.attention_backward(d_ctx, q, k, v, s["ctx"], s["attn_saved"], mask_, config_.num_attention_heads, scale,
                              probs_dropout, dq, dk, dv);
  // The input gradient sums the three products; the weight gradients are one batched product.
  backend_.linear_backward(dq, x, w.query_w, &d_x, Tensor(), nullptr, /*accumulate_dx=*/true);
  backend_.linear_backward(dk, x, w.key_w, &d_x, Tensor(), nullptr, /*accumulate_dx=*/true);
  backend_.linear_backward(dv, x, w.value_w, &d_x, Tensor(), nullptr, /*accumulate_dx=*/true);
  backend_.linear_backward_weights_n({dq, dk, dv}, x, {w.query_w, w.key_w, w.value_w}, {g.query_w, g.key_w, g.value_w},
                                     {g.query_b, g.key_b, g.value_b});
  return d_x;
}

void BertEncoder::embeddings_backward(const SavedTensors& s, const Tensor& dout_in) {
  if (layout_.mask_embeddings && mask_.defined()) backend_.mask_rows(dout_in, mask_);
  Tensor d_embedded = dout_in;
  if (w_.projection_w.defined()) {  // ELECTRA's projection, in the encoder's dtype
    d_embedded = temporary(s["embedded"].shape(), "d_embedded", compute_);
    backend_.linear_backward(dout_in, s["embedded"], wh_.projection_w, &d_embedded, g_.projection_w,
                             &g_.projection_b);
  }
  // Back to float32, where the embeddings computed (in place when the model computes in float32).
  const Tensor work = compute_ == DType::F32 ? d_embedded : temporary(d_embedded.shape(), "d_embeddings_out");
  Tensor d_sum = temporary({B_, L_, config_.embedding_width()}, "d_embeddings");
  backend_.embeddings_layernorm_backward(d_embedded, s["ln_in"], s["ln_mean"], s["ln_rstd"], w_.emb_ln_w,
                                         dropout_at(config_.hidden_dropout_prob, site_embeddings()), work, d_sum,
                                         g_.emb_ln_w, g_.emb_ln_b);
  backend_.embedding_backward(ids_, d_sum, g_.word, config_.pad_token_id);
  if (layout_.has_position_table())
    backend_.embedding_backward(positions_, d_sum, g_.position,
                                layout_.position_padding_row ? config_.pad_token_id : -1);
  if (token_types_.defined()) backend_.embedding_backward(token_types_, d_sum, g_.token_type, -1);
  if (layout_.relative_attention && d_rel_sum_.defined()) {
    // Every layer's share of the relative embeddings' gradient, through their LayerNorm.
    if (config_.relative.layer_norm) {
      Tensor d_table = temporary(d_rel_sum_.shape(), "d_rel_table");
      backend_.layernorm_backward(d_rel_sum_, w_.rel_embeddings, s["rel_mean"], s["rel_rstd"], w_.rel_norm_w, d_table,
                                  g_.rel_norm_w, g_.rel_norm_b);
      backend_.add_inplace(g_.rel_embeddings, d_table);
    } else {
      backend_.add_inplace(g_.rel_embeddings, d_rel_sum_);
    }
    d_rel_sum_ = Tensor();
  }
  rel_ = Tensor();
}

}  // namespace anatomy
