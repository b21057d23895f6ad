// cuda_backend.h: the CUDA implementation of the Backend interface. Plain C++
// header (no CUDA types), implemented in cuda_backend.cu.
#pragma once

#include <memory>

#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

// A backend on GPU `device`: its own stream, cuBLAS handle (float32 without
// TF32) and ledger. Creating it creates the CUDA context.
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace anatomy::cuda
