// meta_backend.h: a backend that runs the model without computing. Every op
// does no arithmetic and touches no data, but every buffer is allocated
// through the ledger exactly as the target backend (CPU or CUDA) allocates it,
// the target's own buffers included (for CUDA: the cuBLAS workspace, the
// results slot, the grow-on-demand kernel scratch, AdamW's chunk table, the
// float32 copies that unfused 16-bit attention makes; sizes from
// kernels/cuda_memory.h). So running the real model and Trainer for a few
// steps on it gives the ledger, peak and composition, of a real run, byte for
// byte: the plan is the estimate (anatomy/memory_plan.h).
//
// Its memory is never dereferenced. Reads back to the host give zeros (so a
// loss, a gradient norm or a flag read with copy_to_host is 0), losses and
// sums of squares return 0.
#pragma once

#include <cstdint>
#include <memory>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/fp32_products.h"

namespace anatomy {

// The backend whose allocations are mirrored.
enum class MetaTarget { Cpu, Cuda };

struct MetaOptions {
  MetaTarget target = MetaTarget::Cuda;
  // As make_cuda_backend's: split TF32 takes kernel scratch for the split operands.
  Fp32Products fp32_products = Fp32Products::Float32;
  int64_t device_capacity = 0;  // bytes the simulated device has; 0: unlimited
  // The device runs the CUDA backend's Hopper attention kernels (compute
  // capability 9.0 and the sm_90a build): its attention keeps the dropout mask
  // as bits and takes the Hopper kernels' scratch.
  bool hopper_attention = false;
};

// device() is Device::cpu() for the CPU target and Device::cuda(0) for CUDA.
// The ledger's allocator: for CUDA, the block pool over simulated segments
// (core/pool.h), as the CUDA backend's pool over cudaMalloc'd ones, so that
// the reserved bytes are predicted too; for the CPU, made-up addresses whose
// reserved bytes are the live bytes, as the C library's. Past the capacity an
// allocation throws OutOfMemory, as on the device.
std::unique_ptr<Backend> make_meta_backend(const MetaOptions& options);

// The CPU target's allocator on its own: made-up, never-dereferenced, 64-byte
// aligned addresses; reserved bytes = live bytes; nullptr past `capacity`
// live bytes (when > 0).
std::unique_ptr<DeviceAllocator> make_simulated_cpu_allocator(int64_t capacity = 0);

}  // namespace anatomy
