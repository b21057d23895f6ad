// hopper_attention.cuh: fused multi-head attention on Hopper's warpgroup
// tensor-core instructions (wgmma, sm_90a), bf16 or fp16 with float32
// accumulation, head size 64 (BERT's). The semantics and layouts are
// flash_attention.cuh's: the reference's attention (CPU backend), q, k, v, ctx
// [B, L, heads*64] with heads interleaved and 16-byte aligned, lse float32
// [B, heads, L] (natural log), so either family's backward reads the other's
// log-sum-exp. The dropout mask is not the CPU backend's: it is
// attention_keep8 of core/random.h (one generator call per eight
// probabilities, each a 16-bit comparison: half the generator's work, the
// forward's largest cost), element (b*heads + h)*L*L + i*L + j, and the
// forward hands it to the backward as bits.
//
// Both kernels are compiled for sm_90a next to a plain sm_90 build of the same file; hopper_attention_available() says whether
// the device runs the sm_90a code (an H100 or H200 does; the plain build has
// no kernel body and is never launched).
// Included only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/flash_attention.cuh"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy::cuda {

// Whether hopper_attention_forward can run here for this head size: D == 64
// and the current device executes the sm_90a kernels. The device check runs
// once per process (a one-thread kernel writing a flag).
bool hopper_attention_available(int64_t D);

// As flash_attention_forward (flash_attention.cuh), for D == 64 only, with
// this file's mask. With dropout and `keep_bits` (uint32 [B, heads, L,
// attention_keep_words(L)] of cuda_memory.h, 16-byte aligned), the forward
// also stores its mask there: bit k of word w of row (b, h, i) is the keep bit
// of key 32w + k (words of keys past L are left as they are), which the
// backward reads rather than running the generator again.
void hopper_attention_forward(cudaStream_t s, AttnType t, const void* q, const void* k, const void* v,
                              const int64_t* key_mask, int64_t B, int64_t L, int64_t heads, int64_t D, float scale,
                              const DropoutSpec& dropout, void* ctx, float* lse /*[B, heads, L]*/,
                              uint32_t* keep_bits = nullptr);

// Whether hopper_attention_backward takes this shape: D == 64 and L <= 512
// (dQ of a whole (batch entry, head) stays in shared memory). The device
// check is hopper_attention_available's.
bool hopper_attention_backward_supported(int64_t D, int64_t L);

// The backward's device scratch: hopper_attention_scratch_bytes of cuda_memory.h.

// As flash_attention_backward, for what hopper_attention_backward_supported
// accepts, reading the log-sum-exp of either forward: dq, dk, dv written (=),
// their token rows grad_row_stride elements apart (heads*64, or 3·heads*64
// for interleaved gradients). Deterministic: one block per (batch entry,
// head) sums dq in a fixed order. With dropout `keep_bits` must be the
// forward's mask bits (the backward has no generator).
void hopper_attention_backward(cudaStream_t s, AttnType t, const void* dctx, const void* q, const void* k,
                               const void* v, const void* ctx, const float* lse, const int64_t* key_mask, int64_t B,
                               int64_t L, int64_t heads, int64_t D, float scale, const DropoutSpec& dropout, void* dq,
                               void* dk, void* dv, void* scratch, int64_t grad_row_stride,
                               const uint32_t* keep_bits = nullptr);

}  // namespace anatomy::cuda
