// cuda_device.cu: device queries, the CUDA allocator behind the Ledger, and
// the fill/copy operations declared in cuda_device.h.

#include "anatomy/kernels/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/core/pool.h"

namespace anatomy::cuda {

[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line) {
  fail("CUDA error in {} ({}:{}): {}", call, file, line,
       cudaGetErrorString(static_cast<cudaError_t>(code)));
}

namespace {

// Makes `index` the current device for the scope and restores the previous
// one after, so that working on one GPU does not move the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    ANATOMY_CUDA_CHECK(cudaGetDevice(&previous_));
    if (index != previous_) ANATOMY_CUDA_CHECK(cudaSetDevice(index));
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

void require_gpu_tensor(const Tensor& t, const char* what) {
  if (!t.defined()) fail("{}: tensor is undefined", what);
  if (t.device().type != DeviceType::CUDA)
    fail("{}: tensor '{}' is on {}, not a CUDA device", what, t.name(), t.device().str());
}

// Segments of GPU memory for the ledger's pool (core/pool.h): cudaMalloc and
// cudaFree, called only when the pool grows or gives memory back. The pool
// hands out blocks of the segments best-fit and keeps them when freed, so a
// training step reaches cudaMalloc only in its first step. Reuse is safe
// because each backend queues all its work on one stream, in order.
class CudaSegments final : public SegmentSource {
 public:
  explicit CudaSegments(int index) : index_(index) {}

  void* map(size_t bytes) override {
    DeviceGuard guard(index_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky, but clear it so no later check sees it
      return nullptr;
    }
    ANATOMY_CUDA_CHECK(status);
    return ptr;
  }

  // Also runs from the pool's destructor, so it must not throw. At process
  // exit the runtime may already be unloading, which is harmless; anything
  // else is reported.
  void unmap(void* ptr, size_t) noexcept override {
    const cudaError_t status = cudaFree(ptr);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      if (status != cudaErrorCudartUnloading)
        std::fprintf(stderr, "anatomy: cudaFree failed: %s\n", cudaGetErrorString(status));
    }
  }

 private:
  int index_;
};

__global__ void fill_f32_kernel(float* data, int64_t n, float value) {
  // Grid-stride loop: any grid size covers any n.
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    data[i] = value;
}

}  // namespace

int device_count() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // No driver, no GPU, or a driver older than the runtime: all mean "none".
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  ANATOMY_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

std::string device_identity(int index) {
  cudaDeviceProp prop{};
  ANATOMY_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return fmt::format("{} ({} SMs)", prop.name, prop.multiProcessorCount);
}

std::string pci_bus_id(int index) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, index) != cudaSuccess) {
    cudaGetLastError();  // clear it: not knowing is an answer
    return "";
  }
  return id;
}

std::unique_ptr<DeviceAllocator> make_cuda_allocator(int index) {
  int count = device_count();
  if (index < 0 || index >= count) fail("no CUDA device {} (this machine has {})", index, count);
  return make_pool_allocator(std::make_unique<CudaSegments>(index));
}

void fill(const Tensor& t, float value) {
  require_gpu_tensor(t, "fill");
  if (t.dtype() != DType::F32) fail("fill: tensor '{}' is {}, not F32", t.name(), dtype_name(t.dtype()));
  int64_t n = t.numel();
  if (n == 0) return;
  DeviceGuard guard(t.device().index);
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU several times over; the loop covers the rest.
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  fill_f32_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(t.data<float>(), n, value);
  ANATOMY_CUDA_CHECK(cudaGetLastError());
}

void copy_to_host(const Tensor& t, void* dst) {
  require_gpu_tensor(t, "copy_to_host");
  if (t.nbytes() == 0) return;
  DeviceGuard guard(t.device().index);
  ANATOMY_CUDA_CHECK(cudaMemcpy(dst, t.raw(), t.nbytes(), cudaMemcpyDeviceToHost));
}

void copy_from_host(const Tensor& t, const void* src) {
  require_gpu_tensor(t, "copy_from_host");
  if (t.nbytes() == 0) return;
  DeviceGuard guard(t.device().index);
  ANATOMY_CUDA_CHECK(cudaMemcpy(t.raw(), src, t.nbytes(), cudaMemcpyHostToDevice));
}

void synchronize() { ANATOMY_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace anatomy::cuda
