// fused.cuh: launchers of the fused kernels of the 16-bit (mixed-precision)
// path, which does one pass over memory where the plain ops do three or four.
// Included from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

// Whether the fused residual LayerNorm kernels take rows of H elements (H a
// multiple of 8, at most 2048) at these addresses (16-byte aligned):
// fused_layernorm_supported of cuda_memory.h (kernels.cuh includes it), as are
// the scratch sizes below.

// sum = round(dropout(x) + residual); y = round(LayerNorm(sum)) with float32
// gamma, beta; mean and rstd [rows] in float32. x, residual, sum, y of
// `dtype` (float32, bf16 or fp16; rounding is the identity for float32);
// statistics from float lane sums added in double.
void residual_layernorm_forward_fused(cudaStream_t s, DType dtype, const void* x, const void* residual,
                                     const DropoutSpec& dropout, const float* gamma, const float* beta, double eps,
                                     void* sum, void* y, float* mean, float* rstd, int64_t rows, int64_t H);

// `scratch`: residual_layernorm_backward_scratch_bytes(rows, H, d_bias != nullptr).
// d_residual = round(∂L/∂sum); d_x = round(dropout(d_residual)); dgamma,
// dbeta (float32) accumulate, and d_bias (float32, may be null) accumulates
// the column sums of d_x as stored. d_residual may be dy (each row is read
// whole before it is written).
void residual_layernorm_backward_fused(cudaStream_t s, DType dtype, const void* dy, const void* sum, const float* mean,
                                      const float* rstd, const float* gamma, const DropoutSpec& dropout,
                                      void* d_residual, void* d_x, float* dgamma, float* dbeta, float* d_bias,
                                      int64_t rows, int64_t H, void* scratch);

// The embeddings block (Backend::embeddings_layernorm_forward) in one pass:
// sum = (word[ids] + pos[pos_ids]) + type[type_ids] (float32), LayerNorm in
// double (mean and rstd saved), dropout in float, out rounded once to
// `out_dtype` (float32, bf16 or fp16). Where embeddings_layernorm_fused_supported
// (cuda_memory.h) holds.
void embeddings_layernorm_forward_fused(cudaStream_t s, DType out_dtype, const int64_t* ids, const int64_t* pos_ids,
                                        const int64_t* type_ids, const float* word, const float* pos,
                                        const float* type, const float* gamma, const float* beta, double eps,
                                        const DropoutSpec& dropout, float* sum, void* out, float* mean, float* rstd,
                                        int64_t rows, int64_t H);
// Its backward up to the sum: work = dropout(float(dout)), d_sum = LayerNorm's
// input gradient (both written), dgamma and dbeta accumulate (layernorm.cu's
// column sums from work and sum). `scratch`: layernorm_backward_scratch_bytes.
void embeddings_layernorm_backward_fused(cudaStream_t s, DType dout_dtype, const void* dout, const float* sum,
                                         const float* mean, const float* rstd, const float* gamma,
                                         const DropoutSpec& dropout, float* work, float* d_sum, float* dgamma,
                                         float* dbeta, int64_t rows, int64_t H, void* scratch);
// dgamma += Σ_rows dy·x̂, dbeta += Σ_rows dy for float32 dy and x: the column
// sums of layernorm_backward (layernorm.cu), without its input gradient.
// `scratch`: layernorm_backward_scratch_bytes(rows, H).
void layernorm_param_gradients(cudaStream_t s, const float* dy, const float* x, const float* mean, const float* rstd,
                               float* dgamma, float* dbeta, int64_t rows, int64_t H, void* scratch);

// out[n] += Σ_c partial[c, n] over `chunks` float partials of N columns, in
// double, in a fixed order (32 strided runs of chunks, then a tree): the last
// step of the column sums above. With planes > 1, plane p's partials follow
// plane p - 1's (chunks × N floats each) and its sums go to out + p ·
// out_plane, in one launch.
void column_partials_finish(cudaStream_t s, const float* partial, float* out, int64_t chunks, int64_t N,
                            int planes = 1, int64_t out_plane = 0);

// The chunks of rows that the column sums below and the recomputing activation
// backward's bias sums take (the same, so that the two give the same bits from
// the same gradient): fused_partial_chunks(rows), but no more than one wave of
// blocks of kColumnSumThreads threads × 8 columns at kColumnSumBlocksPerSm
// blocks an SM. More chunks left a tail wave on a fraction of the SMs (2.2
// waves at batch 32's GELU backward). Depends on the SM count: the same bits
// on the same GPU.
constexpr int kColumnSumThreads = 128, kColumnSumBlocksPerSm = 7;
int64_t column_sum_chunks(int64_t rows, int64_t N);

// db[n] += Σ_rows dy[row, n] for a 16-bit dy [rows, N] with N % 8 == 0 and
// 16-byte alignment: float partials over chunks of rows (16-byte loads), the
// chunks added in double in a fixed order. `scratch`: column_sums_scratch_bytes;
// column_sums_half_supported says when it applies (both in cuda_memory.h).
// With planes > 1, one launch pair does `planes` such sums, each the same bits
// as its own call: plane p reads dy + p · dy_plane elements, adds into
// db + p · db_plane, and takes its own column_sums_scratch_bytes of scratch.
void column_sums_accumulate_half_fast(cudaStream_t s, Half h, const void* dy, int64_t rows, int64_t N, float* db,
                                      void* scratch, int planes = 1, int64_t dy_plane = 0, int64_t db_plane = 0);

// y = round(f(x)) and dx = round(f'(x)·dy) in one pass (16-bit x, dy, dx, y;
// dx may be dy): the activation's output recomputed where backward needs it.
void activation_backward_recompute_half(cudaStream_t s, Half h, ActivationKind kind, const void* x, const void* dy,
                                        void* dx, void* y, int64_t n);
// The same over rows × N (recompute_bias_supported(N, every pointer)), for
// float32, bf16 or fp16, with d_bias[n] += Σ_rows dx[row, n] as stored (float
// partials per chunk of rows, added in a fixed order): the bias gradient of the product
// whose output x is. `scratch`: column_sums_scratch_bytes(rows, N).
void activation_backward_recompute_bias(cudaStream_t s, DType dtype, ActivationKind kind, const void* x,
                                        const void* dy, void* dx, void* y, int64_t rows, int64_t N, float* d_bias,
                                        void* scratch);

// y = round(gelu(x)) (erf or tanh form), as activation_forward_half computes it.
void gelu_forward_half(cudaStream_t s, Half h, ActivationKind kind, const void* x, void* y, int64_t n);

// Multi-tensor AdamW (optimizer.cu): the segments cut into chunks of one
// parameter group each, as a table for the device (adamw_chunk_table of
// cuda_memory.h; built once, uploaded by the caller).
// adamw_step on every chunk of the table in one launch, bit for bit; with
// copy_type, half_copy (same layout) receives the new parameters rounded.
void adamw_step_chunks(cudaStream_t s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                       const void* chunk_table, int64_t chunks, const AdamWHyper& hyper, Half* copy_type,
                       void* half_copy);

}  // namespace anatomy::cuda
