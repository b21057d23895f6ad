// memory_anatomy.h: the memory of a run explained, category by category, so
// that the rows add up to what NVML says the process uses. The ledger lists
// every buffer the engine allocates; on top of it come the CUDA context and
// loaded kernels (measured with NVML before the first allocation), memory
// free inside the allocator's pool (its segments minus its live blocks), and
// "unattributed": NVML's figure minus all of that, shown, never hidden.
// A prediction (anatomy/memory_plan.h) may sit beside the measurement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/core/ledger.h"

namespace anatomy {

// What the estimator predicted for the same run.
struct MemoryPrediction {
  CategoryBytes at_peak{};      // per ledger category, at the predicted peak
  int64_t peak_total = 0;       // the ledger's predicted peak
  std::string peak_phase;
  int64_t reserved_peak = 0;    // the pool's predicted segments at their peak
  int64_t context_bytes = 0;    // the CUDA context and kernels assumed (0 on the CPU)
  int64_t nvml_total = 0;       // reserved_peak + context_bytes: predicted NVML use of this process
};

struct MemoryAnatomy {
  std::string device;           // "cuda:0" or "cpu"
  std::string device_name;      // "NVIDIA H100 80GB HBM3", or "" when unknown
  int64_t device_total = 0;     // the device's memory (0 when unknown, e.g. on the CPU)
  LedgerSnapshot ledger;        // live now, peaks, composition at the peak
  std::vector<PhaseSample> timeline;
  int64_t timeline_dropped = 0;
  PeakBuffers peak_buffers;          // the buffers alive at the ledger's peak, the largest listed
  std::vector<StepSample> steps;     // the whole run, a sample per step or group of steps
  // GPU only; -1 when unknown (CPU runs, or NVML unavailable).
  int64_t context_bytes = -1;   // CUDA context and kernels (NVML, before the first allocation)
  int64_t nvml_used = -1;       // NVML: this process's use when the anatomy was taken
  std::optional<MemoryPrediction> predicted;
  // The engine's choices the run made (core/engine_options.h), by flag name.
  std::vector<std::pair<std::string, std::string>> engine_options;
  // The model: name, source (preset, directory, Hugging Face cache), weights
  // ("random initialisation" for a preset, else the file read).
  std::vector<std::pair<std::string, std::string>> model;
  // What the model holds differently from the plain way, for people (the
  // masked-LM head's logits kept whole against its chunked loss), a line each.
  std::vector<std::string> notes;
};

// How many of the peak's buffers anatomy.json, report.html and the plan's
// JSON list by name (the terminal shows the first kPeakBuffersShown).
inline constexpr size_t kPeakBuffersListed = 25;
inline constexpr size_t kPeakBuffersShown = 10;

// One row of the anatomy: a ledger category or one of the device-level rows
// ("context", "pool_free", "unattributed").
struct MemoryRow {
  std::string key;              // category_name(), or context / pool_free / unattributed
  std::string label;            // for people: "Optimizer states", "CUDA context and kernels", ...
  int64_t at_peak = 0;          // bytes at the ledger's peak (-1: unknown)
  int64_t peak = 0;             // the row's own peak (ledger categories; else = at_peak)
  int64_t predicted = -1;       // predicted bytes at the peak (-1: no prediction)
};

// The rows, in a fixed order: the ten ledger categories, then context,
// pool_free (reserved_peak - peak_total) and unattributed (nvml_used -
// context - reserved_peak; the pool keeps its segments, so NVML at the end
// shows the peak's segments). Device-level rows are -1 when unknown.
std::vector<MemoryRow> memory_rows(const MemoryAnatomy& m);

// The terminal table: one line per row with a bar, the totals, the peak's
// phase and step, and predicted vs measured when there is a prediction.
std::string format_memory_table(const MemoryAnatomy& m);
// A ledger snapshot and a timeline as JSON, bytes as integers, categories by
// category_name(): the parts anatomy.json and `estimate --plan-json` share.
nlohmann::ordered_json ledger_json(const LedgerSnapshot& ledger);
nlohmann::ordered_json timeline_json(const std::vector<PhaseSample>& timeline);
nlohmann::ordered_json step_timeline_json(const std::vector<StepSample>& steps);
// {"buffers": [{name, category, bytes, phase, step}], "other_count", "other_bytes", "total"};
// total = the listed bytes + other_bytes (the ledger's peak).
nlohmann::ordered_json peak_buffers_json(const PeakBuffers& buffers);

// "Largest buffers live at the peak": the `shown` largest, a line each (name,
// category, bytes, the phase and step that allocated it), then "other N
// buffers" and the total, which is the ledger's peak.
std::string format_peak_buffers(const PeakBuffers& buffers, size_t shown = kPeakBuffersShown);
// The whole run in a few lines: live at the first and last step's end, the
// steps' highest points, and the growth between (empty with fewer than two steps).
std::string format_step_timeline(const std::vector<StepSample>& steps);

// anatomy.json: everything above, bytes as integers.
std::string memory_anatomy_json(const MemoryAnatomy& m);
// report.html: self-contained (no network), with inline SVG charts: the
// stacked memory timeline by category, the composition at the peak, and
// predicted vs measured.
// `extra_sections`: HTML placed after the memory sections (the time anatomy's,
// when the run was profiled).
std::string memory_report_html(const MemoryAnatomy& m, const std::string& extra_sections = "");

}  // namespace anatomy
