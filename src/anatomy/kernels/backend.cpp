// backend.cpp: Backend's ops as the model calls them (each described to the
// hook, then run by the backend), the default implementations of its
// optional ops, and what the profiler reports of each op.
//
// An op's cost: FLOPs count multiply-adds as two and element-wise maps as one
// per output element (a handful for LayerNorm and AdamW); bytes are the sizes
// of the tensors an op reads plus those it writes, each once: what an ideal
// fused kernel moves.
#include "anatomy/kernels/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <type_traits>
#include <utility>

namespace anatomy {

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::Contraction: return "tensor contraction";
    case OpClass::Normalization: return "statistical normalization";
    case OpClass::Elementwise: return "element-wise";
    case OpClass::Optimizer: return "optimizer";
    case OpClass::Communication: return "communication";
    case OpClass::Data: return "data";
  }
  return "?";
}

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What follows the last ".<digits>." of `s` (a layer's index, "layer.12."), or npos.
size_t after_last_index(const std::string& s) {
  size_t found = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '.' || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i + 1]))) continue;
    size_t j = i + 1;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j < s.size() && s[j] == '.') found = j + 1;
  }
  return found;
}

double bytes_of(const Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; }
double bytes_of(const Tensor* t) { return t ? bytes_of(*t) : 0.0; }
double numel_of(const Tensor& t) { return static_cast<double>(t.numel()); }

const char* activation_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::GeluErf: return "gelu";
    case ActivationKind::GeluTanh: return "gelu_new";
    case ActivationKind::Relu: return "relu";
    case ActivationKind::Tanh: return "tanh";
  }
  return "activation";
}

}  // namespace

std::string operand_name(const std::string& tensor_name) {
  std::string s = tensor_name;
  for (const char* prefix : {"half.", "grad.", "exp_avg_sq.", "exp_avg."})
    if (starts_with(s, prefix)) s = s.substr(std::string(prefix).size());
  for (const char* suffix : {".weight", ".bias"})
    if (ends_with(s, suffix)) s = s.substr(0, s.size() - std::string(suffix).size());
  // A layer's parameter: what follows its index. Else the name without the
  // model's own prefix (Hugging Face's base_model_prefix: "bert.", "roberta.")
  // when one precedes a module and its tensor.
  if (const size_t at = after_last_index(s); at != std::string::npos) return s.substr(at);
  const size_t first = s.find('.');
  if (first != std::string::npos && s.find('.', first + 1) != std::string::npos) return s.substr(first + 1);
  return s;
}

template <typename Describe, typename Call>
auto Backend::run_op(Describe&& describe, Call&& call) {
  if (hook_ == nullptr || in_op_ || !hook_->recording()) return call();
  in_op_ = true;
  struct Leave {
    bool& in_op;
    ~Leave() { in_op = false; }
  } leave{in_op_};
  hook_->begin(describe());
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    hook_->end();
  } else {
    auto result = call();
    hook_->end();
    return result;
  }
}

void Backend::zero(const Tensor& t) {
  run_op(
      [&] {
        return OpInfo{"zero", operand_name(t.name()), OpClass::Elementwise, 0.0, bytes_of(t)};
      },
      [&] { do_zero(t); });
}
void Backend::upload_async(const Tensor& dst, const void* src) {
  run_op(
      [&] {
        return OpInfo{"upload_async", operand_name(dst.name()), OpClass::Data, 0.0, bytes_of(dst)};
      },
      [&] { do_upload_async(dst, src); });
}
void Backend::copy_from_host(const Tensor& dst, const void* src) {
  run_op(
      [&] {
        return OpInfo{"copy_from_host", operand_name(dst.name()), OpClass::Data, 0.0, bytes_of(dst)};
      },
      [&] { do_copy_from_host(dst, src); });
}
void Backend::copy_to_host(const Tensor& src, void* dst) {
  run_op(
      [&] {
        return OpInfo{"copy_to_host", operand_name(src.name()), OpClass::Data, 0.0, bytes_of(src)};
      },
      [&] { do_copy_to_host(src, dst); });
}
void Backend::copy(const Tensor& dst, const Tensor& src) {
  run_op(
      [&] {
        return OpInfo{"copy", operand_name(dst.name()), OpClass::Elementwise, 0.0, bytes_of(dst) + bytes_of(src)};
      },
      [&] { do_copy(dst, src); });
}
void Backend::cast(const Tensor& src, const Tensor& dst) {
  run_op(
      [&] {
        return OpInfo{"cast", operand_name(dst.name()), OpClass::Elementwise, numel_of(dst),
                      bytes_of(dst) + bytes_of(src)};
      },
      [&] { do_cast(src, dst); });
}

