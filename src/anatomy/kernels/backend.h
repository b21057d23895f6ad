// backend.h: the one interface of operations that the model is written against.
// A backend owns the memory ledger of its device and implements each op; the
// CPU backend (cpu/) is the readable reference, the CUDA backend the fast one.
// Ops know nothing of BERT: they are products, normalisations, element-wise
// maps, attention over a key padding mask, losses and optimizer updates.
//
// Conventions: tensors are contiguous, row-major, float32 unless stated.
// Mixed precision: where an op accepts 16-bit (BF16 or F16) activations it
// says so; parameter gradients, LayerNorm statistics and losses stay float32.
// Backward ops *accumulate* (+=) into parameter gradients, so that gradient
// accumulation over micro-batches needs nothing special, and *write* (=) input
// gradients.
//
// Each op is a public function that describes the op to the backend's hook
// (the profiler), when one records, and calls the backend's implementation,
// the protected do_ function of the same name: one place where every op is
// watched, and one description of each op's cost (backend.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "anatomy/core/engine_options.h"
#include "anatomy/core/ledger.h"
#include "anatomy/core/tensor.h"

namespace anatomy {

enum class ActivationKind { GeluErf, GeluTanh, Relu, Tanh };

// Identifies one dropout site's random stream: masks are a pure function of
// (seed, stream, element index), so backward replays forward's mask.
struct DropoutSpec {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t stream = 0;
};

struct AdamWHyper {
  double lr = 5e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based, after incrementing, as torch.optim.AdamW
  // Each gradient is multiplied by this, rounded to float32, before the update
  // (in float32, as Backend::scale would have): gradient clipping's
  // coefficient folded into the update instead of a pass of its own over the
  // gradients, with the same bits. The gradients themselves are left as they are.
  double grad_scale = 1.0;
};

// A run [offset, offset + count) of a flat parameter buffer, with whether its
// AdamW parameter group has weight decay.
struct ParamSegment {
  int64_t offset = 0, count = 0;
  bool weight_decay = false;
  bool operator==(const ParamSegment&) const = default;
};

// Fails naming `op` unless `seg` lies inside the flat buffer `param`.
inline void check_segment(const ParamSegment& seg, const Tensor& param, const char* op) {
  ANATOMY_CHECK(seg.offset >= 0 && seg.count >= 0 && seg.offset + seg.count <= param.numel(),
                "{}: segment [{}, +{}) outside {}", op, seg.offset, seg.count, param.name());
}
inline void check_segments(const std::vector<ParamSegment>& segments, const Tensor& param, const char* op) {
  for (const ParamSegment& seg : segments) check_segment(seg, param, op);
}

// Fails naming dqkv unless it is [B, L, 3H] of q's dtype for q [B, L, H]: the
// gradients of attention_backward_interleaved.
inline void check_interleaved_gradients(const Tensor& dqkv, const Tensor& q) {
  const int64_t H = q.dim(2);
  ANATOMY_CHECK(dqkv.dtype() == q.dtype() && dqkv.shape() == Shape({q.dim(0), q.dim(1), 3 * H}),
                "attention_backward_interleaved: {} is {} {}, not {} [{}, {}, {}]", dqkv.name(),
                dtype_name(dqkv.dtype()), shape_str(dqkv.shape()), dtype_name(q.dtype()), q.dim(0), q.dim(1), 3 * H);
}

// torch.optim.SGD: L2 weight decay added to the gradient (per segment, as
// AdamW's groups), momentum with dampening, optionally Nesterov.
struct SgdHyper {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = true;  // the momentum buffer starts as the first gradient
  double grad_scale = 1.0;  // as AdamWHyper's: each gradient times this (float32) first
};

// transformers.optimization.Adafactor as Hugging Face Trainer builds it for
// optim="adafactor" (scale_parameter=False, relative_step=False,
// warmup_init=False, beta1=None: no first moment), the learning rate given.
struct AdafactorHyper {
  double lr = 1e-3;
  double eps1 = 1e-30;          // added to grad² (eps[0])
  double clip_threshold = 1.0;  // the update's RMS is clipped to this
  double decay_rate = -0.8;     // beta2_t = 1 - step^decay_rate
  double weight_decay = 0.0;
  int64_t step = 1;             // 1-based
};

// bitsandbytes' block-wise 8-bit states for AdamW: each moment is one byte per
// element, an index into a 256-entry map (signed dynamic map for the first
// moment, unsigned for the second) scaled by its block's absmax.
constexpr int64_t kAdam8bitBlock = 256;

// uint32 words of attention mask bits a row of L probabilities takes, keys
// rounded up to 128 (Backend::attention_keeps_dropout_bits).
constexpr int64_t attention_keep_words(int64_t L) { return (L + 127) / 128 * 4; }

// What an op is, as a profiler reports it: the op ("linear_forward"), the
// operand it works on, its class in the sense of "Data Movement Is All You
// Need" (tensor contraction, statistical normalisation, element-wise, ...),
// and the floating-point operations it executes and the bytes it reads and
// writes, both counted from the shapes (backend.cpp says how).
enum class OpClass { Contraction, Normalization, Elementwise, Optimizer, Communication, Data };
constexpr int kOpClassCount = 6;
const char* op_class_name(OpClass c);
struct OpInfo {
  const char* op = "";
  std::string operand;
  OpClass op_class = OpClass::Elementwise;
  double flops = 0.0;
  double bytes = 0.0;
};
// A parameter's or buffer's name without prefixes and layer indices:
// "half.bert.encoder.layer.3.attention.self.query.weight" -> "attention.self.query".
std::string operand_name(const std::string& tensor_name);

// Watches a backend's ops (the profiler, kernels/profiling.h). While
// recording() it is told of each op before it runs (begin) and after it
// returns (end); an op that throws gets no end. Otherwise ops run untouched.
class OpHook {
 public:
  virtual ~OpHook() = default;
  virtual bool recording() const = 0;
  virtual void begin(OpInfo info) = 0;
  virtual void end() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual Ledger& ledger() = 0;
  // The engine's choices (attention kernels, plans, the last layer, ...), set
  // by whoever makes the backend, before its first op; the model and the
  // communicators read them here too.
  const EngineOptions& options() const { return options_; }
  virtual void set_options(const EngineOptions& options) { options_ = options; }
  // The hook every op goes through (nullptr: none), which outlives its use.
  void set_hook(OpHook* hook) { hook_ = hook; }
  OpHook* hook() const { return hook_; }

