// kernels.cuh: the CUDA kernels behind CudaBackend, as launchers on raw device
// pointers and a stream. Each does what the Backend op of the same name does
// (kernels/backend.h; the CPU backend in kernels/cpu is the reference):
// float32 data, float32 or wider accumulation, and *deterministic* results:
// no floating-point atomics, so the same inputs give the same bits every run.
// Included only from .cu files.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda_memory.h"  // the scratch sizes (..._scratch_bytes) of these launchers

namespace anatomy::cuda {

// ---- element-wise (elementwise.cu) ----
void add(cudaStream_t s, const float* a, const float* b, float* out, int64_t n);
void add_inplace(cudaStream_t s, float* dst, const float* src, int64_t n);
void scale(cudaStream_t s, float* x, float factor, int64_t n);
void activation_forward(cudaStream_t s, ActivationKind kind, const float* x, float* y, int64_t n);
// saved is x for the GELUs and ReLU, y = tanh(x) for Tanh (as the CPU backend).
void activation_backward(cudaStream_t s, ActivationKind kind, const float* saved, const float* dy, float* dx, int64_t n);
// y[i] = dropout_keep(seed, stream, index_base + i, p) ? x[i] / (1 - p) : 0 (core/random.h); in place allowed.
void dropout(cudaStream_t s, const float* x, float* y, int64_t n, const DropoutSpec& spec, uint64_t index_base = 0);
// out[b, :] = x[b, row, :]; dx[b, row, :] += dout[b, :].
void select_row(cudaStream_t s, const float* x, int64_t B, int64_t L, int64_t H, int64_t row, float* out);
void select_row_backward(cudaStream_t s, const float* dout, int64_t B, int64_t L, int64_t H, int64_t row, float* dx);
// db[n] += Σ_m dy[m, n] (the bias gradient of a linear layer), fixed summation order.
void column_sums_accumulate(cudaStream_t s, const float* dy, int64_t M, int64_t N, float* db);

// ---- split-TF32 products (split_tf32.cu) ----
// Writes src (column-major rows x cols, leading dimension ld) three times into
// dst as TF32 pieces, one after another along the rows (dst 3·rows x cols,
// leading dimension 3·rows) or along the columns (dst rows x 3·cols, leading
// dimension rows): segment s (0, 1, 2) is lo where bit s of lo_mask is set,
// else hi (hi = x rounded to TF32, lo = x - hi rounded to TF32; lo = 0 for a
// non-finite x). See kernels/fp32_products.h.
void split_tf32(cudaStream_t s, const float* src, int64_t rows, int64_t cols, int64_t ld, bool along_rows,
                unsigned lo_mask, float* dst);

// ---- embeddings (embedding.cu) ----
// out[t, :] (+)= table[ids[t], :]. ids must be within [0, V) (validated before).
void embedding_forward(cudaStream_t s, const int64_t* ids, const float* table, float* out, int64_t T, int64_t H,
                       bool accumulate);
// dtable[ids[t], :] += dout[t, :] for ids != padding_idx, deterministic (tokens
// of one id summed in token order). `scratch` must hold embedding_backward_scratch_bytes(T) bytes.
// What CUB itself answers for the sort storage of T tokens (a size query, no
// work), which cuda_memory.h's cub_sort_pairs_bytes(T) models; for tests.
size_t cub_sort_pairs_query_bytes(int64_t T);
// Backend::positions_past_padding: one warp per sequence, a running count of its non-padding tokens.
void positions_past_padding(cudaStream_t s, const int64_t* ids, int64_t B, int64_t L, int64_t padding_idx,
                            int64_t* positions);
void embedding_backward(cudaStream_t s, const int64_t* ids, const float* dout, float* dtable, int64_t T, int64_t H,
                        int64_t V, int64_t padding_idx, void* scratch);

// ---- LayerNorm (layernorm.cu) ----
void layernorm_forward(cudaStream_t s, const float* x, const float* gamma, const float* beta, double eps, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t H);
// dx written; dgamma, dbeta accumulated (+=). `scratch` holds layernorm_backward_scratch_bytes(rows, H) bytes.
void layernorm_backward(cudaStream_t s, const float* dy, const float* x, const float* mean, const float* rstd,
                        const float* gamma, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t H,
                        void* scratch);

// ---- losses (loss.cu): write dlogits and the mean loss (one double on the device) ----
// labels -100 ignored; loss NaN when all are ignored. label_smoothing ε: the
// target (1 − ε)·one-hot + ε/C (Trainer's LabelSmoother), as Backend::cross_entropy.
void cross_entropy(cudaStream_t s, const float* logits, const int64_t* labels, float* dlogits, double* loss,
                   int64_t B, int64_t C, double label_smoothing = 0.0);
// The SUM of the counted rows' losses into *loss; dlogits (nullptr: none; may
// be logits) = scale · (softmax − one-hot). logits and dlogits float32 or
// 16-bit (`in`, `out`). `scratch`: cross_entropy_sum_scratch_bytes(N) bytes.
void cross_entropy_sum(cudaStream_t s, DType in, const void* logits, const int64_t* labels, DType out,
                       void* dlogits, double scale, double* loss, int64_t N, int64_t C, void* scratch);
void mse(cudaStream_t s, const float* logits, const float* targets, float* dlogits, double* loss, int64_t n);
void bce_with_logits(cudaStream_t s, const float* logits, const float* targets, float* dlogits, double* loss,
                     int64_t n);

// ---- optimizer (optimizer.cu) ----
// *result = Σ x[i]², in double, fixed order. `scratch` holds sum_of_squares_scratch_bytes(n) bytes.
void sum_of_squares(cudaStream_t s, const float* x, int64_t n, double* result, void* scratch);
void adamw_step(cudaStream_t s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWHyper& hyper);

// ---- attention (attention.cu) ----
// As Backend::attention_forward/backward: q, k, v, ctx [B, L, heads*D] (heads
// interleaved), key_mask int64 [B, L] or nullptr, probs [B, heads, L, L].
// `scratch` holds attention_scratch_bytes(B, heads, L) bytes. The cuBLAS
// handle is the backend's, already bound to stream `s`, in pure float32 mode.
// `window` > 0: query i attends only to keys j with |i − j| ≤ window (Backend::attention_window_forward).
void attention_forward(cudaStream_t s, cublasHandle_t cublas, const float* q, const float* k, const float* v,
                       const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, double scale,
                       const DropoutSpec& dropout, float* probs, float* ctx, void* scratch, int64_t window = 0);
void attention_backward(cudaStream_t s, cublasHandle_t cublas, const float* dctx, const float* q, const float* k,
                        const float* v, const float* probs, int64_t B, int64_t L, int64_t heads, int64_t D,
                        double scale, const DropoutSpec& dropout, float* dq, float* dk, float* dv, void* scratch);
// DeBERTa's relative attention (attention.cu, kernels/backend.h): the
// materialised attention with the content-to-position (pos_k) and
// position-to-content (pos_q) terms added to the scores; either may be null.
// pos_q, pos_k: [P, heads*D]; rel_index [2L − 1]; rel_ranges [P, 2].
// Scratch: relative_attention_scratch_bytes (cuda_memory.h).
void attention_relative_forward(cudaStream_t s, cublasHandle_t cublas, const float* q, const float* k, const float* v,
                                const float* pos_q, const float* pos_k, const int64_t* rel_index, int64_t P,
                                const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, double scale,
                                const DropoutSpec& dropout, float* probs, float* ctx, void* scratch);
// dq, dk, dv written; dpos_q, dpos_k (null where the term is absent) written, summed over the batch.
void attention_relative_backward(cudaStream_t s, cublasHandle_t cublas, const float* dctx, const float* q,
                                 const float* k, const float* v, const float* pos_q, const float* pos_k,
                                 const int64_t* rel_ranges, int64_t P, const float* probs, int64_t B, int64_t L,
                                 int64_t heads, int64_t D, double scale, const DropoutSpec& dropout, float* dq,
                                 float* dk, float* dv, float* dpos_q, float* dpos_k, void* scratch);

// ---- ModernBERT's element-wise ops (rotary.cu) ----
// Backend::rotary on x [B, L, heads·D] of `dtype` (float32, bf16, fp16), in place.
void rotary(cudaStream_t s, DType dtype, void* x, int64_t B, int64_t L, int64_t heads, int64_t D, double theta,
            bool inverse);
// Backend::gated_activation_forward/backward over `rows` rows: u [rows, 2I], y and dy [rows, I].
void gated_activation_forward(cudaStream_t s, DType dtype, ActivationKind kind, const void* u, void* y, int64_t rows,
                              int64_t I);
void gated_activation_backward(cudaStream_t s, DType dtype, ActivationKind kind, const void* u, const void* dy,
                               void* du, int64_t rows, int64_t I);

// ---- 16-bit variants (mixed precision) ----
// Mixed precision keeps activations and their gradients in a 16-bit format and
// master weights, optimizer moments and weight gradients in float32. These
// launchers take 16-bit data as void* plus a Half tag, so that this header
// stays free of cuda_bf16.h / cuda_fp16.h types. Each widens its 16-bit inputs
// to float (exact), does the float32 op's arithmetic, and rounds each result
// once to the 16-bit format, to nearest even (__float2bfloat16_rn /
// __float2half_rn): an output is round(float32 op on the widened inputs).
// 16-bit pointers need 2-byte alignment; where every pointer of a call is
// 16-byte aligned, eight elements move per 16-byte load. Deterministic, with no
// floating-point atomics, like the float32 launchers.
enum class Half { BF16, F16 };

// embedding_forward (embedding.cu) from a 16-bit table, widened exactly.
void embedding_forward_half(cudaStream_t s, Half h, const int64_t* ids, const void* table, float* out, int64_t T,
                            int64_t H, bool accumulate);

// ---- 16-bit element-wise (elementwise.cu) ----
void cast_f32_to_half(cudaStream_t s, Half h, const float* x, void* y, int64_t n);
void cast_half_to_f32(cudaStream_t s, Half h, const void* x, float* y, int64_t n);
// out = round(a + b); dst = round(dst + src) (the residual adds).
void add_half(cudaStream_t s, Half h, const void* a, const void* b, void* out, int64_t n);
void add_inplace_half(cudaStream_t s, Half h, void* dst, const void* src, int64_t n);
// As activation_forward/backward on 16-bit x, y, saved, dy and dx, the math in float.
void activation_forward_half(cudaStream_t s, Half h, ActivationKind kind, const void* x, void* y, int64_t n);
void activation_backward_half(cudaStream_t s, Half h, ActivationKind kind, const void* saved, const void* dy,
                              void* dx, int64_t n);
// y[i] = keep ? round(x[i] / (1 - p)) : 0 with the float32 dropout's mask for the same spec and index.
void dropout_half(cudaStream_t s, Half h, const void* x, void* y, int64_t n, const DropoutSpec& spec,
                  uint64_t index_base = 0);
// out[b, :] = x[b, row, :]; dx[b, row, :] = round(dx[b, row, :] + dout[b, :]).
void select_row_half(cudaStream_t s, Half h, const void* x, int64_t B, int64_t L, int64_t H, int64_t row, void* out);
// Row r of x [rows, H] (float32, or the 16-bit type `half`) set to 0 where mask[r] == 0.
void mask_rows(cudaStream_t s, std::optional<Half> half, void* x, const int64_t* mask, int64_t rows, int64_t H);
void select_row_backward_half(cudaStream_t s, Half h, const void* dout, int64_t B, int64_t L, int64_t H, int64_t row,
                              void* dx);
// db[n] += Σ_m dy[m, n] for a 16-bit dy, float32 db; as column_sums_accumulate on the widened dy, bit for bit.
void column_sums_accumulate_half(cudaStream_t s, Half h, const void* dy, int64_t M, int64_t N, float* db);

// ---- 16-bit embeddings (embedding.cu) ----
// out[t, :] = round((word[ids[t], :] + pos[pos_ids[t], :]) + type[type_ids[t], :]): the three
// float32 (master) rows summed in float, in the order of three embedding_forward calls, rounded
// once. pos_ids/pos and type_ids/type may be nullptr (that row is left out).
void embedding_sum_forward_half(cudaStream_t s, Half h, const int64_t* ids, const int64_t* pos_ids,
                                const int64_t* type_ids, const float* word, const float* pos, const float* type,
                                void* out, int64_t T, int64_t H);
// embedding_backward with a 16-bit dout: the same bits as embedding_backward on the widened dout.
// `scratch` holds embedding_backward_scratch_bytes(T) bytes.
void embedding_backward_half(cudaStream_t s, Half h, const int64_t* ids, const void* dout, float* dtable, int64_t T,
                             int64_t H, int64_t V, int64_t padding_idx, void* scratch);

// ---- 16-bit LayerNorm (layernorm.cu) ----
// x, y 16-bit; gamma, beta, mean, rstd float32; statistics in double from the widened x.
void layernorm_forward_half(cudaStream_t s, Half h, const void* x, const float* gamma, const float* beta, double eps,
                            void* y, float* mean, float* rstd, int64_t rows, int64_t H);
// dy, x, dx 16-bit; dgamma, dbeta float32, accumulated (+=) with the float32 backward's deterministic
// two-level reduction. `scratch` holds layernorm_backward_scratch_bytes(rows, H) bytes.
void layernorm_backward_half(cudaStream_t s, Half h, const void* dy, const void* x, const float* mean,
                             const float* rstd, const float* gamma, void* dx, float* dgamma, float* dbeta,
                             int64_t rows, int64_t H, void* scratch);

// ---- optimizer with 16-bit copies, and the finite checks of loss scaling (optimizer.cu) ----
// adamw_step, bit for bit, that also writes half_copy[i] = round(new param[i]) in the same pass.
void adamw_step_with_copy(cudaStream_t s, Half h, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                          int64_t n, const AdamWHyper& hyper, void* half_copy);
// *flag = 1 when every x[i] is finite (no inf, no NaN), else 0. With and_into_flag,
// *flag = *flag && (all finite) instead, so that one flag can cover many tensors.
// `scratch` holds all_finite_scratch_bytes(n) bytes (also for unscale_and_check).
void all_finite(cudaStream_t s, const float* x, int64_t n, int* flag, void* scratch, bool and_into_flag = false);
// x[i] *= inv_scale (in float) and the flag as all_finite's, of x before and after, in one pass.
void unscale_and_check(cudaStream_t s, float* x, int64_t n, float inv_scale, int* flag, void* scratch,
                       bool and_into_flag = false);

}  // namespace anatomy::cuda
