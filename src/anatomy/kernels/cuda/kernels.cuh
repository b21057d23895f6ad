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

#include "anatomy/kernels/backend.h"

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

// ---- embeddings (embedding.cu) ----
// out[t, :] (+)= table[ids[t], :]. ids must be within [0, V) (validated before).
void embedding_forward(cudaStream_t s, const int64_t* ids, const float* table, float* out, int64_t T, int64_t H,
                       bool accumulate);
// dtable[ids[t], :] += dout[t, :] for ids != padding_idx, deterministic (tokens
// of one id summed in token order). `scratch` must hold embedding_backward_scratch_bytes(T) bytes.
size_t embedding_backward_scratch_bytes(int64_t T);
void embedding_backward(cudaStream_t s, const int64_t* ids, const float* dout, float* dtable, int64_t T, int64_t H,
                        int64_t V, int64_t padding_idx, void* scratch);

// ---- LayerNorm (layernorm.cu) ----
void layernorm_forward(cudaStream_t s, const float* x, const float* gamma, const float* beta, double eps, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t H);
// dx written; dgamma, dbeta accumulated (+=). `scratch` holds layernorm_backward_scratch_bytes(rows, H) bytes.
size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t H);
void layernorm_backward(cudaStream_t s, const float* dy, const float* x, const float* mean, const float* rstd,
                        const float* gamma, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t H,
                        void* scratch);

// ---- losses (loss.cu): write dlogits and the mean loss (one double on the device) ----
void cross_entropy(cudaStream_t s, const float* logits, const int64_t* labels, float* dlogits, double* loss,
                   int64_t B, int64_t C);  // labels -100 ignored; loss NaN when all are ignored
void mse(cudaStream_t s, const float* logits, const float* targets, float* dlogits, double* loss, int64_t n);
void bce_with_logits(cudaStream_t s, const float* logits, const float* targets, float* dlogits, double* loss,
                     int64_t n);

// ---- optimizer (optimizer.cu) ----
// *result = Σ x[i]², in double, fixed order. `scratch` holds sum_of_squares_scratch_bytes(n) bytes.
size_t sum_of_squares_scratch_bytes(int64_t n);
void sum_of_squares(cudaStream_t s, const float* x, int64_t n, double* result, void* scratch);
void adamw_step(cudaStream_t s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWHyper& hyper);

// ---- attention (attention.cu) ----
// As Backend::attention_forward/backward: q, k, v, ctx [B, L, heads*D] (heads
// interleaved), key_mask int64 [B, L] or nullptr, probs [B, heads, L, L].
// `scratch` holds attention_scratch_bytes(B, heads, L) bytes. The cuBLAS
// handle is the backend's, already bound to stream `s`, in pure float32 mode.
size_t attention_scratch_bytes(int64_t B, int64_t heads, int64_t L);
void attention_forward(cudaStream_t s, cublasHandle_t cublas, const float* q, const float* k, const float* v,
                       const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, double scale,
                       const DropoutSpec& dropout, float* probs, float* ctx, void* scratch);
void attention_backward(cudaStream_t s, cublasHandle_t cublas, const float* dctx, const float* q, const float* k,
                        const float* v, const float* probs, int64_t B, int64_t L, int64_t heads, int64_t D,
                        double scale, const DropoutSpec& dropout, float* dq, float* dk, float* dv, void* scratch);

}  // namespace anatomy::cuda
