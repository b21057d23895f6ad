// flash_attention_f32.cuh: fused ("flash") multi-head attention in float32,
// forward and backward, for the float32 path (plain FP32 FMA on the CUDA cores:
// no tensor cores, no TF32, so results are float32-accurate). Like the 16-bit
// kernels of flash_attention.cuh it never stores the [B, heads, L, L]
// probabilities: the forward writes ctx and each row's log-sum-exp, the
// backward recomputes the probabilities tile by tile from q, k and the
// log-sum-exp.
//
// Semantics are the CPU backend's attention (kernels/cpu/cpu_backend.cpp), as
// documented in flash_attention.cuh: scores scale·q·kᵀ; keys whose mask is 0
// get probability exactly 0; in a batch entry whose keys are all masked every
// row attends uniformly (1/L) to all L keys, and its gradients are those of a
// softmax of constant scores; dropout acts on the probabilities with the
// reference's mask, element (b*heads + h)*L*L + i*L + j of
// dropout_keep(seed, stream, ·, p) (core/random.h), kept values scaled by
// 1/(1 - p); the backward replays that mask.
//
// Layout: q, k, v, ctx, dctx, dq, dk, dv are float32 [B, L, heads*D] with heads
// interleaved (element (b, t, h, d) at ((b*L + t)*heads + h)*D + d). Pointers
// that are 16-byte aligned are read and written 16 bytes at a time; others
// work too (element by element, slower). key_mask is int64 [B, L] (1 keep,
// 0 pad) or nullptr. lse is float32 [B, heads, L] (natural log of
// Σ_j exp(scale·q_i·k_j) over the kept keys). D must be one that
// flash_attention_f32_supported accepts; L any value >= 1.
//
// Results are deterministic: no floating-point atomics; dq is summed in
// float32 scratch in a fixed order over a number of splits that depends only
// on the shapes, not on the device.
// Included only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy::cuda {

// Head sizes the kernels have (32 and 64): flash_attention_f32_supported of
// cuda_memory.h. Bytes of device scratch flash_attention_f32_backward needs
// (row sums dO·O and the float32 dq partial sums):
// flash_attention_f32_scratch_bytes(B, L, heads, D), also there.

void flash_attention_f32_forward(cudaStream_t s, const float* q, const float* k, const float* v,
                                 const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, float scale,
                                 const DropoutSpec& dropout, float* ctx, float* lse /*[B, heads, L]*/);

// dq, dk, dv are written (=). `scratch` holds flash_attention_f32_scratch_bytes(B, L, heads, D) bytes,
// 256-byte aligned. grad_row_stride: floats from one token's dq (dk, dv) to
// the next; 0 means heads*D (contiguous), 3*heads*D writes them interleaved
// (Backend::attention_backward_interleaved: pass dq, dq + H, dq + 2H).
void flash_attention_f32_backward(cudaStream_t s, const float* dctx, const float* q, const float* k, const float* v,
                                  const float* ctx, const float* lse, const int64_t* key_mask, int64_t B, int64_t L,
                                  int64_t heads, int64_t D, float scale, const DropoutSpec& dropout, float* dq,
                                  float* dk, float* dv, void* scratch, int64_t grad_row_stride = 0);

}  // namespace anatomy::cuda
