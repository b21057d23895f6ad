// cuda_device.h: the CUDA backend's device basics: how many GPUs there are,
// their names, an allocator that lets the Ledger own GPU memory, and plain
// fill/copy/synchronise operations on GPU tensors. Includable from plain C++
// (no CUDA types appear here); implemented in cuda_device.cu.
#pragma once

#include <memory>
#include <string>

#include "anatomy/core/ledger.h"
#include "anatomy/core/tensor.h"

namespace anatomy::cuda {

// Number of CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();
std::string device_name(int index);
// "<name> (<SMs> SMs)" of CUDA device `index`: what the per-machine caches
// (cuBLASLt algorithm choices, cuDNN plans) key on, since MIG slices share a
// name but not an SM count.
std::string device_identity(int index);
// The PCI bus id of CUDA device `index` ("0000:3B:00.0"); "" when unknown.
// Makes no CUDA context.
std::string pci_bus_id(int index);

// The ledger's pool (core/pool.h) over cudaMalloc'd segments of device
// `index`. allocate() returns nullptr when the device is out of memory, so
// that the Ledger reports it naming the buffer.
std::unique_ptr<anatomy::DeviceAllocator> make_cuda_allocator(int index);

// Sets every element of an F32 tensor on the GPU to `value`.
void fill(const anatomy::Tensor& t, float value);
// Copies t.nbytes() bytes between a GPU tensor and host memory (blocking).
void copy_to_host(const anatomy::Tensor& t, void* dst);
void copy_from_host(const anatomy::Tensor& t, const void* src);
// Waits for all work queued on the current device.
void synchronize();

// Throws anatomy::Error naming the failed call and CUDA's description of
// `code` (a cudaError_t). Used through ANATOMY_CUDA_CHECK.
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);

}  // namespace anatomy::cuda

// Checks the cudaError_t of a CUDA runtime call; usable only where
// cuda_runtime.h is included. The error is read back with cudaGetLastError so
// that a later check does not report it a second time.
#define ANATOMY_CUDA_CHECK(call)                                                        \
  do {                                                                                  \
    cudaError_t anatomy_cuda_status_ = (call);                                          \
    if (anatomy_cuda_status_ != cudaSuccess) {                                          \
      (void)cudaGetLastError();                                                         \
      ::anatomy::cuda::throw_cuda_error(static_cast<int>(anatomy_cuda_status_), #call,  \
                                        __FILE__, __LINE__);                            \
    }                                                                                   \
  } while (0)
