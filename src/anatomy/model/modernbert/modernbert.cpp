// modernbert.cpp: ModernBERT's parameters, and its sequence classifier's
// forward and backward (modernbert.h has the computation).
#include "anatomy/model/modernbert/modernbert.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

namespace anatomy {

namespace {

std::string layer_prefix(int64_t l) { return fmt::format("model.layers.{}.", l); }

// Dropout sites: the embeddings, three per layer, the classifier.
constexpr int64_t kSitesPerLayer = 3;
int64_t site_probs(int64_t l) { return 1 + kSitesPerLayer * l; }
int64_t site_attention_out(int64_t l) { return 2 + kSitesPerLayer * l; }
int64_t site_mlp(int64_t l) { return 3 + kSitesPerLayer * l; }

// Selective checkpointing recomputes attention's internals and the MLP's input product.
const std::set<std::string>& selective_recomputed() {
  static const std::set<std::string> names = {"qkv", "attn_saved", "ctx", "u"};
  return names;
}

ActivationKind kind_of(Activation a) {
  switch (a) {
    case Activation::Gelu: return ActivationKind::GeluErf;
    case Activation::GeluNew: return ActivationKind::GeluTanh;
    case Activation::Relu: return ActivationKind::Relu;
  }
  return ActivationKind::GeluErf;
}

}  // namespace

std::vector<ParamSpec> modernbert_parameter_specs(const ModelConfig& c) {
  const ModernBertOptions o = modernbert_options(c);
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  // ModernBertPreTrainedModel._init_weights: truncated normals at ±cutoff std, "in" products and the
  // embeddings at initializer_range, "out" products (attention and MLP Wo, the head's dense) scaled
  // down by sqrt(2 · layers), the classifier at hidden_size^-1/2.
  const double in = c.initializer_range, out = in / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  const double final_out = 1.0 / std::sqrt(static_cast<double>(H));
  std::vector<ParamSpec> specs;
  auto linear = [&](const std::string& prefix, int64_t rows, int64_t cols, bool bias, double std) {
    ParamSpec w{prefix + ".weight", {rows, cols}, true, ParamInit::Normal};
    w.init_std = std;
    w.init_cutoff = o.initializer_cutoff_factor;
    specs.push_back(w);
    if (bias) specs.push_back({prefix + ".bias", {rows}, false, ParamInit::Zeros});
  };
  auto norm = [&](const std::string& prefix) {
    specs.push_back({prefix + ".weight", {H}, false, ParamInit::Ones});
    if (o.norm_bias) specs.push_back({prefix + ".bias", {H}, false, ParamInit::Zeros});
  };
  ParamSpec tok{"model.embeddings.tok_embeddings.weight", {c.vocab_size, H}, true, ParamInit::Normal};
  tok.init_std = in;
  tok.init_cutoff = o.initializer_cutoff_factor;
  specs.push_back(tok);
  norm("model.embeddings.norm");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = layer_prefix(l);
    if (l > 0) norm(p + "attn_norm");
    linear(p + "attn.Wqkv", 3 * H, H, o.attention_bias, in);
    linear(p + "attn.Wo", H, H, o.attention_bias, out);
    norm(p + "mlp_norm");
    linear(p + "mlp.Wi", 2 * I, H, o.mlp_bias, in);
    linear(p + "mlp.Wo", H, I, o.mlp_bias, out);
  }
  norm("model.final_norm");
  linear("head.dense", H, H, o.classifier_bias, out);
  norm("head.norm");
  linear("classifier", c.num_labels, H, true, final_out);
  return specs;
}