void Backend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) {
  run_op(
      [&] {
        const double M = numel_of(x) / static_cast<double>(x.dim(-1)), K = static_cast<double>(x.dim(-1)),
                     N = static_cast<double>(w.dim(0));
        return OpInfo{"linear_forward", operand_name(w.name()), OpClass::Contraction,
                      2.0 * M * N * K + (b ? M * N : 0.0), bytes_of(x) + bytes_of(w) + bytes_of(b) + bytes_of(y)};
      },
      [&] { do_linear_forward(x, w, b, y); });
}
void Backend::linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor& dw,
                              const Tensor* db, bool accumulate_dx) {
  run_op(
      [&] {
        const double M = numel_of(x) / static_cast<double>(x.dim(-1)), K = static_cast<double>(x.dim(-1)),
                     N = static_cast<double>(w.dim(0));
        const double flops = 2.0 * M * N * K * ((dx ? 1.0 : 0.0) + (dw.defined() ? 1.0 : 0.0)) + (db ? M * N : 0.0);
        const double bytes = bytes_of(dy) * ((dx ? 1.0 : 0.0) + (dw.defined() || db ? 1.0 : 0.0)) +
                             (dw.defined() ? bytes_of(x) : 0.0) + bytes_of(dx) * (accumulate_dx ? 2.0 : 1.0) +
                             (dx ? bytes_of(w) : 0.0) + 2.0 * bytes_of(dw) + 2.0 * bytes_of(db);
        return OpInfo{"linear_backward", operand_name(w.name()), OpClass::Contraction, flops, bytes};
      },
      [&] { do_linear_backward(dy, x, w, dx, dw, db, accumulate_dx); });
}
void Backend::residual_layernorm_forward(const Tensor& x, const Tensor& residual, const DropoutSpec& dropout,
                                         const Tensor& gamma, const Tensor& beta, double eps, const Tensor& sum,
                                         const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  run_op(
      [&] {
        return OpInfo{"residual_layernorm_forward", operand_name(gamma.name()), OpClass::Normalization,
                      10.0 * numel_of(y),
                      bytes_of(x) + bytes_of(residual) + bytes_of(sum) + bytes_of(y) + bytes_of(gamma) +
                          bytes_of(beta) + bytes_of(mean) + bytes_of(rstd)};
      },
      [&] { do_residual_layernorm_forward(x, residual, dropout, gamma, beta, eps, sum, y, mean, rstd); });
}
void Backend::residual_layernorm_backward(const Tensor& dy, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                          const Tensor& gamma, const DropoutSpec& dropout, const Tensor& d_residual,
                                          const Tensor& d_x, const Tensor& dgamma, const Tensor& dbeta,
                                          const Tensor* d_bias) {
  run_op(
      [&] {
        return OpInfo{"residual_layernorm_backward", operand_name(gamma.name()), OpClass::Normalization,
                      (d_bias ? 15.0 : 14.0) * numel_of(sum),
                      bytes_of(dy) + bytes_of(sum) + bytes_of(mean) + bytes_of(rstd) + bytes_of(gamma) +
                          bytes_of(d_residual) + bytes_of(d_x) +
                          2.0 * (bytes_of(dgamma) + bytes_of(dbeta) + bytes_of(d_bias))};
      },
      [&] {
        do_residual_layernorm_backward(dy, sum, mean, rstd, gamma, dropout, d_residual, d_x, dgamma, dbeta, d_bias);
      });
}
// The batched products are one op each; the operand names the first's layer
// ("attention.self.query") with the count ("x3").
void Backend::linear_forward_n(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                               const std::vector<Tensor>& y) {
  run_op(
      [&] {
        const double M = numel_of(x) / static_cast<double>(x.dim(-1)), K = static_cast<double>(x.dim(-1));
        double flops = 0, bytes = bytes_of(x);
        for (size_t i = 0; i < w.size(); ++i) {
          const double N = static_cast<double>(w[i].dim(0));
          flops += 2.0 * M * N * K + M * N;
          bytes += bytes_of(w[i]) + bytes_of(b[i]) + bytes_of(y[i]);
        }
        return OpInfo{"linear_forward", fmt::format("{} x{}", operand_name(w[0].name()), w.size()),
                      OpClass::Contraction, flops, bytes};
      },
      [&] { do_linear_forward_n(x, w, b, y); });
}
void Backend::linear_backward_weights_n(const std::vector<Tensor>& dy, const Tensor& x, const std::vector<Tensor>& w,
                                        const std::vector<Tensor>& dw, const std::vector<Tensor>& db) {
  run_op(
      [&] {
        const double M = numel_of(x) / static_cast<double>(x.dim(-1)), K = static_cast<double>(x.dim(-1));
        double flops = 0, bytes = bytes_of(x);
        for (size_t i = 0; i < dy.size(); ++i) {
          const double N = static_cast<double>(w[i].dim(0));
          flops += 2.0 * M * N * K + M * N;
          bytes += bytes_of(dy[i]) + 2.0 * bytes_of(dw[i]) + 2.0 * bytes_of(db[i]);
        }
        return OpInfo{"linear_backward_weights", fmt::format("{} x{}", operand_name(w[0].name()), w.size()),
                      OpClass::Contraction, flops, bytes};
      },
      [&] { do_linear_backward_weights_n(dy, x, w, dw, db); });
}
void Backend::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate) {
  run_op(
      [&] {
        return OpInfo{"embedding_forward", operand_name(table.name()), OpClass::Elementwise,
                      accumulate ? numel_of(out) : 0.0, bytes_of(ids) + bytes_of(out) * (accumulate ? 3.0 : 2.0)};
      },
      [&] { do_embedding_forward(ids, table, out, accumulate); });
}
void Backend::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx) {
  run_op(
      [&] {
        return OpInfo{"embedding_backward", operand_name(dtable.name()), OpClass::Elementwise, numel_of(dout),
                      bytes_of(ids) + 3.0 * bytes_of(dout)};
      },
      [&] { do_embedding_backward(ids, dout, dtable, padding_idx); });
}
void Backend::positions_past_padding(const Tensor& ids, int64_t padding_idx, const Tensor& positions) {
  ANATOMY_CHECK(ids.rank() == 2 && ids.dtype() == DType::I64 && positions.shape() == ids.shape() &&
                    positions.dtype() == DType::I64,
                "positions_past_padding: {} and {} must be int64 [batch, seq] alike", ids.name(), positions.name());
  run_op(
      [&] {
        return OpInfo{"positions_past_padding", operand_name(positions.name()), OpClass::Elementwise, numel_of(ids),
                      bytes_of(ids) + bytes_of(positions)};
      },
      [&] { do_positions_past_padding(ids, padding_idx, positions); });
}
void Backend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                                const Tensor& mean, const Tensor& rstd) {
  run_op(
      [&] {
        return OpInfo{"layernorm_forward", operand_name(gamma.name()), OpClass::Normalization, 8.0 * numel_of(x),
                      bytes_of(x) + bytes_of(y) + bytes_of(gamma) + bytes_of(beta) + bytes_of(mean) + bytes_of(rstd)};
      },
      [&] { do_layernorm_forward(x, gamma, beta, eps, y, mean, rstd); });
}
// The embeddings block is one op each way, named after its LayerNorm. The
// bytes are what it must move at least: the gathered word rows, the position
// and token-type tables, sum and out written (forward); dout and sum read,
// work and d_sum written (backward).
void Backend::embeddings_layernorm_forward(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                           const Tensor& word, const Tensor& position, const Tensor& token_type,
                                           const Tensor& gamma, const Tensor& beta, double eps,
                                           const DropoutSpec& dropout, const Tensor& sum, const Tensor& mean,
                                           const Tensor& rstd, const Tensor& work, const Tensor& out) {
  run_op(
      [&] {
        return OpInfo{"embeddings_layernorm_forward", operand_name(gamma.name()), OpClass::Normalization,
                      12.0 * numel_of(sum),
                      bytes_of(ids) + bytes_of(positions) + bytes_of(token_types) + 2.0 * bytes_of(sum) +
                          bytes_of(position) + bytes_of(token_type) + bytes_of(out) + bytes_of(mean) + bytes_of(rstd) +
                          bytes_of(gamma) + bytes_of(beta)};
      },
      [&] {
        do_embeddings_layernorm_forward(ids, positions, token_types, word, position, token_type, gamma, beta, eps,
                                        dropout, sum, mean, rstd, work, out);
      });
}
void Backend::embeddings_layernorm_backward(const Tensor& dout, const Tensor& sum, const Tensor& mean,
                                            const Tensor& rstd, const Tensor& gamma, const DropoutSpec& dropout,
                                            const Tensor& work, const Tensor& d_sum, const Tensor& dgamma,
                                            const Tensor& dbeta) {
  run_op(
      [&] {
        return OpInfo{"embeddings_layernorm_backward", operand_name(gamma.name()), OpClass::Normalization,
                      14.0 * numel_of(sum),
                      bytes_of(dout) + bytes_of(sum) + bytes_of(work) + bytes_of(d_sum) + bytes_of(mean) +
                          bytes_of(rstd) + bytes_of(gamma) + 2.0 * (bytes_of(dgamma) + bytes_of(dbeta))};
      },
      [&] { do_embeddings_layernorm_backward(dout, sum, mean, rstd, gamma, dropout, work, d_sum, dgamma, dbeta); });
}
void Backend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  run_op(
      [&] {
        return OpInfo{"layernorm_backward", operand_name(gamma.name()), OpClass::Normalization, 12.0 * numel_of(x),
                      bytes_of(dy) + bytes_of(x) + bytes_of(dx) + bytes_of(mean) + bytes_of(rstd) + bytes_of(gamma) +
                          2.0 * (bytes_of(dgamma) + bytes_of(dbeta))};
      },
      [&] { do_layernorm_backward(dy, x, mean, rstd, gamma, dx, dgamma, dbeta); });
}
void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  run_op(
      [&] {
        return OpInfo{"add", operand_name(out.name()), OpClass::Elementwise, numel_of(out),
                      bytes_of(a) + bytes_of(b) + bytes_of(out)};
      },
      [&] { do_add(a, b, out); });
}
void Backend::add_inplace(const Tensor& dst, const Tensor& src) {
  run_op(
      [&] {
        return OpInfo{"add_inplace", operand_name(dst.name()), OpClass::Elementwise, numel_of(dst),
                      2.0 * bytes_of(dst) + bytes_of(src)};
      },
      [&] { do_add_inplace(dst, src); });
}
void Backend::activation_forward(ActivationKind kind, const Tensor& x, const Tensor& y) {
  run_op(
      [&] {
        return OpInfo{"activation_forward", activation_name(kind), OpClass::Elementwise, numel_of(y),
                      bytes_of(x) + bytes_of(y)};
      },
      [&] { do_activation_forward(kind, x, y); });
}
void Backend::activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy, const Tensor& dx) {
  run_op(
      [&] {
        return OpInfo{"activation_backward", activation_name(kind), OpClass::Elementwise, numel_of(dx),
                      bytes_of(saved) + bytes_of(dy) + bytes_of(dx)};
      },
      [&] { do_activation_backward(kind, saved, dy, dx); });
}
void Backend::activation_backward_recompute(ActivationKind kind, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                            const Tensor& y, const Tensor* d_bias) {
  run_op(
      [&] {
        return OpInfo{"activation_backward", activation_name(kind), OpClass::Elementwise,
                      (d_bias ? 3.0 : 2.0) * numel_of(dx),
                      bytes_of(x) + bytes_of(dy) + bytes_of(dx) + bytes_of(y) + 2.0 * bytes_of(d_bias)};
      },
      [&] { do_activation_backward_recompute(kind, x, dy, dx, y, d_bias); });
}
void Backend::dropout(const Tensor& x, const Tensor& y, const DropoutSpec& spec) {
  run_op(
      [&] {
        return OpInfo{"dropout", operand_name(y.name()), OpClass::Elementwise, numel_of(y), bytes_of(x) + bytes_of(y)};
      },
      [&] { do_dropout(x, y, spec); });
}
void Backend::select_row(const Tensor& x, int64_t row, const Tensor& out) {
  run_op(
      [&] {
        return OpInfo{"select_row", operand_name(out.name()), OpClass::Elementwise, 0.0, 2.0 * bytes_of(out)};
      },
      [&] { do_select_row(x, row, out); });
}
void Backend::select_row_backward(const Tensor& dout, int64_t row, const Tensor& dx) {
  run_op(
      [&] {
        return OpInfo{"select_row_backward", operand_name(dx.name()), OpClass::Elementwise, numel_of(dout),
                      3.0 * bytes_of(dout)};
      },
      [&] { do_select_row_backward(dout, row, dx); });
}

