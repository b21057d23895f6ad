// bench_report.cpp: `anatomy bench`'s table as Markdown (bench.md and the
// terminal) and every figure as JSON (bench.json).
#include <fmt/format.h>

#include "anatomy/cli/bench.h"

namespace anatomy::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The anatomy's rows that get a column of their own; the rest add up to "other".
const std::vector<std::pair<std::string, std::string>> kCategoryColumns = {
    {"weights_all", "weights"},       {"optimizer_states", "optimizer"}, {"gradients", "gradients"},
    {"activations", "activations"},   {"temporary", "temporary"},        {"context", "context"}};
const std::vector<std::string> kOtherKeys = {"functionality", "data",      "workspace",
                                             "communication", "pool_free", "unattributed"};

bool on_cpu(const BenchSetup& setup) { return setup.device == "cpu"; }

std::string fixed(double value, int decimals) {
  return value < 0.0 ? "-" : fmt::format("{:.{}f}", value, decimals);
}

std::string mib(int64_t bytes) { return bytes < 0 ? "-" : fmt::format("{:.1f}", static_cast<double>(bytes) / kMiB); }

// functionality + data + workspaces + communication + free in the pool + unattributed: -1 when none is known.
int64_t other_bytes(const RowResult& r) {
  int64_t sum = 0;
  bool known = false;
  for (const std::string& key : kOtherKeys) {
    const int64_t b = r.category(key);
    const bool device_row = key == "pool_free" || key == "unattributed";
    if (b < 0 && (!device_row || r.nvml_process_bytes < 0)) continue;  // unknown, not a negative remainder
    sum += b;
    known = true;
  }
  return known ? sum : -1;
}

// What a row that did not run shows in its first figure's cell.
std::string status_cell(const RowResult& r) {
  switch (r.status) {
    case RowStatus::OutOfMemory: return "OOM";
    case RowStatus::Failed: return fmt::format("failed (exit {})", r.exit_code);
    case RowStatus::NotApplicable: return "n/a" + (r.reason.empty() ? "" : " (" + r.reason + ")");
    case RowStatus::Pending: return "not run yet";
    case RowStatus::Ok: break;
  }
  return "";
}

std::string hf_status_cell(const HfResult& h) {
  switch (h.status) {
    case RowStatus::OutOfMemory: return "OOM";
    case RowStatus::Failed: return fmt::format("failed (exit {})", h.exit_code);
    case RowStatus::NotApplicable: return "n/a" + (h.reason.empty() ? "" : " (" + h.reason + ")");
    case RowStatus::Pending: return "not run";
    case RowStatus::Ok: break;
  }
  return "";
}

// A Markdown cell may not hold a bare "|".
std::string cell(std::string text) {
  for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2)) text.replace(at, 1, "\\|");
  return text;
}

std::string heading(const BenchSetup& setup) {
  std::string length = setup.max_steps > 0 ? fmt::format("{} steps", setup.max_steps) : "one epoch";
  std::string where = on_cpu(setup) ? "the CPU" : (setup.gpu_name.empty() ? "the GPU" : setup.gpu_name);
  std::string out = fmt::format("{}, {} dummy sequences of {} tokens, {}, on {}.", setup.model, setup.dummy_size,
                                setup.dummy_seq_len, length, where);
  if (!setup.passthrough.empty()) out += fmt::format(" Every row also has `{}`.", fmt::join(setup.passthrough, " "));
  if (setup.warm_up_steps > 0)
    out += fmt::format(" Each run came after an unmeasured run of {} step{} with the same flags.",
                       setup.warm_up_steps, setup.warm_up_steps == 1 ? "" : "s");
  return out;
}

double ratio(double ours, double theirs) { return ours < 0.0 || theirs <= 0.0 ? -1.0 : ours / theirs; }

