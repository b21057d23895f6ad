// shared_memory_config.cuh: the one-time shared-memory set-up of a kernel
// that asks for more than the default 48 KiB (the flash attention kernels).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy::cuda {

// Opt-in to the kernel's dynamic shared memory, and all of the unified
// L1/shared memory as shared memory (otherwise a smaller default carveout may
// fit fewer blocks per SM than the registers allow). Once per device: the
// calls cost microseconds, which would show in every launch on an idle GPU.
// `done` (one bit per device) must belong to this one kernel: callers keep it
// as a static of their own template instantiation, one per kernel. `bytes` is
// the most the kernel ever asks for.
template <typename K>
void configure_shared_memory(K kernel, int bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  ANATOMY_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;  // devices past 64: every time
  if (done.load(std::memory_order_acquire) & bit) return;
  ANATOMY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  ANATOMY_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  done.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace anatomy::cuda