void Backend::mask_rows(const Tensor& x, const Tensor& mask) {
  ANATOMY_CHECK(x.rank() == 3 && mask.dtype() == DType::I64 && mask.numel() == x.dim(0) * x.dim(1),
                "mask_rows: {} must be [B, L, H] and {} int64 [B, L]", x.name(), mask.name());
  run_op(
      [&] {
        return OpInfo{"mask_rows", operand_name(x.name()), OpClass::Elementwise, numel_of(x),
                      2.0 * bytes_of(x) + bytes_of(mask)};
      },
      [&] { do_mask_rows(x, mask); });
}

// Attention FLOPs: scores Q·Kᵀ and context P·V, 2·B·heads·L²·d each. Backward
// computes dV, dP, dQ and dK (four more) and, when the forward kept no
// probabilities, recomputes the scores (a fifth).
void Backend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                int64_t heads, double scale, const DropoutSpec& dropout, const Tensor& saved,
                                const Tensor& ctx) {
  run_op(
      [&] {
        const double B = static_cast<double>(q.dim(0)), L = static_cast<double>(q.dim(1)),
                     hd = static_cast<double>(q.dim(2));
        return OpInfo{"attention_forward", "attention", OpClass::Contraction, 4.0 * B * L * L * hd,
                      bytes_of(q) + bytes_of(k) + bytes_of(v) + bytes_of(key_mask) + bytes_of(saved) + bytes_of(ctx)};
      },
      [&] { do_attention_forward(q, k, v, key_mask, heads, scale, dropout, saved, ctx); });
}
namespace {

// attention_backward's FLOPs (the fused kernels recompute the probabilities)
// and the bytes it reads besides the gradients it writes; the interleaved
// variant is the same operation, timed under the same name.
double attention_backward_flops(const Backend& inner, const Tensor& q, int64_t heads) {
  const double B = static_cast<double>(q.dim(0)), L = static_cast<double>(q.dim(1)), hd = static_cast<double>(q.dim(2));
  return (inner.attention_saves_probabilities(q.dtype(), q.dim(2) / heads) ? 8.0 : 10.0) * B * L * L * hd;
}
double attention_backward_input_bytes(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& ctx, const Tensor& saved, const Tensor& key_mask) {
  return bytes_of(dctx) + bytes_of(q) + bytes_of(k) + bytes_of(v) + bytes_of(ctx) + bytes_of(saved) +
         bytes_of(key_mask);
}

}  // namespace

