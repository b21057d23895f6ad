// adamw_8bit.cu: bitsandbytes' block-wise 8-bit AdamW on the GPU (semantics in
// backend.h; tested against kernels/cpu/adamw_8bit.cpp). One block of threads
// per quantization block of kAdam8bitBlock elements, one element per thread:
// dequantize both moments, the AdamW update in double with every operation
// rounded on its own (adamw_math.cuh's adamw_element, the CPU's arithmetic),
// a block max for each new absmax (max is order-free: deterministic), then the
// nearest map entry of value / absmax, by the function the CPU uses.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "anatomy/kernels/cuda/adamw_math.cuh"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/optimizer_kernels.cuh"
#include "anatomy/kernels/quantize_8bit.h"

namespace anatomy::cuda {

namespace {

constexpr int kThreads = static_cast<int>(kAdam8bitBlock);
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "one thread per element of a quantization block");


__device__ __forceinline__ float block_max(float v, float* warps) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  float m = warps[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warps[w]);
  return m;
}

template <typename Copy>
__global__ void __launch_bounds__(kThreads)
    adamw8bit_kernel(float* param, const float* grad, uint8_t* state1, uint8_t* state2, float* absmax1,
                     float* absmax2, const float* qmap1, const float* qmap2, int64_t n, AdamWConstants k, Copy* copy) {
  __shared__ float map1[kQuantizationMapSize], map2[kQuantizationMapSize];
  __shared__ float warps1[kThreads / 32], warps2[kThreads / 32];
  for (int j = threadIdx.x; j < kQuantizationMapSize; j += kThreads) map1[j] = qmap1[j], map2[j] = qmap2[j];
  __syncthreads();
  const int64_t b = blockIdx.x;
  const int64_t i = b * kThreads + threadIdx.x;
  const bool valid = i < n;
  float m = 0.0f, v = 0.0f;
  if (valid) {
    m = __fmul_rn(map1[state1[i]], absmax1[b]);
    v = __fmul_rn(map2[state2[i]], absmax2[b]);
    float p = param[i];
    adamw_element(k, grad[i], m, v, p);
    param[i] = p;
    if constexpr (!std::is_same_v<Copy, float>) copy[i] = round_copy<Copy>(p);
  }
  const float max1 = block_max(fabsf(m), warps1);
  const float max2 = block_max(fabsf(v), warps2);
  if (threadIdx.x == 0) absmax1[b] = max1, absmax2[b] = max2;
  if (valid) {
    // scale_to_map divides with '/', IEEE round-to-nearest in device code
    // (the build does not use --use_fast_math / -prec-div=false).
    state1[i] = nearest_map_index(map1, scale_to_map(m, max1));
    state2[i] = nearest_map_index(map2, scale_to_map(v, max2));
  }
}

}  // namespace

void adamw8bit_step(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& state1,
                    const Tensor& state2, const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1,
                    const Tensor& qmap2, const AdamWHyper& hp, const Tensor* half_copy) {
  const int64_t n = param.numel();
  const int64_t blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
  ANATOMY_CHECK(param.dtype() == DType::F32 && grad.dtype() == DType::F32 && grad.numel() == n &&
                    state1.dtype() == DType::U8 && state2.dtype() == DType::U8 && state1.numel() == n &&
                    state2.numel() == n && absmax1.numel() == blocks && absmax2.numel() == blocks &&
                    qmap1.numel() == kQuantizationMapSize && qmap2.numel() == kQuantizationMapSize,
                "adamw8bit_step: the states of {} do not match it ({} elements, {} blocks)", param.name(), n, blocks);
  ANATOMY_CHECK(!half_copy || (half_copy->numel() == n && (half_copy->dtype() == DType::BF16 ||
                                                            half_copy->dtype() == DType::F16)),
                "adamw8bit_step: the 16-bit copy of {} must be BF16/F16 [{}]", param.name(), n);
  if (n <= 0) return;
  ANATOMY_CHECK(blocks <= 0x7fffffff, "adamw8bit_step: {} has too many blocks", param.name());
  const AdamWConstants k = adamw_constants(hp);
  const auto grid = static_cast<unsigned>(blocks);
  auto launch = [&](auto* copy) {
    using Copy = std::remove_pointer_t<decltype(copy)>;
    adamw8bit_kernel<Copy><<<grid, kThreads, 0, stream>>>(
        param.data<float>(), grad.data<float>(), state1.data<uint8_t>(), state2.data<uint8_t>(),
        absmax1.data<float>(), absmax2.data<float>(), qmap1.data<float>(), qmap2.data<float>(), n, k, copy);
  };
  if (!half_copy) launch(static_cast<float*>(nullptr));
  else if (half_copy->dtype() == DType::BF16) launch(static_cast<__nv_bfloat16*>(half_copy->raw()));
  else launch(static_cast<__half*>(half_copy->raw()));
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
