// chunk_sums.cuh: the fixed-order column sums that the LayerNorm backwards and
// the bias gradients finish with. A first kernel sums each chunk of rows into
// a partial row; the finishing kernel here adds the chunks' partials of every
// column. The order of the additions depends only on thread and chunk numbers,
// so a sum gives the same bits every run. Included from .cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy::cuda {

// Lanes 0..L-1 of column tx hold s[lane][tx] in each of the arrays; adds them
// in a fixed tree (lane y += lane y + half, half from L/2 down to 1), leaving
// each array's sum in s[0][tx]. Every thread of the block calls it, after
// writing its own s[ty][tx].
template <int L, int C, typename... More>
__device__ __forceinline__ void lane_tree_sum(int tx, int ty, double (&s)[L][C], More&... more) {
  static_assert(L > 0 && (L & (L - 1)) == 0, "a power of two of lanes");
  __syncthreads();
  for (int half = L / 2; half > 0; half /= 2) {
    if (ty < half) {
      s[ty][tx] += s[ty + half][tx];
      ((more[ty][tx] += more[ty + half][tx]), ...);
    }
    __syncthreads();
  }
}

// Planes of chunk partials (P: float or double) and where their column sums
// are added: plane y's partials start y · partial_plane elements on, a chunks
// × N block; its sums go to out[y] (out_plane 0) or to out[0] + y · out_plane.
constexpr int kFinishCols = 32, kFinishLanes = 32, kMaxFinishPlanes = 3;
template <typename P>
struct FinishPlanes {
  const P* partial = nullptr;
  int64_t partial_plane = 0;
  float* out[kMaxFinishPlanes] = {};
  int64_t out_plane = 0;
};

// A block of 32 columns × 32 lanes per plane (blockIdx.y): lane y sums chunks
// y, y + 32, ... in double, then the 32 lane sums are added by lane_tree_sum,
// and the total is added (as float) into the output. Wide rather than long:
// with 8 lanes a column and 32 blocks for N = 1024 this took 6-9 µs, a sixth of
// the LayerNorm backward, waiting on one load after another; one thread a
// column took 55 µs at 16384 rows of 1024 (an H100, ncu).
template <typename P>
__global__ void __launch_bounds__(kFinishCols* kFinishLanes)
    chunk_sums_finish_kernel(const FinishPlanes<P> p, int64_t chunks, int N) {
  __shared__ double sums[kFinishLanes][kFinishCols + 1];
  const int tx = threadIdx.x % kFinishCols, ty = threadIdx.x / kFinishCols;
  const int h = blockIdx.x * kFinishCols + tx;
  const P* partial = p.partial + static_cast<int64_t>(blockIdx.y) * p.partial_plane;
  double a = 0.0;
  if (h < N) {
#pragma unroll 4
    for (int64_t c = ty; c < chunks; c += kFinishLanes) a += partial[c * N + h];
  }
  sums[ty][tx] = a;
  lane_tree_sum(tx, ty, sums);
  if (ty == 0 && h < N) {
    float* out = p.out_plane != 0 ? p.out[0] + static_cast<int64_t>(blockIdx.y) * p.out_plane : p.out[blockIdx.y];
    out[h] += static_cast<float>(sums[0][tx]);
  }
}

// Adds the chunks' partials of `planes` planes of N columns into their outputs.
template <typename P>
void launch_chunk_sums_finish(cudaStream_t s, const FinishPlanes<P>& p, int planes, int64_t chunks, int64_t N) {
  const dim3 grid(static_cast<unsigned>((N + kFinishCols - 1) / kFinishCols), static_cast<unsigned>(planes));
  chunk_sums_finish_kernel<P><<<grid, kFinishCols * kFinishLanes, 0, s>>>(p, chunks, static_cast<int>(N));
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anatomy::cuda