void Backend::attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                 double scale, const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                                 const Tensor& dv) {
  run_op(
      [&] {
        return OpInfo{"attention_backward", "attention", OpClass::Contraction,
                      attention_backward_flops(*this, q, heads),
                      attention_backward_input_bytes(dctx, q, k, v, ctx, saved, key_mask) + bytes_of(dq) +
                          bytes_of(dk) + bytes_of(dv)};
      },
      [&] { do_attention_backward(dctx, q, k, v, ctx, saved, key_mask, heads, scale, dropout, dq, dk, dv); });
}
void Backend::attention_backward_interleaved(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& ctx, const Tensor& saved, const Tensor& key_mask,
                                             int64_t heads, double scale, const DropoutSpec& dropout,
                                             const Tensor& dqkv) {
  run_op(
      [&] {
        return OpInfo{"attention_backward", "attention", OpClass::Contraction,
                      attention_backward_flops(*this, q, heads),
                      attention_backward_input_bytes(dctx, q, k, v, ctx, saved, key_mask) + bytes_of(dqkv)};
      },
      [&] { do_attention_backward_interleaved(dctx, q, k, v, ctx, saved, key_mask, heads, scale, dropout, dqkv); });
}

// The (query, key) pairs within a window, times the hidden size: what the
// windowed attention's products cost (Σ over rows of the keys within the window).
static double window_score_count(const Tensor& q, int64_t window) {
  const int64_t L = q.dim(1);
  double pairs = 0.0;
  for (int64_t i = 0; i < L; ++i)
    pairs += static_cast<double>(std::min(L - 1, i + window) - std::max<int64_t>(0, i - window) + 1);
  return static_cast<double>(q.dim(0)) * pairs * static_cast<double>(q.dim(2));
}
void Backend::attention_window_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                       int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                                       const Tensor& saved, const Tensor& ctx) {
  ANATOMY_CHECK(q.rank() == 3 && heads > 0 && q.dim(2) % heads == 0 && k.shape() == q.shape() &&
                    v.shape() == q.shape() && ctx.shape() == q.shape() && window >= 0,
                "attention_window_forward: q, k, v, ctx must be [B, L, heads*d] alike (window {})", window);
  const bool probabilities = attention_window_saves_probabilities(q.dtype(), q.dim(2) / heads, dropout.p);
  const int64_t rows = q.dim(0) * heads * q.dim(1);
  ANATOMY_CHECK(saved.dtype() == DType::F32 && saved.numel() == (probabilities ? rows * q.dim(1) : rows),
                "attention_window_forward: {} must be float32 [B, heads, L{}]", saved.name(),
                probabilities ? ", L" : "");
  run_op(
      [&] {
        return OpInfo{"attention_forward", "attention", OpClass::Contraction, 4.0 * window_score_count(q, window),
                      bytes_of(q) + bytes_of(k) + bytes_of(v) + bytes_of(key_mask) + bytes_of(saved) + bytes_of(ctx)};
      },
      [&] { do_attention_window_forward(q, k, v, key_mask, heads, scale, window, dropout, saved, ctx); });
}
void Backend::attention_window_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                        double scale, int64_t window, const DropoutSpec& dropout, const Tensor& dq,
                                        const Tensor& dk, const Tensor& dv) {
  ANATOMY_CHECK(dq.shape() == q.shape() && dk.shape() == q.shape() && dv.shape() == q.shape() &&
                    dctx.shape() == q.shape() && ctx.shape() == q.shape() && saved.dtype() == DType::F32 &&
                    window >= 0,
                "attention_window_backward: gradients and ctx must be shaped as q, {} float32 (window {})",
                saved.name(), window);
  run_op(
      [&] {
        return OpInfo{"attention_backward", "attention", OpClass::Contraction, 8.0 * window_score_count(q, window),
                      bytes_of(dctx) + bytes_of(q) + bytes_of(k) + bytes_of(v) + bytes_of(ctx) + bytes_of(saved) +
                          bytes_of(key_mask) + bytes_of(dq) + bytes_of(dk) + bytes_of(dv)};
      },
      [&] {
        do_attention_window_backward(dctx, q, k, v, ctx, saved, key_mask, heads, scale, window, dropout, dq, dk, dv);
      });
}
// DeBERTa's attention: the plain attention's four products per head, and the
// content-to-position and position-to-content products of each term it has
// (2·B·L·P·H each forward, three times that backward).
void Backend::attention_relative_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_q,
                                         const Tensor& pos_k, const Tensor& rel_index, const Tensor& rel_ranges,
                                         const Tensor& key_mask, int64_t heads, double scale,
                                         const DropoutSpec& dropout, const Tensor& probs, const Tensor& ctx) {
  ANATOMY_CHECK(q.rank() == 3 && heads > 0 && q.dim(2) % heads == 0 && k.shape() == q.shape() &&
                    v.shape() == q.shape() && ctx.shape() == q.shape(),
                "attention_relative_forward: q, k, v, ctx must be [B, L, heads*d] alike");
  ANATOMY_CHECK(probs.dtype() == DType::F32 && probs.numel() == q.dim(0) * heads * q.dim(1) * q.dim(1),
                "attention_relative_forward: {} must be float32 [B, heads, L, L]", probs.name());
  ANATOMY_CHECK(rel_index.dtype() == DType::I64 && rel_index.numel() == std::max<int64_t>(2 * q.dim(1) - 1, 0) &&
                    rel_ranges.dtype() == DType::I64 && rel_ranges.rank() == 2 && rel_ranges.dim(1) == 2,
                "attention_relative_forward: relative position tables of the wrong shape");
  for (const Tensor* pos : {&pos_q, &pos_k})
    ANATOMY_CHECK(!pos->defined() || (pos->rank() == 2 && pos->dim(0) == rel_ranges.dim(0) &&
                                      pos->dim(1) == q.dim(2) && pos->dtype() == q.dtype()),
                  "attention_relative_forward: {} must be [P, heads*d] in q's dtype", pos->name());
  run_op(
      [&] {
        const double B = static_cast<double>(q.dim(0)), L = static_cast<double>(q.dim(1)),
                     hd = static_cast<double>(q.dim(2)), P = static_cast<double>(rel_ranges.dim(0));
        const double terms = (pos_q.defined() ? 1.0 : 0.0) + (pos_k.defined() ? 1.0 : 0.0);
        return OpInfo{"attention_forward", "attention", OpClass::Contraction,
                      4.0 * B * L * L * hd + terms * 2.0 * B * L * P * hd,
                      bytes_of(q) + bytes_of(k) + bytes_of(v) + bytes_of(pos_q) + bytes_of(pos_k) +
                          bytes_of(key_mask) + bytes_of(probs) + bytes_of(ctx)};
      },
      [&] {
        do_attention_relative_forward(q, k, v, pos_q, pos_k, rel_index, rel_ranges, key_mask, heads, scale, dropout,
                                      probs, ctx);
      });
}
void Backend::attention_relative_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& pos_q, const Tensor& pos_k, const Tensor& rel_index,
                                          const Tensor& rel_ranges, const Tensor& probs, int64_t heads, double scale,
                                          const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                                          const Tensor& dv, const Tensor& dpos_q, const Tensor& dpos_k) {
  ANATOMY_CHECK(dq.shape() == q.shape() && dk.shape() == q.shape() && dv.shape() == q.shape() &&
                    dctx.shape() == q.shape() && probs.dtype() == DType::F32,
                "attention_relative_backward: gradients must be shaped as q, probabilities float32");
  ANATOMY_CHECK(pos_q.defined() == dpos_q.defined() && pos_k.defined() == dpos_k.defined() &&
                    (!dpos_q.defined() || dpos_q.shape() == pos_q.shape()) &&
                    (!dpos_k.defined() || dpos_k.shape() == pos_k.shape()),
                "attention_relative_backward: position gradients must be shaped as pos_q and pos_k");
  run_op(
      [&] {
        const double B = static_cast<double>(q.dim(0)), L = static_cast<double>(q.dim(1)),
                     hd = static_cast<double>(q.dim(2)), P = static_cast<double>(rel_ranges.dim(0));
        const double terms = (pos_q.defined() ? 1.0 : 0.0) + (pos_k.defined() ? 1.0 : 0.0);
        return OpInfo{"attention_backward", "attention", OpClass::Contraction,
                      8.0 * B * L * L * hd + terms * 4.0 * B * L * P * hd,
                      bytes_of(dctx) + bytes_of(q) + bytes_of(k) + bytes_of(v) + bytes_of(pos_q) + bytes_of(pos_k) +
                          bytes_of(probs) + bytes_of(dq) + bytes_of(dk) + bytes_of(dv) + bytes_of(dpos_q) +
                          bytes_of(dpos_k)};
      },
      [&] {
        do_attention_relative_backward(dctx, q, k, v, pos_q, pos_k, rel_index, rel_ranges, probs, heads, scale,
                                       dropout, dq, dk, dv, dpos_q, dpos_k);
      });
}
void Backend::rotary(const Tensor& x, int64_t heads, double theta, bool inverse) {
  ANATOMY_CHECK(x.rank() == 3 && heads > 0 && x.dim(2) % heads == 0 && (x.dim(2) / heads) % 2 == 0 && theta > 0.0,
                "rotary: {} must be [B, L, heads*d] with an even head size d", x.name());
  run_op(
      [&] {
        return OpInfo{inverse ? "rotary_backward" : "rotary", operand_name(x.name()), OpClass::Elementwise,
                      3.0 * numel_of(x), 2.0 * bytes_of(x)};
      },
      [&] { do_rotary(x, heads, theta, inverse); });
}
void Backend::gated_activation_forward(ActivationKind kind, const Tensor& u, const Tensor& y) {
  ANATOMY_CHECK(kind != ActivationKind::Tanh, "gated_activation_forward: tanh is not a gate's activation");
  ANATOMY_CHECK(u.numel() == 2 * y.numel() && u.dim(-1) == 2 * y.dim(-1) && u.dtype() == y.dtype(),
                "gated_activation_forward: {} must be {} with a last dimension twice as wide", u.name(), y.name());
  run_op(
      [&] {
        return OpInfo{"gated_activation", operand_name(y.name()), OpClass::Elementwise, 10.0 * numel_of(y),
                      bytes_of(u) + bytes_of(y)};
      },
      [&] { do_gated_activation_forward(kind, u, y); });
}
void Backend::gated_activation_backward(ActivationKind kind, const Tensor& u, const Tensor& dy, const Tensor& du) {
  ANATOMY_CHECK(kind != ActivationKind::Tanh, "gated_activation_backward: tanh is not a gate's activation");
  ANATOMY_CHECK(u.shape() == du.shape() && u.numel() == 2 * dy.numel() && u.dim(-1) == 2 * dy.dim(-1) &&
                    u.dtype() == dy.dtype() && du.dtype() == u.dtype(),
                "gated_activation_backward: {}, {} and {} do not fit", u.name(), dy.name(), du.name());
  run_op(
      [&] {
        return OpInfo{"gated_activation_backward", operand_name(du.name()), OpClass::Elementwise,
                      16.0 * numel_of(dy), bytes_of(u) + bytes_of(dy) + bytes_of(du)};
      },
      [&] { do_gated_activation_backward(kind, u, dy, du); });
}
// The first query's attention: scores and context, 2·B·L·H each; backward
// dP, dQ, dK and dV, four more.
void Backend::attention_first_query_forward(const Tensor& q0, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                            int64_t heads, double scale, const DropoutSpec& dropout,
                                            const Tensor& probs, const Tensor& ctx0) {
  run_op(
      [&] {
        return OpInfo{"attention_forward", "attention (first query)", OpClass::Contraction, 4.0 * numel_of(k),
                      bytes_of(q0) + bytes_of(k) + bytes_of(v) + bytes_of(key_mask) + bytes_of(probs) + bytes_of(ctx0)};
      },
      [&] { do_attention_first_query_forward(q0, k, v, key_mask, heads, scale, dropout, probs, ctx0); });
}
void Backend::attention_first_query_backward(const Tensor& dctx0, const Tensor& q0, const Tensor& k, const Tensor& v,
                                             const Tensor& probs, int64_t heads, double scale,
                                             const DropoutSpec& dropout, const Tensor& dq0, const Tensor& dk,
                                             const Tensor& dv) {
  run_op(
      [&] {
        return OpInfo{"attention_backward", "attention (first query)", OpClass::Contraction, 8.0 * numel_of(k),
                      bytes_of(dctx0) + bytes_of(q0) + bytes_of(k) + bytes_of(v) + bytes_of(probs) + bytes_of(dq0) +
                          bytes_of(dk) + bytes_of(dv)};
      },
      [&] { do_attention_first_query_backward(dctx0, q0, k, v, probs, heads, scale, dropout, dq0, dk, dv); });
}

