// cpu_backend.cpp: the reference backend. Plain loops in float32 with float64
// accumulation for every reduction, OpenBLAS for the matrix products. It is the
// oracle the CUDA kernels are tested against, so clarity beats speed here.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "anatomy/core/random.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/rotary_frequencies.h"
#include "anatomy/kernels/cpu/optimizer_kernels.h"

namespace anatomy {

namespace {

void expect_f32(const Tensor& t, const char* op) {
  ANATOMY_CHECK(t.defined() && t.dtype() == DType::F32, "{}: '{}' must be a defined float32 tensor", op, t.name());
}

void expect_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  ANATOMY_CHECK(a.numel() == b.numel(), "{}: {} has {} elements but {} has {}", op, a.name(), a.numel(), b.name(),
                b.numel());
}

// Rows of a tensor seen as a matrix [numel / last, last].
int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : ledger_(Device::cpu(), make_cpu_allocator()) {
    if (threads > 0) openblas_set_num_threads(threads);
  }

  Device device() const override { return Device::cpu(); }
  Ledger& ledger() override { return ledger_; }

  void do_zero(const Tensor& t) override { std::memset(t.raw(), 0, t.nbytes()); }
  void do_upload_async(const Tensor& dst, const void* src) override { std::memcpy(dst.raw(), src, dst.nbytes()); }
  void upload_wait() override {}
  void do_copy_from_host(const Tensor& dst, const void* src) override { std::memcpy(dst.raw(), src, dst.nbytes()); }
  void do_copy_to_host(const Tensor& src, void* dst) override { std::memcpy(dst, src.raw(), src.nbytes()); }
  void do_copy(const Tensor& dst, const Tensor& src) override {
    ANATOMY_CHECK(dst.nbytes() == src.nbytes(), "copy: {} and {} differ in size", dst.name(), src.name());
    std::memmove(dst.raw(), src.raw(), src.nbytes());
  }

