// nvml.cpp: NVML loaded with dlopen/dlsym. The few types and entry points used
// are declared here by hand, with the layouts of nvml.h from the CUDA toolkit,
// so that no NVML header or library is needed at build time.
#include "anatomy/gpu/nvml.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace anatomy::gpu {

namespace {
// From nvml.h: results are an enum whose success value is 0; a device is an
// opaque pointer; nvmlMemory_t (version 1) is three unsigned long longs.
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
using nvmlDevice_t = void*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
// Buffer sizes NVML documents as large enough for these strings.
constexpr unsigned kDeviceNameBufferSize = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*device_name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  // Optional: only used to word unavailable_reason().
  const char* (*error_string)(nvmlReturn_t) = nullptr;
};

namespace {
template <typename Fn>
bool resolve(void* library, const char* symbol, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*out == nullptr && missing->empty()) *missing = symbol;
  return *out != nullptr;
}
}  // namespace

Nvml& Nvml::instance() {
  // A function-local static: initialised once, thread-safely, on first use.
  static Nvml nvml;
  return nvml;
}

Nvml::Nvml() {
  // RTLD_LOCAL keeps NVML's symbols out of the global namespace of the process.
  library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* why = dlerror();
    reason_ = fmt::format("cannot load libnvidia-ml.so.1 ({})", why ? why : "unknown reason");
    return;
  }
  api_ = new Api;
  std::string missing;
  bool ok = resolve(library_, "nvmlInit_v2", &api_->init, &missing);
  ok = resolve(library_, "nvmlShutdown", &api_->shutdown, &missing) && ok;
  ok = resolve(library_, "nvmlDeviceGetCount_v2", &api_->device_count, &missing) && ok;
  ok = resolve(library_, "nvmlDeviceGetHandleByIndex_v2", &api_->handle_by_index, &missing) && ok;
  ok = resolve(library_, "nvmlDeviceGetName", &api_->device_name, &missing) && ok;
  ok = resolve(library_, "nvmlDeviceGetMemoryInfo", &api_->memory_info, &missing) && ok;
  ok = resolve(library_, "nvmlSystemGetDriverVersion", &api_->driver_version, &missing) && ok;
  api_->error_string = reinterpret_cast<const char* (*)(nvmlReturn_t)>(dlsym(library_, "nvmlErrorString"));
  if (!ok) {
    reason_ = fmt::format("libnvidia-ml.so.1 lacks {}", missing);
    return;
  }
  nvmlReturn_t rc = api_->init();
  if (rc != NVML_SUCCESS) {
    reason_ = fmt::format("nvmlInit failed: {}",
                          api_->error_string ? api_->error_string(rc) : fmt::format("error {}", rc));
    return;
  }
  available_ = true;
}

Nvml::~Nvml() {
  if (available_) api_->shutdown();
  // The library stays loaded: unloading it at exit gains nothing and would
  // break any other static still calling into it.
  delete api_;
}

int Nvml::device_count() const {
  if (!available_) return 0;
  unsigned count = 0;
  if (api_->device_count(&count) != NVML_SUCCESS) return 0;
  return static_cast<int>(count);
}

void* Nvml::handle_for(int index) const {
  if (!available_ || index < 0) return nullptr;
  nvmlDevice_t device = nullptr;
  if (api_->handle_by_index(static_cast<unsigned>(index), &device) != NVML_SUCCESS) return nullptr;
  return device;
}

std::optional<std::string> Nvml::device_name(int index) const {
  void* device = handle_for(index);
  if (device == nullptr) return std::nullopt;
  char name[kDeviceNameBufferSize] = {};
  if (api_->device_name(device, name, sizeof name) != NVML_SUCCESS) return std::nullopt;
  return std::string(name);
}

std::optional<GpuMemory> Nvml::memory(int index) const {
  void* device = handle_for(index);
  if (device == nullptr) return std::nullopt;
  nvmlMemory_t info{};
  if (api_->memory_info(device, &info) != NVML_SUCCESS) return std::nullopt;
  return GpuMemory{info.total, info.free, info.used};
}

std::optional<std::string> Nvml::driver_version() const {
  if (!available_) return std::nullopt;
  char version[kDriverVersionBufferSize] = {};
  if (api_->driver_version(version, sizeof version) != NVML_SUCCESS) return std::nullopt;
  return std::string(version);
}

std::optional<std::string> gpu_memory_occupied_line(int index) {
  auto memory = Nvml::instance().memory(index);
  if (!memory) return std::nullopt;
  // The seed: print(f"GPU memory occupied: {info.used//1024**2} MB.")
  return fmt::format("GPU memory occupied: {} MB.", memory->used / (1024ull * 1024ull));
}

}  // namespace anatomy::gpu
