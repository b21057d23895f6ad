// flash_attention.cuh: fused ("flash") multi-head attention in bf16 or fp16
// with float32 accumulation, forward and backward, after FlashAttention-2
// (Dao 2023). Unlike attention.cu it never stores the [B, heads, L, L]
// probabilities: the forward writes ctx and each row's log-sum-exp, the
// backward recomputes the scores tile by tile from q, k and the log-sum-exp.
//
// Semantics are the CPU backend's attention (kernels/cpu/cpu_backend.cpp):
// scores scale·q·kᵀ; keys whose mask is 0 get probability exactly 0; in a
// batch entry whose keys are all masked every row attends uniformly (1/L) to
// all L keys, and its gradients are those of a softmax of constant scores;
// dropout acts on the probabilities with the reference's mask, element
// (b*heads + h)*L*L + i*L + j of dropout_keep(seed, stream, ·, p) (core/random.h),
// kept values scaled by 1/(1 - p); the backward replays that mask.
//
// Layout: q, k, v, ctx, dctx, dq, dk, dv are [B, L, heads*D] with heads
// interleaved (element (b, t, h, d) at ((b*L + t)*heads + h)*D + d), 16-bit of
// the one AttnType, 16-byte aligned. key_mask is int64 [B, L] (1 keep, 0 pad)
// or nullptr. lse is float32 [B, heads, L] (natural log of Σ_j exp(scale·q_i·k_j)
// over the kept keys). D must be 32, 64 or 128; L any value >= 1.
//
// Results are deterministic: no floating-point atomics; dq is accumulated in
// float32 scratch in a fixed order and summed over a fixed number of splits
// that depends only on the shapes, not on the device.
// Included only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy::cuda {

enum class AttnType { BF16, F16 };

// Bytes of device scratch flash_attention_backward needs (row sums dO·O and
// the float32 dq accumulators): flash_attention_scratch_bytes(B, L, heads, D)
// of cuda_memory.h, which also says which head sizes there are kernels for
// (flash_attention_supported).

void flash_attention_forward(cudaStream_t s, AttnType t, const void* q, const void* k, const void* v,
                             const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, float scale,
                             const DropoutSpec& dropout, void* ctx, float* lse /*[B, heads, L]*/,
                             int64_t window = -1);

// `window` >= 0: query i attends only to the keys j with |i − j| <= window
// that the mask keeps (Backend::attention_window_forward), and the kernels
// visit only the tiles within it; a query with no such key attends uniformly
// to all L keys, and its lse is +inf, which the backward reads as that. No
// dropout with a window. The backward's scratch is then
// flash_window_scratch_bytes(B, L, heads, D) of cuda_memory.h.
//
// Inference over packed sequences (no mask, no dropout, no log-sum-exp): q, k,
// v, ctx [rows, heads*D]; entry b is rows offsets[b] .. offsets[b+1] (int64 on
// the device, B + 1 of them), none longer than `longest`. Each entry computes
// exactly what flash_attention_forward computes for it alone as a batch of one.
void flash_attention_forward_packed(cudaStream_t s, AttnType t, const void* q, const void* k, const void* v,
                                    const int64_t* offsets, int64_t B, int64_t longest, int64_t rows, int64_t heads,
                                    int64_t D, float scale, void* ctx);

// The backward's row terms: delta[b, h, t] = Σ_d dctx·ctx (float sums of the
// 16-bit values) and lse2 = lse·log2(e), both float32 [B, heads, L].
void flash_attention_row_terms(cudaStream_t s, AttnType t, const void* dctx, const void* ctx, const float* lse,
                               int64_t B, int64_t L, int64_t heads, int64_t D, float* delta, float* lse2);

// dq, dk, dv are written (=). `scratch` holds flash_attention_scratch_bytes(B, L, heads, D) bytes, 256-byte aligned.
void flash_attention_backward(cudaStream_t s, AttnType t, const void* dctx, const void* q, const void* k, const void* v,
                              const void* ctx, const float* lse, const int64_t* key_mask, int64_t B, int64_t L,
                              int64_t heads, int64_t D, float scale, const DropoutSpec& dropout, void* dq, void* dk,
                              void* dv, void* scratch, int64_t window = -1);

}  // namespace anatomy::cuda
