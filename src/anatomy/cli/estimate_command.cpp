// estimate_command.cpp: `anatomy estimate`: the memory plan of `anatomy train`
// with the same flags, on this machine's GPU or on a named one, without
// allocating anything on a device.
#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "anatomy/analysis/estimate.h"
#include "anatomy/cli/commands.h"
#include "anatomy/model/registry.h"
#include "anatomy/cli/training_flags.h"
#include "anatomy/gpu/catalog.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/io/files.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/training_data.h"

namespace anatomy::cli {

namespace {

struct EstimateFlags {
  TrainFlags train;
  std::string gpu;
  std::string gpu_memory;
  std::string context_memory;
  std::string nccl_memory;
  int nproc = 1;
  std::string plan_json;
  bool json = false;
};

// The data's shape from the flags, without generating dummy data.
// Text data is read and tokenized as `train` does it, which sets the model's labels and a preset's vocabulary.
DataShape shape_from_flags(const TrainingArguments& args, ModelSource& source) {
  if (!args.train_file.empty()) {
    const TrainingData data = load_training_data(args, source);
    return DataShape::of(data.train, data.eval ? &*data.eval : nullptr);
  }
  const ModelConfig& config = source.config;
  std::optional<Dataset> eval;
  if (!args.validation_file.empty()) {
    if (is_text_data_file(args.validation_file))
      fail("--validation-file {}: text validation data needs a text --train-file (its labels name the classes)",
           args.validation_file);
    eval = load_tensor_dataset(args.validation_file);
  }
  DataShape s;
  if (eval) {  // the validation set's part of the shape
    const DataShape e = DataShape::of(*eval, &*eval);
    s.eval_size = e.eval_size;
    s.eval_seq_len = e.eval_seq_len;
    s.eval_token_type_ids = e.eval_token_type_ids;
    s.eval_attention_mask = e.eval_attention_mask;
  }
  s.size = args.dummy_size;
  s.seq_len = args.dummy_seq_len;
  s.label_width = 1;
  if (model_task(config) == kTokenClassification || model_task(config) == kMaskedLm) {
    // the dummy data's: 0 for every token; masked-LM's plan, every token masked (its most)
    s.token_labels = true;
    s.label_width = s.seq_len;
  }
  if (model_task(config) == kMultipleChoice) {  // the dummy data's: 4 choices an example, label 0
    s.choices = kDummyChoices;
    s.seq_len *= kDummyChoices;
  }
  if (model_task(config) == kQuestionAnswering) {  // the dummy data's: start and end 0
    s.span_labels = true;
    s.label_width = 2;
  }
  s.label_dtype = config.num_labels == 1 && model_task(config) != kMaskedLm ? DType::F32 : DType::I64;
  if (s.seq_len / std::max<int64_t>(s.choices, 1) > config.max_sequence_length())
    fail("--dummy-seq-len {}: longer than the model's {}", s.seq_len,
         max_sequence_length_text(config));
  return s;
}

int run_estimate(const EstimateFlags& flags, const CLI::App& app) {
  const EngineOptions options = resolve_engine_options(flags.train.engine);
  TrainingArguments args = resolve_training_flags(flags.train, app);
  ModelSource source = resolve_model(args.model, /*need_weights=*/false);  // the plan needs no weights
  if (!args.task.empty()) set_model_task(source.config, args.task);
  EstimateRequest r;
  r.options = options;
  r.shape = shape_from_flags(args, source);
  r.config = source.config;
  r.model_name = source.preset.empty() ? source.directory : source.preset;
  r.args = args;
  r.fp32_products = fp32_products_of(flags.train);
  r.nproc = flags.nproc;
  if (args.zero_stage > 0 && flags.nproc < 2)
    fail("--zero-stage {}: shards over several ranks; give --nproc N (N >= 2)", args.zero_stage);
  r.gpu = flags.train.device != "cpu";
  if (!r.gpu && (args.bf16 || args.fp16))
    fail("--{}: mixed precision runs on the GPU; drop --device cpu", args.bf16 ? "bf16" : "fp16");
  if (!r.gpu && (!flags.gpu.empty() || !flags.gpu_memory.empty() || !flags.nccl_memory.empty()))
    fail("--device cpu: --gpu, --gpu-memory and --nccl-memory describe GPUs");

  const gpu::GpuSpec* spec = nullptr;
  if (!flags.gpu.empty()) {
    spec = gpu::find_gpu(flags.gpu);
    if (!spec) {
      std::string known;
      for (const gpu::GpuSpec& g : gpu::known_gpus()) known += (known.empty() ? "" : ", ") + g.key;
      fail("--gpu {}: unknown GPU (known: {}; or give --gpu-memory SIZE)", flags.gpu, known);
    }
  }
  if (r.gpu) {
    const gpu::Nvml& nvml = gpu::Nvml::instance();
    const bool here = flags.gpu.empty() && flags.gpu_memory.empty() && nvml.available() && nvml.device_count() > 0;
    if (here) {  // this machine's GPU, as it is now
      const int index = nvml_index_of(0);  // CUDA device 0, the one `anatomy train` takes
      r.device_name = nvml.device_name(index).value_or("GPU 0");
      if (const auto m = nvml.memory(index)) {
        r.device_total = static_cast<int64_t>(m->total);
        r.other_processes = static_cast<int64_t>(m->used);
      }
      spec = gpu::find_gpu(r.device_name);
    } else if (spec) {
      r.device_name = spec->name;
      r.device_total = spec->total_bytes;
      r.other_processes = spec->reserved_bytes;  // the driver's share of an idle device, as NVML counts it
    }
    if (!flags.gpu_memory.empty()) {
      r.device_total = gpu::parse_byte_size(flags.gpu_memory, "--gpu-memory");
      if (r.device_total <= 0) fail("--gpu-memory {}: must be positive", flags.gpu_memory);
      if (!spec) r.device_name = fmt::format("a GPU of {}", format_bytes(r.device_total));
    }
    if (spec) {
      r.context_bytes = spec->context_bytes;
      r.context_source = spec->context_source;
      // The Hopper attention kernels run on compute capability 9.0 (H100, H200).
      r.hopper_attention = spec->compute_capability_major == 9 && spec->compute_capability_minor == 0;
    } else {
      r.context_bytes = gpu::default_context_bytes();
      r.context_source = "a typical figure; give --context-memory to change it";
    }
    if (!flags.context_memory.empty()) {
      r.context_bytes = gpu::parse_byte_size(flags.context_memory, "--context-memory");
      r.context_source = "from --context-memory";
    }
    if (flags.nproc > 1) {
      r.nccl_bytes = gpu::default_nccl_bytes();
      r.nccl_source = gpu::kDefaultNcclSource;
      if (!flags.nccl_memory.empty()) {
        r.nccl_bytes = gpu::parse_byte_size(flags.nccl_memory, "--nccl-memory");
        r.nccl_source = "from --nccl-memory";
      }
    } else if (!flags.nccl_memory.empty()) {
      fail("--nccl-memory {}: NCCL runs between several ranks; give --nproc N (N >= 2)", flags.nccl_memory);
    }
    if (r.device_name.empty()) r.device_name = "a GPU (give --gpu or --gpu-memory to ask whether it fits)";
  } else {
    r.device_name = "the CPU";
  }
  if (flags.train.auto_find_batch_size) {
    // The batch `anatomy train --auto-find-batch-size` would take on this device, and the plan at it.
    const int64_t batch = estimate_auto_batch(r);
    if (batch < 0)
      fail("--auto-find-batch-size: the estimate needs the GPU's memory (--gpu NAME or --gpu-memory SIZE, or a GPU "
           "on this machine)");
    if (batch == 0) fail("--auto-find-batch-size: not even a batch of 1 fits {}", r.device_name);
    if (batch < r.args.per_device_train_batch_size)
      fmt::print(flags.json ? stderr : stdout, "--auto-find-batch-size: batch {} does not fit; using {}\n",
                 r.args.per_device_train_batch_size, batch);
    r.args.per_device_train_batch_size = batch;
  }
  const Estimate e = estimate_training(r);
  if (flags.json)
    fmt::print("{}", estimate_json(r, e));
  else
    fmt::print("{}", format_estimate(r, e));
  if (!flags.plan_json.empty()) io::write_text_file_atomic(flags.plan_json, estimate_json(r, e));
  return 0;
}

}  // namespace

Command add_estimate_command(CLI::App& app) {
  auto flags = std::make_shared<EstimateFlags>();
  add_training_flags(app, flags->train);
  app.add_option("--plan-json", flags->plan_json,
                 "Also write the whole plan as JSON to this file: every phase's bytes by category, the peaks, "
                 "the batch search");
  app.add_flag("--json", flags->json,
               "Print the plan as JSON instead of the table: the same figures, in bytes (the Python package's "
               "anatomy.estimate() reads it)");
  app.add_option("--gpu", flags->gpu, "A GPU by name: v100-16gb, t4, a100-40gb, a100-80gb, h100-80gb, h200, ... "
                                      "(default: this machine's GPU)");
  app.add_option("--gpu-memory", flags->gpu_memory, "The GPU's memory, e.g. 16GiB or 24GB (instead of --gpu)");
  app.add_option("--context-memory", flags->context_memory,
                 "The CUDA context and kernels' memory to assume, e.g. 500MiB (default: the GPU's known figure)");
  app.add_option("--nccl-memory", flags->nccl_memory,
                 fmt::format("NCCL's own buffers per GPU to assume with --nproc N >= 2, e.g. 600MiB (default: {}, "
                             "measured on two H100s; a run prints its own)",
                             format_bytes(gpu::default_nccl_bytes())));
  app.add_option("--nproc", flags->nproc, "Data-parallel ranks (GPUs) to plan for, with --zero-stage; the plan is "
                                          "per GPU")
      ->capture_default_str()->check(CLI::Range(1, 65536));
  return [flags, &app]() -> int { return run_estimate(*flags, app); };
}

}  // namespace anatomy::cli
