// memory_anatomy.cpp: the anatomy's rows, the terminal table and anatomy.json.
// The HTML report is in memory_report_html.cpp.
#include "anatomy/analysis/memory_anatomy.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace anatomy {

namespace {

constexpr std::array<const char*, kCategoryCount> kCategoryLabels = {
    "Weights (float32)",  // under mixed precision this category holds the float32 masters
    "Weights (half-precision copy)",
    "Optimizer states",
    "Gradients",
    "Activations saved for backward",
    "Temporary buffers",
    "Functionality-specific",
    "Data batches",
    "Library workspaces",
    "Communication buffers"};

// The seed's six categories: always shown, even when empty, so a reader can
// see that (say) no optimizer states were held rather than wonder.
bool is_seed_category(const std::string& key) {
  return key == "weights" || key == "optimizer_states" || key == "gradients" || key == "activations" ||
         key == "temporary" || key == "functionality";
}

// The pool's figures say whether an allocator kept free memory: the CPU one
// reports exactly what is live, so its reserved bytes equal the ledger's.
bool is_pooled(const LedgerSnapshot& l) {
  return l.reserved_peak != l.peak_total || l.reserved_at_peak != l.peak_total;
}

// Code points, not bytes: the labels hold "−" and the bars "█".
size_t display_width(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char ch) { return (ch & 0xC0) != 0x80; }));
}

std::string pad_right(std::string s, size_t width) {
  const size_t w = display_width(s);
  if (w < width) s.append(width - w, ' ');
  return s;
}

std::string bytes_or(int64_t bytes, const char* unknown) { return bytes < 0 ? unknown : format_bytes(bytes); }

std::string step_phrase(const std::string& phase, int64_t step) {
  return step >= 0 ? fmt::format("\"{}\" of step {}", phase, step + 1)
                   : fmt::format("\"{}\" (before the first step)", phase);
}

// Signed relative error of a prediction: + means it predicted too much.
std::string prediction_error(int64_t predicted, int64_t measured) {
  if (measured <= 0) return "error unknown";
  return fmt::format("error {:+.1f}%", 100.0 * static_cast<double>(predicted - measured) / measured);
}

nlohmann::ordered_json by_category(const CategoryBytes& bytes) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (size_t c = 0; c < kCategoryCount; ++c) out[std::string(category_name(static_cast<Category>(c)))] = bytes[c];
  return out;
}

}  // namespace

std::vector<MemoryRow> memory_rows(const MemoryAnatomy& m) {
  const LedgerSnapshot& l = m.ledger;
  const MemoryPrediction* p = m.predicted ? &*m.predicted : nullptr;
  std::vector<MemoryRow> rows;
  for (size_t c = 0; c < kCategoryCount; ++c)
    rows.push_back({std::string(category_name(static_cast<Category>(c))), kCategoryLabels[c], l.at_peak[c], l.peak[c],
                    p ? p->at_peak[c] : -1});

  rows.push_back({"context", "CUDA context and kernels", m.context_bytes, m.context_bytes,
                  p ? p->context_bytes : -1});

  // The pool's segments at their peak less the ledger's peak: what the pool
  // holds beyond the live buffers (rounding, fragmentation, segments kept),
  // so that ledger + pool free = the segments NVML sees. An allocator that
  // reports less than the ledger holds keeps no pool; then it is unknown.
  const int64_t pool_free = l.reserved_peak >= l.peak_total ? l.reserved_peak - l.peak_total : -1;
  rows.push_back({"pool_free", "Free inside the pool", pool_free, pool_free,
                  p ? std::max<int64_t>(0, p->reserved_peak - p->peak_total) : -1});

  // NVML is read after the run, when the pool still holds its peak's
  // segments; what is left is what nobody accounted for (may be negative
  // when the context was overestimated). The plan cannot predict it.
  const int64_t unattributed =
      m.nvml_used >= 0 && m.context_bytes >= 0 ? m.nvml_used - m.context_bytes - l.reserved_peak : -1;
  rows.push_back({"unattributed", "Unattributed (NVML − all the rest)", unattributed, unattributed, -1});
  return rows;
}