double Backend::cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                              double label_smoothing) {
  ANATOMY_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "cross_entropy: label smoothing {} outside [0, 1]",
                label_smoothing);
  return run_op(
      [&] {
        return OpInfo{"cross_entropy", "loss", OpClass::Normalization, 6.0 * numel_of(logits),
                      bytes_of(logits) + bytes_of(labels) + bytes_of(dlogits)};
      },
      [&] { return do_cross_entropy(logits, labels, dlogits, label_smoothing); });
}
double Backend::cross_entropy_sum(const Tensor& logits, const Tensor& labels, const Tensor& dlogits, double scale) {
  ANATOMY_CHECK(logits.rank() == 2 && labels.dtype() == DType::I64 && labels.numel() == logits.dim(0),
                "cross_entropy_sum: {} is not rows with one int64 label each in {}", logits.name(), labels.name());
  ANATOMY_CHECK(!dlogits.defined() || dlogits.numel() == logits.numel(), "cross_entropy_sum: {} does not fit {}",
                dlogits.name(), logits.name());
  return run_op(
      [&] {
        return OpInfo{"cross_entropy", "loss", OpClass::Normalization, 6.0 * numel_of(logits),
                      bytes_of(logits) + bytes_of(labels) + (dlogits.defined() ? bytes_of(dlogits) : 0)};
      },
      [&] { return do_cross_entropy_sum(logits, labels, dlogits, scale); });
}
double Backend::mse(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) {
  return run_op(
      [&] {
        return OpInfo{"mse", "loss", OpClass::Elementwise, 4.0 * numel_of(logits),
                      bytes_of(logits) + bytes_of(targets) + bytes_of(dlogits)};
      },
      [&] { return do_mse(logits, targets, dlogits); });
}
double Backend::bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) {
  return run_op(
      [&] {
        return OpInfo{"bce_with_logits", "loss", OpClass::Elementwise, 8.0 * numel_of(logits),
                      bytes_of(logits) + bytes_of(targets) + bytes_of(dlogits)};
      },
      [&] { return do_bce_with_logits(logits, targets, dlogits); });
}
double Backend::sum_of_squares(const Tensor& t) {
  return run_op(
      [&] {
        return OpInfo{"sum_of_squares", operand_name(t.name()), OpClass::Optimizer, 2.0 * numel_of(t), bytes_of(t)};
      },
      [&] { return do_sum_of_squares(t); });
}
void Backend::scale(const Tensor& t, double factor) {
  run_op(
      [&] {
        return OpInfo{"scale", operand_name(t.name()), OpClass::Optimizer, numel_of(t), 2.0 * bytes_of(t)};
      },
      [&] { do_scale(t, factor); });
}
void Backend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                         const AdamWHyper& hyper) {
  run_op(
      [&] {
        return OpInfo{"adamw_step", "adamw", OpClass::Optimizer, 12.0 * numel_of(param),
                      2.0 * (bytes_of(param) + bytes_of(exp_avg) + bytes_of(exp_avg_sq)) + bytes_of(grad)};
      },
      [&] { do_adamw_step(param, grad, exp_avg, exp_avg_sq, hyper); });
}

