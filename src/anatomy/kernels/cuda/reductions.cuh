// reductions.cuh: the order-fixed sums in double that several kernels share
// (the LayerNorms, the optimizers' norms). The order of the additions depends
// only on the lane and warp numbers, so a sum gives the same bits every run.
#pragma once

#include <cuda_runtime.h>

namespace anatomy::cuda {

// Every lane of the warp ends with the same sum, added in a fixed butterfly order.
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Block-wide sum of a block of kBlock threads, the warps' sums added in warp
// order; valid in thread 0.
template <int kBlock>
__device__ double block_sum(double v) {
  static_assert(kBlock % 32 == 0, "whole warps");
  __shared__ double warps[kBlock / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kBlock / 32; ++w) total += warps[w];
  return total;
}

}  // namespace anatomy::cuda