void ModernBertTensors::bind_unit(int64_t unit, const ModelConfig& c, const ModernBertOptions& o,
                                  const std::function<Tensor(const std::string&)>& get) {
  const int64_t L = c.num_hidden_layers, H = c.hidden_size;
  ANATOMY_CHECK(unit >= 0 && unit <= L + 1, "parameter unit {} of {}", unit, L + 2);
  if (static_cast<int64_t>(layers.size()) != L) layers.resize(static_cast<size_t>(L));
  const auto maybe = [&](bool present, const std::string& name) { return present ? get(name) : Tensor(); };
  if (unit == 0) {
    tok = get("model.embeddings.tok_embeddings.weight");
    emb_norm_w = get("model.embeddings.norm.weight");
    emb_norm_b = maybe(o.norm_bias, "model.embeddings.norm.bias");
  } else if (unit <= L) {
    const int64_t l = unit - 1;
    const std::string p = layer_prefix(l);
    Layer& e = layers[static_cast<size_t>(l)];
    e.attn_norm_w = maybe(l > 0, p + "attn_norm.weight");
    e.attn_norm_b = maybe(l > 0 && o.norm_bias, p + "attn_norm.bias");
    const Tensor qkv_w = get(p + "attn.Wqkv.weight"), qkv_b = maybe(o.attention_bias, p + "attn.Wqkv.bias");
    // Query, key and value: rows [0, H), [H, 2H), [2H, 3H) of Wqkv (Hugging Face's view(…, 3, heads, d)).
    const auto third = [&](const Tensor& t, int64_t i, const char* what) {
      if (!t.defined()) return Tensor();
      const int64_t n = t.numel() / 3;
      return t.slice(i * n, t.rank() == 2 ? Shape{H, H} : Shape{H}, t.name() + "[" + what + "]");
    };
    e.q_w = third(qkv_w, 0, "q");
    e.k_w = third(qkv_w, 1, "k");
    e.v_w = third(qkv_w, 2, "v");
    e.q_b = third(qkv_b, 0, "q");
    e.k_b = third(qkv_b, 1, "k");
    e.v_b = third(qkv_b, 2, "v");
    e.attn_out_w = get(p + "attn.Wo.weight");
    e.attn_out_b = maybe(o.attention_bias, p + "attn.Wo.bias");
    e.mlp_norm_w = get(p + "mlp_norm.weight");
    e.mlp_norm_b = maybe(o.norm_bias, p + "mlp_norm.bias");
    e.wi_w = get(p + "mlp.Wi.weight");
    e.wi_b = maybe(o.mlp_bias, p + "mlp.Wi.bias");
    e.mlp_out_w = get(p + "mlp.Wo.weight");
    e.mlp_out_b = maybe(o.mlp_bias, p + "mlp.Wo.bias");
  } else {
    final_norm_w = get("model.final_norm.weight");
    final_norm_b = maybe(o.norm_bias, "model.final_norm.bias");
    head_dense_w = get("head.dense.weight");
    head_dense_b = maybe(o.classifier_bias, "head.dense.bias");
    head_norm_w = get("head.norm.weight");
    head_norm_b = maybe(o.norm_bias, "head.norm.bias");
    classifier_w = get("classifier.weight");
    classifier_b = get("classifier.bias");
  }
}

namespace {

std::vector<ParameterUnit> modernbert_units(const ParameterSet& set, const ModelConfig& c) {
  std::vector<int64_t> starts = {0};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    starts.push_back(set.offset_of(layer_prefix(l) + (l > 0 ? "attn_norm.weight" : "attn.Wqkv.weight")));
  starts.push_back(set.offset_of("model.final_norm.weight"));
  std::vector<ParameterUnit> units;
  for (size_t u = 0; u < starts.size(); ++u)
    units.push_back({starts[u], u + 1 < starts.size() ? starts[u + 1] : set.flat_elements()});
  return units;
}

}  // namespace

struct ModernBertForSequenceClassification::Step {
  SavedTensors embeddings;
  std::vector<SavedTensors> layers;
  SavedTensors head;
  Tensor dlogits;
};

ModernBertForSequenceClassification::ModernBertForSequenceClassification(Backend& backend, const ModelConfig& config,
                                                                         DType compute)
    : Model(backend, config, compute, modernbert_parameter_specs(config),
            [&config](const ParameterSet& set) { return modernbert_units(set, config); }),
      options_(modernbert_options(config_)) {
  ANATOMY_CHECK(config_.model_type == "modernbert", "a {} config for ModernBERT", config_.model_type);
  if (!options_.norm_bias) {
    zero_bias_ = Tensor::empty(backend_.ledger(), {config_.hidden_size}, DType::F32, Category::Functionality,
                               "layernorm_zero_bias");
    backend_.zero(zero_bias_);
  }
  bind_views(Views::Weights, weights_);
  bind_views(Views::Compute, half_weights_ ? *half_weights_ : weights_);
}

ModernBertForSequenceClassification::~ModernBertForSequenceClassification() = default;

std::string ModernBertForSequenceClassification::attention_note() const {
  int64_t local = 0;
  for (bool s : options_.sliding) local += s;
  if (local == 0) return "";
  // Whether the local layers run fused, in training as the plan has it.
  const float p = static_cast<float>(config_.attention_probs_dropout_prob);
  const bool kept = backend_.attention_window_saves_probabilities(compute_, config_.head_dim(), p);
  return fmt::format("; {} of {} layers local (±{} tokens, {})", local, config_.num_hidden_layers, options_.window(),
                     kept ? "probabilities kept" : "our flash kernels with the window");
}

ModernBertTensors& ModernBertForSequenceClassification::views_of(Views views) {
  switch (views) {
    case Views::Weights: return w_;
    case Views::Compute: return wh_;
    case Views::Gradients: return g_;
  }
  return w_;
}