std::string hf_table(const std::vector<RowResult>& rows, const BenchSetup& setup) {
  const bool cpu = on_cpu(setup);
  const char* measure = cpu ? "peak RSS MB" : "peak NVML MB";
  std::string out = "\n## anatomy beside Hugging Face Trainer\n\n";
  out += fmt::format("| row | anatomy samples/s | HF samples/s | speed ours/HF | anatomy {0} | HF {0} | "
                     "memory ours/HF |\n",
                     measure);
  out += "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const RowResult& r : rows) {
    if (!r.hf_run) continue;
    const bool ours_ok = r.status == RowStatus::Ok;
    const bool theirs_ok = r.hf.status == RowStatus::Ok;
    const double ours_mb = ours_ok ? static_cast<double>(r.comparison_mb()) : -1.0;
    const double theirs_mb = theirs_ok ? static_cast<double>(r.hf.peak_mb) : -1.0;
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", r.row.name,
                       ours_ok ? fixed(r.samples_per_second, 2) : cell(status_cell(r)),
                       theirs_ok ? fixed(r.hf.samples_per_second, 2) : cell(hf_status_cell(r.hf)),
                       fixed(ratio(ours_ok ? r.samples_per_second : -1.0, theirs_ok ? r.hf.samples_per_second : -1.0), 2),
                       fixed(ours_mb, 0), fixed(theirs_mb, 0), fixed(ratio(ours_mb, theirs_mb), 2));
  }
  out += cpu ? "\nPeak RSS MB: the most resident memory each run's process held (the kernel's peak RSS). "
             : "\nPeak NVML MB: the most memory used on the GPU (NVML, as nvidia-smi shows it: every process, the "
               "driver's reserve included) while the run's process lived, polled by the bench every 100 ms. ";
  out += "Hugging Face runs bench/hf_trainer.py on the same settings (random initialisation, the seed's dummy data)";
  out += setup.hf_versions.empty() ? ".\n" : fmt::format(": {}.\n", setup.hf_versions);
  return out;
}

nlohmann::ordered_json number_or_null(double value) {
  return value < 0.0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(value);
}
nlohmann::ordered_json number_or_null(int64_t value) {
  return value < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(value);
}

}  // namespace

std::string bench_markdown(const std::vector<RowResult>& rows, const BenchSetup& setup) {
  const RowResult* reference = reference_row(rows, setup);
  const bool cpu = on_cpu(setup);
  std::string out = fmt::format("# anatomy bench\n\n{}\n\n", heading(setup));
  out += fmt::format("| row | settings | time (s) | samples/s | {} |", cpu ? "ledger peak (MB)" : "GPU memory occupied (MB)");
  for (const auto& [key, label] : kCategoryColumns) out += " " + label + " |";
  out += fmt::format(" other | speed vs {0} | memory vs {0} |\n", setup.reference);
  out += "| --- | --- | ---: | ---: | ---: |";
  for (size_t i = 0; i < kCategoryColumns.size(); ++i) out += " ---: |";
  out += " ---: | ---: | ---: |\n";
  for (const RowResult& r : rows) {
    out += fmt::format("| {} | {} |", r.row.name, r.row.description());
    if (r.status != RowStatus::Ok) {
      out += fmt::format(" {} |", cell(status_cell(r)));
      for (size_t i = 0; i < kCategoryColumns.size() + 5; ++i) out += " - |";
      out += "\n";
      continue;
    }
    out += fmt::format(" {} | {} | {} |", fixed(r.seconds, 2), fixed(r.samples_per_second, 2),
                       fixed(r.memory_mb(), cpu ? 1 : 0));
    for (const auto& [key, label] : kCategoryColumns) out += fmt::format(" {} |", mib(r.category(key)));
    out += fmt::format(" {} | {} | {} |\n", mib(other_bytes(r)), fixed(relative_speed(r, reference), 2),
                       fixed(relative_memory(r, reference), 2));
  }
  out += "\n";
  out += cpu ? "A CPU run has no GPU memory: the memory column is the ledger's peak (MiB), every buffer the engine "
               "allocated. "
             : "GPU memory occupied: the seed's figure after training (NVML's memory used on the device, in MiB, "
               "the driver's reserve included). ";
  out += "Weights to other: MiB at the ledger's peak by category (each row's anatomy.json; weights include the "
         "half-precision copy; context is the CUDA context and kernels; other is functionality-specific memory, "
         "data, library workspaces, communication, free inside the pool and unattributed). ";
  out += fmt::format("Speed and memory: samples/s and {} relative to the {} row.\n",
                     cpu ? "ledger peak" : "GPU memory occupied", setup.reference);
  if (!reference)
    out += fmt::format("The {} row has no figures, so the relative columns are empty.\n", setup.reference);
  for (const RowResult& r : rows)
    if (r.status == RowStatus::Failed || r.status == RowStatus::OutOfMemory)
      out += fmt::format("\n- {}: {}{}", r.row.name,
                         r.status == RowStatus::OutOfMemory ? "out of memory" : fmt::format("exit code {}", r.exit_code),
                         r.reason.empty() ? "" : ": " + r.reason);
  if (out.back() != '\n') out += "\n";
  if (setup.with_hf) out += hf_table(rows, setup);
  return out;
}

