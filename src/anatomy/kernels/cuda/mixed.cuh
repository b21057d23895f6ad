// mixed.cuh: what mixed-precision matrix products need around cuBLAS:
// broadcasting a 16-bit bias into the rows of a 16-bit output (the float32
// bias gradient is a product with a vector of ones). Included from .cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "anatomy/kernels/cuda/kernels.cuh"

namespace anatomy::cuda {

// out[m, n] = bias[n] (all 16-bit of `type`).
void broadcast_rows_half(cudaStream_t s, Half type, const void* bias, void* out, int64_t M, int64_t N);

}  // namespace anatomy::cuda