void ModernBertForSequenceClassification::bind_views(Views views, const ParameterSet& set) {
  ModernBertTensors& t = views_of(views);
  const auto get = [&](const std::string& name) { return set.get(name); };
  for (int64_t u = 0; u < config_.num_hidden_layers + 2; ++u) t.bind_unit(u, config_, options_, get);
}

void ModernBertForSequenceClassification::bind_unit_views(Views views, int64_t unit,
                                                          const std::function<Tensor(const std::string&)>& get) {
  views_of(views).bind_unit(unit, config_, options_, get);
}

bool ModernBertForSequenceClassification::reads_float32_in_mixed_precision(const std::string& name) const {
  const bool layer_product = name.rfind("model.layers.", 0) == 0 && name.find("norm.") == std::string::npos;
  return !layer_product;
}

std::vector<std::string> ModernBertForSequenceClassification::checkpoint_names(const std::string& name) const {
  std::vector<std::string> names = {name};
  if (name.rfind("model.", 0) == 0) names.push_back(name.substr(6));  // a bare ModernBertModel's checkpoint
  return names;
}

bool ModernBertForSequenceClassification::optional_on_load(const std::string& name) const {
  return name.rfind("head.", 0) == 0 || name.rfind("classifier.", 0) == 0;
}

// Hugging Face's ModernBERT initialises the whole token table after nn.Embedding zeroed the padding
// row (the parent module comes last), so no row stays zero.
int64_t ModernBertForSequenceClassification::zero_row_on_init(const ParamSpec&) const { return -1; }

DropoutSpec ModernBertForSequenceClassification::dropout_at(double p, int64_t site) const {
  DropoutSpec spec;
  spec.p = forward_options_.training ? static_cast<float>(p) : 0.0f;
  spec.seed = forward_options_.seed;
  spec.stream = (forward_options_.step << 16) | static_cast<uint64_t>(site);
  return spec;
}

Tensor ModernBertForSequenceClassification::temporary(Shape shape, const std::string& name, DType dtype) {
  return Tensor::empty(backend_.ledger(), std::move(shape), dtype, Category::Temporary, name);
}

const Tensor& ModernBertForSequenceClassification::bias_or_zero(const Tensor& bias) const {
  return bias.defined() ? bias : zero_bias_;
}

// A LayerNorm's bias gradient: the parameter's, or a temporary that backward discards.
Tensor ModernBertForSequenceClassification::bias_gradient(const Tensor& gradient) {
  if (gradient.defined()) return gradient;
  Tensor sink = temporary({config_.hidden_size}, "layernorm_bias_gradient_unused");
  backend_.zero(sink);
  return sink;
}

std::vector<SavedSpec> ModernBertForSequenceClassification::saved_for_backward(Part part, int64_t l, int64_t B,
                                                                               int64_t L) const {
  const int64_t H = config_.hidden_size, I = config_.intermediate_size, N = config_.num_attention_heads, T = B * L;
  const DType x = compute_, f32 = DType::F32;
  switch (part) {
    case Part::Embeddings:
      return {
          {"ln_in", {B, L, H}, f32, "LayerNorm backward (token embeddings)"},
          {"ln_mean", {T}, f32, "LayerNorm backward"},
          {"ln_rstd", {T}, f32, "LayerNorm backward"},
          {"out", {B, L, H}, x, "input of layer 0"},
      };
    case Part::Layer: {
      std::vector<SavedSpec> specs;
      // The normed inputs h and h2 are not kept: backward makes them again
      // from x (the previous layer's output) and x1 (attention_input, mlp_input).
      if (l > 0)
        specs = {
            {"attn_ln_mean", {T}, f32, "attention LayerNorm backward"},
            {"attn_ln_rstd", {T}, f32, "attention LayerNorm backward"},
        };
      const bool local = options_.sliding[static_cast<size_t>(l)];
      const float p_drop = dropout_at(config_.attention_probs_dropout_prob, 0).p;
      const bool probabilities =
          local ? backend_.attention_window_saves_probabilities(x, config_.head_dim(), p_drop)
                : backend_.attention_saves_probabilities(x, config_.head_dim());
      const bool bits = !local && !probabilities && p_drop > 0.0f &&
                        backend_.attention_keeps_dropout_bits(x, config_.head_dim(), L);
      const std::vector<SavedSpec> rest = {
          {"qkv", {3, B, L, H}, x, "attention backward (query and key after the rotary embedding, value)"},
          probabilities ? SavedSpec{"attn_saved", {B, N, L, L}, f32, "attention backward (softmax output)"}
          : bits        ? SavedSpec{"attn_saved", {B, N, L * (attention_keep_words(L) + 1)}, f32,
                             "attention backward (dropout mask bits, row log-sum-exp)"}
                        : SavedSpec{"attn_saved", {B, N, L}, f32, "attention backward (row log-sum-exp)"},
          {"ctx", {B, L, H}, x, "Wo backward"},
          {"x1", {B, L, H}, x, "MLP LayerNorm backward (the residual after attention)"},
          {"mlp_ln_mean", {T}, f32, "MLP LayerNorm backward"},
          {"mlp_ln_rstd", {T}, f32, "MLP LayerNorm backward"},
          {"u", {B, L, 2 * I}, x, "GeGLU backward; recomputing the MLP's Wo input"},
          {"out", {B, L, H}, x, "input of the next layer"},
      };
      specs.insert(specs.end(), rest.begin(), rest.end());
      return specs;
    }
    case Part::Head:
      return {
          {"first", {B, H}, f32, "final LayerNorm backward (the first token)"},
          {"final_mean", {B}, f32, "final LayerNorm backward"},
          {"final_rstd", {B}, f32, "final LayerNorm backward"},
          {"dense_in", {B, H}, f32, "head dense backward"},
          {"pre", {B, H}, f32, "head activation backward"},
          {"act", {B, H}, f32, "head LayerNorm backward"},
          {"head_mean", {B}, f32, "head LayerNorm backward"},
          {"head_rstd", {B}, f32, "head LayerNorm backward"},
          {"cls_in", {B, H}, f32, "classifier backward"},
          {"logits", {B, config_.num_labels}, f32, "loss"},
      };
  }
  return {};
}

