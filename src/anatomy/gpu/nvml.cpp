// nvml.cpp: NVML loaded with dlopen/dlsym. The few types and entry points used
// are declared here by hand, with the layouts of nvml.h from the CUDA toolkit,
// so that no NVML header or library is needed at build time.
#include "anatomy/gpu/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

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
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
// usedGpuMemory when the driver cannot tell (always so under Windows WDDM).
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ull;

// The process-info layouts of the three generations of
// nvmlDevice{Compute,Graphics}RunningProcesses. Each begins with pid and
// usedGpuMemory, which is all that is read; they differ in their size, so an
// array must be walked with the stride of the layout the driver writes.
struct nvmlProcessInfo_v1_t {  // the unversioned entry points
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {  // _v2, and _v3 of every driver but R525-R530
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct nvmlProcessInfo_cc_t {  // _v3 of R525-R530, whose nvml.h briefly added this field
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_v2_t) == 24 &&
              sizeof(nvmlProcessInfo_cc_t) == 32);
using ProcessQuery = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, void*);

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
  // Optional: the CUDA device's NVML index (index_of_pci_bus_id).
  nvmlReturn_t (*handle_by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*device_index)(nvmlDevice_t, unsigned*) = nullptr;
  // Optional: only used to word unavailable_reason().
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  // Optional (processes() answers std::nullopt without them): the newest
  // generation this driver has, and the size of the entries it fills.
  ProcessQuery compute_processes = nullptr;
  ProcessQuery graphics_processes = nullptr;
  size_t process_info_size = 0;
};

namespace {
template <typename Fn>
bool resolve(void* library, const char* symbol, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*out == nullptr && missing->empty()) *missing = symbol;
  return *out != nullptr;
}

// Picks the newest process queries the library exports. Which layout a _v3
// query fills is not in its name: drivers R525 to R530 wrote the 32-byte
// layout, every later one the 24-byte one. Only those drivers export
// nvmlDeviceGetConfComputeMemSizeInfo without nvmlDeviceGetRunningProcessDetailList
// (the test nvitop uses, which has held since).
void resolve_process_queries(void* library, ProcessQuery* compute, ProcessQuery* graphics, size_t* entry_size) {
  auto query = [library](const char* symbol) { return reinterpret_cast<ProcessQuery>(dlsym(library, symbol)); };
  struct Generation {
    const char *compute, *graphics;
  };
  const Generation generations[] = {
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"},
      {"nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2"},
      {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"},
  };
  for (size_t g = 0; g < std::size(generations); ++g) {
    *compute = query(generations[g].compute);
    if (*compute == nullptr) continue;
    *graphics = query(generations[g].graphics);
    if (g == 0) {
      const bool cc_layout = dlsym(library, "nvmlDeviceGetConfComputeMemSizeInfo") != nullptr &&
                             dlsym(library, "nvmlDeviceGetRunningProcessDetailList") == nullptr;
      *entry_size = cc_layout ? sizeof(nvmlProcessInfo_cc_t) : sizeof(nvmlProcessInfo_v2_t);
    } else {
      *entry_size = g == 1 ? sizeof(nvmlProcessInfo_v2_t) : sizeof(nvmlProcessInfo_v1_t);
    }
    return;
  }
}

// The whole of a small /proc file, or "" when it cannot be read.
std::string read_proc_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return "";
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
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
  api_->handle_by_pci_bus_id = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
      dlsym(library_, "nvmlDeviceGetHandleByPciBusId_v2"));
  api_->device_index =
      reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>(dlsym(library_, "nvmlDeviceGetIndex"));
  resolve_process_queries(library_, &api_->compute_processes, &api_->graphics_processes,
                          &api_->process_info_size);
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

std::optional<int> Nvml::index_of_pci_bus_id(const std::string& bus_id) const {
  if (!available_ || !api_->handle_by_pci_bus_id || !api_->device_index || bus_id.empty()) return std::nullopt;
  nvmlDevice_t device = nullptr;
  if (api_->handle_by_pci_bus_id(bus_id.c_str(), &device) != NVML_SUCCESS) return std::nullopt;
  unsigned index = 0;
  if (api_->device_index(device, &index) != NVML_SUCCESS) return std::nullopt;
  return static_cast<int>(index);
}

