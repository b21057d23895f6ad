// cuda_backend.h: the CUDA implementation of the Backend interface. Plain C++
// header (no CUDA types), implemented in cuda_backend.cu.
#pragma once

#include <cstdint>
#include <memory>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/fp32_products.h"

namespace anatomy::cuda {

// A backend on GPU `device`: its own stream, cuBLAS handle and ledger.
// Float32 products run as `fp32_products` says (kernels/fp32_products.h):
// plain float32, TF32, or split TF32. Creating it creates the CUDA context.
// Matrix products take the fastest of cuBLASLt's candidate algorithms, timed
// at a product's first call and cached across runs, unless
// options.gemm_tuning is off; the attention kernels and cuDNN's plans follow
// `options` too (Backend::set_options may change them before the first op).
std::unique_ptr<Backend> make_cuda_backend(int device, Fp32Products fp32_products = Fp32Products::Float32,
                                           const EngineOptions& options = {});

// How many product plans `backend` (a CUDA backend) chose an algorithm for by
// timing the candidates, rather than from the cache or with one candidate
// only. For tests.
int64_t gemm_plans_tuned(Backend& backend);

}  // namespace anatomy::cuda