void Backend::adamw_step_flat(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                              const std::vector<ParamSegment>& segments, const AdamWHyper& hyper,
                              const Tensor* half_copy) {
  run_op(
      [&] {
        double n = 0.0;
        for (const ParamSegment& seg : segments) n += static_cast<double>(seg.count);
        return OpInfo{"adamw_step", "adamw", OpClass::Optimizer, 12.0 * n, n * (4.0 * 7.0 + (half_copy ? 2.0 : 0.0))};
      },
      [&] { do_adamw_step_flat(param, grad, exp_avg, exp_avg_sq, segments, hyper, half_copy); });
}

void Backend::sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                            const std::vector<ParamSegment>& segments, const SgdHyper& hyper, const Tensor* half_copy) {
  run_op(
      [&] {
        double n = 0.0;
        for (const ParamSegment& seg : segments) n += static_cast<double>(seg.count);
        const double words = momentum_buf.defined() ? 5.0 : 3.0;  // p read+write, g read, buffer read+write
        return OpInfo{"sgd_step", "sgd", OpClass::Optimizer, 5.0 * n, n * (4.0 * words + (half_copy ? 2.0 : 0.0))};
      },
      [&] { do_sgd_step_flat(param, grad, momentum_buf, segments, hyper, half_copy); });
}