std::string format_memory_table(const MemoryAnatomy& m) {
  const std::vector<MemoryRow> rows = memory_rows(m);
  const bool predicted = m.predicted.has_value();
  const LedgerSnapshot& l = m.ledger;
  int64_t total = 0, largest = 1;
  for (const MemoryRow& r : rows)
    if (r.at_peak > 0) {
      total += r.at_peak;
      largest = std::max(largest, r.at_peak);
    }

  constexpr size_t kLabelWidth = 35, kBarWidth = 20;
  std::string out = fmt::format("Memory anatomy on {}", m.device);
  if (!m.device_name.empty() || m.device_total > 0) {
    out += " (" + m.device_name;
    if (m.device_total > 0) out += (m.device_name.empty() ? "" : ", ") + format_bytes(m.device_total);
    out += ")";
  }
  out += ", at the ledger's peak:\n";
  out += fmt::format("  {}{:>10} {:>10}{} {:>6}\n", pad_right("", kLabelWidth), "at peak", "own peak",
                     predicted ? fmt::format(" {:>10}", "predicted") : "", "share");

  for (const MemoryRow& r : rows) {
    const bool device_row = r.key == "context" || r.key == "unattributed";
    const bool empty = r.at_peak <= 0 && r.peak <= 0 && r.predicted <= 0;
    // Unattributed is never hidden on a GPU, even when NVML could not say.
    if (empty && !is_seed_category(r.key) && !(device_row && m.device != "cpu")) continue;
    const std::string share =
        r.at_peak > 0 && total > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(r.at_peak) / total) : "";
    size_t cells = 0;
    if (r.at_peak > 0)
      cells = std::max<size_t>(1, static_cast<size_t>(std::llround(double(kBarWidth) * r.at_peak / largest)));
    std::string bar;
    for (size_t i = 0; i < cells; ++i) bar += "█";
    out += fmt::format("  {}{:>10} {:>10}{} {:>6}  {}\n", pad_right(r.label, kLabelWidth),
                       bytes_or(r.at_peak, "unknown"), bytes_or(r.peak, "unknown"),
                       predicted ? fmt::format(" {:>10}", bytes_or(r.predicted, "-")) : "", share, bar);
  }
  out += fmt::format("  {}{:>10}\n", pad_right("Total of the rows", kLabelWidth), format_bytes(total));

  out += fmt::format("Ledger peak {} during {}\n", format_bytes(l.peak_total), step_phrase(l.peak_phase, l.peak_step));
  if (is_pooled(l))
    out += fmt::format("Pool segments: {} at their peak, {} at the ledger's peak\n", format_bytes(l.reserved_peak),
                       format_bytes(l.reserved_at_peak));
  if (m.nvml_used >= 0)
    out += fmt::format("NVML: this process uses {}{}\n", format_bytes(m.nvml_used),
                       m.device_total > 0 ? fmt::format(" of the device's {}", format_bytes(m.device_total)) : "");
  if (m.predicted) {
    const MemoryPrediction& p = *m.predicted;
    out += fmt::format("Predicted ledger peak {}, measured {} ({}); predicted during {}\n", format_bytes(p.peak_total),
                       format_bytes(l.peak_total), prediction_error(p.peak_total, l.peak_total), '"' + p.peak_phase + '"');
    if (m.nvml_used >= 0 && p.nvml_total > 0)
      out += fmt::format("Predicted NVML use {}, measured {} ({})\n", format_bytes(p.nvml_total),
                         format_bytes(m.nvml_used), prediction_error(p.nvml_total, m.nvml_used));
  }
  if (m.timeline_dropped > 0)
    out += fmt::format("Timeline: {} phase samples kept, {} dropped\n", m.timeline.size(), m.timeline_dropped);
  for (const std::string& note : m.notes) out += note + "\n";
  if (!m.peak_buffers.largest.empty()) out += "\n" + format_peak_buffers(m.peak_buffers);
  if (m.steps.size() >= 2) out += "\n" + format_step_timeline(m.steps);
  return out;
}

namespace {
std::string allocated_during(const LedgerEntry& e) {
  return e.step >= 0 ? fmt::format("{}, step {}", e.phase, e.step + 1) : e.phase;
}
std::string steps_phrase(const StepSample& s) {
  return s.first_step == s.last_step ? fmt::format("step {}", s.last_step + 1)
                                     : fmt::format("steps {}-{}", s.first_step + 1, s.last_step + 1);
}
}  // namespace

std::string format_peak_buffers(const PeakBuffers& b, size_t shown) {
  int64_t total = b.other_bytes;
  for (const LedgerEntry& e : b.largest) total += e.bytes;
  const size_t listed = std::min(shown, b.largest.size());
  int64_t other_bytes = b.other_bytes;
  int64_t other_count = b.other_count;
  for (size_t i = listed; i < b.largest.size(); ++i) {
    other_bytes += b.largest[i].bytes;
    ++other_count;
  }
  std::string out = "Largest buffers live at the peak:\n";
  out += fmt::format("  {:>10}  {:<17} {:<28} {}\n", "bytes", "category", "allocated during", "buffer");
  for (size_t i = 0; i < listed; ++i) {
    const LedgerEntry& e = b.largest[i];
    out += fmt::format("  {:>10}  {:<17} {:<28} {}\n", format_bytes(e.bytes), category_name(e.category),
                       allocated_during(e), e.name);
  }
  if (other_count > 0)
    out += fmt::format("  {:>10}  {} other buffer{}\n", format_bytes(other_bytes), other_count,
                       other_count == 1 ? "" : "s");
  out += fmt::format("  {:>10}  in all: the ledger's peak\n", format_bytes(total));
  return out;
}