void ModernBertForSequenceClassification::embeddings_forward(const SavedTensors& s) {
  backend_.embedding_forward(ids_, w_.tok, s["ln_in"], false);
  const Tensor work = compute_ == DType::F32 ? s["out"] : temporary(s["ln_in"].shape(), "embeddings_out");
  backend_.layernorm_forward(s["ln_in"], w_.emb_norm_w, bias_or_zero(w_.emb_norm_b), config_.layer_norm_eps, work,
                             s["ln_mean"], s["ln_rstd"]);
  backend_.dropout(work, work, dropout_at(options_.embedding_dropout, 0));
  if (compute_ != DType::F32) backend_.cast(work, s["out"]);
}

void ModernBertForSequenceClassification::embeddings_backward(const SavedTensors& s, const Tensor& dout) {
  const Tensor work = compute_ == DType::F32 ? dout : temporary(dout.shape(), "d_embeddings_out");
  if (compute_ != DType::F32) backend_.cast(dout, work);
  backend_.dropout(work, work, dropout_at(options_.embedding_dropout, 0));
  Tensor d_sum = temporary(dout.shape(), "d_token_embeddings");
  backend_.layernorm_backward(work, s["ln_in"], s["ln_mean"], s["ln_rstd"], w_.emb_norm_w, d_sum, g_.emb_norm_w,
                              bias_gradient(g_.emb_norm_b));
  backend_.embedding_backward(ids_, d_sum, g_.tok, config_.pad_token_id);
}

// Layer l's query, key, value (rotated) from its normed input h, attention
// and context: s["qkv"], s["attn_saved"], s["ctx"].
void ModernBertForSequenceClassification::attention_part(int64_t l, const Tensor& h, const SavedTensors& s) {
  const ModernBertTensors::Layer& w = wh_.layers[static_cast<size_t>(l)];
  const Shape one = {B_, L_, config_.hidden_size};
  const int64_t n = shape_numel(one);
  const Tensor& qkv = s["qkv"];
  const Tensor q = qkv.slice(0, one, "q"), k = qkv.slice(n, one, "k"), v = qkv.slice(2 * n, one, "v");
  const auto bias = [](const Tensor& b) { return b.defined() ? &b : nullptr; };
  backend_.linear_forward(h, w.q_w, bias(w.q_b), q);
  backend_.linear_forward(h, w.k_w, bias(w.k_b), k);
  backend_.linear_forward(h, w.v_w, bias(w.v_b), v);
  const bool local = options_.sliding[static_cast<size_t>(l)];
  const double theta = local ? options_.local_rope_theta : options_.global_rope_theta;
  const int64_t heads = config_.num_attention_heads;
  backend_.rotary(q, heads, theta, false);
  backend_.rotary(k, heads, theta, false);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
  const DropoutSpec probs_dropout = dropout_at(config_.attention_probs_dropout_prob, site_probs(l));
  if (local)
    backend_.attention_window_forward(q, k, v, mask_, heads, scale, options_.window(), probs_dropout, s["attn_saved"],
                                      s["ctx"]);
  else
    backend_.attention_forward(q, k, v, mask_, heads, scale, probs_dropout, s["attn_saved"], s["ctx"]);
}

