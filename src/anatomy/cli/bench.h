// bench.h: `anatomy bench`, the seeds' table of efficient-training techniques
// measured: the rows of the sweep (each one `anatomy train` run in a process of
// its own), what each row measured, and the reports drawn from them (Markdown,
// JSON, an SVG chart of speed against memory).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace anatomy::cli {

// One configuration of the sweep: Hugging Face's documented table
// (perf_train_gpu_one) has the same rows.
struct BenchRow {
  std::string name;           // what --rows takes: "vanilla", "accum-ckpt-fp16", ...
  int64_t batch = 4;          // --per-device-train-batch-size
  int64_t accumulation = 1;   // --gradient-accumulation-steps
  bool checkpointing = false; // --gradient-checkpointing
  std::string precision;      // "", "fp16", "bf16" or "tf32"
  std::string optim = "adamw";  // adamw, adafactor or adamw_8bit

  // "batch 1 + accumulation 4 + checkpointing + fp16 + Adafactor"
  std::string description() const;
  // The row's flags for `anatomy train`.
  std::vector<std::string> train_flags() const;
  // The same settings as Hugging Face TrainingArguments overrides.
  nlohmann::json hf_arguments() const;
  // Mixed precision and TF32 exist on the GPU only.
  bool needs_gpu() const { return !precision.empty(); }
};

// vanilla batch 4; batch 1 + accumulation 4; + checkpointing; fp16; bf16;
// tf32; Adafactor; 8-bit AdamW; accumulation + checkpointing + fp16 with each
// optimizer.
const std::vector<BenchRow>& default_bench_rows();
// "vanilla, accum, ..." for messages.
std::string bench_row_names();

enum class RowStatus { Pending, Ok, OutOfMemory, Failed, NotApplicable };
// "ok", "oom", "failed", "n/a", "pending": bench.json's spelling.
std::string status_name(RowStatus status);

// Hugging Face Trainer on the same row (bench/hf_trainer.py's result line).
struct HfResult {
  RowStatus status = RowStatus::Pending;
  std::string reason;              // n/a or failure: why
  int exit_code = 0;
  double seconds = 0.0;            // train_runtime
  double samples_per_second = 0.0; // train_samples_per_second
  // GPU: the peak of NVML's device memory used while it ran (MiB), polled by
  // the bench; CPU: its peak resident memory (MiB), as it reports it.
  int64_t peak_mb = -1;
  nlohmann::ordered_json raw;      // the whole result line
};

// One category of the anatomy at the ledger's peak (anatomy.json's rows).
struct CategoryBytes {
  std::string key;    // weights, weights_half, optimizer_states, ..., context, pool_free, unattributed
  int64_t bytes = -1; // -1: unknown
};

struct RowResult {
  BenchRow row;
  RowStatus status = RowStatus::Pending;
  std::string reason;              // n/a: why; failed: the child's error line; oom: its first line
  int exit_code = 0;               // the child's (-signal when killed)
  std::string output_dir;          // <out>/rows/<name>
  std::vector<std::string> command;  // the child's argv
  double wall_seconds = 0.0;       // the child's whole life, start-up and saving included

  // From the child's summary lines (the seed's Time and Samples/second).
  double seconds = 0.0;
  double samples_per_second = 0.0;
  int64_t gpu_memory_occupied_mb = -1;  // the seed's "GPU memory occupied: N MB." after training (GPU only)
  int64_t cpu_peak_rss_mb = -1;         // "CPU memory occupied (peak RSS)" (CPU only)
  int64_t nvml_peak_mb = -1;       // peak of NVML's device memory used while the child ran (MiB), polled by the bench
  // From log.jsonl's last training record.
  int64_t steps = 0;
  double final_loss = 0.0;
  double log_samples_per_second = 0.0;
  // From anatomy.json.
  std::vector<CategoryBytes> at_peak;  // every row of the anatomy at the ledger's peak
  int64_t ledger_peak_bytes = -1;
  std::string peak_phase;
  int64_t nvml_process_bytes = -1; // NVML: the child's own use at the end
  std::string device;              // "cuda:0" or "cpu"
  std::string device_name;

  HfResult hf;
  bool hf_run = false;             // --with-hf ran (or marked) this row

  // The table's memory figure: GPU memory occupied on a GPU, the ledger's peak (MiB) on the CPU.
  double memory_mb() const;
  // The figure beside Hugging Face's: NVML's peak on a GPU, the peak RSS on the CPU (MiB; -1 unknown).
  int64_t comparison_mb() const { return device == "cpu" ? cpu_peak_rss_mb : nvml_peak_mb; }
  // Bytes of one anatomy row (-1: unknown), the weights' two rows summed by "weights_all".
  int64_t category(const std::string& key) const;
};

// What the sweep was, for the reports' headings.
struct BenchSetup {
  std::string model;
  int64_t dummy_size = 0;
  int64_t dummy_seq_len = 0;
  int64_t max_steps = -1;
  int64_t warm_up_steps = 0;      // unmeasured steps before each row's run (and Trainer's)
  std::string device;             // "cuda" or "cpu": the children's --device
  std::string gpu_name;           // NVML's, "" on the CPU
  std::vector<std::string> passthrough;
  bool with_hf = false;
  std::string hf_versions;        // "torch 2.4.0, transformers 4.44.0, bitsandbytes absent"
  std::string reference;          // the row the relative columns divide by
};

// Speed and memory relative to the reference row; < 0 when either is unknown.
double relative_speed(const RowResult& r, const RowResult* reference);
double relative_memory(const RowResult& r, const RowResult* reference);
// The reference row among `rows` (setup.reference), or null when it did not run.
const RowResult* reference_row(const std::vector<RowResult>& rows, const BenchSetup& setup);

// bench.md: the table (and, with --with-hf, ours beside Hugging Face's).
std::string bench_markdown(const std::vector<RowResult>& rows, const BenchSetup& setup);
// bench.json: every figure of every row.
std::string bench_json(const std::vector<RowResult>& rows, const BenchSetup& setup);
// bench.svg: samples/s against memory, one labelled point per row (and per
// Hugging Face row), self-contained SVG.
std::string bench_chart_svg(const std::vector<RowResult>& rows, const BenchSetup& setup);

}  // namespace anatomy::cli
