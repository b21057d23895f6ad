// profiling.h: a Backend that times every op of another one. It forwards
// each call to the inner backend and, while recording, brackets it with two
// markers (CUDA events on the GPU, the clock on the CPU) and notes what the op
// is: its name, the operand it works on, its class in the sense of "Data
// Movement Is All You Need" (tensor contraction, statistical normalisation,
// element-wise, ...), the floating-point operations it executes and the bytes
// it reads and writes, both counted from the shapes. The phase comes from the
// ledger ("forward layer 3"), which the model sets.
//
// While not recording it only forwards: a profiled run costs nothing on the
// steps it does not profile beyond one virtual call per op.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "anatomy/kernels/backend.h"

namespace anatomy {

enum class OpClass { Contraction, Normalization, Elementwise, Optimizer, Communication, Data };
constexpr int kOpClassCount = 6;
const char* op_class_name(OpClass c);

struct OpRecord {
  std::string op;       // backend op: "linear_forward", "attention_backward", ...
  std::string operand;  // what it works on, layer-free: "attention.self.query", "gelu", ...
  std::string phase;    // the ledger's phase when it ran: "forward layer 3"
  OpClass op_class = OpClass::Elementwise;
  double flops = 0.0;   // floating-point operations executed (recomputation included)
  double bytes = 0.0;   // bytes read + written, counted from the shapes
  double start_ms = 0.0;  // from the start of the step
  double ms = 0.0;
};

struct StepTiming {
  double step_ms = 0.0;  // from the first marker of the step to its last
  std::vector<OpRecord> ops;
};

// A parameter's or buffer's name without prefixes and layer indices:
// "half.bert.encoder.layer.3.attention.self.query.weight" -> "attention.self.query".
std::string operand_name(const std::string& tensor_name);

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) { Backend::set_options(inner.options()); }
  void set_options(const EngineOptions& options) override {
    Backend::set_options(options);
    inner_.set_options(options);
  }

  // Starts recording a step (forgets any earlier markers).
  void begin_step();
  // Stops recording; waits for the step's work and returns its timings.
  StepTiming end_step();
  bool recording() const { return recording_; }
  // Times `call`, work that is not one of this backend's ops but runs on its
  // stream or holds it up (a collective queued or waited for, numbers the
  // ranks exchange through the host), as an op of class `c` with no FLOPs or
  // bytes counted. While not recording it only calls it.
  void time_call(const char* op, std::string operand, OpClass c, const std::function<void()>& call);

  Device device() const override { return inner_.device(); }
  Ledger& ledger() override { return inner_.ledger(); }

  void zero(const Tensor& t) override;
  void upload_async(const Tensor& dst, const void* src) override;
  void upload_wait() override { inner_.upload_wait(); }
  void copy_from_host(const Tensor& dst, const void* src) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void cast(const Tensor& src, const Tensor& dst) override;
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) override;
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor& dw,
                       const Tensor* db, bool accumulate_dx) override;
  void residual_layernorm_forward(const Tensor& x, const Tensor& residual, const DropoutSpec& dropout,
                                  const Tensor& gamma, const Tensor& beta, double eps, const Tensor& sum,
                                  const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void residual_layernorm_backward(const Tensor& dy, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& gamma, const DropoutSpec& dropout, const Tensor& d_residual,
                                   const Tensor& d_x, const Tensor& dgamma, const Tensor& dbeta,
                                   const Tensor* d_bias) override;
  void linear_forward_n(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                        const std::vector<Tensor>& y) override;
  void linear_backward_weights_n(const std::vector<Tensor>& dy, const Tensor& x, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& dw, const std::vector<Tensor>& db) override;
  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx) override;
  void embeddings_layernorm_forward(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                    const Tensor& word, const Tensor& position, const Tensor& token_type,
                                    const Tensor& gamma, const Tensor& beta, double eps, const DropoutSpec& dropout,
                                    const Tensor& sum, const Tensor& mean, const Tensor& rstd, const Tensor& work,
                                    const Tensor& out) override;
  void embeddings_layernorm_backward(const Tensor& dout, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& gamma, const DropoutSpec& dropout, const Tensor& work,
                                     const Tensor& d_sum, const Tensor& dgamma, const Tensor& dbeta) override;
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                          const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void add_inplace(const Tensor& dst, const Tensor& src) override;
  void activation_forward(ActivationKind kind, const Tensor& x, const Tensor& y) override;
  void activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy, const Tensor& dx) override;
  void activation_backward_recompute(ActivationKind kind, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                     const Tensor& y, const Tensor* d_bias) override;
  void dropout(const Tensor& x, const Tensor& y, const DropoutSpec& spec) override;
  void select_row(const Tensor& x, int64_t row, const Tensor& out) override;
  void select_row_backward(const Tensor& dout, int64_t row, const Tensor& dx) override;
  bool attention_saves_probabilities(DType dtype, int64_t head_dim) const override {
    return inner_.attention_saves_probabilities(dtype, head_dim);
  }
  bool attention_keeps_dropout_bits(DType dtype, int64_t head_dim, int64_t L) const override {
    return inner_.attention_keeps_dropout_bits(dtype, head_dim, L);
  }
  bool attention_first_query_supported(int64_t head_dim, int64_t L) const override {
    return inner_.attention_first_query_supported(head_dim, L);
  }
  void attention_first_query_forward(const Tensor& q0, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                     int64_t heads, double scale, const DropoutSpec& dropout, const Tensor& probs,
                                     const Tensor& ctx0) override;
  void attention_first_query_backward(const Tensor& dctx0, const Tensor& q0, const Tensor& k, const Tensor& v,
                                      const Tensor& probs, int64_t heads, double scale, const DropoutSpec& dropout,
                                      const Tensor& dq0, const Tensor& dk, const Tensor& dv) override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                         double scale, const DropoutSpec& dropout, const Tensor& saved, const Tensor& ctx) override;
  void attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx,
                          const Tensor& saved, const Tensor& key_mask, int64_t heads, double scale,
                          const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk, const Tensor& dv) override;
  void attention_backward_interleaved(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                      double scale, const DropoutSpec& dropout, const Tensor& dqkv) override;
  double cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& dlogits) override;
  double mse(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override;
  double bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) override;
  double sum_of_squares(const Tensor& t) override;
  void scale(const Tensor& t, double factor) override;
  void sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                     const std::vector<ParamSegment>& segments, const SgdHyper& hyper, const Tensor* half_copy) override;
  void adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state, const Tensor& col_state,
                      const Tensor& v_state, const AdafactorHyper& hyper, const Tensor* half_copy) override;
  void adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                      const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                      const AdamWHyper& hyper, const Tensor* half_copy) override;
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWHyper& hyper) override;
  void adamw_step_flat(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                       const std::vector<ParamSegment>& segments, const AdamWHyper& hyper,
                       const Tensor* half_copy) override;
  void synchronize() override { inner_.synchronize(); }
  void release_scratch() override { inner_.release_scratch(); }
  void* native_stream() override { return inner_.native_stream(); }
  int64_t record_marker() override { return inner_.record_marker(); }
  void range_push(const char* name) override { inner_.range_push(name); }
  void range_pop() override { inner_.range_pop(); }
  double marker_elapsed_ms(int64_t from, int64_t to) override { return inner_.marker_elapsed_ms(from, to); }
  void clear_markers() override { inner_.clear_markers(); }

 private:
  struct Pending {
    OpRecord record;
    int64_t begin = 0, end = 0;
  };
  // Brackets one forwarded call with markers when recording.
  template <typename F>
  auto timed(const char* op, std::string operand, OpClass c, double flops, double bytes, F&& call);

  Backend& inner_;
  bool recording_ = false;
  int64_t step_begin_ = 0;
  std::vector<Pending> pending_;
};

}  // namespace anatomy
