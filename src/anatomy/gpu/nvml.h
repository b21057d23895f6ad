// nvml.h: facts about the NVIDIA GPUs of this machine (names, memory in use,
// driver version) through NVML, the library behind nvidia-smi and pynvml.
// NVML is opened at run time with dlopen, so the engine builds and runs on
// machines without an NVIDIA driver; there every query answers "unknown"
// (std::nullopt, false, 0) instead of throwing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace anatomy::gpu {

// Device memory as nvmlDeviceGetMemoryInfo reports it, in bytes.
struct GpuMemory {
  uint64_t total = 0, free = 0, used = 0;
};

class Nvml {
 public:
  // The one instance: the library is loaded and initialised on first use and
  // shut down at process exit.
  static Nvml& instance();

  // True when libnvidia-ml.so.1 was loaded and nvmlInit succeeded.
  bool available() const { return available_; }
  // Why available() is false ("" when it is true).
  std::string unavailable_reason() const { return reason_; }

  int device_count() const;
  std::optional<std::string> device_name(int index) const;
  // As nvidia-smi and pynvml's nvmlDeviceGetMemoryInfo give it: `used` counts
  // every process on the device, CUDA contexts included.
  std::optional<GpuMemory> memory(int index) const;
  std::optional<std::string> driver_version() const;

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

 private:
  Nvml();
  ~Nvml();

  struct Api;  // the resolved entry points, defined in nvml.cpp
  void* handle_for(int index) const;  // nvmlDevice_t, or nullptr

  void* library_ = nullptr;
  Api* api_ = nullptr;
  bool available_ = false;
  std::string reason_;
};

// "GPU memory occupied: N MB." exactly as the Hugging Face seed prints it
// (N = used // 1024**2), or std::nullopt when NVML or the device is absent.
std::optional<std::string> gpu_memory_occupied_line(int index = 0);

}  // namespace anatomy::gpu