std::optional<std::string> Nvml::driver_version() const {
  if (!available_) return std::nullopt;
  char version[kDriverVersionBufferSize] = {};
  if (api_->driver_version(version, sizeof version) != NVML_SUCCESS) return std::nullopt;
  return std::string(version);
}

bool Nvml::append_processes(void* device, bool graphics, std::vector<GpuProcess>& out) const {
  const ProcessQuery query = graphics ? api_->graphics_processes : api_->compute_processes;
  if (query == nullptr) return false;
  // The first call, with no buffer, answers the count (or success when there
  // are none). Processes may start between that call and the next, so leave
  // room and try again a few times.
  unsigned capacity = 0;
  std::vector<unsigned long long> buffer;  // 8-byte aligned, as every layout needs
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned count = capacity;
    const nvmlReturn_t rc = query(device, &count, capacity > 0 ? buffer.data() : nullptr);
    if (rc == NVML_SUCCESS) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(buffer.data());
      for (unsigned i = 0; i < std::min(count, capacity); ++i) {
        nvmlProcessInfo_v1_t entry;  // the prefix every layout shares
        std::memcpy(&entry, bytes + i * api_->process_info_size, sizeof entry);
        const bool known = entry.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE &&
                           entry.usedGpuMemory <= static_cast<unsigned long long>(INT64_MAX);
        out.push_back({static_cast<int>(entry.pid), "", known ? static_cast<int64_t>(entry.usedGpuMemory) : -1});
      }
      return true;
    }
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return false;
    capacity = count * 2 + 8;
    // Sized for the widest layout, so that a driver writing wider entries than
    // the stride chosen still stays inside the buffer.
    buffer.assign(capacity * sizeof(nvmlProcessInfo_cc_t) / sizeof(unsigned long long), 0);
  }
  return false;
}

std::optional<std::vector<GpuProcess>> Nvml::unnamed_processes(int index) const {
  void* device = handle_for(index);
  if (device == nullptr) return std::nullopt;
  std::vector<GpuProcess> listed;
  if (!append_processes(device, /*graphics=*/false, listed)) return std::nullopt;
  // Graphics contexts matter only on desktops; a device without them may
  // refuse the query, which leaves the compute list whole.
  append_processes(device, /*graphics=*/true, listed);
  // A process with both kinds of context is listed twice, with the same
  // memory (or once unknown): keep one entry, with the larger figure.
  std::vector<GpuProcess> result;
  for (const GpuProcess& p : listed) {
    auto same = std::find_if(result.begin(), result.end(), [&](const GpuProcess& q) { return q.pid == p.pid; });
    if (same == result.end())
      result.push_back(p);
    else
      same->used_bytes = std::max(same->used_bytes, p.used_bytes);
  }
  return result;
}

std::optional<std::vector<GpuProcess>> Nvml::processes(int index) const {
  auto listed = unnamed_processes(index);
  if (listed)
    for (GpuProcess& p : *listed) p.name = process_name(p.pid);
  return listed;
}

std::optional<int64_t> Nvml::process_used_bytes(int index, int pid) const {
  const auto listed = unnamed_processes(index);
  if (!listed) return std::nullopt;
  for (const GpuProcess& p : *listed)
    if (p.pid == pid && p.used_bytes >= 0) return p.used_bytes;
  return std::nullopt;
}

std::string process_name(int pid) {
  if (pid <= 0) return "";
  // cmdline holds the arguments separated by NULs; argv[0] is what
  // nvidia-smi shows. Kernel threads and zombies have an empty one.
  std::string cmdline = read_proc_file(fmt::format("/proc/{}/cmdline", pid));
  std::string name = cmdline.substr(0, cmdline.find('\0'));
  if (name.empty()) {
    name = read_proc_file(fmt::format("/proc/{}/comm", pid));
    while (!name.empty() && (name.back() == '\n' || name.back() == '\0')) name.pop_back();
  }
  return name;
}

std::optional<std::string> gpu_memory_occupied_line(int index) {
  auto memory = Nvml::instance().memory(index);
  if (!memory) return std::nullopt;
  // The seed: print(f"GPU memory occupied: {info.used//1024**2} MB.")
  return fmt::format("GPU memory occupied: {} MB.", memory->used / (1024ull * 1024ull));
}

}  // namespace anatomy::gpu