  // --- memory ---
  void zero(const Tensor& t);
  // Asynchronous input upload, for a loader that copies the next batch while
  // the current one computes. upload_async queues a copy of dst.nbytes() host
  // bytes from src into dst on a copy queue of its own, through pinned staging
  // memory (src is read before the call returns). The copy waits until the
  // compute queue has finished everything queued before the latest
  // upload_wait(); upload_wait() makes the ops queued after it wait for every
  // upload issued so far. So with two sets of input buffers, batch k + 1 is
  // uploaded into the set batch k − 1 used while batch k computes. dst must not
  // be memory that the compute queue may still reuse (fixed buffers, not
  // temporaries).
  void upload_async(const Tensor& dst, const void* src);
  virtual void upload_wait() = 0;
  void copy_from_host(const Tensor& dst, const void* src);
  void copy_to_host(const Tensor& src, void* dst);
  void copy(const Tensor& dst, const Tensor& src);
  // dst = src converted between F32 and BF16/F16 (round to nearest even); equal element counts.
  void cast(const Tensor& src, const Tensor& dst);

  // --- products ---
  // y[M,N] = x[M,K] · w[N,K]^T (+ b[N]). Mixed precision: x, w, b and y all
  // 16-bit of one type, products accumulated in float32.
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y);
  // dx = dy · w (when dx is given; dx += dy · w with accumulate_dx); dw += dy^T · x
  // (when dw is defined); db += Σ_rows dy (when db is given). Mixed precision:
  // dy, x, w, dx 16-bit; dw and db float32.
  void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, const Tensor& dw,
                       const Tensor* db, bool accumulate_dx = false);

  // n products of one input whose weights, biases and outputs each lie at one
  // constant stride in memory (query, key and value): y_i = x · w_i^T + b_i.
  // A backend may run them as one batched product; by default they run one by one.
  void linear_forward_n(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                        const std::vector<Tensor>& y);
  // Their weight and bias gradients: dw_i += dy_i^T · x and db_i += Σ_rows dy_i.
  void linear_backward_weights_n(const std::vector<Tensor>& dy, const Tensor& x, const std::vector<Tensor>& w,
                                 const std::vector<Tensor>& dw, const std::vector<Tensor>& db);

  // --- embeddings ---
  // out[t] (+)= table[ids[t]] for every row t; ids are int64; `accumulate` adds instead of writing.
  // out is float32; the table float32, or BF16/F16 (inference's 16-bit weights;
  // also a gather of rows of 16-bit activations), converted exactly to float.
  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate);
  // dtable[ids[t]] += dout[t], skipping rows whose id equals padding_idx (pass -1 for none).
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx);
  // RoBERTa's position ids of a [B, L] batch (int64, like ids): a padding
  // token (id == padding_idx) gets padding_idx, the others padding_idx + 1 +
  // the number of non-padding tokens before them in their sequence.
  void positions_past_padding(const Tensor& ids, int64_t padding_idx, const Tensor& positions);

  // The embeddings block, forward: sum = word[ids] + position[positions] +
  // token_type[token_types] (float32 tables, added in that order, as three
  // embedding_forward calls; token_type undefined: a model without token
  // types, two tables; position undefined: a model without a position table), y = LayerNorm(sum) (saves mean and rstd),
  // out = dropout(y) rounded once to out's dtype. `work` is float32 like sum:
  // where y is kept before the dropout and the rounding (out itself when out
  // is float32). The default runs those ops; a backend may fuse them (and then
  // need not touch work).
  void embeddings_layernorm_forward(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                    const Tensor& word, const Tensor& position, const Tensor& token_type,
                                    const Tensor& gamma, const Tensor& beta, double eps, const DropoutSpec& dropout,
                                    const Tensor& sum, const Tensor& mean, const Tensor& rstd, const Tensor& work,
                                    const Tensor& out);
  // Its backward up to the sum: work = dropout(float32(dout)) (written; work
  // may be dout itself when dout is float32), d_sum = LayerNorm's input
  // gradient from work (written), dgamma and dbeta accumulate. The default runs
  // cast, dropout and layernorm_backward.
  void embeddings_layernorm_backward(const Tensor& dout, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& gamma, const DropoutSpec& dropout, const Tensor& work,
                                     const Tensor& d_sum, const Tensor& dgamma, const Tensor& dbeta);

  // --- normalisation ---
  // y = (x - mean) * rstd * gamma + beta over the last dimension; saves mean and rstd [rows].
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd);
  // dx = ∂/∂x (written); dgamma, dbeta += .
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                          const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);

  // The residual connection of a transformer layer, fused:
  // sum = dropout(x) + residual; y = LayerNorm(sum) (saves mean and rstd).
  // x, residual, sum and y share one dtype (16-bit under mixed precision: sum is
  // rounded to it before the statistics); gamma, beta, mean, rstd float32.
  void residual_layernorm_forward(const Tensor& x, const Tensor& residual, const DropoutSpec& dropout,
                                  const Tensor& gamma, const Tensor& beta, double eps, const Tensor& sum,
                                  const Tensor& y, const Tensor& mean, const Tensor& rstd);
  // Its backward: d_residual = ∂/∂sum (written; may be dy itself), d_x =
  // dropout(d_residual) (written), dgamma and dbeta accumulate. With d_bias
  // (float32 [H]), d_bias += Σ_rows d_x as well: the bias gradient of the
  // product whose output x is, which a backend can sum in the same pass.
  void residual_layernorm_backward(const Tensor& dy, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& gamma, const DropoutSpec& dropout, const Tensor& d_residual,
                                   const Tensor& d_x, const Tensor& dgamma, const Tensor& dbeta,
                                   const Tensor* d_bias = nullptr);

  // --- element-wise ---
  void add(const Tensor& a, const Tensor& b, const Tensor& out);  // out = a + b
  void add_inplace(const Tensor& dst, const Tensor& src);         // dst += src
  void activation_forward(ActivationKind kind, const Tensor& x, const Tensor& y);
  // dx = dy * f'(x) where `saved` is x (for GELU, ReLU) or y = f(x) (for tanh).
  void activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy, const Tensor& dx);
  // Backward that recomputes the forward in the same pass: y = f(x) and
  // dx = dy * f'(x), x the saved input (not for Tanh, which saves its output).
  // dx may be dy. Lets a layer keep only x and rebuild f(x) when backward needs it.
  // With d_bias (float32, x's last dimension), d_bias += Σ_rows dx as well: the
  // bias gradient of the product whose output x is.
  void activation_backward_recompute(ActivationKind kind, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                     const Tensor& y, const Tensor* d_bias = nullptr);
  // y = x * keep / (1 - p); in place allowed. Backward is the same call on dy.
  void dropout(const Tensor& x, const Tensor& y, const DropoutSpec& spec);
  // out[b, :] = x[b, row, :] for every batch entry b (x is [B, L, H], out [B, H]).
  void select_row(const Tensor& x, int64_t row, const Tensor& out);
  // dx[b, row, :] += dout[b, :].
  void select_row_backward(const Tensor& dout, int64_t row, const Tensor& dx);
  // x[b, l, :] = 0 where mask[b, l] == 0 (x [B, L, H] of any floating dtype,
  // mask int64 [B, L]): DeBERTa's embeddings times the attention mask, and its backward.
  void mask_rows(const Tensor& x, const Tensor& mask);

  // --- attention ---
  // Multi-head scaled dot-product attention. q, k, v, ctx: [B, L, heads*d] with
  // heads interleaved as Hugging Face's view(B, L, heads, d). key_mask: int64
  // [B, L] (1 attend, 0 padding) or undefined. Dropout applies to the
  // probabilities. `saved` (float32) is what backward needs besides q, k, v
  // and ctx: the probabilities [B, heads, L, L] before dropout when
  // attention_saves_probabilities(dtype, head_dim), else the row log-sum-exp [B, heads, L]
  // of a fused kernel that recomputes them. 16-bit q, k, v, ctx allowed where
  // the backend has such attention.
  virtual bool attention_saves_probabilities(DType dtype, int64_t head_dim) const = 0;
  // Whether a fused attention of this shape also keeps its dropout mask, as
  // bits, for the backward to read rather than draw again (no by default).
  // Then, with dropout, `saved` is float32 [B, heads, L·(W + 1)], W =
  // attention_keep_words(L) (below): the bits [B, heads, L, W] as uint32
  // words (bit k of word w of row i: key 32w + k kept), then the row
  // log-sum-exp [B, heads, L]. The model sizes `saved` so when asked for.
  virtual bool attention_keeps_dropout_bits(DType dtype, int64_t head_dim, int64_t L) const {
    (void)dtype;
    (void)head_dim;
    (void)L;
    return false;
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                         double scale, const DropoutSpec& dropout, const Tensor& saved, const Tensor& ctx);
  // Inference attention over packed sequences of different lengths (no
  // padding, no dropout, nothing saved): q, k, v, ctx [T, heads*d], sequence b
  // is rows offsets[b] .. offsets[b+1] of them. `offsets` is int64 [B + 1] on
  // the device, `host_offsets` the same numbers on the host. By default each
  // sequence runs through attention_forward as a batch of one.
  void attention_forward_packed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                                const std::vector<int64_t>& host_offsets, int64_t heads, double scale,
                                const Tensor& ctx);
  void attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& ctx,
                          const Tensor& saved, const Tensor& key_mask, int64_t heads, double scale,
                          const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk, const Tensor& dv);
  // The same, with the three input gradients interleaved per token: dqkv is
  // [B, L, 3·heads·d] (q's dtype), row t holding dq, dk and dv of token t one
  // after another (columns 0, H and 2H). That is the layout of one product
  // [B·L, 3H]·[3H, H] for their input gradient, and of one [3H, B·L]·[B·L, H]
  // for their weight gradients, when the three weights lie adjacent. Written (=).
  void attention_backward_interleaved(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                      double scale, const DropoutSpec& dropout, const Tensor& dqkv);

  // Attention within a window (ModernBERT's local layers): query i attends to
  // the keys j with |i − j| ≤ window that the key mask keeps, as Hugging
  // Face's bidirectional sliding-window mask; a query with no such key
  // attends uniformly to all L keys (as attention_forward's all-masked rows).
  // `saved` (float32) is the probabilities [B, heads, L, L] before dropout
  // when attention_window_saves_probabilities(dtype, head_dim, dropout p),
  // else the row log-sum-exp [B, heads, L] of a fused kernel that visits only
  // the key tiles within the window (+inf marks a query that attends
  // uniformly). q, k, v and ctx as attention_forward's (float32, or 16-bit,
  // computed through float32 copies where not fused).
  virtual bool attention_window_saves_probabilities(DType dtype, int64_t head_dim, float dropout_p) const {
    (void)dtype;
    (void)head_dim;
    (void)dropout_p;
    return true;
  }
  void attention_window_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                                const Tensor& saved, const Tensor& ctx);
  // Its backward from what the forward saved (the probabilities hold the
  // window and mask in their zeros; the fused path reads ctx, the key mask
  // and the window); dq, dk, dv written.
  void attention_window_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                 double scale, int64_t window, const DropoutSpec& dropout, const Tensor& dq,
                                 const Tensor& dk, const Tensor& dv);

  // DeBERTa's disentangled attention (relative positions). The score of query
  // i and key j in head h is
  //   scale · (q_i·k_j + q_i·pos_k[r] + k_j·pos_q[r]),  r = rel_index[i − j + L − 1]
  // (content-to-position through pos_k, position-to-content through pos_q;
  // an undefined one leaves its term out). pos_q, pos_k: [P, heads·d] in q's
  // dtype, the relative embeddings through the layer's query and key
  // projections, shared by the batch. rel_index: int64 [2L − 1], each in
  // [0, P); rel_ranges: int64 [P, 2], the first and last distance i − j whose
  // index is r (first > last: none), which the backward sums over. The key
  // mask, the dropout, `probs` (always materialised) and ctx are
  // attention_window_forward's.
  void attention_relative_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_q,
                                  const Tensor& pos_k, const Tensor& rel_index, const Tensor& rel_ranges,
                                  const Tensor& key_mask, int64_t heads, double scale, const DropoutSpec& dropout,
                                  const Tensor& probs, const Tensor& ctx);
  // Its backward from the saved probabilities: dq, dk, dv written; dpos_q and
  // dpos_k (shaped as pos_q and pos_k, summed over the batch) written where defined.
  void attention_relative_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& pos_q, const Tensor& pos_k, const Tensor& rel_index,
                                   const Tensor& rel_ranges, const Tensor& probs, int64_t heads, double scale,
                                   const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                   const Tensor& dpos_q, const Tensor& dpos_k);

  // Rotary position embedding, in place on x [B, L, heads·d] (queries or keys),
  // positions 0 .. L−1: in each head, element i < d/2 and element i + d/2 of
  // token t turn by the angle t·f_i, f_i = 1 / theta^(2i/d), as Hugging Face's
  // rotate_half convention computes it (frequencies and angles in float32, the
  // rotation in float32 on the widened input, rounded once to x's dtype).
  // `inverse` turns by −angle: the backward, applied to a gradient.
  void rotary(const Tensor& x, int64_t heads, double theta, bool inverse);

  // Gated activation (GeGLU with GELU): u [.., 2I] holds the input half then
  // the gate half, as Hugging Face's chunk(2, dim=-1); y [.., I] = act(input) · gate.
  void gated_activation_forward(ActivationKind kind, const Tensor& u, const Tensor& y);
  // du [.., 2I] (written): act'(input) · gate · dy, then act(input) · dy.
  void gated_activation_backward(ActivationKind kind, const Tensor& u, const Tensor& dy, const Tensor& du);

  // Attention of the first token only (query row 0) over all L keys: what the
  // last encoder layer needs when only its first token's output is read.
  // q0, ctx0: [B, 1, heads*d]; k, v: [B, L, heads*d] (q0's dtype); key_mask
  // as attention_forward's. `probs` (float32 [B, heads, L]) receives the
  // probabilities before dropout, which the backward reads. Masked keys get
  // probability 0; a batch entry whose keys are all masked attends uniformly
  // to all L keys. The dropout mask of key j is the reference's mask of
  // attention_forward's row 0 (element (b·heads + h)·L·L + j of the stream,
  // core/random.h), the CPU backend's and our flash kernels' bit for bit.
  void attention_first_query_forward(const Tensor& q0, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                     int64_t heads, double scale, const DropoutSpec& dropout, const Tensor& probs,
                                     const Tensor& ctx0);
  // Its backward: dq0 [B, 1, heads*d], dk and dv [B, L, heads*d], written (=).
  void attention_first_query_backward(const Tensor& dctx0, const Tensor& q0, const Tensor& k, const Tensor& v,
                                      const Tensor& probs, int64_t heads, double scale, const DropoutSpec& dropout,
                                      const Tensor& dq0, const Tensor& dk, const Tensor& dv);
  // Whether the two above take this head size and key count (the CUDA kernels have
  // limits: cuda_memory.h). Where they do not, the model computes its whole
  // last layer.
  virtual bool attention_first_query_supported(int64_t head_dim, int64_t L) const {
    (void)head_dim;
    (void)L;
    return true;
  }

  // --- losses: return the mean loss and write dlogits = ∂loss/∂logits ---
  // Cross-entropy over classes; labels int64 [B]; label -100 is ignored, as torch does.
  // label_smoothing ε (Trainer's LabelSmoother): each row's loss is
  // (1 − ε)·(−log p_y) + ε·mean_c(−log p_c), its gradient softmax − ((1 − ε)·one-hot + ε/C);
  // the mean over the counted rows as before.
  double cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                       double label_smoothing = 0.0);
  // The cross-entropy's SUM over the rows of logits [N, C] (float32, or the
  // compute dtype: read as float, as torch's float32 loss under autocast reads
  // 16-bit logits) whose int64 label is not -100; with dlogits defined (the
  // shape of logits, float32 or 16-bit; it may be logits itself), writes
  // scale · (softmax − one-hot) into counted rows and 0 into ignored ones. The
  // masked-LM head's chunked loss: the caller divides by the rows it counts
  // over every chunk. A label outside [0, C) makes the sum NaN (an error on
  // the CPU).
  double cross_entropy_sum(const Tensor& logits, const Tensor& labels, const Tensor& dlogits, double scale);
  // Mean squared error; logits and targets of equal element count.
  double mse(const Tensor& logits, const Tensor& targets, const Tensor& dlogits);
  // Binary cross-entropy with logits, mean over all elements.
  double bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& dlogits);

  // --- optimizer ---
  double sum_of_squares(const Tensor& t);
  void scale(const Tensor& t, double factor);
  // torch.optim.AdamW on one parameter tensor: decoupled weight decay, bias-corrected moments.
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWHyper& hyper);

  // The same over flat buffers of one layout, in one pass: each segment is
  // updated with hyper.weight_decay when it decays and 0 otherwise (elements
  // outside every segment are left alone). With half_copy (BF16/F16, same
  // layout) the updated parameters are also written into it, rounded.
  void adamw_step_flat(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                       const std::vector<ParamSegment>& segments, const AdamWHyper& hyper, const Tensor* half_copy);

  // torch.optim.SGD over the flat buffers (segments as adamw_step_flat's;
  // momentum_buf undefined when hyper.momentum == 0).
  void sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                     const std::vector<ParamSegment>& segments, const SgdHyper& hyper, const Tensor* half_copy);
  // Adafactor on one parameter tensor. A matrix [rows, cols] keeps factored
  // second moments row_state [rows] and col_state [cols] (v_state undefined);
  // anything else keeps v_state [n] (row and col undefined). All float32;
  // half_copy the tensor's 16-bit view, refreshed.
  void adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state, const Tensor& col_state,
                      const Tensor& v_state, const AdafactorHyper& hyper, const Tensor* half_copy);
  // 8-bit AdamW on one parameter tensor of n elements: state1/state2 U8 [n],
  // absmax1/absmax2 F32 [ceil(n / kAdam8bitBlock)], qmap1/qmap2 F32 [256]
  // (the signed and unsigned dynamic maps), dequantized, updated as AdamW and
  // quantized back per block.
  void adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                      const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                      const AdamWHyper& hyper, const Tensor* half_copy);

  // The sequences of ops the optional ops above run by default, for a backend
  // that falls back to them where it cannot fuse, and for tests that compare.
  void embeddings_layernorm_forward_unfused(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                            const Tensor& word, const Tensor& position, const Tensor& token_type,
                                            const Tensor& gamma, const Tensor& beta, double eps,
                                            const DropoutSpec& dropout, const Tensor& sum, const Tensor& mean,
                                            const Tensor& rstd, const Tensor& work, const Tensor& out);
  void embeddings_layernorm_backward_unfused(const Tensor& dout, const Tensor& sum, const Tensor& mean,
                                             const Tensor& rstd, const Tensor& gamma, const DropoutSpec& dropout,
                                             const Tensor& work, const Tensor& d_sum, const Tensor& dgamma,
                                             const Tensor& dbeta);
  void attention_forward_packed_one_by_one(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                                           const std::vector<int64_t>& host_offsets, int64_t heads, double scale,
                                           const Tensor& ctx);

  // Waits for queued work (no-op on the CPU).
  virtual void synchronize() {}
  // Frees the scratch the backend keeps between ops (the CUDA backend's
  // kernel scratch, grown to the largest need so far), after work that needed
  // more of it than what follows will (the profiler's ceilings).
  virtual void release_scratch() {}
  // The queue the backend computes on (a cudaStream_t on the GPU; null on the
  // CPU), for libraries that queue work beside it (NCCL).
  virtual void* native_stream() { return nullptr; }

  // --- timing, for the profiler ---
  // Records a marker in the backend's queue (a CUDA event on the GPU, the
  // clock on the CPU) and returns its index. marker_elapsed_ms waits until
  // both markers have passed and returns the time between them.
  // clear_markers forgets them all (indices restart at 0).
  virtual int64_t record_marker() = 0;
  // Named ranges for external timeline tools (NVTX for Nsight Systems on the
  // GPU; nothing on the CPU). Pushes and pops nest.
  virtual void range_push(const char* name) { (void)name; }
  virtual void range_pop() {}
  virtual double marker_elapsed_ms(int64_t from, int64_t to) = 0;
  virtual void clear_markers() = 0;

 protected:
  // The ops above as each backend implements them, called through the public
  // op, which describes the op to the hook (below) and calls this. The
  // defaulted ones run other ops (the declarations above say how).
  virtual void do_zero(const Tensor& t) = 0;
  virtual void do_upload_async(const Tensor& dst, const void* src) = 0;
  virtual void do_copy_from_host(const Tensor& dst, const void* src) = 0;
  virtual void do_copy_to_host(const Tensor& src, void* dst) = 0;
  virtual void do_copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void do_cast(const Tensor& src, const Tensor& dst) = 0;
  virtual void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) = 0;
  virtual void do_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx,
                                  const Tensor& dw, const Tensor* db, bool accumulate_dx) = 0;
  virtual void do_linear_forward_n(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                                   const std::vector<Tensor>& y);
  virtual void do_linear_backward_weights_n(const std::vector<Tensor>& dy, const Tensor& x,
                                            const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                                            const std::vector<Tensor>& db);
  virtual void do_embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate) = 0;
  virtual void do_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                                     int64_t padding_idx) = 0;
  virtual void do_positions_past_padding(const Tensor& ids, int64_t padding_idx, const Tensor& positions) = 0;
  virtual void do_embeddings_layernorm_forward(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                               const Tensor& word, const Tensor& position, const Tensor& token_type,
                                               const Tensor& gamma, const Tensor& beta, double eps,
                                               const DropoutSpec& dropout, const Tensor& sum, const Tensor& mean,
                                               const Tensor& rstd, const Tensor& work, const Tensor& out);
  virtual void do_embeddings_layernorm_backward(const Tensor& dout, const Tensor& sum, const Tensor& mean,
                                                const Tensor& rstd, const Tensor& gamma, const DropoutSpec& dropout,
                                                const Tensor& work, const Tensor& d_sum, const Tensor& dgamma,
                                                const Tensor& dbeta);
  virtual void do_layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                                    const Tensor& y, const Tensor& mean, const Tensor& rstd) = 0;
  virtual void do_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& gamma, const Tensor& dx, const Tensor& dgamma,
                                     const Tensor& dbeta) = 0;
  virtual void do_residual_layernorm_forward(const Tensor& x, const Tensor& residual, const DropoutSpec& dropout,
                                             const Tensor& gamma, const Tensor& beta, double eps, const Tensor& sum,
                                             const Tensor& y, const Tensor& mean, const Tensor& rstd) = 0;
  virtual void do_residual_layernorm_backward(const Tensor& dy, const Tensor& sum, const Tensor& mean,
                                              const Tensor& rstd, const Tensor& gamma, const DropoutSpec& dropout,
                                              const Tensor& d_residual, const Tensor& d_x, const Tensor& dgamma,
                                              const Tensor& dbeta, const Tensor* d_bias) = 0;
  virtual void do_add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void do_add_inplace(const Tensor& dst, const Tensor& src) = 0;
  virtual void do_activation_forward(ActivationKind kind, const Tensor& x, const Tensor& y) = 0;
  virtual void do_activation_backward(ActivationKind kind, const Tensor& saved, const Tensor& dy, const Tensor& dx) = 0;
  virtual void do_activation_backward_recompute(ActivationKind kind, const Tensor& x, const Tensor& dy,
                                                const Tensor& dx, const Tensor& y, const Tensor* d_bias) = 0;
  virtual void do_dropout(const Tensor& x, const Tensor& y, const DropoutSpec& spec) = 0;
  virtual void do_select_row(const Tensor& x, int64_t row, const Tensor& out) = 0;
  virtual void do_select_row_backward(const Tensor& dout, int64_t row, const Tensor& dx) = 0;
  virtual void do_mask_rows(const Tensor& x, const Tensor& mask) = 0;
  virtual void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                    int64_t heads, double scale, const DropoutSpec& dropout, const Tensor& saved,
                                    const Tensor& ctx) = 0;
  virtual void do_attention_forward_packed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                                           const std::vector<int64_t>& host_offsets, int64_t heads, double scale,
                                           const Tensor& ctx);
  virtual void do_attention_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& ctx, const Tensor& saved, const Tensor& key_mask, int64_t heads,
                                     double scale, const DropoutSpec& dropout, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv) = 0;
  virtual void do_attention_backward_interleaved(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& ctx, const Tensor& saved, const Tensor& key_mask,
                                                 int64_t heads, double scale, const DropoutSpec& dropout,
                                                 const Tensor& dqkv) = 0;
  virtual void do_attention_window_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                           int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                                           const Tensor& saved, const Tensor& ctx) = 0;
  virtual void do_attention_window_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& ctx, const Tensor& saved, const Tensor& key_mask,
                                            int64_t heads, double scale, int64_t window, const DropoutSpec& dropout,
                                            const Tensor& dq, const Tensor& dk, const Tensor& dv) = 0;
  virtual void do_attention_relative_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_q,
                                             const Tensor& pos_k, const Tensor& rel_index, const Tensor& rel_ranges,
                                             const Tensor& key_mask, int64_t heads, double scale,
                                             const DropoutSpec& dropout, const Tensor& probs, const Tensor& ctx) = 0;
  virtual void do_attention_relative_backward(const Tensor& dctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& pos_q, const Tensor& pos_k, const Tensor& rel_index,
                                              const Tensor& rel_ranges, const Tensor& probs, int64_t heads,
                                              double scale, const DropoutSpec& dropout, const Tensor& dq,
                                              const Tensor& dk, const Tensor& dv, const Tensor& dpos_q,
                                              const Tensor& dpos_k) = 0;
  virtual void do_rotary(const Tensor& x, int64_t heads, double theta, bool inverse) = 0;
  virtual void do_gated_activation_forward(ActivationKind kind, const Tensor& u, const Tensor& y) = 0;
  virtual void do_gated_activation_backward(ActivationKind kind, const Tensor& u, const Tensor& dy,
                                            const Tensor& du) = 0;
  virtual void do_attention_first_query_forward(const Tensor& q0, const Tensor& k, const Tensor& v,
                                                const Tensor& key_mask, int64_t heads, double scale,
                                                const DropoutSpec& dropout, const Tensor& probs,
                                                const Tensor& ctx0) = 0;
  virtual void do_attention_first_query_backward(const Tensor& dctx0, const Tensor& q0, const Tensor& k,
                                                 const Tensor& v, const Tensor& probs, int64_t heads, double scale,
                                                 const DropoutSpec& dropout, const Tensor& dq0, const Tensor& dk,
                                                 const Tensor& dv) = 0;
  virtual double do_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                                  double label_smoothing) = 0;
  virtual double do_cross_entropy_sum(const Tensor& logits, const Tensor& labels, const Tensor& dlogits,
                                      double scale) = 0;
  virtual double do_mse(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) = 0;
  virtual double do_bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& dlogits) = 0;
  virtual double do_sum_of_squares(const Tensor& t) = 0;
  virtual void do_scale(const Tensor& t, double factor) = 0;
  virtual void do_adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                             const AdamWHyper& hyper) = 0;
  virtual void do_adamw_step_flat(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                  const Tensor& exp_avg_sq, const std::vector<ParamSegment>& segments,
                                  const AdamWHyper& hyper, const Tensor* half_copy) = 0;
  virtual void do_sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                                const std::vector<ParamSegment>& segments, const SgdHyper& hyper,
                                const Tensor* half_copy) = 0;
  virtual void do_adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state,
                                 const Tensor& col_state, const Tensor& v_state, const AdafactorHyper& hyper,
                                 const Tensor* half_copy) = 0;
  virtual void do_adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                                 const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                                 const AdamWHyper& hyper, const Tensor* half_copy) = 0;

 private:
  // Runs `call`, the op, and where a hook records, tells it what `describe`
  // says the op is, around it. An op that a backend runs as other ops is one
  // op: ops called while one runs are not described.
  template <typename Describe, typename Call>
  auto run_op(Describe&& describe, Call&& call);

  EngineOptions options_;
  OpHook* hook_ = nullptr;
  bool in_op_ = false;
};

std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace anatomy
