// first_query_attention.cuh: attention of query row 0 over all L keys, as
// Backend::attention_first_query_forward / _backward (backend.h) define it,
// in float32, bf16 or fp16 (first_query_attention.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "anatomy/core/tensor.h"
#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

struct FirstQueryShape {
  int64_t B = 0, L = 0, heads = 0, H = 0;  // H = heads·d: the columns of q0, k, v
  double scale = 1.0;
};

// q0, ctx0 [B, 1, H]; k, v [B, L, H], contiguous, of `dtype`; mask int64 [B, L] or null;
// probs float32 [B, heads, L] (written).
void first_query_attention_forward(cudaStream_t stream, DType dtype, const FirstQueryShape& s, const void* q0,
                                   const void* k, const void* v, const int64_t* mask, const DropoutSpec& dropout,
                                   float* probs, void* ctx0);
// dq0 [B, 1, H], dk, dv [B, L, H] written (=).
void first_query_attention_backward(cudaStream_t stream, DType dtype, const FirstQueryShape& s, const void* dctx0,
                                    const void* q0, const void* k, const void* v, const float* probs,
                                    const DropoutSpec& dropout, void* dq0, void* dk, void* dv);
// Their head sizes and lengths: first_query_attention_shape of cuda_memory.h.

}  // namespace anatomy::cuda