std::string format_step_timeline(const std::vector<StepSample>& steps) {
  if (steps.size() < 2) return "";
  const StepSample& first = steps.front();
  const StepSample& last = steps.back();
  int64_t low = first.peak, high = first.peak;
  for (const StepSample& s : steps) {
    low = std::min(low, s.peak);
    high = std::max(high, s.peak);
  }
  const int64_t count = last.last_step - first.first_step + 1;
  std::string out = fmt::format("Over the whole run ({} steps, {} samples):\n", count, steps.size());
  const int64_t growth = last.end - first.end;
  out += fmt::format("  live at the end of {}: {}; at the end of {}: {} ({}{})\n", steps_phrase(first),
                     format_bytes(first.end), steps_phrase(last), format_bytes(last.end), growth > 0 ? "+" : "",
                     format_bytes(growth));
  out += fmt::format("  the highest point of a step: from {} to {}\n", format_bytes(low), format_bytes(high));
  if (growth > 0) {
    // The categories that grew, largest first.
    std::vector<std::pair<int64_t, size_t>> grown;
    for (size_t c = 0; c < kCategoryCount; ++c)
      if (last.end_live[c] > first.end_live[c]) grown.emplace_back(last.end_live[c] - first.end_live[c], c);
    std::sort(grown.rbegin(), grown.rend());
    std::string which;
    for (const auto& [bytes, c] : grown)
      which += fmt::format("{}{} +{}", which.empty() ? "" : ", ", category_name(static_cast<Category>(c)),
                           format_bytes(bytes));
    out += fmt::format("  memory held between steps grew over the run: {}\n", which);
  }
  return out;
}

nlohmann::ordered_json step_timeline_json(const std::vector<StepSample>& steps) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const StepSample& s : steps)
    out.push_back({{"first_step", s.first_step}, {"last_step", s.last_step}, {"peak", s.peak}, {"end", s.end},
                   {"reserved", s.reserved}, {"end_live", by_category(s.end_live)}});
  return out;
}

nlohmann::ordered_json peak_buffers_json(const PeakBuffers& b) {
  nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
  int64_t total = b.other_bytes;
  for (const LedgerEntry& e : b.largest) {
    buffers.push_back({{"name", e.name}, {"category", category_name(e.category)}, {"bytes", e.bytes},
                       {"phase", e.phase}, {"step", e.step}});
    total += e.bytes;
  }
  return {{"buffers", buffers},
          {"other_count", b.other_count},
          {"other_bytes", b.other_bytes},
          {"other_by_category", by_category(b.other_by_category)},
          {"total", total}};
}

nlohmann::ordered_json ledger_json(const LedgerSnapshot& l) {
  return {{"live", by_category(l.live)},
          {"peak", by_category(l.peak)},
          {"at_peak", by_category(l.at_peak)},
          {"live_total", l.live_total},
          {"peak_total", l.peak_total},
          {"peak_phase", l.peak_phase},
          {"peak_step", l.peak_step},
          {"reserved", l.reserved},
          {"reserved_peak", l.reserved_peak},
          {"reserved_at_peak", l.reserved_at_peak},
          {"allocations", l.allocations}};
}

nlohmann::ordered_json timeline_json(const std::vector<PhaseSample>& timeline) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PhaseSample& s : timeline)
    out.push_back({{"phase", s.phase}, {"step", s.step}, {"total", s.total}, {"reserved", s.reserved},
                   {"live", by_category(s.live)}});
  return out;
}

std::string memory_anatomy_json(const MemoryAnatomy& m) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["device"] = m.device;
  j["device_name"] = m.device_name;
  j["device_total"] = m.device_total;
  if (!m.model.empty()) {
    j["model"] = ordered_json::object();
    for (const auto& [name, value] : m.model) j["model"][name] = value;
  }

  j["rows"] = ordered_json::array();
  for (const MemoryRow& r : memory_rows(m))
    j["rows"].push_back({{"key", r.key}, {"label", r.label}, {"at_peak", r.at_peak}, {"peak", r.peak},
                         {"predicted", r.predicted}});

  j["ledger"] = ledger_json(m.ledger);
  j["timeline"] = timeline_json(m.timeline);
  j["timeline_dropped"] = m.timeline_dropped;
  j["peak_buffers"] = peak_buffers_json(m.peak_buffers);
  j["step_timeline"] = step_timeline_json(m.steps);
  j["context_bytes"] = m.context_bytes;
  j["nvml_used"] = m.nvml_used;
  j["engine_options"] = ordered_json::object();
  for (const auto& [name, value] : m.engine_options) j["engine_options"][name] = value;
  if (!m.notes.empty()) j["notes"] = m.notes;

  if (m.predicted) {
    const MemoryPrediction& p = *m.predicted;
    j["predicted"] = {{"at_peak", by_category(p.at_peak)}, {"peak_total", p.peak_total},
                      {"peak_phase", p.peak_phase},        {"reserved_peak", p.reserved_peak},
                      {"context_bytes", p.context_bytes},  {"nvml_total", p.nvml_total}};
  } else {
    j["predicted"] = nullptr;
  }
  // Phase names are the program's, but invalid UTF-8 must not make the dump throw.
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace anatomy