// One op makes each normed input, in forward and again in backward: the
// same h and h2 bit for bit from the same kept input and weights. Without
// `mean` and `rstd` (backward: the forward kept them) temporaries take the
// statistics.
Tensor ModernBertForSequenceClassification::attention_input(int64_t l, const Tensor& x, const Tensor& mean,
                                                            const Tensor& rstd) {
  if (l == 0) return x;
  const ModernBertTensors::Layer& masters = w_.layers[static_cast<size_t>(l)];
  const Tensor h = temporary(x.shape(), "h", compute_);
  backend_.layernorm_forward(x, masters.attn_norm_w, bias_or_zero(masters.attn_norm_b), config_.layer_norm_eps, h,
                             mean.defined() ? mean : temporary({B_ * L_}, "h_mean"),
                             rstd.defined() ? rstd : temporary({B_ * L_}, "h_rstd"));
  return h;
}
Tensor ModernBertForSequenceClassification::mlp_input(int64_t l, const Tensor& x1, const Tensor& mean,
                                                      const Tensor& rstd) {
  const ModernBertTensors::Layer& masters = w_.layers[static_cast<size_t>(l)];
  const Tensor h2 = temporary(x1.shape(), "h2", compute_);
  backend_.layernorm_forward(x1, masters.mlp_norm_w, bias_or_zero(masters.mlp_norm_b), config_.layer_norm_eps, h2,
                             mean.defined() ? mean : temporary({B_ * L_}, "h2_mean"),
                             rstd.defined() ? rstd : temporary({B_ * L_}, "h2_rstd"));
  return h2;
}

void ModernBertForSequenceClassification::layer_forward(int64_t l, const Tensor& x, const SavedTensors& s) {
  const ModernBertTensors::Layer& w = wh_.layers[static_cast<size_t>(l)];
  const int64_t H = config_.hidden_size, I = config_.intermediate_size;
  const auto bias = [](const Tensor& b) { return b.defined() ? &b : nullptr; };
  attention_part(l, l > 0 ? attention_input(l, x, s["attn_ln_mean"], s["attn_ln_rstd"]) : x, s);
  Tensor projected = temporary({B_, L_, H}, "projected", compute_);
  backend_.linear_forward(s["ctx"], w.attn_out_w, bias(w.attn_out_b), projected);
  // x1 = x + dropout(Wo·ctx); h2 = LayerNorm_mlp(x1), by the op that backward
  // repeats (mlp_input), so that Wi's gradient reads the h2 the forward used.
  backend_.dropout(projected, projected, dropout_at(config_.attention_probs_dropout_prob, site_attention_out(l)));
  backend_.add(projected, x, s["x1"]);
  backend_.linear_forward(mlp_input(l, s["x1"], s["mlp_ln_mean"], s["mlp_ln_rstd"]), w.wi_w, bias(w.wi_b), s["u"]);
  Tensor gated = temporary({B_, L_, I}, "gated", compute_);
  backend_.gated_activation_forward(kind_of(config_.hidden_act), s["u"], gated);
  backend_.dropout(gated, gated, dropout_at(config_.hidden_dropout_prob, site_mlp(l)));
  backend_.linear_forward(gated, w.mlp_out_w, bias(w.mlp_out_b), projected);
  backend_.add(projected, s["x1"], s["out"]);
}

