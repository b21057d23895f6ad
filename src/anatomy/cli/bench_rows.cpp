// bench_rows.cpp: the rows of `anatomy bench`, as `anatomy train` flags and as
// Hugging Face TrainingArguments, and the relative columns.
#include <algorithm>

#include <fmt/format.h>

#include "anatomy/cli/bench.h"

namespace anatomy::cli {

namespace {

std::string optim_label(const std::string& optim) {
  if (optim == "adafactor") return "Adafactor";
  if (optim == "adamw_8bit") return "8-bit AdamW";
  return "AdamW";
}

BenchRow make_row(std::string name, int64_t batch, int64_t accumulation, bool checkpointing, std::string precision,
                  std::string optim) {
  BenchRow r;
  r.name = std::move(name);
  r.batch = batch;
  r.accumulation = accumulation;
  r.checkpointing = checkpointing;
  r.precision = std::move(precision);
  r.optim = std::move(optim);
  return r;
}

}  // namespace

std::string BenchRow::description() const {
  std::vector<std::string> parts{fmt::format("batch {}", batch)};
  if (accumulation > 1) parts.push_back(fmt::format("accumulation {}", accumulation));
  if (checkpointing) parts.push_back("checkpointing");
  if (!precision.empty()) parts.push_back(precision);
  // The combinations name their optimizer, AdamW too; a single technique needs not.
  const bool combination = accumulation > 1 && checkpointing && !precision.empty();
  if (optim != "adamw" || combination) parts.push_back(optim_label(optim));
  return fmt::format("{}", fmt::join(parts, " + "));
}

std::vector<std::string> BenchRow::train_flags() const {
  std::vector<std::string> f{"--per-device-train-batch-size", std::to_string(batch)};
  if (accumulation > 1) f.insert(f.end(), {"--gradient-accumulation-steps", std::to_string(accumulation)});
  if (checkpointing) f.push_back("--gradient-checkpointing");
  if (!precision.empty()) f.push_back("--" + precision);
  if (optim != "adamw") f.insert(f.end(), {"--optim", optim});
  return f;
}

nlohmann::json BenchRow::hf_arguments() const {
  nlohmann::json a = nlohmann::json::object();
  a["per_device_train_batch_size"] = batch;
  a["gradient_accumulation_steps"] = accumulation;
  if (checkpointing) a["gradient_checkpointing"] = true;
  if (!precision.empty()) a[precision] = true;  // fp16, bf16 and tf32 are TrainingArguments' names
  a["optim"] = optim == "adafactor" ? "adafactor" : optim == "adamw_8bit" ? "adamw_bnb_8bit" : "adamw_torch";
  return a;
}

const std::vector<BenchRow>& default_bench_rows() {
  static const std::vector<BenchRow> rows = {
      make_row("vanilla", 4, 1, false, "", "adamw"),
      make_row("accum", 1, 4, false, "", "adamw"),
      make_row("accum-ckpt", 1, 4, true, "", "adamw"),
      make_row("fp16", 4, 1, false, "fp16", "adamw"),
      make_row("bf16", 4, 1, false, "bf16", "adamw"),
      make_row("tf32", 4, 1, false, "tf32", "adamw"),
      make_row("adafactor", 4, 1, false, "", "adafactor"),
      make_row("adamw-8bit", 4, 1, false, "", "adamw_8bit"),
      make_row("accum-ckpt-fp16", 1, 4, true, "fp16", "adamw"),
      make_row("accum-ckpt-fp16-adafactor", 1, 4, true, "fp16", "adafactor"),
      make_row("accum-ckpt-fp16-adamw-8bit", 1, 4, true, "fp16", "adamw_8bit"),
  };
  return rows;
}

std::string bench_row_names() {
  std::vector<std::string> names;
  for (const BenchRow& r : default_bench_rows()) names.push_back(r.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string status_name(RowStatus status) {
  switch (status) {
    case RowStatus::Ok: return "ok";
    case RowStatus::OutOfMemory: return "oom";
    case RowStatus::Failed: return "failed";
    case RowStatus::NotApplicable: return "n/a";
    case RowStatus::Pending: break;
  }
  return "pending";
}

double RowResult::memory_mb() const {
  if (device != "cpu") return static_cast<double>(gpu_memory_occupied_mb);
  return ledger_peak_bytes < 0 ? -1.0 : static_cast<double>(ledger_peak_bytes) / (1024.0 * 1024.0);
}

int64_t RowResult::category(const std::string& key) const {
  if (key == "weights_all") {
    const int64_t a = category("weights"), b = category("weights_half");
    return a < 0 ? -1 : a + std::max<int64_t>(b, 0);
  }
  for (const CategoryBytes& c : at_peak)
    if (c.key == key) return c.bytes;
  return -1;
}

const RowResult* reference_row(const std::vector<RowResult>& rows, const BenchSetup& setup) {
  for (const RowResult& r : rows)
    if (r.row.name == setup.reference) return r.status == RowStatus::Ok ? &r : nullptr;
  return nullptr;
}

double relative_speed(const RowResult& r, const RowResult* reference) {
  if (!reference || r.status != RowStatus::Ok || reference->samples_per_second <= 0.0) return -1.0;
  return r.samples_per_second / reference->samples_per_second;
}

double relative_memory(const RowResult& r, const RowResult* reference) {
  if (!reference || r.status != RowStatus::Ok) return -1.0;
  const double ours = r.memory_mb(), theirs = reference->memory_mb();
  return ours < 0.0 || theirs <= 0.0 ? -1.0 : ours / theirs;
}

}  // namespace anatomy::cli
