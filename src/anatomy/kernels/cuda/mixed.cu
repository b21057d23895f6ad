// mixed.cu: the kernels of mixed.cuh.
#include "anatomy/kernels/cuda/mixed.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "anatomy/core/error.h"
#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy::cuda {

namespace {

template <typename T>
__global__ void broadcast_rows_kernel(const T* bias, T* out, int64_t M, int64_t N) {
  const int64_t total = M * N, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    out[i] = bias[i % N];
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 65536)); }

}  // namespace

void broadcast_rows_half(cudaStream_t s, Half type, const void* bias, void* out, int64_t M, int64_t N) {
  if (M * N == 0) return;
  if (type == Half::BF16)
    broadcast_rows_kernel<<<blocks_for(M * N), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(bias),
                                                             static_cast<__nv_bfloat16*>(out), M, N);
  else
    broadcast_rows_kernel<<<blocks_for(M * N), 256, 0, s>>>(static_cast<const __half*>(bias),
                                                             static_cast<__half*>(out), M, N);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
