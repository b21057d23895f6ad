// meta_backend.cpp: MetaBackend, the Backend that allocates as its target
// does and computes nothing (meta_backend.h).
//
// For the CUDA target, each op asks kernels/cuda_memory.h which path the CUDA
// backend takes and what that path allocates (the *_choice and *_path
// functions, the sizes, the temporaries' names), the same functions the CUDA
// backend acts on, and allocates it here under the same name, category,
// order and lifetime. A path may depend on the dtype, the head size, the
// hidden size and the 16-byte alignment of the tensors' addresses; the
// simulated addresses keep the real ones' alignment, since both come from the
// same pool policy. The CPU backend allocates nothing for itself.
// tests/test_meta_backend.cpp and tests/gpu/test_meta_backend_cuda.cpp compare
// the ledgers of real and meta training runs.
#include "anatomy/kernels/meta/meta_backend.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/core/pool.h"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy {

namespace {

// Made-up host addresses: 64-byte aligned as the C library's aligned_alloc
// gives them (cpu allocator, core/ledger.cpp), never reused, never touched.
class SimulatedCpuAllocator final : public DeviceAllocator {
 public:
  explicit SimulatedCpuAllocator(int64_t capacity) : capacity_(capacity) {}
  void* allocate(size_t bytes) override {
    if (capacity_ > 0 && live_ + static_cast<int64_t>(bytes) > capacity_) return nullptr;
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* ptr = reinterpret_cast<void*>(next_);
    next_ += rounded + 64;  // a gap, so that no two buffers are adjacent
    live_ += static_cast<int64_t>(bytes);
    return ptr;
  }
  void release(void*, size_t bytes) override { live_ -= static_cast<int64_t>(bytes); }
  int64_t reserved_bytes() const override { return live_; }

 private:
  int64_t capacity_;
  int64_t live_ = 0;
  uintptr_t next_ = uintptr_t{1} << 44;
};

int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

class MetaBackend final : public Backend {
 public:
  explicit MetaBackend(const MetaOptions& options)
      : target_(options.target),
        split_tf32_(options.target == MetaTarget::Cuda && options.fp32_products == Fp32Products::SplitTf32),
        hopper_attention_(options.target == MetaTarget::Cuda && options.hopper_attention),
        ledger_(options.target == MetaTarget::Cuda ? Device::cuda(0) : Device::cpu(),
                options.target == MetaTarget::Cuda
                    ? make_pool_allocator(make_simulated_segments(options.device_capacity))
                    : make_simulated_cpu_allocator(options.device_capacity)) {
    if (cuda()) {
      // As the CudaBackend constructor: the cuBLAS workspace, then the results slot.
      workspace_ = Tensor::empty(ledger_, {static_cast<int64_t>(cuda::kCublasWorkspaceBytes / 4)}, DType::F32,
                                 Category::Workspace, "cublas_workspace");
      results_ = Tensor::empty(ledger_, {cuda::kHostResultsFloats}, DType::F32, Category::Functionality,
                               "host_results");
    }
  }

  Device device() const override { return cuda() ? Device::cuda(0) : Device::cpu(); }
  Ledger& ledger() override { return ledger_; }

  // --- memory: nothing moves; what is read back is zeros ---
  void do_zero(const Tensor&) override {}
  void do_upload_async(const Tensor&, const void*) override {}
  void upload_wait() override {}
  void do_copy_from_host(const Tensor&, const void*) override {}
  void do_copy_to_host(const Tensor& src, void* dst) override {
    if (src.nbytes() > 0) std::memset(dst, 0, src.nbytes());
  }
  void do_copy(const Tensor& dst, const Tensor& src) override {
    ANATOMY_CHECK(dst.nbytes() == src.nbytes(), "copy: {} and {} differ in size", dst.name(), src.name());
  }
  void do_cast(const Tensor& src, const Tensor& dst) override {
    ANATOMY_CHECK(src.numel() == dst.numel(), "cast: {} and {} differ in size", src.name(), dst.name());
    const bool ok = src.dtype() == dst.dtype() ||
                    (src.dtype() == DType::F32 && (dst.dtype() == DType::BF16 || dst.dtype() == DType::F16)) ||
                    (dst.dtype() == DType::F32 && (src.dtype() == DType::BF16 || src.dtype() == DType::F16));
    ANATOMY_CHECK(ok, "cast from {} to {}", dtype_name(src.dtype()), dtype_name(dst.dtype()));
  }

