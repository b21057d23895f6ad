// cuda_backend.h: the CUDA implementation of the Backend interface. Plain C++
// header (no CUDA types), implemented in cuda_backend.cu.
#pragma once

#include <memory>

#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

// A backend on GPU `device`: its own stream, cuBLAS handle and ledger.
// Float32 products use plain float32 unless `tf32` (TensorFloat-32 tensor
// cores, 10-bit mantissa inputs, as torch.backends.cuda.matmul.allow_tf32).
// Creating it creates the CUDA context.
std::unique_ptr<Backend> make_cuda_backend(int device, bool tf32 = false);

}  // namespace anatomy::cuda
