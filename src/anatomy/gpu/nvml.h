// nvml.h: facts about the NVIDIA GPUs of this machine (names, memory in use,
// driver version) through NVML, the library behind nvidia-smi and pynvml.
// NVML is opened at run time with dlopen, so the engine builds and runs on
// machines without an NVIDIA driver; there every query answers "unknown"
// (std::nullopt, false, 0) instead of throwing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace anatomy::gpu {

// Device memory as nvmlDeviceGetMemoryInfo reports it, in bytes.
struct GpuMemory {
  uint64_t total = 0, free = 0, used = 0;
};

// One process holding memory on a device, as nvidia-smi's process table shows it.
struct GpuProcess {
  int pid = 0;            // as NVML reports it: inside a container, often the host's pid
  std::string name;       // its command (argv[0]), "" when this pid namespace cannot see it
  int64_t used_bytes = -1;  // its device memory; -1 when NVML cannot tell (NVML_VALUE_NOT_AVAILABLE)
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
  // NVML's index of the device at PCI bus id `bus_id` ("0000:3B:00.0", as
  // cudaDeviceGetPCIBusId gives it); std::nullopt when unknown. NVML numbers
  // every GPU of the machine, whatever CUDA_VISIBLE_DEVICES hides or reorders.
  std::optional<int> index_of_pci_bus_id(const std::string& bus_id) const;

  // The processes with a compute or graphics context on the device, each pid
  // once; std::nullopt when NVML, the device or the query is unavailable.
  std::optional<std::vector<GpuProcess>> processes(int index) const;
  // The device memory that process `pid` holds; std::nullopt when it is not
  // listed or NVML cannot tell. Inside a container NVML may list host pids, so
  // getpid() is not found there: fall back to device `used` minus a baseline.
  std::optional<int64_t> process_used_bytes(int index, int pid) const;

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

 private:
  Nvml();
  ~Nvml();

  struct Api;  // the resolved entry points, defined in nvml.cpp
  void* handle_for(int index) const;  // nvmlDevice_t, or nullptr
  // Appends the processes of one NVML process query (compute or graphics);
  // false when the query failed.
  bool append_processes(void* device, bool graphics, std::vector<GpuProcess>& out) const;
  // processes() without the names, which cost a read of /proc each.
  std::optional<std::vector<GpuProcess>> unnamed_processes(int index) const;

  void* library_ = nullptr;
  Api* api_ = nullptr;
  bool available_ = false;
  std::string reason_;
};

// "GPU memory occupied: N MB." exactly as the Hugging Face seed prints it
// (N = used // 1024**2), or std::nullopt when NVML or the device is absent.
std::optional<std::string> gpu_memory_occupied_line(int index = 0);

// The command of process `pid` as this pid namespace sees it: argv[0] from
// /proc/<pid>/cmdline, else /proc/<pid>/comm; "" when neither is readable.
std::string process_name(int pid);

}  // namespace anatomy::gpu
