// device_buffer.h: a cudaMalloc'd buffer for the GPU kernel tests, freed on
// scope exit, with host upload/download and NaN poisoning.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy::test {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { ANATOMY_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1))); }
  ~DeviceBuffer() { (void)cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  void upload(const std::vector<T>& host) {
    ANATOMY_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    ANATOMY_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost));
    return host;
  }
  // All bytes 0xFF: NaN as float32, bf16 and fp16 alike, so an element a
  // kernel fails to write shows.
  void poison() { ANATOMY_CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes_)); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

}  // namespace anatomy::test
