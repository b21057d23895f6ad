// cuda_backend.h: the CUDA implementation of the Backend interface. Plain C++
// header (no CUDA types), implemented in cuda_backend.cu.
#pragma once

#include <cstdint>
#include <memory>

#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

// A backend on GPU `device`: its own stream, cuBLAS handle and ledger.
// Float32 products use plain float32 unless `tf32` (TensorFloat-32 tensor
// cores, 10-bit mantissa inputs, as torch.backends.cuda.matmul.allow_tf32).
// Creating it creates the CUDA context.
// Matrix products take the fastest of cuBLASLt's candidate algorithms, timed
// at a product's first call and cached across runs, unless the environment
// variable ANATOMY_GEMM_TUNING is 0 (any value but 0 and 1 is an Error).
std::unique_ptr<Backend> make_cuda_backend(int device, bool tf32 = false);

// How many product plans `backend` (a CUDA backend) chose an algorithm for by
// timing the candidates, rather than from the cache or with one candidate
// only. For tests.
int64_t gemm_plans_tuned(Backend& backend);

}  // namespace anatomy::cuda
