// cuda_device.cu: device queries, the CUDA allocator behind the Ledger, and
// the fill/copy operations declared in cuda_device.h.

#include "anatomy/kernels/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <unordered_map>
#include <vector>
#include <cstdio>

#include "anatomy/core/error.h"

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

// cudaMalloc/cudaFree through a cache of freed blocks, keyed by size rounded
// up to 512 bytes. A training step allocates the same sizes every step, so
// after the first step nothing reaches cudaMalloc, and cudaFree (which waits
// for the whole device) is called only when memory runs short. Reuse is safe
// because each backend queues all its work on one stream, in order.
class CudaAllocator final : public DeviceAllocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  ~CudaAllocator() override { release_cached(); }

  void* allocate(size_t bytes) override {
    const size_t rounded = round_up(bytes);
    auto it = cache_.find(rounded);
    if (it != cache_.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= rounded;
      return ptr;
    }
    DeviceGuard guard(index_);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, rounded);
    if (status == cudaErrorMemoryAllocation && cached_bytes_ > 0) {
      (void)cudaGetLastError();
      release_cached();  // give the cache back and try once more
      status = cudaMalloc(&ptr, rounded);
    }
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky, but clear it so no later check sees it
      return nullptr;
    }
    ANATOMY_CUDA_CHECK(status);
    return ptr;
  }

  void release(void* ptr, size_t bytes) override {
    const size_t rounded = round_up(bytes);
    cache_[rounded].push_back(ptr);
    cached_bytes_ += rounded;
  }

 private:
  // Never zero: cudaMalloc(0) gives nullptr, which the Ledger would read as
  // "out of memory".
  static size_t round_up(size_t bytes) { return (std::max<size_t>(bytes, 1) + 511) / 512 * 512; }

  void release_cached() noexcept {
    // Also runs from the destructor, so it must not throw. At process exit the
    // runtime may already be unloading, which is harmless; anything else is reported.
    for (auto& [size, blocks] : cache_)
      for (void* ptr : blocks) {
        cudaError_t status = cudaFree(ptr);
        if (status != cudaSuccess) {
          (void)cudaGetLastError();
          if (status != cudaErrorCudartUnloading)
            std::fprintf(stderr, "anatomy: cudaFree failed: %s\n", cudaGetErrorString(status));
        }
      }
    cache_.clear();
    cached_bytes_ = 0;
  }

  int index_;
  std::unordered_map<size_t, std::vector<void*>> cache_;
  size_t cached_bytes_ = 0;
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

std::unique_ptr<DeviceAllocator> make_cuda_allocator(int index) {
  int count = device_count();
  if (index < 0 || index >= count) fail("no CUDA device {} (this machine has {})", index, count);
  return std::make_unique<CudaAllocator>(index);
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