void Backend::adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state, const Tensor& col_state,
                             const Tensor& v_state, const AdafactorHyper& hyper, const Tensor* half_copy) {
  run_op(
      [&] {
        const auto n = static_cast<double>(param.numel());
        // grad read twice (statistics, then the update), param read and written.
        return OpInfo{"adafactor_step", param.name(), OpClass::Optimizer, 10.0 * n,
                      n * (4.0 * 4.0 + (half_copy ? 2.0 : 0.0))};
      },
      [&] { do_adafactor_step(param, grad, row_state, col_state, v_state, hyper, half_copy); });
}

void Backend::adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                             const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                             const AdamWHyper& hyper, const Tensor* half_copy) {
  run_op(
      [&] {
        const auto n = static_cast<double>(param.numel());
        // p read and written, g read, two one-byte states read and written.
        return OpInfo{"adamw8bit_step", param.name(), OpClass::Optimizer, 16.0 * n,
                      n * (4.0 * 3.0 + 4.0 + (half_copy ? 2.0 : 0.0))};
      },
      [&] { do_adamw8bit_step(param, grad, state1, state2, absmax1, absmax2, qmap1, qmap2, hyper, half_copy); });
}

// Packed attention: scores and context over each sequence, 4·len²·(heads·d).
void Backend::attention_forward_packed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                                       const std::vector<int64_t>& host_offsets, int64_t heads, double scale,
                                       const Tensor& ctx) {
  run_op(
      [&] {
        double flops = 0.0;
        for (size_t b = 0; b + 1 < host_offsets.size(); ++b) {
          const auto len = static_cast<double>(host_offsets[b + 1] - host_offsets[b]);
          flops += 4.0 * len * len * static_cast<double>(q.dim(-1));
        }
        return OpInfo{"attention_forward", "attention", OpClass::Contraction, flops,
                      bytes_of(q) + bytes_of(k) + bytes_of(v) + bytes_of(offsets) + bytes_of(ctx)};
      },
      [&] { do_attention_forward_packed(q, k, v, offsets, host_offsets, heads, scale, ctx); });
}