Tensor ModernBertForSequenceClassification::layer_backward(int64_t l, const Tensor& x, const SavedTensors& s,
                                                           const Tensor& dout) {
  const ModernBertTensors::Layer& w = wh_.layers[static_cast<size_t>(l)];
  const ModernBertTensors::Layer& masters = w_.layers[static_cast<size_t>(l)];
  const ModernBertTensors::Layer& g = g_.layers[static_cast<size_t>(l)];
  const int64_t H = config_.hidden_size, I = config_.intermediate_size, heads = config_.num_attention_heads;
  const DType t = compute_;
  const auto bias = [](const Tensor& b) { return b.defined() ? &b : nullptr; };
  // out = x1 + Wo_mlp·dropout(gated(u)): the MLP's branch, its input recomputed.
  Tensor d_h2 = temporary({B_, L_, H}, "d_h2", t);
  {
    Tensor gated = temporary({B_, L_, I}, "gated", t);
    backend_.gated_activation_forward(kind_of(config_.hidden_act), s["u"], gated);
    const DropoutSpec mlp_dropout = dropout_at(config_.hidden_dropout_prob, site_mlp(l));
    backend_.dropout(gated, gated, mlp_dropout);
    Tensor d_gated = temporary({B_, L_, I}, "d_gated", t);
    backend_.linear_backward(dout, gated, w.mlp_out_w, &d_gated, g.mlp_out_w, bias(g.mlp_out_b));
    gated = Tensor();
    backend_.dropout(d_gated, d_gated, mlp_dropout);
    Tensor du = temporary({B_, L_, 2 * I}, "d_u", t);
    backend_.gated_activation_backward(kind_of(config_.hidden_act), s["u"], d_gated, du);
    d_gated = Tensor();
    const Tensor h2 = mlp_input(l, s["x1"]);
    backend_.linear_backward(du, h2, w.wi_w, &d_h2, g.wi_w, bias(g.wi_b));
  }
  // h2 = LayerNorm_mlp(x1): dout (the residual's share of d x1) gains the LayerNorm's.
  {
    Tensor d_x1 = temporary({B_, L_, H}, "d_x1", t);
    backend_.layernorm_backward(d_h2, s["x1"], s["mlp_ln_mean"], s["mlp_ln_rstd"], masters.mlp_norm_w, d_x1,
                                g.mlp_norm_w, bias_gradient(g.mlp_norm_b));
    backend_.add_inplace(dout, d_x1);
  }
  // x1 = x + dropout(Wo·ctx)
  Tensor d_projected = d_h2;  // d_h2 is spent: its buffer takes the attention output's gradient
  backend_.dropout(dout, d_projected, dropout_at(config_.attention_probs_dropout_prob, site_attention_out(l)));
  Tensor d_ctx = temporary({B_, L_, H}, "d_ctx", t);
  backend_.linear_backward(d_projected, s["ctx"], w.attn_out_w, &d_ctx, g.attn_out_w, bias(g.attn_out_b));
  d_projected = Tensor();
  d_h2 = Tensor();
  const Shape one = {B_, L_, H};
  const int64_t n = shape_numel(one);
  const Tensor& qkv = s["qkv"];
  const Tensor q = qkv.slice(0, one, "q"), k = qkv.slice(n, one, "k"), v = qkv.slice(2 * n, one, "v");
  Tensor d_qkv = temporary({3, B_, L_, H}, "d_qkv", t);
  const Tensor dq = d_qkv.slice(0, one, "dq"), dk = d_qkv.slice(n, one, "dk"), dv = d_qkv.slice(2 * n, one, "dv");
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
  const DropoutSpec probs_dropout = dropout_at(config_.attention_probs_dropout_prob, site_probs(l));
  const bool local = options_.sliding[static_cast<size_t>(l)];
  if (local)
    backend_.attention_window_backward(d_ctx, q, k, v, s["ctx"], s["attn_saved"], mask_, heads, scale,
                                       options_.window(), probs_dropout, dq, dk, dv);
  else
    backend_.attention_backward(d_ctx, q, k, v, s["ctx"], s["attn_saved"], mask_, heads, scale, probs_dropout, dq, dk,
                                dv);
  d_ctx = Tensor();
  const double theta = local ? options_.local_rope_theta : options_.global_rope_theta;
  backend_.rotary(dq, heads, theta, true);
  backend_.rotary(dk, heads, theta, true);
  const Tensor h = attention_input(l, x);
  Tensor d_h = temporary({B_, L_, H}, "d_h", t);
  backend_.linear_backward(dq, h, w.q_w, &d_h, g.q_w, bias(g.q_b));
  backend_.linear_backward(dk, h, w.k_w, &d_h, g.k_w, bias(g.k_b), /*accumulate_dx=*/true);
  backend_.linear_backward(dv, h, w.v_w, &d_h, g.v_w, bias(g.v_b), /*accumulate_dx=*/true);
  d_qkv = Tensor();
  if (l > 0) {
    Tensor d_x = temporary({B_, L_, H}, "d_x", t);
    backend_.layernorm_backward(d_h, x, s["attn_ln_mean"], s["attn_ln_rstd"], masters.attn_norm_w, d_x,
                                g.attn_norm_w, bias_gradient(g.attn_norm_b));
    backend_.add_inplace(dout, d_x);
  } else {
    backend_.add_inplace(dout, d_h);
  }
  return dout;  // consumed: it now holds the layer input's gradient
}

