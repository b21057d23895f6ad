// busy_gpu.cpp: the table and advice of busy_gpu.h.
#include "anatomy/gpu/busy_gpu.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace anatomy::gpu {

namespace {
constexpr int64_t kMiB = 1024 * 1024;
constexpr size_t kMaxNameWidth = 40;  // longer commands keep their end, as nvidia-smi does

std::string shown_name(const std::string& name) {
  if (name.empty()) return "(not visible from here)";  // another pid namespace: another container
  if (name.size() <= kMaxNameWidth) return name;
  return "..." + name.substr(name.size() - (kMaxNameWidth - 3));
}
}  // namespace

std::string format_busy_gpu_warning(const std::vector<GpuProcess>& processes, int own_pid,
                                    const GpuMemory& memory) {
  std::vector<GpuProcess> others;
  for (const GpuProcess& p : processes)
    if (p.pid != own_pid) others.push_back(p);
  if (others.empty()) return "";

  size_t name_width = std::string_view("Process name").size();
  for (const auto& p : others) name_width = std::max(name_width, shown_name(p.name).size());
  int64_t held = 0;
  bool some_unknown = false;
  std::string table = fmt::format("  {:>8}  {:<{}}  {:>10}\n", "PID", "Process name", name_width, "GPU memory");
  for (const auto& p : others) {
    const std::string used = p.used_bytes >= 0 ? fmt::format("{} MiB", p.used_bytes / kMiB) : "N/A";
    table += fmt::format("  {:>8}  {:<{}}  {:>10}\n", p.pid, shown_name(p.name), name_width, used);
    if (p.used_bytes >= 0)
      held += p.used_bytes;
    else
      some_unknown = true;
  }
  const std::string amount = held == 0 && some_unknown ? "an amount NVML cannot tell"
                             : fmt::format("{}{} MiB", some_unknown ? "at least " : "", held / kMiB);
  return fmt::format(
      "warning: {} other process{} on this GPU:\n{}"
      "  The memory figures below include only this process; other processes hold {}; "
      "free memory is {} MiB of {} MiB.\n"
      "  For figures like the seed's, stop the processes that use GPU memory first.\n",
      others.size(), others.size() == 1 ? "" : "es", table, amount, memory.free / kMiB, memory.total / kMiB);
}

void warn_if_gpu_busy(int index) {
  const Nvml& nvml = Nvml::instance();
  const auto processes = nvml.processes(index);
  const auto memory = nvml.memory(index);
  if (!processes || !memory) return;
  const std::string warning = format_busy_gpu_warning(*processes, static_cast<int>(getpid()), *memory);
  if (!warning.empty()) std::fputs(warning.c_str(), stderr);
}

}  // namespace anatomy::gpu