  // --- products ---
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) override {
    if (!cuda())  // the CPU backend has float32 products only
      ANATOMY_CHECK(x.defined() && x.dtype() == DType::F32, "linear_forward: '{}' must be a defined float32 tensor",
                    x.name());
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(w.dim(1) == K && y.numel() == M * N, "linear_forward: shapes of {} {} {}", x.name(), w.name(),
                  y.name());
    split_tf32_scratch(x.dtype(), N, M, K);
  }
  void do_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor& dw,
                          const Tensor* db, bool accumulate_dx) override {
    const int64_t K = x.dim(-1), M = rows_of(x), N = w.dim(0);
    ANATOMY_CHECK(dy.numel() == M * N && (!dw.defined() || dw.numel() == N * K), "linear_backward: shapes of {} {}",
                  dy.name(), dw.name());
    if (dx) split_tf32_scratch(x.dtype(), K, M, N);
    if (dw.defined()) split_tf32_scratch(x.dtype(), K, N, M);
    if (db) bias_gradient(dy, *db);
  }
  void release_scratch() override { scratch_ = Tensor(); }
  // A split-TF32 float32 product of column-major C[m,n] = op(A)[m,k] · op(B)[k,n]
  // splits its operands into the scratch (CudaBackend::split_operands).
  void split_tf32_scratch(DType inputs, int64_t m, int64_t n, int64_t k) {
    if (split_tf32_ && inputs == DType::F32) scratch_bytes(cuda::split_tf32_scratch_bytes(m, n, k));
  }
  void bias_gradient(const Tensor& dy, const Tensor& db) {
    if (cuda()) scratch_bytes(cuda::bias_gradient_choice(dy, db).scratch);
  }
  // linear_forward_n: Backend's, one product at a time; the CUDA backend's
  // batched forward allocates what that does (nothing in 16 bits).
  void do_linear_backward_weights_n(const std::vector<Tensor>& dy, const Tensor& x, const std::vector<Tensor>& w,
                                    const std::vector<Tensor>& dw, const std::vector<Tensor>& db) override {
    const auto choice = cuda() ? cuda::linear_backward_weights_n_choice(dy, x, w, dw, db)
                               : cuda::OpChoice<cuda::WeightGradientsPath>{cuda::WeightGradientsPath::Separate};
    switch (choice.path) {
      case cuda::WeightGradientsPath::Separate: return Backend::do_linear_backward_weights_n(dy, x, w, dw, db);
      case cuda::WeightGradientsPath::BatchedWithBiasSums: return scratch_bytes(choice.scratch);
      case cuda::WeightGradientsPath::BatchedThenBiases:
        for (size_t i = 0; i < dy.size(); ++i) linear_backward(dy[i], x, w[i], nullptr, Tensor(), &db[i], false);
    }
  }

  // --- embeddings ---
  void do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool) override {
    ANATOMY_CHECK(out.numel() == ids.numel() * table.dim(1), "embedding_forward: {} does not fit {} rows of {}",
                  out.name(), ids.numel(), table.dim(1));
  }
  void do_embedding_backward(const Tensor& ids, const Tensor&, const Tensor&, int64_t) override {
    if (cuda()) scratch_bytes(cuda::embedding_backward_scratch_bytes(ids.numel()));
  }

  void do_positions_past_padding(const Tensor&, int64_t, const Tensor&) override {}

  // --- normalisation ---
  void do_layernorm_forward(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                            const Tensor&) override {}
  void do_layernorm_backward(const Tensor&, const Tensor& x, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&) override {
    if (cuda()) scratch_bytes(cuda::layernorm_backward_scratch_bytes(rows_of(x), x.dim(-1)));
  }
  void do_residual_layernorm_forward(const Tensor& x, const Tensor& residual, const DropoutSpec&, const Tensor&,
                                     const Tensor&, double, const Tensor& sum, const Tensor& y, const Tensor&,
                                     const Tensor&) override {
    ANATOMY_CHECK(x.numel() == sum.numel() && residual.numel() == sum.numel() && y.numel() == sum.numel() &&
                      x.dtype() == sum.dtype() && residual.dtype() == sum.dtype() && y.dtype() == sum.dtype(),
                  "residual_layernorm_forward: {} {} {} {} differ in size or dtype", x.name(), residual.name(),
                  sum.name(), y.name());
    // Fused or not, the CUDA backend allocates nothing here.
  }
  void do_residual_layernorm_backward(const Tensor& dy, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& gamma, const DropoutSpec&, const Tensor& d_residual,
                                      const Tensor& d_x, const Tensor& dgamma, const Tensor& dbeta,
                                      const Tensor* d_bias) override {
    ANATOMY_CHECK(dy.numel() == sum.numel() && d_residual.numel() == sum.numel() && d_x.numel() == sum.numel() &&
                      dy.dtype() == sum.dtype() && d_residual.dtype() == sum.dtype() && d_x.dtype() == sum.dtype(),
                  "residual_layernorm_backward: {} {} {} {} differ in size or dtype", dy.name(), sum.name(),
                  d_residual.name(), d_x.name());
    if (!cuda()) return;
    const auto choice = cuda::residual_layernorm_backward_choice(dy, sum, d_residual, d_x, d_bias != nullptr);
    if (choice.path == cuda::ResidualLayerNormPath::Fused) return scratch_bytes(choice.scratch);
    layernorm_backward(dy, sum, mean, rstd, gamma, d_x, dgamma, dbeta);
    if (d_bias) bias_gradient(d_x, *d_bias);
  }

  // --- element-wise: nothing allocated on either target ---
  void do_add(const Tensor&, const Tensor&, const Tensor&) override {}
  void do_add_inplace(const Tensor&, const Tensor&) override {}
  void do_activation_forward(ActivationKind, const Tensor&, const Tensor&) override {}
  void do_activation_backward(ActivationKind, const Tensor&, const Tensor&, const Tensor&) override {}
  void do_activation_backward_recompute(ActivationKind kind, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                        const Tensor& y, const Tensor* d_bias) override {
    ANATOMY_CHECK(kind != ActivationKind::Tanh, "activation_backward_recompute: tanh saves its output, not its input");
    if (!cuda()) return;
    const auto choice = cuda::activation_backward_recompute_choice(x, dy, dx, y, d_bias != nullptr);
    if (choice.path == cuda::RecomputePath::WithBias) return scratch_bytes(choice.scratch);
    if (d_bias) bias_gradient(dx, *d_bias);
  }
  void do_dropout(const Tensor&, const Tensor&, const DropoutSpec&) override {}
  void do_select_row(const Tensor&, int64_t, const Tensor&) override {}
  void do_select_row_backward(const Tensor&, int64_t, const Tensor&) override {}
  void do_mask_rows(const Tensor&, const Tensor&) override {}
  // The first-query attention's shapes (as the CUDA backend's); it takes no scratch.
  bool attention_first_query_supported(int64_t head_dim, int64_t L) const override {
    return !cuda() || cuda::first_query_attention_shape(head_dim, L);
  }
  void do_attention_first_query_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, double,
                                        const DropoutSpec&, const Tensor&, const Tensor&) override {}
  void do_attention_first_query_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         int64_t, double, const DropoutSpec&, const Tensor&, const Tensor&,
                                         const Tensor&) override {}

  // --- attention ---
  bool attention_saves_probabilities(DType dtype, int64_t head_dim) const override {
    return cuda() ? !cuda::fused_attention(dtype, head_dim) : true;
  }
  // Whether the Hopper kernels run, for a device that runs them (MetaOptions::hopper_attention).
  bool hopper(DType dtype, int64_t head_dim, int64_t L) const {
    return cuda() && cuda::hopper_attention_runs(dtype, head_dim, L, options(), [&] { return hopper_attention_; });
  }
  bool attention_keeps_dropout_bits(DType dtype, int64_t head_dim, int64_t L) const override {
    return hopper(dtype, head_dim, L);
  }
  cuda::AttentionCall call_of(const Tensor& q, const Tensor& saved, int64_t heads, const DropoutSpec& dropout) const {
    return cuda::attention_call(q, saved, heads, dropout.p, hopper(q.dtype(), q.dim(2) / heads, q.dim(1)));
  }
  // cuDNN takes every shape it is asked about where the options select it:
  // the plan assumes cuDNN loads (the CUDA backend warns where it does not).
  bool cudnn_takes() const { return cuda::cudnn_attention_selected(options()); }

  void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                            double scale, const DropoutSpec& dropout, const Tensor& probs, const Tensor& ctx) override {
    if (!cuda()) return;
    const cuda::AttentionCall c = call_of(q, probs, heads, dropout);
    const cuda::AttentionPath path = cuda::attention_forward_path(c, probs.defined(), [&] { return cudnn_takes(); });
    if (path == cuda::AttentionPath::Float32Copies) {
      const ForwardCopies f = forward_copies(q, k, v, ctx);
      return attention_forward(f.q, f.k, f.v, key_mask, heads, scale, dropout, probs, f.ctx);
    }
    scratch_bytes(cuda::attention_forward_scratch_bytes(path, c));
  }
  // The CUDA backend's windowed attention: the flash kernels with a window
  // where fused (cuda::window_attention_fused), else the materialised
  // kernels, through float32 copies for 16 bits.
  bool attention_window_saves_probabilities(DType dtype, int64_t head_dim, float dropout_p) const override {
    return !cuda() || !cuda::window_attention_fused(dtype, head_dim, dropout_p);
  }
  void do_attention_window_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                   int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                                   const Tensor& saved, const Tensor& ctx) override {
    if (!cuda()) return;
    if (!attention_window_saves_probabilities(q.dtype(), q.dim(2) / heads, dropout.p)) return;  // no scratch
    if (q.dtype() != DType::F32) {
      const ForwardCopies f = forward_copies(q, k, v, ctx);
      return attention_window_forward(f.q, f.k, f.v, key_mask, heads, scale, window, dropout, saved, f.ctx);
    }
    scratch_bytes(cuda::attention_scratch_bytes(q.dim(0), heads, q.dim(1)));
  }
  void do_attention_window_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                    double scale, int64_t window, const DropoutSpec& dropout, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv) override {
    if (!cuda()) return;
    if (!attention_window_saves_probabilities(q.dtype(), q.dim(2) / heads, dropout.p))
      return scratch_bytes(cuda::flash_window_scratch_bytes(q.dim(0), q.dim(1), heads, q.dim(2) / heads));
    if (q.dtype() != DType::F32) {
      const BackwardCopies b = backward_copies(dctx, q, k, v, dq, dk, dv);
      return attention_window_backward(b.dctx, b.q, b.k, b.v, ctx, saved, key_mask, heads, scale, window, dropout,
                                       b.dq, b.dk, b.dv);
    }
    scratch_bytes(cuda::attention_scratch_bytes(q.dim(0), heads, q.dim(1)));
  }
  // DeBERTa's attention: the CUDA backend's materialised kernels, through float32 copies for 16 bits.
  void do_attention_relative_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_q,
                                     const Tensor& pos_k, const Tensor& rel_index, const Tensor& rel_ranges,
                                     const Tensor& key_mask, int64_t heads, double scale, const DropoutSpec& dropout,
                                     const Tensor& probs, const Tensor& ctx) override {
    if (!cuda()) return;
    if (q.dtype() != DType::F32) {
      const ForwardCopies f = forward_copies(q, k, v, ctx);
      const auto& n = cuda::kRelativeFloat32Copies;
      const Tensor pq = pos_q.defined() ? temporary(pos_q.shape(), n[0]) : Tensor();
      const Tensor pk = pos_k.defined() ? temporary(pos_k.shape(), n[1]) : Tensor();
      return attention_relative_forward(f.q, f.k, f.v, pq, pk, rel_index, rel_ranges, key_mask, heads, scale, dropout,
                                        probs, f.ctx);
    }
    scratch_bytes(cuda::relative_attention_scratch_bytes(q.dim(0), heads, q.dim(1), rel_ranges.dim(0)));
  }
  void do_attention_relative_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& pos_q, const Tensor& pos_k, const Tensor& rel_index,
                                      const Tensor& rel_ranges, const Tensor& probs, int64_t heads, double scale,
                                      const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                                      const Tensor& dv, const Tensor& dpos_q, const Tensor& dpos_k) override {
    if (!cuda()) return;
    if (q.dtype() != DType::F32) {
      const BackwardCopies b = backward_copies(dctx, q, k, v, dq, dk, dv);
      const auto& n = cuda::kRelativeFloat32Copies;
      const Tensor pq = pos_q.defined() ? temporary(pos_q.shape(), n[0]) : Tensor();
      const Tensor pk = pos_k.defined() ? temporary(pos_k.shape(), n[1]) : Tensor();
      const Tensor dpq = dpos_q.defined() ? temporary(dpos_q.shape(), n[2]) : Tensor();
      const Tensor dpk = dpos_k.defined() ? temporary(dpos_k.shape(), n[3]) : Tensor();
      return attention_relative_backward(b.dctx, b.q, b.k, b.v, pq, pk, rel_index, rel_ranges, probs, heads, scale,
                                         dropout, b.dq, b.dk, b.dv, dpq, dpk);
    }
    scratch_bytes(cuda::relative_attention_scratch_bytes(q.dim(0), heads, q.dim(1), rel_ranges.dim(0)));
  }
  void do_rotary(const Tensor&, int64_t, double, bool) override {}
  void do_gated_activation_forward(ActivationKind, const Tensor&, const Tensor&) override {}
  void do_gated_activation_backward(ActivationKind, const Tensor&, const Tensor&, const Tensor&) override {}

  void do_attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx,
                             const Tensor& saved, const Tensor& key_mask, int64_t heads, double scale,
                             const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                             const Tensor& dv) override {
    if (!cuda()) return;
    const cuda::AttentionCall c = call_of(q, saved, heads, dropout);
    const cuda::AttentionPath path = cuda::attention_backward_path(c, [&] { return cudnn_takes(); });
    if (path == cuda::AttentionPath::Float32Copies) {
      const BackwardCopies b = backward_copies(dctx, q, k, v, dq, dk, dv);
      return attention_backward(b.dctx, b.q, b.k, b.v, ctx, saved, key_mask, heads, scale, dropout, b.dq, b.dk,
                                b.dv);
    }
    scratch_bytes(cuda::attention_backward_scratch_bytes(path, c));
  }

  void do_attention_backward_interleaved(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                         double scale, const DropoutSpec& dropout, const Tensor& dqkv) override {
    // The CPU backend needs nothing.
    (void)dqkv;
    if (!cuda()) return;
    const cuda::AttentionCall c = call_of(q, saved, heads, dropout);
    const cuda::AttentionPath path = cuda::attention_backward_path(c, [&] { return cudnn_takes(); });
    if (cuda::attention_backward_strided(path)) return scratch_bytes(cuda::attention_backward_scratch_bytes(path, c));
    // The temporaries, in this order, freed together.
    const auto& names = cuda::kInterleavedTemporaries;
    Tensor dq = Tensor::empty(ledger(), q.shape(), q.dtype(), Category::Temporary, names[0]);
    Tensor dk = Tensor::empty(ledger(), q.shape(), q.dtype(), Category::Temporary, names[1]);
    Tensor dv = Tensor::empty(ledger(), q.shape(), q.dtype(), Category::Temporary, names[2]);
    attention_backward(dctx, q, k, v, ctx, saved, key_mask, heads, scale, dropout, dq, dk, dv);
  }

  // --- losses: 0, with nothing read ---
  double do_cross_entropy(const Tensor&, const Tensor&, const Tensor&, double) override { return 0.0; }
  double do_mse(const Tensor&, const Tensor&, const Tensor&) override { return 0.0; }
  double do_bce_with_logits(const Tensor&, const Tensor&, const Tensor&) override { return 0.0; }
  double do_cross_entropy_sum(const Tensor& logits, const Tensor&, const Tensor&, double) override {
    if (cuda()) scratch_bytes(cuda::cross_entropy_sum_scratch_bytes(logits.dim(0)));
    return 0.0;
  }

  // --- optimizer ---
  double do_sum_of_squares(const Tensor& t) override {
    if (cuda()) scratch_bytes(cuda::sum_of_squares_scratch_bytes(t.numel()));
    return 0.0;
  }
  void do_scale(const Tensor&, double) override {}
  void do_adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWHyper&) override {}
  void do_sgd_step_flat(const Tensor&, const Tensor&, const Tensor&, const std::vector<ParamSegment>&, const SgdHyper&,
                        const Tensor*) override {}
  void do_adafactor_step(const Tensor& param, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const AdafactorHyper&, const Tensor*) override {
    if (cuda()) scratch_bytes(cuda::adafactor_scratch_bytes(param.numel()));
  }
  void do_adamw8bit_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const AdamWHyper&, const Tensor*) override {}

  void do_adamw_step_flat(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                          const std::vector<ParamSegment>& segments, const AdamWHyper&,
                          const Tensor* half_copy) override {
    ANATOMY_CHECK(param.numel() == grad.numel() && param.numel() == exp_avg.numel() &&
                      param.numel() == exp_avg_sq.numel() && (!half_copy || half_copy->numel() == param.numel()),
                  "adamw_step_flat: {} {} {} {} differ in size", param.name(), grad.name(), exp_avg.name(),
                  exp_avg_sq.name());
    check_segments(segments, param, "adamw_step_flat");
    if (!cuda()) return;
    // The chunk table, once per distinct segment list, the old one released
    // before the new one is allocated (as CudaBackend::adamw_step_flat).
    if (!adamw_table_.defined() || segments != adamw_segments_) {
      std::vector<unsigned char> table;
      cuda::adamw_chunk_table(segments, table);
      adamw_table_ = Tensor();
      adamw_table_ = Tensor::empty(ledger_, {cuda::adamw_chunk_table_floats(table.size())}, DType::F32,
                                   Category::Functionality, "adamw_chunk_table");
      adamw_segments_ = segments;
    }
  }

  // --- timing: markers that measure nothing ---
  int64_t record_marker() override { return markers_++; }
  double marker_elapsed_ms(int64_t from, int64_t to) override {
    ANATOMY_CHECK(from >= 0 && to >= 0 && from < markers_ && to < markers_, "marker_elapsed_ms: no markers {} and {}",
                  from, to);
    return 0.0;
  }
  void clear_markers() override { markers_ = 0; }

 private:
  bool cuda() const { return target_ == MetaTarget::Cuda; }

  Tensor temporary(const Shape& shape, const char* name) {
    return Tensor::empty(ledger_, shape, DType::F32, Category::Temporary, name);
  }
  // The CUDA backend's float32 copies of a 16-bit attention's operands, in its order.
  struct ForwardCopies {
    Tensor ctx, q, k, v;
  };
  ForwardCopies forward_copies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx) {
    const auto& n = cuda::kForwardFloat32Copies;
    return {temporary(ctx.shape(), n[0]), temporary(q.shape(), n[1]), temporary(k.shape(), n[2]),
            temporary(v.shape(), n[3])};
  }
  struct BackwardCopies {
    Tensor dq, dk, dv, dctx, q, k, v;
  };
  BackwardCopies backward_copies(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    const auto& n = cuda::kBackwardFloat32Copies;
    return {temporary(dq.shape(), n[0]),   temporary(dk.shape(), n[1]), temporary(dv.shape(), n[2]),
            temporary(dctx.shape(), n[3]), temporary(q.shape(), n[4]),  temporary(k.shape(), n[5]),
            temporary(v.shape(), n[6])};
  }

  // One scratch shared by the ops, grown to the largest need so far (rounded),
  // the old one released first (as CudaBackend::scratch_bytes).
  void scratch_bytes(size_t bytes) {
    if (bytes == 0) return;
    if (!scratch_.defined() || scratch_.nbytes() < bytes) {
      scratch_ = Tensor();
      const auto words = static_cast<int64_t>(cuda::scratch_allocation_bytes(bytes) / 4);
      scratch_ = Tensor::empty(ledger_, {words}, DType::F32, Category::Temporary, "kernel_scratch");
    }
  }

  MetaTarget target_;
  bool split_tf32_ = false;  // float32 products in split TF32 (CUDA target only)
  bool hopper_attention_ = false;  // the device runs the Hopper attention kernels (CUDA target only)
  Ledger ledger_;  // first, so that it outlives the buffers below
  Tensor workspace_, results_, scratch_, adamw_table_;
  std::vector<ParamSegment> adamw_segments_;  // what adamw_table_ was built from
  int64_t markers_ = 0;
};

}  // namespace

std::unique_ptr<DeviceAllocator> make_simulated_cpu_allocator(int64_t capacity) {
  return std::make_unique<SimulatedCpuAllocator>(capacity);
}

std::unique_ptr<Backend> make_meta_backend(const MetaOptions& options) {
  return std::make_unique<MetaBackend>(options);
}

}  // namespace anatomy