void ModernBertForSequenceClassification::head_forward(const Tensor& hidden, const SavedTensors& s) {
  const int64_t H = config_.hidden_size;
  if (compute_ == DType::F32) {
    backend_.select_row(hidden, 0, s["first"]);
  } else {  // the head runs in float32 from the rounded first token
    Tensor first = temporary({B_, H}, "first_token_half", compute_);
    backend_.select_row(hidden, 0, first);
    backend_.cast(first, s["first"]);
  }
  // The final LayerNorm is per token: only the first token's is read.
  backend_.layernorm_forward(s["first"], w_.final_norm_w, bias_or_zero(w_.final_norm_b), config_.layer_norm_eps,
                             s["dense_in"], s["final_mean"], s["final_rstd"]);
  backend_.linear_forward(s["dense_in"], w_.head_dense_w, w_.head_dense_b.defined() ? &w_.head_dense_b : nullptr,
                          s["pre"]);
  backend_.activation_forward(kind_of(options_.classifier_activation), s["pre"], s["act"]);
  Tensor normed = temporary({B_, H}, "head_normed");
  backend_.layernorm_forward(s["act"], w_.head_norm_w, bias_or_zero(w_.head_norm_b), config_.layer_norm_eps, normed,
                             s["head_mean"], s["head_rstd"]);
  const int64_t site = 1 + kSitesPerLayer * config_.num_hidden_layers;
  backend_.dropout(normed, s["cls_in"], dropout_at(config_.classifier_dropout_prob(), site));
  backend_.linear_forward(s["cls_in"], w_.classifier_w, &w_.classifier_b, s["logits"]);
}

Tensor ModernBertForSequenceClassification::head_backward(const SavedTensors& s, const Tensor& dlogits) {
  const int64_t H = config_.hidden_size;
  Tensor d = temporary({B_, H}, "d_classifier_in");
  backend_.linear_backward(dlogits, s["cls_in"], w_.classifier_w, &d, g_.classifier_w, &g_.classifier_b);
  const int64_t site = 1 + kSitesPerLayer * config_.num_hidden_layers;
  backend_.dropout(d, d, dropout_at(config_.classifier_dropout_prob(), site));
  Tensor d_act = temporary({B_, H}, "d_head_act");
  backend_.layernorm_backward(d, s["act"], s["head_mean"], s["head_rstd"], w_.head_norm_w, d_act, g_.head_norm_w,
                              bias_gradient(g_.head_norm_b));
  backend_.activation_backward(kind_of(options_.classifier_activation), s["pre"], d_act, d_act);
  Tensor d_dense_in = d;  // spent: reused
  backend_.linear_backward(d_act, s["dense_in"], w_.head_dense_w, &d_dense_in, g_.head_dense_w,
                           g_.head_dense_b.defined() ? &g_.head_dense_b : nullptr);
  Tensor d_first = d_act;  // spent: reused
  backend_.layernorm_backward(d_dense_in, s["first"], s["final_mean"], s["final_rstd"], w_.final_norm_w, d_first,
                              g_.final_norm_w, bias_gradient(g_.final_norm_b));
  Tensor d_hidden = temporary({B_, L_, H}, "d_hidden", compute_);
  backend_.zero(d_hidden);
  if (compute_ == DType::F32) {
    backend_.select_row_backward(d_first, 0, d_hidden);
  } else {
    Tensor half = temporary({B_, H}, "d_first_token_half", compute_);
    backend_.cast(d_first, half);
    backend_.select_row_backward(half, 0, d_hidden);
  }
  return d_hidden;
}

ForwardOutput ModernBertForSequenceClassification::forward(const ModelInputs& inputs, const ForwardOptions& options) {
  ANATOMY_CHECK(inputs.input_ids.defined() && inputs.input_ids.rank() == 2 && inputs.input_ids.dtype() == DType::I64,
                "input_ids must be int64 [batch, seq]");
  forward_options_ = options;
  B_ = inputs.input_ids.dim(0);
  L_ = inputs.input_ids.dim(1);
  ids_ = inputs.input_ids;
  mask_ = inputs.attention_mask;
  const Category kept = options.save_for_backward ? Category::Activations : Category::Temporary;
  Ledger& ledger = backend_.ledger();
  auto step = std::make_unique<Step>();

  ledger.set_phase("forward embeddings");
  step->embeddings = SavedTensors(backend_, saved_for_backward(Part::Embeddings, 0, B_, L_), kept, "embeddings.");
  use_unit_weights(0, 1);
  embeddings_forward(step->embeddings);
  drop_unit_weights(0);
  const Tensor* hidden = &step->embeddings["out"];
  SavedTensors previous;
  const bool checkpointing = options.save_for_backward && options.gradient_checkpointing;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    ledger.set_phase(fmt::format("forward layer {}", l));
    const std::vector<SavedSpec> specs = saved_for_backward(Part::Layer, l, B_, L_);
    std::set<std::string> checkpoint = {"out"};
    if (options.selective_checkpointing)
      for (const SavedSpec& spec : specs)
        if (selective_recomputed().count(spec.name) == 0) checkpoint.insert(spec.name);
    SavedTensors layer(backend_, specs, kept, fmt::format("layer.{}.", l), checkpointing ? &checkpoint : nullptr);
    use_unit_weights(1 + l, 2 + l);
    layer_forward(l, *hidden, layer);
    drop_unit_weights(1 + l);
    if (checkpointing) layer.keep_only(checkpoint);
    if (options.save_for_backward) {
      step->layers.push_back(std::move(layer));
      hidden = &step->layers.back()["out"];
    } else {
      previous = std::move(layer);
      hidden = &previous["out"];
    }
  }
  ledger.set_phase("forward head");
  step->head = SavedTensors(backend_, saved_for_backward(Part::Head, 0, B_, L_), kept, "head.");
  use_unit_weights(config_.num_hidden_layers + 1, -1);
  head_forward(*hidden, step->head);
  drop_unit_weights(config_.num_hidden_layers + 1);

  ForwardOutput out;
  out.logits = step->head["logits"];
  if (inputs.labels.defined()) {
    out.problem_type = resolve_problem_type(config_, inputs.labels.dtype());
    step->dlogits = Tensor::empty(ledger, out.logits.shape(), DType::F32, Category::Temporary, "dlogits");
    ledger.set_phase("loss");
    out.loss = sequence_classification_loss(backend_, out.logits, inputs.labels, out.problem_type, step->dlogits,
                                            options.label_smoothing);
  }
  if (options.save_for_backward) step_ = std::move(step);
  else step_.reset();
  return out;
}