void Backend::do_attention_forward_packed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                                          const std::vector<int64_t>& host_offsets, int64_t heads, double scale,
                                          const Tensor& ctx) {
  attention_forward_packed_one_by_one(q, k, v, offsets, host_offsets, heads, scale, ctx);
}
void Backend::do_embeddings_layernorm_forward(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                              const Tensor& word, const Tensor& position, const Tensor& token_type,
                                              const Tensor& gamma, const Tensor& beta, double eps,
                                              const DropoutSpec& dropout, const Tensor& sum, const Tensor& mean,
                                              const Tensor& rstd, const Tensor& work, const Tensor& out) {
  embeddings_layernorm_forward_unfused(ids, positions, token_types, word, position, token_type, gamma, beta, eps,
                                       dropout, sum, mean, rstd, work, out);
}
void Backend::do_embeddings_layernorm_backward(const Tensor& dout, const Tensor& sum, const Tensor& mean,
                                               const Tensor& rstd, const Tensor& gamma, const DropoutSpec& dropout,
                                               const Tensor& work, const Tensor& d_sum, const Tensor& dgamma,
                                               const Tensor& dbeta) {
  embeddings_layernorm_backward_unfused(dout, sum, mean, rstd, gamma, dropout, work, d_sum, dgamma, dbeta);
}
void Backend::do_linear_forward_n(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                                  const std::vector<Tensor>& y) {
  for (size_t i = 0; i < w.size(); ++i) linear_forward(x, w[i], &b[i], y[i]);
}
void Backend::do_linear_backward_weights_n(const std::vector<Tensor>& dy, const Tensor& x,
                                           const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                                           const std::vector<Tensor>& db) {
  for (size_t i = 0; i < dy.size(); ++i) linear_backward(dy[i], x, w[i], nullptr, dw[i], &db[i]);
}

void Backend::attention_forward_packed_one_by_one(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& offsets, const std::vector<int64_t>& host_offsets,
                                                  int64_t heads, double scale, const Tensor& ctx) {
  (void)offsets;
  ANATOMY_CHECK(q.rank() == 2 && k.shape() == q.shape() && v.shape() == q.shape() && ctx.shape() == q.shape(),
                "attention_forward_packed: q, k, v and ctx must be [tokens, heads*d] alike");
  ANATOMY_CHECK(heads > 0 && q.dim(1) % heads == 0, "attention_forward_packed: {} columns do not split into {} heads",
                q.dim(1), heads);
  ANATOMY_CHECK(host_offsets.size() >= 2 && host_offsets.front() == 0 && host_offsets.back() == q.dim(0),
                "attention_forward_packed: the offsets do not cover the {} packed rows", q.dim(0));
  const int64_t width = q.dim(1);
  const bool probabilities = attention_saves_probabilities(q.dtype(), width / heads);
  for (size_t b = 0; b + 1 < host_offsets.size(); ++b) {
    const int64_t start = host_offsets[b], len = host_offsets[b + 1] - start;
    ANATOMY_CHECK(len >= 0, "attention_forward_packed: offsets decrease at sequence {}", b);
    if (len == 0) continue;
    const Shape one = {1, len, width};
    auto rows = [&](const Tensor& t) { return t.slice(start * width, one, t.name()); };
    const Shape saved_shape = probabilities ? Shape{1, heads, len, len} : Shape{1, heads, len};
    Tensor saved = Tensor::empty(ledger(), saved_shape, DType::F32, Category::Temporary, "attention_saved");
    attention_forward(rows(q), rows(k), rows(v), Tensor(), heads, scale, DropoutSpec{}, saved, rows(ctx));
  }
}

void Backend::embeddings_layernorm_forward_unfused(
    const Tensor& ids, const Tensor& positions, const Tensor& token_types, const Tensor& word, const Tensor& position,
    const Tensor& token_type, const Tensor& gamma, const Tensor& beta, double eps, const DropoutSpec& dropout_spec,
    const Tensor& sum, const Tensor& mean, const Tensor& rstd, const Tensor& work, const Tensor& out) {
  ANATOMY_CHECK(work.dtype() == DType::F32 && work.numel() == sum.numel() && out.numel() == sum.numel(),
                "embeddings_layernorm_forward: {} must be float32 like {}, and {} the same size", work.name(),
                sum.name(), out.name());
  embedding_forward(ids, word, sum, false);
  if (position.defined()) embedding_forward(positions, position, sum, true);  // DeBERTa has no position table
  if (token_type.defined()) embedding_forward(token_types, token_type, sum, true);
  layernorm_forward(sum, gamma, beta, eps, work, mean, rstd);
  dropout(work, work, dropout_spec);
  if (work.raw() != out.raw()) cast(work, out);
}

void Backend::embeddings_layernorm_backward_unfused(const Tensor& dout, const Tensor& sum, const Tensor& mean,
                                            const Tensor& rstd, const Tensor& gamma, const DropoutSpec& dropout_spec,
                                            const Tensor& work, const Tensor& d_sum, const Tensor& dgamma,
                                            const Tensor& dbeta) {
  ANATOMY_CHECK(work.dtype() == DType::F32 && work.numel() == dout.numel() && d_sum.numel() == dout.numel(),
                "embeddings_layernorm_backward: {} must be float32 the size of {}, and {} too", work.name(),
                dout.name(), d_sum.name());
  if (work.raw() != dout.raw()) cast(dout, work);
  dropout(work, work, dropout_spec);
  layernorm_backward(work, sum, mean, rstd, gamma, d_sum, dgamma, dbeta);
}

}  // namespace anatomy
