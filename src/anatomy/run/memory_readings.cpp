// memory_readings.cpp: NVML readings and the anatomy's files.
#include "anatomy/run/memory_readings.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "anatomy/io/files.h"

namespace anatomy::run {

GpuMemoryProbe::GpuMemoryProbe(int index) : index_(index) {
  if (const auto m = gpu::Nvml::instance().memory(index)) baseline_ = static_cast<int64_t>(m->used);
}

std::optional<int64_t> GpuMemoryProbe::own_use() const {
  const gpu::Nvml& nvml = gpu::Nvml::instance();
  if (const auto own = nvml.process_used_bytes(index_, static_cast<int>(getpid()))) return *own;
  const auto m = nvml.memory(index_);
  if (!m || !baseline_) return std::nullopt;
  return static_cast<int64_t>(m->used) - *baseline_;
}

std::optional<gpu::GpuMemory> GpuMemoryProbe::device() const { return gpu::Nvml::instance().memory(index_); }

MemoryAnatomy take_memory_anatomy(Backend& backend, const DeviceFacts& facts, int64_t context_bytes,
                                  int64_t nvml_used, const MemoryPlan* plan) {
  MemoryAnatomy m;
  Ledger& ledger = backend.ledger();
  m.device = backend.device().str();
  m.device_name = facts.name;
  m.device_total = facts.total;
  m.ledger = ledger.snapshot();
  m.timeline = ledger.timeline();
  m.timeline_dropped = ledger.timeline_dropped();
  m.peak_buffers = ledger.peak_buffers(kPeakBuffersListed);
  m.steps = ledger.step_timeline();
  m.context_bytes = context_bytes;
  m.nvml_used = nvml_used;
  if (plan) m.predicted = plan->prediction();
  m.engine_options = engine_option_fields(backend.options());
  return m;
}

void write_memory_reports(const MemoryAnatomy& anatomy, const std::string& dir, const std::string& extra_sections) {
  namespace fs = std::filesystem;
  const std::string json_path = (fs::path(dir) / "anatomy.json").string();
  const std::string html_path = (fs::path(dir) / "report.html").string();
  io::write_text_file_atomic(json_path, memory_anatomy_json(anatomy));
  io::write_text_file_atomic(html_path, memory_report_html(anatomy, extra_sections));
  fmt::print("Memory anatomy written to {} and {}\n", json_path, html_path);
}

}  // namespace anatomy::run