  void do_cast(const Tensor& src, const Tensor& dst) override {
    expect_same_numel(src, dst, "cast");
    const int64_t n = src.numel();
    auto convert_out = [&](auto to_half) {
      const float* in = src.data<float>();
      uint16_t* out = dst.data<uint16_t>();
      for (int64_t i = 0; i < n; ++i) out[i] = to_half(in[i]);
    };
    auto convert_in = [&](auto from_half) {
      const uint16_t* in = src.data<uint16_t>();
      float* out = dst.data<float>();
      for (int64_t i = 0; i < n; ++i) out[i] = from_half(in[i]);
    };
    if (src.dtype() == DType::F32 && dst.dtype() == DType::BF16) convert_out(float_to_bf16);
    else if (src.dtype() == DType::F32 && dst.dtype() == DType::F16) convert_out(float_to_f16);
    else if (src.dtype() == DType::BF16 && dst.dtype() == DType::F32) convert_in(bf16_to_float);
    else if (src.dtype() == DType::F16 && dst.dtype() == DType::F32) convert_in(f16_to_float);
    else if (src.dtype() == dst.dtype()) copy(dst, src);
    else ANATOMY_CHECK(false, "cast from {} to {}", dtype_name(src.dtype()), dtype_name(dst.dtype()));
  }

  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) override {
    expect_f32(x, "linear_forward");
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(w.dim(1) == K && y.numel() == M * N, "linear_forward: shapes of {} {} {}", x.name(), w.name(),
                  y.name());
    float* out = y.data<float>();
    if (b) {
      const float* bias = b->data<float>();
      for (int64_t m = 0; m < M; ++m) std::memcpy(out + m * N, bias, N * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x.data<float>(), K, w.data<float>(), K,
                b ? 1.0f : 0.0f, out, N);
  }

  void do_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor& dw,
                          const Tensor* db, bool accumulate_dx) override {
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(dy.numel() == M * N && (!dw.defined() || dw.numel() == N * K), "linear_backward: shapes of {} {}",
                  dy.name(), dw.name());
    if (dx) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dy.data<float>(), N, w.data<float>(), K,
                  accumulate_dx ? 1.0f : 0.0f, dx->data<float>(), K);
    }
    if (dw.defined())
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dy.data<float>(), N, x.data<float>(), K,
                  1.0f, dw.data<float>(), K);
    if (db) column_sums_accumulate(dy, *db);
  }

  // db[n] += Σ_rows dy[row, n] (dy [rows, N], N = db's length), summed in double.
  static void column_sums_accumulate(const Tensor& dy, const Tensor& db) {
    const int64_t N = db.numel(), M = N > 0 ? dy.numel() / N : 0;
    ANATOMY_CHECK(M * N == dy.numel(), "bias gradient: {} is not rows of {} ({})", dy.name(), N, db.name());
    const float* g = dy.data<float>();
    float* out = db.data<float>();
    std::vector<double> sums(N, 0.0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) sums[n] += g[m * N + n];
    for (int64_t n = 0; n < N; ++n) out[n] += static_cast<float>(sums[n]);
  }

  void do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate) override {
    const int64_t H = table.dim(1), V = table.dim(0), T = ids.numel();
    ANATOMY_CHECK(out.numel() == T * H, "embedding_forward: {} does not fit {} rows of {}", out.name(), T, H);
    expect_f32(out, "embedding_forward");
    const int64_t* id = ids.data<int64_t>();
    float* o = out.data<float>();
    for (int64_t t = 0; t < T; ++t)
      ANATOMY_CHECK(id[t] >= 0 && id[t] < V, "embedding_forward: id {} outside {} of {} rows", id[t], table.name(), V);
    if (table.dtype() != DType::F32) {  // 16-bit rows, converted exactly
      ANATOMY_CHECK(table.dtype() == DType::BF16 || table.dtype() == DType::F16,
                    "embedding_forward: {} is {}, not float32, bf16 or fp16", table.name(), dtype_name(table.dtype()));
      float (*to_float)(uint16_t) = table.dtype() == DType::BF16 ? bf16_to_float : f16_to_float;
      const uint16_t* tab = table.data<uint16_t>();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const float x = to_float(tab[id[t] * H + h]);
          o[t * H + h] = accumulate ? o[t * H + h] + x : x;
        }
      return;
    }
    const float* tab = table.data<float>();
    for (int64_t t = 0; t < T; ++t) {
      const float* row = tab + id[t] * H;
      float* dst = o + t * H;
      if (accumulate)
        for (int64_t h = 0; h < H; ++h) dst[h] += row[h];
      else
        std::memcpy(dst, row, H * sizeof(float));
    }
  }

  void do_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                             int64_t padding_idx) override {
    const int64_t H = dtable.dim(1), T = ids.numel();
    const int64_t* id = ids.data<int64_t>();
    const float* g = dout.data<float>();
    float* d = dtable.data<float>();
    for (int64_t t = 0; t < T; ++t) {
      if (id[t] == padding_idx) continue;
      for (int64_t h = 0; h < H; ++h) d[id[t] * H + h] += g[t * H + h];
    }
  }

  void do_positions_past_padding(const Tensor& ids, int64_t padding_idx, const Tensor& positions) override {
    const int64_t B = ids.dim(0), L = ids.dim(1);
    const int64_t* id = ids.data<int64_t>();
    int64_t* out = positions.data<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t seen = 0;
      for (int64_t t = 0; t < L; ++t) {
        const bool real = id[b * L + t] != padding_idx;
        seen += real;
        out[b * L + t] = real ? padding_idx + seen : padding_idx;
      }
    }
  }

  void do_layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd) override {
    const int64_t H = x.dim(-1), R = rows_of(x);
    const float *in = x.data<float>(), *g = gamma.data<float>(), *b = beta.data<float>();
    float *out = y.data<float>(), *mu = mean.data<float>(), *rs = rstd.data<float>();
    for (int64_t r = 0; r < R; ++r) {
      const float* row = in + r * H;
      double sum = 0.0;
      for (int64_t h = 0; h < H; ++h) sum += row[h];
      const double m = sum / H;
      double var = 0.0;
      for (int64_t h = 0; h < H; ++h) var += (row[h] - m) * (row[h] - m);
      var /= H;
      const double s = 1.0 / std::sqrt(var + eps);
      mu[r] = static_cast<float>(m);
      rs[r] = static_cast<float>(s);
      for (int64_t h = 0; h < H; ++h) out[r * H + h] = static_cast<float>((row[h] - m) * s * g[h] + b[h]);
    }
  }

  void do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                             const Tensor& gamma, const Tensor& dx, const Tensor& dgamma,
                             const Tensor& dbeta) override {
    const int64_t H = x.dim(-1), R = rows_of(x);
    const float *in = x.data<float>(), *g = gamma.data<float>(), *grad = dy.data<float>();
    const float *mu = mean.data<float>(), *rs = rstd.data<float>();
    float *out = dx.data<float>(), *dg = dgamma.data<float>(), *dbt = dbeta.data<float>();
    std::vector<double> dgamma_acc(H, 0.0), dbeta_acc(H, 0.0);
    for (int64_t r = 0; r < R; ++r) {
      const float* row = in + r * H;
      const float* gr = grad + r * H;
      const double m = mu[r], s = rs[r];
      double sum_dyg = 0.0, sum_dyg_xhat = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        const double xhat = (row[h] - m) * s;
        const double dyg = static_cast<double>(gr[h]) * g[h];
        sum_dyg += dyg;
        sum_dyg_xhat += dyg * xhat;
        dgamma_acc[h] += gr[h] * xhat;
        dbeta_acc[h] += gr[h];
      }
      const double mean_dyg = sum_dyg / H, mean_dyg_xhat = sum_dyg_xhat / H;
      for (int64_t h = 0; h < H; ++h) {
        const double xhat = (row[h] - m) * s;
        const double dyg = static_cast<double>(gr[h]) * g[h];
        out[r * H + h] = static_cast<float>(s * (dyg - mean_dyg - xhat * mean_dyg_xhat));
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      dg[h] += static_cast<float>(dgamma_acc[h]);
      dbt[h] += static_cast<float>(dbeta_acc[h]);
    }
  }

  // The fused residual LayerNorm, as the plain ops it stands for.
  void do_residual_layernorm_forward(const Tensor& x, const Tensor& residual, const DropoutSpec& dropout,
                                     const Tensor& gamma, const Tensor& beta, double eps, const Tensor& sum,
                                     const Tensor& y, const Tensor& mean, const Tensor& rstd) override {
    expect_same_numel(x, sum, "residual_layernorm_forward");
    this->dropout(x, sum, dropout);
    add(sum, residual, sum);
    layernorm_forward(sum, gamma, beta, eps, y, mean, rstd);
  }
  void do_residual_layernorm_backward(const Tensor& dy, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& gamma, const DropoutSpec& dropout, const Tensor& d_residual,
                                      const Tensor& d_x, const Tensor& dgamma, const Tensor& dbeta,
                                      const Tensor* d_bias) override {
    // Into d_x first: d_residual may be dy.
    layernorm_backward(dy, sum, mean, rstd, gamma, d_x, dgamma, dbeta);
    copy(d_residual, d_x);
    this->dropout(d_x, d_x, dropout);
    if (d_bias) column_sums_accumulate(d_x, *d_bias);
  }

  void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    expect_same_numel(a, b, "add");
    expect_same_numel(a, out, "add");
    const float *x = a.data<float>(), *y = b.data<float>();
    float* o = out.data<float>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = x[i] + y[i];
  }

  void do_add_inplace(const Tensor& dst, const Tensor& src) override {
    expect_same_numel(dst, src, "add_inplace");
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] += s[i];
  }

  // f(v), and f'(v) for `saved` v as activation_backward reads it (tanh: its output), in double.
  static double activation_value(ActivationKind kind, double v) {
    switch (kind) {
      case ActivationKind::GeluErf: return 0.5 * v * (1.0 + std::erf(v * kSqrt1_2));
      case ActivationKind::GeluTanh: return 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
      case ActivationKind::Relu: return v > 0.0 ? v : 0.0;
      case ActivationKind::Tanh: return std::tanh(v);
    }
    return 0.0;
  }
  static double activation_derivative(ActivationKind kind, double v) {
    switch (kind) {
      case ActivationKind::GeluErf: return 0.5 * (1.0 + std::erf(v * kSqrt1_2)) + v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
      case ActivationKind::GeluTanh: {
        const double t = std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v));
        return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * v * v);
      }
      case ActivationKind::Relu: return v > 0.0 ? 1.0 : 0.0;
      case ActivationKind::Tanh: return 1.0 - v * v;  // saved is tanh(x)
    }
    return 0.0;
  }

  void do_activation_forward(ActivationKind kind, const Tensor& x, const Tensor& y) override {
    expect_same_numel(x, y, "activation_forward");
    const float* in = x.data<float>();
    float* out = y.data<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) out[i] = static_cast<float>(activation_value(kind, in[i]));
  }

  void do_activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy, const Tensor& dx) override {
    expect_same_numel(saved, dy, "activation_backward");
    expect_same_numel(saved, dx, "activation_backward");
    const float *s = saved.data<float>(), *g = dy.data<float>();
    float* out = dx.data<float>();
    for (int64_t i = 0, n = saved.numel(); i < n; ++i)
      out[i] = static_cast<float>(g[i] * activation_derivative(kind, s[i]));
  }

  void do_activation_backward_recompute(ActivationKind kind, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                        const Tensor& y, const Tensor* d_bias) override {
    ANATOMY_CHECK(kind != ActivationKind::Tanh, "activation_backward_recompute: tanh saves its output, not its input");
    activation_forward(kind, x, y);  // y first: dx may be dy, never x or y
    activation_backward(kind, x, dy, dx);
    if (d_bias) column_sums_accumulate(dx, *d_bias);
  }

  void do_dropout(const Tensor& x, const Tensor& y, const DropoutSpec& spec) override {
    expect_same_numel(x, y, "dropout");
    const float* in = x.data<float>();
    float* out = y.data<float>();
    const int64_t n = x.numel();
    if (spec.p <= 0.0f) {
      if (in != out) std::memcpy(out, in, n * sizeof(float));
      return;
    }
    const float scale = 1.0f / (1.0f - spec.p);
    for (int64_t i = 0; i < n; ++i)
      out[i] = dropout_keep(spec.seed, spec.stream, static_cast<uint64_t>(i), spec.p) ? in[i] * scale : 0.0f;
  }

  void do_select_row(const Tensor& x, int64_t row, const Tensor& out) override {
    const int64_t B = x.dim(0), L = x.dim(1), H = x.dim(2);
    ANATOMY_CHECK(row < L && out.numel() == B * H, "select_row: shapes of {} {}", x.name(), out.name());
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(out.data<float>() + b * H, x.data<float>() + (b * L + row) * H, H * sizeof(float));
  }

  void do_select_row_backward(const Tensor& dout, int64_t row, const Tensor& dx) override {
    const int64_t B = dx.dim(0), L = dx.dim(1), H = dx.dim(2);
    for (int64_t b = 0; b < B; ++b) {
      float* d = dx.data<float>() + (b * L + row) * H;
      const float* g = dout.data<float>() + b * H;
      for (int64_t h = 0; h < H; ++h) d[h] += g[h];
    }
  }

  void do_mask_rows(const Tensor& x, const Tensor& mask) override {
    expect_f32(x, "mask_rows");
    const int64_t rows = x.dim(0) * x.dim(1), H = x.dim(2);
    for (int64_t r = 0; r < rows; ++r)
      if (mask.data<int64_t>()[r] == 0) std::fill(x.data<float>() + r * H, x.data<float>() + (r + 1) * H, 0.0f);
  }

  bool attention_saves_probabilities(DType, int64_t) const override { return true; }

  // Attention with its probabilities kept: query i attends to the keys the
  // mask keeps, within `window` of it (a negative window: every key).
  // `add_scores(b, h, p)`, when given, adds to head h of batch entry b's
  // [L, L] scores before the softmax.
  using ScoreTerms = std::function<void(int64_t b, int64_t h, float* scores)>;
  void attention_forward_into(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                              int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                              const Tensor& probs, const Tensor& ctx, const ScoreTerms& add_scores = nullptr,
                              bool mask_queries = false) {
    const int64_t B = q.dim(0), L = q.dim(1), H = q.dim(2), D = H / heads;
    ANATOMY_CHECK(probs.numel() == B * heads * L * L, "attention_forward: {} has the wrong size", probs.name());
    const int64_t* mask = key_mask.defined() ? key_mask.data<int64_t>() : nullptr;
    std::vector<float> dropped(L * L);
    std::vector<int64_t> keys(window >= 0 ? L : 0);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q.data<float>() + b * L * H + h * D;
        const float* kh = k.data<float>() + b * L * H + h * D;
        const float* vh = v.data<float>() + b * L * H + h * D;
        float* p = probs.data<float>() + (b * heads + h) * L * L;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, D, static_cast<float>(scale), qh, H, kh, H, 0.0f,
                    p, L);
        if (add_scores) add_scores(b, h, p);
        for (int64_t i = 0; i < L; ++i) {
          if (mask_queries && mask != nullptr && mask[b * L + i] == 0) {
            // DeBERTa's mask is query × key: a padding query's row has every key masked (uniform).
            std::fill(p + i * L, p + (i + 1) * L, 1.0f / static_cast<float>(L));
            continue;
          }
          if (window < 0) {
            softmax_row(p + i * L, mask ? mask + b * L : nullptr, L);
            continue;
          }
          // The keys of row i: the key mask's, within the window.
          for (int64_t j = 0; j < L; ++j)
            keys[j] = (mask == nullptr || mask[b * L + j] != 0) && std::abs(i - j) <= window;
          softmax_row(p + i * L, keys.data(), L);
        }
        const float* weights = p;
        if (dropout.p > 0.0f) {
          apply_dropout(p, dropped.data(), L * L, dropout, static_cast<uint64_t>((b * heads + h) * L * L));
          weights = dropped.data();
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, L, 1.0f, weights, L, vh, H, 0.0f,
                    ctx.data<float>() + b * L * H + h * D, H);
      }
    }
  }
  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                            double scale, const DropoutSpec& dropout, const Tensor& probs, const Tensor& ctx) override {
    attention_forward_into(q, k, v, key_mask, heads, scale, -1, dropout, probs, ctx);
  }
  void do_attention_window_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                   int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                                   const Tensor& probs, const Tensor& ctx) override {
    attention_forward_into(q, k, v, key_mask, heads, scale, window, dropout, probs, ctx);
  }
  // The probabilities hold the window and the mask (their zeros).
  void do_attention_window_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor&, const Tensor& probs, const Tensor&, int64_t heads, double scale,
                                    int64_t, const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                                    const Tensor& dv) override {
    attention_backward_into(dctx, q, k, v, probs, heads, scale, dropout, dq.data<float>(), dk.data<float>(),
                            dv.data<float>(), q.dim(2));
  }

  // DeBERTa's terms per head: c2p = Q·pos_kᵀ and p2c = K·pos_qᵀ ([L, P]
  // each, float32 products), added as scale·c2p[i, r] + scale·p2c[j, r].
  void do_attention_relative_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_q,
                                     const Tensor& pos_k, const Tensor& rel_index, const Tensor& rel_ranges,
                                     const Tensor& key_mask, int64_t heads, double scale, const DropoutSpec& dropout,
                                     const Tensor& probs, const Tensor& ctx) override {
    const int64_t L = q.dim(1), H = q.dim(2), D = H / heads, P = rel_ranges.dim(0);
    const int64_t* index = rel_index.data<int64_t>();
    std::vector<float> c2p(pos_k.defined() ? L * P : 0), p2c(pos_q.defined() ? L * P : 0);
    const float s = static_cast<float>(scale);
    attention_forward_into(q, k, v, key_mask, heads, scale, -1, dropout, probs, ctx, [&](int64_t b, int64_t h,
                                                                                        float* p) {
      const int64_t off = b * L * H + h * D;
      if (pos_k.defined())
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, P, D, 1.0f, q.data<float>() + off, H,
                    pos_k.data<float>() + h * D, H, 0.0f, c2p.data(), P);
      if (pos_q.defined())
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, P, D, 1.0f, k.data<float>() + off, H,
                    pos_q.data<float>() + h * D, H, 0.0f, p2c.data(), P);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          const int64_t r = index[i - j + L - 1];
          float term = 0.0f;
          if (pos_k.defined()) term += s * c2p[i * P + r];
          if (pos_q.defined()) term += s * p2c[j * P + r];
          p[i * L + j] += term;
        }
    }, /*mask_queries=*/true);
  }
  void do_attention_relative_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& pos_q, const Tensor& pos_k, const Tensor& rel_index,
                                      const Tensor& rel_ranges, const Tensor& probs, int64_t heads, double scale,
                                      const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                                      const Tensor& dv, const Tensor& dpos_q, const Tensor& dpos_k) override {
    (void)rel_index;
    const int64_t L = q.dim(1), H = q.dim(2), D = H / heads, P = rel_ranges.dim(0);
    const int64_t* ranges = rel_ranges.data<int64_t>();
    for (const Tensor* d : {&dpos_q, &dpos_k})
      if (d->defined()) zero(*d);
    std::vector<float> grad(L * P);
    // d_term[row, r] = Σ dS over the distances d of r: row i's keys j = i − d
    // (content-to-position) or key j's queries i = j + d (position-to-content).
    const auto sum_by_distance = [&](const float* ds, bool by_key) {
      for (int64_t row = 0; row < L; ++row)
        for (int64_t r = 0; r < P; ++r) {
          float acc = 0.0f;
          for (int64_t d = ranges[2 * r]; d <= ranges[2 * r + 1]; ++d) {
            const int64_t other = by_key ? row + d : row - d;
            if (other < 0 || other >= L) continue;
            acc += by_key ? ds[other * L + row] : ds[row * L + other];
          }
          grad[row * P + r] = acc;
        }
    };
    attention_backward_into(dctx, q, k, v, probs, heads, scale, dropout, dq.data<float>(), dk.data<float>(),
                            dv.data<float>(), H, [&](int64_t b, int64_t h, const float* ds) {
      const int64_t off = b * L * H + h * D;
      // A term: its gradient by (token, index), then dx += d_term·pos and d_pos += d_termᵀ·x.
      const auto term = [&](const Tensor& pos, bool by_key, const Tensor& x, const Tensor& dx, const Tensor& dpos) {
        sum_by_distance(ds, by_key);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, P, 1.0f, grad.data(), P,
                    pos.data<float>() + h * D, H, 1.0f, dx.data<float>() + off, H);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, P, D, L, 1.0f, grad.data(), P, x.data<float>() + off, H,
                    1.0f, dpos.data<float>() + h * D, H);
      };
      if (pos_k.defined()) term(pos_k, false, q, dq, dpos_k);  // content-to-position: dQ, d_pos_k
      if (pos_q.defined()) term(pos_q, true, k, dk, dpos_q);   // position-to-content: dK, d_pos_q
    });
  }

  void do_rotary(const Tensor& x, int64_t heads, double theta, bool inverse) override {
    expect_f32(x, "rotary");
    const int64_t B = x.dim(0), L = x.dim(1), H = x.dim(2), D = H / heads, half = D / 2;
    const std::vector<float> f = rotary_inverse_frequencies(theta, D);
    float* p = x.data<float>();
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(t) * f[i];
        const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
        const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * (inverse ? -1.0f : 1.0f);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < heads; ++h) {
            float* row = p + (b * L + t) * H + h * D;
            const float a = row[i], z = row[i + half];
            row[i] = a * c - z * s;
            row[i + half] = z * c + a * s;
          }
      }
    }
  }

  void do_gated_activation_forward(ActivationKind kind, const Tensor& u, const Tensor& y) override {
    expect_f32(u, "gated_activation_forward");
    const int64_t I = y.dim(-1), rows = y.numel() / I;
    const float* in = u.data<float>();
    float* out = y.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < I; ++i)
        out[r * I + i] = static_cast<float>(activation_value(kind, in[r * 2 * I + i]) * in[r * 2 * I + I + i]);
  }
  void do_gated_activation_backward(ActivationKind kind, const Tensor& u, const Tensor& dy,
                                    const Tensor& du) override {
    expect_f32(u, "gated_activation_backward");
    const int64_t I = dy.dim(-1), rows = dy.numel() / I;
    const float* in = u.data<float>();
    const float* g = dy.data<float>();
    float* d = du.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < I; ++i) {
        const double a = in[r * 2 * I + i], gate = in[r * 2 * I + I + i], grad = g[r * I + i];
        d[r * 2 * I + i] = static_cast<float>(grad * gate * activation_derivative(kind, a));
        d[r * 2 * I + I + i] = static_cast<float>(grad * activation_value(kind, a));
      }
  }

  void do_attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx,
                             const Tensor& probs, const Tensor& key_mask, int64_t heads, double scale,
                             const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                             const Tensor& dv) override {
    attention_backward_into(dctx, q, k, v, probs, heads, scale, dropout, dq.data<float>(), dk.data<float>(),
                            dv.data<float>(), q.dim(2));
  }
  void do_attention_backward_interleaved(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& ctx, const Tensor& probs, const Tensor& key_mask, int64_t heads,
                                         double scale, const DropoutSpec& dropout, const Tensor& dqkv) override {
    (void)ctx;
    (void)key_mask;
    check_interleaved_gradients(dqkv, q);
    const int64_t H = q.dim(2);
    float* d = dqkv.data<float>();
    attention_backward_into(dctx, q, k, v, probs, heads, scale, dropout, d, d + H, d + 2 * H, 3 * H);
  }

  void do_attention_first_query_forward(const Tensor& q0, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                        int64_t heads, double scale, const DropoutSpec& dropout, const Tensor& probs,
                                        const Tensor& ctx0) override {
    const int64_t B = k.dim(0), L = k.dim(1), H = k.dim(2), D = H / heads;
    ANATOMY_CHECK(q0.numel() == B * H && ctx0.numel() == B * H && probs.numel() == B * heads * L,
                  "attention_first_query_forward: shapes of {}, {}, {}", q0.name(), probs.name(), ctx0.name());
    const int64_t* mask = key_mask.defined() ? key_mask.data<int64_t>() : nullptr;
    std::vector<float> dropped(L);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* q = q0.data<float>() + b * H + h * D;
        float* p = probs.data<float>() + (b * heads + h) * L;
        for (int64_t j = 0; j < L; ++j) {
          const float* kj = k.data<float>() + (b * L + j) * H + h * D;
          float s = 0.0f;
          for (int64_t d = 0; d < D; ++d) s += q[d] * kj[d];
          p[j] = s * static_cast<float>(scale);
        }
        softmax_row(p, mask ? mask + b * L : nullptr, L);
        const float* weights = p;
        if (dropout.p > 0.0f) {
          apply_dropout(p, dropped.data(), L, dropout, static_cast<uint64_t>((b * heads + h) * L * L));
          weights = dropped.data();
        }
        weighted_row_sum(weights, v.data<float>() + b * L * H + h * D, L, D, H, ctx0.data<float>() + b * H + h * D);
      }
    }
  }

  void do_attention_first_query_backward(const Tensor& dctx0, const Tensor& q0, const Tensor& k, const Tensor& v,
                                         const Tensor& probs, int64_t heads, double scale, const DropoutSpec& dropout,
                                         const Tensor& dq0, const Tensor& dk, const Tensor& dv) override {
    const int64_t B = k.dim(0), L = k.dim(1), H = k.dim(2), D = H / heads;
    std::vector<float> weights(L), ds(L);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* p = probs.data<float>() + (b * heads + h) * L;
        const float* g = dctx0.data<float>() + b * H + h * D;
        const float* q = q0.data<float>() + b * H + h * D;
        const uint64_t base = static_cast<uint64_t>((b * heads + h) * L * L);
        if (dropout.p > 0.0f) apply_dropout(p, weights.data(), L, dropout, base);
        else std::copy(p, p + L, weights.begin());
        // dP_dropped_j = dctx · v_j, then through the mask; dS = P ⊙ (dP − Σ P dP), scaled.
        for (int64_t j = 0; j < L; ++j) {
          const float* vj = v.data<float>() + (b * L + j) * H + h * D;
          float dp = 0.0f;
          for (int64_t d = 0; d < D; ++d) dp += g[d] * vj[d];
          ds[j] = dp;
        }
        if (dropout.p > 0.0f) apply_dropout(ds.data(), ds.data(), L, dropout, base);
        double dot = 0.0;
        for (int64_t j = 0; j < L; ++j) dot += static_cast<double>(p[j]) * ds[j];
        for (int64_t j = 0; j < L; ++j) ds[j] = static_cast<float>(p[j] * (ds[j] - dot) * scale);
        weighted_row_sum(ds.data(), k.data<float>() + b * L * H + h * D, L, D, H, dq0.data<float>() + b * H + h * D);
        for (int64_t j = 0; j < L; ++j) {
          float* dkj = dk.data<float>() + (b * L + j) * H + h * D;
          float* dvj = dv.data<float>() + (b * L + j) * H + h * D;
          for (int64_t d = 0; d < D; ++d) {
            dkj[d] = ds[j] * q[d];
            dvj[d] = weights[j] * g[d];
          }
        }
      }
    }
  }

 private:
  // attention_backward with dq, dk, dv written at `grad_stride` floats a token
  // (H when each is its own [B, L, H] tensor, 3H when interleaved).
  // `after(b, h, dS)`, when given, runs after each head's dq and dk, with its
  // [L, L] score gradients (the scale applied).
  using ScoreGradients = std::function<void(int64_t b, int64_t h, const float* ds)>;
  void attention_backward_into(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& probs, int64_t heads, double scale, const DropoutSpec& dropout,
                               float* dq_data, float* dk_data, float* dv_data, int64_t grad_stride,
                               const ScoreGradients& after = nullptr) {
    const int64_t B = q.dim(0), L = q.dim(1), H = q.dim(2), D = H / heads;
    const int64_t G = grad_stride;
    std::vector<float> dropped(L * L), dp(L * L);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off = b * L * H + h * D, goff = b * L * G + h * D;
        const float* p = probs.data<float>() + (b * heads + h) * L * L;
        const uint64_t base = static_cast<uint64_t>((b * heads + h) * L * L);
        const float* weights = p;
        if (dropout.p > 0.0f) {
          apply_dropout(p, dropped.data(), L * L, dropout, base);
          weights = dropped.data();
        }
        // dV = P_dropped^T · dctx
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, D, L, 1.0f, weights, L, dctx.data<float>() + off, H,
                    0.0f, dv_data + goff, G);
        // dP_dropped = dctx · V^T, then through the dropout mask.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, D, 1.0f, dctx.data<float>() + off, H,
                    v.data<float>() + off, H, 0.0f, dp.data(), L);
        if (dropout.p > 0.0f) apply_dropout(dp.data(), dp.data(), L * L, dropout, base);
        // Softmax backward: dS = P ⊙ (dP − Σ_j P dP), then the scale.
        for (int64_t i = 0; i < L; ++i) {
          const float* pr = p + i * L;
          float* g = dp.data() + i * L;
          double dot = 0.0;
          for (int64_t j = 0; j < L; ++j) dot += static_cast<double>(pr[j]) * g[j];
          for (int64_t j = 0; j < L; ++j) g[j] = static_cast<float>(pr[j] * (g[j] - dot) * scale);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, L, 1.0f, dp.data(), L, k.data<float>() + off, H,
                    0.0f, dq_data + goff, G);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, D, L, 1.0f, dp.data(), L, q.data<float>() + off, H,
                    0.0f, dk_data + goff, G);
        if (after) after(b, h, dp.data());
      }
    }
  }

 public:

  double do_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                          double label_smoothing) override {
    const int64_t B = logits.dim(0), C = logits.dim(1);
    const float* x = logits.data<float>();
    const int64_t* y = labels.data<int64_t>();
    float* d = dlogits.data<float>();
    int64_t counted = 0;
    for (int64_t b = 0; b < B; ++b) counted += y[b] != -100;
    double total = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      if (y[b] == -100) {
        std::fill(d + b * C, d + (b + 1) * C, 0.0f);
        continue;
      }
      total += cross_entropy_row(x + b * C, C, y[b], d + b * C, [&](double g) { return g / counted; }, label_smoothing);
    }
    return counted ? total / counted : NAN;
  }

  // The cross-entropy of one row of C logits against label y (in [0, C)):
  // returns log-sum-exp − row[y] and writes gradient(softmax − one-hot) into
  // d (when not null; d may be the row itself: each value is read before it is written).
  // With label smoothing ε the target is (1 − ε)·one-hot + ε/C (Trainer's
  // LabelSmoother): the loss (1 − ε)·(lse − row[y]) + ε·mean_c(lse − row[c]).
  template <typename Gradient>
  static double cross_entropy_row(const float* row, int64_t C, int64_t y, float* d, Gradient gradient,
                                  double label_smoothing = 0.0) {
    ANATOMY_CHECK(y >= 0 && y < C, "cross_entropy: label {} outside [0, {})", y, C);
    double mx = row[0];
    for (int64_t c = 1; c < C; ++c) mx = std::max(mx, static_cast<double>(row[c]));
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - mx);
    const double lse = mx + std::log(sum);
    const double eps = label_smoothing;
    double loss = lse - row[y];
    if (eps > 0.0) {
      double mean = 0.0;
      for (int64_t c = 0; c < C; ++c) mean += row[c];
      mean /= static_cast<double>(C);
      loss = (1.0 - eps) * loss + eps * (lse - mean);
    }
    const double spread = eps / static_cast<double>(C);
    if (d)
      for (int64_t c = 0; c < C; ++c)
        d[c] = static_cast<float>(gradient(std::exp(row[c] - lse) - ((c == y ? 1.0 - eps : 0.0) + spread)));
    return loss;
  }

  double do_cross_entropy_sum(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                              double scale) override {
    expect_f32(logits, "cross_entropy_sum");
    if (dlogits.defined()) expect_f32(dlogits, "cross_entropy_sum");
    const int64_t N = logits.dim(0), C = logits.dim(1);
    const float* x = logits.data<float>();
    const int64_t* y = labels.data<int64_t>();
    float* d = dlogits.defined() ? dlogits.data<float>() : nullptr;
    double total = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      if (y[n] == -100) {
        if (d) std::fill(d + n * C, d + (n + 1) * C, 0.0f);
        continue;
      }
      total += cross_entropy_row(x + n * C, C, y[n], d ? d + n * C : nullptr, [&](double g) { return g * scale; });
    }
    return total;
  }

  double do_mse(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override {
    expect_same_numel(logits, targets, "mse");
    const int64_t n = logits.numel();
    const float *x = logits.data<float>(), *t = targets.data<float>();
    float* d = dlogits.data<float>();
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double diff = static_cast<double>(x[i]) - t[i];
      total += diff * diff;
      d[i] = static_cast<float>(2.0 * diff / n);
    }
    return total / n;
  }

  double do_bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override {
    expect_same_numel(logits, targets, "bce_with_logits");
    const int64_t n = logits.numel();
    const float *x = logits.data<float>(), *t = targets.data<float>();
    float* d = dlogits.data<float>();
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], target = t[i];
      total += std::max(v, 0.0) - v * target + std::log1p(std::exp(-std::abs(v)));
      const double sigmoid = 1.0 / (1.0 + std::exp(-v));
      d[i] = static_cast<float>((sigmoid - target) / n);
    }
    return total / n;
  }

  double do_sum_of_squares(const Tensor& t) override {
    const float* x = t.data<float>();
    double total = 0.0;
    for (int64_t i = 0, n = t.numel(); i < n; ++i) total += static_cast<double>(x[i]) * x[i];
    return total;
  }

  void do_scale(const Tensor& t, double factor) override {
    float* x = t.data<float>();
    const float f = static_cast<float>(factor);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) x[i] *= f;
  }

  void do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const AdamWHyper& hp) override {
    expect_same_numel(param, grad, "adamw_step");
    adamw_loop(param.data<float>(), grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(),
               param.numel(), hp);
  }

  void do_sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                        const std::vector<ParamSegment>& segments, const SgdHyper& hyper,
                        const Tensor* half_copy) override {
    cpu::sgd_step_flat(param, grad, momentum_buf, segments, hyper, half_copy);
  }
  void do_adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state, const Tensor& col_state,
                         const Tensor& v_state, const AdafactorHyper& hyper, const Tensor* half_copy) override {
    cpu::adafactor_step(param, grad, row_state, col_state, v_state, hyper, half_copy);
  }
  void do_adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                         const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                         const AdamWHyper& hyper, const Tensor* half_copy) override {
    cpu::adamw8bit_step(param, grad, state1, state2, absmax1, absmax2, qmap1, qmap2, hyper, half_copy);
  }

  void do_adamw_step_flat(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                          const std::vector<ParamSegment>& segments, const AdamWHyper& hp,
                          const Tensor* half_copy) override {
    expect_same_numel(param, grad, "adamw_step_flat");
    expect_same_numel(param, exp_avg, "adamw_step_flat");
    expect_same_numel(param, exp_avg_sq, "adamw_step_flat");
    if (half_copy) expect_same_numel(param, *half_copy, "adamw_step_flat");
    for (const ParamSegment& seg : segments) {
      check_segment(seg, param, "adamw_step_flat");
      AdamWHyper h = hp;
      if (!seg.weight_decay) h.weight_decay = 0.0;
      float* p = param.data<float>() + seg.offset;
      adamw_loop(p, grad.data<float>() + seg.offset, exp_avg.data<float>() + seg.offset,
                 exp_avg_sq.data<float>() + seg.offset, seg.count, h);
      if (half_copy) {
        auto* out = static_cast<uint16_t*>(half_copy->raw()) + seg.offset;
        for (int64_t i = 0; i < seg.count; ++i)
          out[i] = half_copy->dtype() == DType::BF16 ? float_to_bf16(p[i]) : float_to_f16(p[i]);
      }
    }
  }

  static void adamw_loop(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& hp) {
    const double bias1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
    const double bias2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
    const double step_size = hp.lr / bias1;
    const double bias2_sqrt = std::sqrt(bias2);
    const double decay = 1.0 - hp.lr * hp.weight_decay;
    const float gs = static_cast<float>(hp.grad_scale);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i] * gs;  // float product, as scale() would have stored
      const double mi = hp.beta1 * m[i] + (1.0 - hp.beta1) * gi;
      const double vi = hp.beta2 * v[i] + (1.0 - hp.beta2) * gi * gi;
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
      const double denom = std::sqrt(vi) / bias2_sqrt + hp.eps;
      p[i] = static_cast<float>(p[i] * decay - step_size * mi / denom);
    }
  }

  // Every op has finished when it returns, so a marker is the clock's reading.
  int64_t record_marker() override {
    markers_.push_back(std::chrono::steady_clock::now());
    return static_cast<int64_t>(markers_.size()) - 1;
  }
  double marker_elapsed_ms(int64_t from, int64_t to) override {
    ANATOMY_CHECK(from >= 0 && to >= 0 && to < static_cast<int64_t>(markers_.size()) &&
                      from < static_cast<int64_t>(markers_.size()),
                  "marker_elapsed_ms: no markers {} and {}", from, to);
    return std::chrono::duration<double, std::milli>(markers_[to] - markers_[from]).count();
  }
  void clear_markers() override { markers_.clear(); }

 private:
  // Softmax of one row of scores in place; keys with mask 0 get probability 0.
  // A row whose keys are all masked attends uniformly, as an additive mask of
  // the most negative float does in Hugging Face's eager attention.
  // out[d] = Σ_j w[j]·rows[j·stride + d] for d < D, j in order: the first
  // query's context (w: probabilities, rows: values) and dq (w: dS, rows: keys).
  static void weighted_row_sum(const float* w, const float* rows, int64_t L, int64_t D, int64_t stride, float* out) {
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < L; ++j) acc += w[j] * rows[j * stride + d];
      out[d] = acc;
    }
  }
  static void softmax_row(float* row, const int64_t* mask, int64_t L) {
    bool any = false;
    double mx = -INFINITY;
    for (int64_t j = 0; j < L; ++j) {
      if (mask && mask[j] == 0) continue;
      any = true;
      mx = std::max(mx, static_cast<double>(row[j]));
    }
    if (!any) {
      std::fill(row, row + L, 1.0f / static_cast<float>(L));
      return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < L; ++j) {
      if (mask && mask[j] == 0) continue;
      sum += std::exp(row[j] - mx);
    }
    for (int64_t j = 0; j < L; ++j)
      row[j] = (mask && mask[j] == 0) ? 0.0f : static_cast<float>(std::exp(row[j] - mx) / sum);
  }

  static void apply_dropout(const float* in, float* out, int64_t n, const DropoutSpec& spec, uint64_t base) {
    const float scale = 1.0f / (1.0f - spec.p);
    for (int64_t i = 0; i < n; ++i)
      out[i] = dropout_keep(spec.seed, spec.stream, base + static_cast<uint64_t>(i), spec.p) ? in[i] * scale : 0.0f;
  }

  Ledger ledger_;
  std::vector<std::chrono::steady_clock::time_point> markers_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace anatomy