void ModernBertForSequenceClassification::backward(double loss_scale) {
  ANATOMY_CHECK(step_ && step_->dlogits.defined(), "backward without a training forward that computed a loss");
  std::unique_ptr<Step> step = std::move(step_);
  if (!lends_gradients()) gradients();
  Ledger& ledger = backend_.ledger();
  const int64_t head_unit = config_.num_hidden_layers + 1;

  ledger.set_phase("backward head");
  use_unit_weights(head_unit, head_unit - 1);
  use_unit_gradients(head_unit);
  if (loss_scale != 1.0) backend_.scale(step->dlogits, loss_scale);
  Tensor d_hidden = head_backward(step->head, step->dlogits);
  step->head = SavedTensors();
  drop_unit_weights(head_unit);
  unit_gradients_ready(head_unit);
  gradients_ready("model.final_norm.weight");

  for (int64_t l = config_.num_hidden_layers - 1; l >= 0; --l) {
    const Tensor& x = l > 0 ? step->layers[static_cast<size_t>(l - 1)]["out"] : step->embeddings["out"];
    use_unit_weights(1 + l, l);
    use_unit_gradients(1 + l);
    SavedTensors& saved = step->layers[static_cast<size_t>(l)];
    if (forward_options_.gradient_checkpointing && forward_options_.selective_checkpointing) {
      // Attention's internals and the MLP's input product again, from the kept h and h2.
      ledger.set_phase(fmt::format("recompute layer {}", l));
      std::vector<SavedSpec> specs;
      for (const SavedSpec& spec : saved_for_backward(Part::Layer, l, B_, L_))
        if (selective_recomputed().count(spec.name) != 0) specs.push_back(spec);
      SavedTensors again(backend_, specs, Category::Activations, fmt::format("layer.{}.", l));
      attention_part(l, attention_input(l, x), again);
      backend_.linear_forward(mlp_input(l, saved["x1"]), wh_.layers[static_cast<size_t>(l)].wi_w,
                              wh_.layers[static_cast<size_t>(l)].wi_b.defined()
                                  ? &wh_.layers[static_cast<size_t>(l)].wi_b
                                  : nullptr,
                              again["u"]);
      saved.absorb(std::move(again));
    } else if (forward_options_.gradient_checkpointing) {
      ledger.set_phase(fmt::format("recompute layer {}", l));
      SavedTensors layer(backend_, saved_for_backward(Part::Layer, l, B_, L_), Category::Activations,
                         fmt::format("layer.{}.", l));
      layer_forward(l, x, layer);
      saved = std::move(layer);
    }
    ledger.set_phase(fmt::format("backward layer {}", l));
    d_hidden = layer_backward(l, x, saved, d_hidden);
    step->layers.pop_back();
    drop_unit_weights(1 + l);
    unit_gradients_ready(1 + l);
    gradients_ready((layer_prefix(l) + (l > 0 ? "attn_norm.weight" : "attn.Wqkv.weight")).c_str());
  }
  ledger.set_phase("backward embeddings");
  use_unit_weights(0, -1);
  use_unit_gradients(0);
  embeddings_backward(step->embeddings, d_hidden);
  drop_unit_weights(0);
  unit_gradients_ready(0);
  gradients_ready(nullptr);
}

}  // namespace anatomy