std::string bench_json(const std::vector<RowResult>& rows, const BenchSetup& setup) {
  using nlohmann::ordered_json;
  const RowResult* reference = reference_row(rows, setup);
  ordered_json j;
  j["setup"] = {{"model", setup.model},
                {"dummy_size", setup.dummy_size},
                {"dummy_seq_len", setup.dummy_seq_len},
                {"max_steps", setup.max_steps},
                {"warm_up_steps", setup.warm_up_steps},
                {"device", setup.device},
                {"gpu_name", setup.gpu_name},
                {"passthrough", setup.passthrough},
                {"with_hf", setup.with_hf},
                {"hf_versions", setup.hf_versions}};
  j["reference"] = setup.reference;
  j["memory_measure"] = on_cpu(setup) ? "ledger_peak_mb" : "gpu_memory_occupied_mb";
  j["rows"] = ordered_json::array();
  for (const RowResult& r : rows) {
    const bool ok = r.status == RowStatus::Ok;
    ordered_json row;
    row["name"] = r.row.name;
    row["settings"] = r.row.description();
    row["train_flags"] = r.row.train_flags();
    row["status"] = status_name(r.status);
    row["exit_code"] = r.exit_code;
    row["reason"] = r.reason;
    row["output_dir"] = r.output_dir;
    row["command"] = r.command;
    row["wall_s"] = r.wall_seconds;
    row["time_s"] = ok ? ordered_json(r.seconds) : ordered_json(nullptr);
    row["samples_per_second"] = ok ? ordered_json(r.samples_per_second) : ordered_json(nullptr);
    row["steps"] = ok ? ordered_json(r.steps) : ordered_json(nullptr);
    row["final_loss"] = ok ? ordered_json(r.final_loss) : ordered_json(nullptr);
    row["log_samples_per_second"] = ok ? ordered_json(r.log_samples_per_second) : ordered_json(nullptr);
    row["memory_mb"] = ok ? number_or_null(r.memory_mb()) : ordered_json(nullptr);
    row["gpu_memory_occupied_mb"] = number_or_null(r.gpu_memory_occupied_mb);
    row["nvml_peak_mb"] = number_or_null(r.nvml_peak_mb);
    row["nvml_process_bytes"] = number_or_null(r.nvml_process_bytes);
    row["cpu_peak_rss_mb"] = number_or_null(r.cpu_peak_rss_mb);
    row["ledger_peak_bytes"] = number_or_null(r.ledger_peak_bytes);
    row["peak_phase"] = r.peak_phase;
    ordered_json at_peak = ordered_json::object();
    for (const CategoryBytes& c : r.at_peak) at_peak[c.key] = c.bytes;
    row["at_peak_bytes"] = at_peak;
    row["relative_speed"] = number_or_null(relative_speed(r, reference));
    row["relative_memory"] = number_or_null(relative_memory(r, reference));
    if (r.hf_run) {
      const HfResult& h = r.hf;
      const bool hf_ok = h.status == RowStatus::Ok;
      const double ours_mb = ok ? static_cast<double>(r.comparison_mb()) : -1.0;
      const double theirs_mb = hf_ok ? static_cast<double>(h.peak_mb) : -1.0;
      row["hf"] = {{"status", status_name(h.status)},
                   {"reason", h.reason},
                   {"exit_code", h.exit_code},
                   {"time_s", hf_ok ? ordered_json(h.seconds) : ordered_json(nullptr)},
                   {"samples_per_second", hf_ok ? ordered_json(h.samples_per_second) : ordered_json(nullptr)},
                   {on_cpu(setup) ? "peak_rss_mb" : "nvml_peak_mb", number_or_null(h.peak_mb)},
                   {"speed_ratio", number_or_null(ratio(ok ? r.samples_per_second : -1.0,
                                                        hf_ok ? h.samples_per_second : -1.0))},
                   {"memory_ratio", number_or_null(ratio(ours_mb, theirs_mb))},
                   {"result", h.raw}};
    } else {
      row["hf"] = nullptr;
    }
    j["rows"].push_back(row);
  }
  return j.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace anatomy::cli
