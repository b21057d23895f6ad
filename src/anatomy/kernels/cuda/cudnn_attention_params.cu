// cudnn_attention_params.cu: the small device inputs of a cuDNN attention
// graph (cudnn_attention.cpp), written in stream order right before it runs:
// the dropout seed and offset (int64) and, for a padding mask, the query and
// key lengths (int32 [B] each, at kCudnnAttentionLengthsOffset). A key length
// is the count of leading ones of the mask row: the data layer admits only
// right padding (1…1 0…0).
#include <cuda_runtime.h>

#include <cstdint>

#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda_memory.h"

namespace anatomy::cuda {

namespace {

__global__ void params_kernel(const int64_t* key_mask, int64_t B, int64_t L, int64_t seed, int64_t offset,
                              char* params) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    reinterpret_cast<int64_t*>(params)[0] = seed;
    reinterpret_cast<int64_t*>(params)[1] = offset;
  }
  if (!key_mask) return;
  auto* seq_q = reinterpret_cast<int32_t*>(params + kCudnnAttentionLengthsOffset);
  int32_t* seq_kv = seq_q + B;
  // One warp per batch entry: the first zero of the row.
  const int64_t b = blockIdx.x;
  if (b >= B) return;
  int64_t first_zero = L;
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
    if (key_mask[b * L + j] == 0 && j < first_zero) first_zero = j;
  for (int d = 16; d > 0; d >>= 1) {
    const int64_t other = __shfl_down_sync(0xffffffffu, first_zero, d);
    first_zero = other < first_zero ? other : first_zero;
  }
  if (threadIdx.x == 0) {
    seq_q[b] = static_cast<int32_t>(L);
    seq_kv[b] = static_cast<int32_t>(first_zero);
  }
}

}  // namespace

void cudnn_attention_params(cudaStream_t s, const int64_t* key_mask, int64_t B, int64_t L, int64_t seed,
                            int64_t offset, void* params) {
  params_kernel<<<static_cast<unsigned>(key_mask ? B : 1), 32, 0, s>>>(key_mask, B, L, seed, offset,
                                                                       static_cast<char*>(params));
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
