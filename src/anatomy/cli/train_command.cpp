// train_command.cpp: `anatomy train`. With no flags it runs the seed
// experiment (bert-large-uncased, dummy 512 x 512, batch 4, one epoch); on a
// machine without a GPU it runs the same experiment scaled to the CPU.
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "anatomy/anatomy/profile.h"
#include "anatomy/cli/commands.h"
#include "anatomy/cli/report.h"
#include "anatomy/data/dataset.h"
#include "anatomy/gpu/facts.h"
#include "anatomy/gpu/host_memory.h"
#include "anatomy/io/files.h"
#include "anatomy/kernels/profiling.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"

namespace anatomy::cli {

namespace {

// What the seed experiment becomes on a CPU: small enough to end in a minute or two.
constexpr const char* kCpuModel = "bert-mini";
constexpr int64_t kCpuDummySize = 128;
constexpr int64_t kCpuDummySeqLen = 128;

struct TrainFlags {
  TrainingArguments args;
  int64_t profile_steps = 0;
  int64_t profile_warmup = 3;
  std::string scheduler = "linear";
  std::string device = "auto";
  bool no_shuffle = false;
  bool no_progress = false;
  bool tf32 = false;
};


}  // namespace

// The profiled window: `count` steps after `warmup`, moved earlier when the run is shorter.
std::pair<int64_t, int64_t> profile_window(int64_t warmup, int64_t count, int64_t total) {
  const int64_t n = std::min(count, total);
  return {std::max<int64_t>(0, std::min(warmup, total - n)), n};
}

void write_profile(const ProfileSummary& summary, const std::vector<StepTiming>& steps, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string summary_path = (fs::path(dir) / "profile.json").string();
  const std::string trace_path = (fs::path(dir) / "trace.json").string();
  io::write_text_file_atomic(summary_path, profile_json(summary));
  io::write_text_file_atomic(trace_path, trace_json(steps));
  fmt::print("Profile written to {} and {} (open the trace in https://ui.perfetto.dev or chrome://tracing)\n",
             summary_path, trace_path);
}

Command add_train_command(CLI::App& app, bool profile_command) {
  auto flags = std::make_shared<TrainFlags>();
  if (profile_command) flags->profile_steps = 5;
  TrainingArguments& a = flags->args;
  app.add_option("--model", a.model, "Directory with config.json + model.safetensors, or a preset "
                                     "(bert-large-uncased, bert-base-uncased, bert-medium, bert-small, bert-mini, bert-tiny)")
      ->capture_default_str();
  app.add_option("--dataset", a.dataset, "Built-in dataset: dummy (the seed's random ids)")->capture_default_str();
  app.add_option("--train-file", a.train_file, "Pre-tokenized safetensors file: input_ids [N, L] and optional "
                                               "attention_mask, token_type_ids, labels");
  app.add_option("--dummy-size", a.dummy_size, "Number of dummy sequences")->capture_default_str()->check(positive_number());
  app.add_option("--dummy-seq-len", a.dummy_seq_len, "Tokens per dummy sequence")->capture_default_str()->check(positive_number());
  app.add_option("--per-device-train-batch-size", a.per_device_train_batch_size, "Batch size")
      ->capture_default_str()->check(positive_number());
  app.add_option("--num-train-epochs", a.num_train_epochs, "Epochs (ignored when --max-steps > 0)")
      ->capture_default_str()->check(positive_number());
  app.add_option("--max-steps", a.max_steps, "Optimizer steps; overrides --num-train-epochs when > 0")->capture_default_str();
  app.add_option("--learning-rate", a.learning_rate, "AdamW learning rate")->capture_default_str()->check(non_negative_number());
  app.add_option("--weight-decay", a.weight_decay, "Decoupled weight decay (never on biases and LayerNorm)")
      ->capture_default_str()->check(non_negative_number());
  app.add_option("--adam-beta1", a.adam_beta1, "AdamW beta1")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--adam-beta2", a.adam_beta2, "AdamW beta2")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--adam-epsilon", a.adam_epsilon, "AdamW epsilon")->capture_default_str()->check(positive_number());
  app.add_option("--warmup-steps", a.warmup_steps, "Linear warmup steps")->capture_default_str()->check(non_negative_number());
  app.add_option("--lr-scheduler-type", flags->scheduler, "linear, constant or constant_with_warmup")
      ->capture_default_str()->check(CLI::IsMember({"linear", "constant", "constant_with_warmup"}));
  app.add_option("--max-grad-norm", a.max_grad_norm, "Clip the global gradient norm to this (0: no clipping)")
      ->capture_default_str()->check(non_negative_number());
  app.add_option("--seed", a.seed, "Seed of initialisation, data, shuffling and dropout")
      ->capture_default_str()->check(non_negative_number());
  app.add_flag("--no-shuffle", flags->no_shuffle, "Keep the data in file order");
  app.add_option("--logging-steps", a.logging_steps, "Write a log record every N steps")
      ->capture_default_str()->check(positive_number());
  app.add_option("--output-dir", a.output_dir, "Write config.json, model.safetensors and log.jsonl here");
  app.add_option("--device", flags->device, "cpu, cuda or auto")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_flag("--no-progress", flags->no_progress, "No progress bar");
  app.add_flag("--tf32", flags->tf32, "TensorFloat-32 matrix products on the GPU (float32 storage)");
  app.add_flag("--bf16", a.bf16, "Mixed precision: bf16 compute, float32 master weights, gradients and AdamW states");
  app.add_flag("--fp16", a.fp16, "Mixed precision in fp16 with dynamic loss scaling (as PyTorch's GradScaler)");
  app.add_option("--profile-steps", flags->profile_steps,
                 "Time every operation of this many steps (CUDA events) and print the time anatomy")
      ->capture_default_str()->check(non_negative_number());
  app.add_option("--profile-warmup", flags->profile_warmup, "Steps to run before the profiled ones")
      ->capture_default_str()->check(non_negative_number());

  return [flags, &app, profile_command]() -> int {
    TrainingArguments args = flags->args;
    parse_schedule_kind(flags->scheduler, &args.lr_scheduler_type);
    args.shuffle = !flags->no_shuffle;
    args.progress = !flags->no_progress;
    if (!args.train_file.empty() && app.count("--dataset"))
      fail("--dataset and --train-file are exclusive: give one");
    if (args.train_file.empty() && args.dataset != "dummy")
      fail("--dataset {}: only \"dummy\" is built in; give text or tensors with --train-file", args.dataset);
    if (!args.output_dir.empty() && std::filesystem::exists(args.output_dir) &&
        !std::filesystem::is_directory(args.output_dir))
      fail("--output-dir {}: exists and is not a directory", args.output_dir);

    if (args.bf16 && args.fp16) fail("--bf16 and --fp16 are exclusive: give one");
    if (profile_command && !app.count("--max-steps") && !app.count("--num-train-epochs"))
      args.max_steps = flags->profile_warmup + flags->profile_steps;  // profile: just the steps it needs
    if (profile_command && flags->profile_steps == 0) fail("--profile-steps must be positive for anatomy profile");
    DeviceChoice device = choose_device(flags->device, flags->tf32);
    std::unique_ptr<ProfilingBackend> profiler;
    if (flags->profile_steps > 0) profiler = std::make_unique<ProfilingBackend>(*device.backend);
    Backend& backend = profiler ? static_cast<Backend&>(*profiler) : *device.backend;
    if ((args.bf16 || args.fp16) && backend.device().is_cpu())
      fail("--{}: mixed precision runs on the GPU; this run is on the CPU", args.bf16 ? "bf16" : "fp16");
    if (!device.note.empty()) fmt::print("{}\n", device.note);
    const bool on_gpu = !backend.device().is_cpu();
    // The seed's three readings of NVML: after the CUDA context, after the model, after training.
    auto print_gpu_memory = [&] {
      if (!on_gpu) return;
      const auto line = gpu::gpu_memory_occupied_line(backend.device().index);
      fmt::print("{}\n", line ? *line : "GPU memory occupied: unknown (NVML unavailable).");
    };
    if (on_gpu) {
      fmt::print("GPU: {}\n", gpu::Nvml::instance().device_name(backend.device().index).value_or("unknown"));
      print_gpu_memory();
    }
    if (backend.device().is_cpu() && flags->device == "auto") {
      // The seed experiment, scaled: only what the user did not choose changes.
      std::vector<std::string> scaled;
      if (!app.count("--model")) {
        args.model = kCpuModel;
        scaled.push_back(fmt::format("model {}", kCpuModel));
      }
      if (args.train_file.empty() && !app.count("--dummy-size")) {
        args.dummy_size = kCpuDummySize;
        scaled.push_back(fmt::format("{} sequences", kCpuDummySize));
      }
      if (args.train_file.empty() && !app.count("--dummy-seq-len")) {
        args.dummy_seq_len = kCpuDummySeqLen;
        scaled.push_back(fmt::format("{} tokens each", kCpuDummySeqLen));
      }
      if (!scaled.empty())
        fmt::print("The seed experiment scaled to the CPU: {} (set --model, --dummy-size, --dummy-seq-len to change).\n",
                   fmt::join(scaled, ", "));
    }

    // The profiler's yardsticks, measured (or read from the cache) before the model exists.
    std::optional<Ceilings> ceilings;
    if (profiler) {
      const std::string name =
          on_gpu ? gpu::Nvml::instance().device_name(backend.device().index).value_or("unknown GPU") : "cpu";
      const DType product_dtype = args.bf16 ? DType::BF16 : args.fp16 ? DType::F16 : DType::F32;
      ceilings = device_ceilings(*device.backend, name, product_dtype, flags->tf32 && on_gpu);
      device.backend->ledger().reset_peaks();
    }
    const ModelSource source = resolve_model(args.model);
    Dataset data = args.train_file.empty() ? make_dummy_dataset(args.dummy_size, args.dummy_seq_len, args.seed)
                                           : load_tensor_dataset(args.train_file);
    if (args.train_file.empty() && source.config.num_labels == 1) {
      // Dummy labels are all 0; a regression model gets them as floats.
      data.label_dtype = DType::F32;
      data.labels_f32.assign(data.size, 0.0f);
      data.labels_i64.clear();
    }
    validate_dataset(data, source.config);

    const DType compute = args.bf16 ? DType::BF16 : args.fp16 ? DType::F16 : DType::F32;
    BertForSequenceClassification model(backend, source.config, compute);
    if (source.directory.empty()) {
      init_weights(model, args.seed);
    } else {
      const LoadReport report = load_weights(model, source.directory, args.seed);
      if (!report.initialised.empty())
        fmt::print("Newly initialised (not in the checkpoint): {}\n", fmt::join(report.initialised, ", "));
      if (!report.unused.empty()) fmt::print("Unused checkpoint tensors: {}\n", report.unused.size());
    }
    backend.synchronize();
    print_gpu_memory();
    Trainer trainer(backend, model, data, args);
    fmt::print("Training {} ({} parameters) on {}: {} examples of {} tokens, batch {}, {} steps\n",
               source.preset.empty() ? source.directory : source.preset, model.weights().parameter_count(),
               backend.device().str(), data.size, data.seq_len, args.per_device_train_batch_size,
               trainer.total_steps());
    std::fflush(stdout);
    std::vector<StepTiming> timings;
    if (profiler) {
      const auto [first, count] = profile_window(flags->profile_warmup, flags->profile_steps, trainer.total_steps());
      trainer.set_hooks(StepHooks{[&, first = first, count = count](int64_t step) {
                                    if (step >= first && step < first + count) profiler->begin_step();
                                  },
                                  [&](int64_t) {
                                    if (profiler->recording()) timings.push_back(profiler->end_step());
                                  }});
    }
    const TrainResult result = trainer.train();
    if (!std::all_of(result.losses.begin(), result.losses.end(), [](double l) { return std::isfinite(l); }))
      fmt::print("warning: the loss was not finite at some step\n");

    if (!args.output_dir.empty() && !profile_command) save_pretrained(model, backend, args.output_dir);

    fmt::print("Time: {:.2f}\n", result.seconds);
    fmt::print("Samples/second: {:.2f}\n", result.samples_per_second);
    if (on_gpu)
      print_gpu_memory();
    else
      fmt::print("CPU memory occupied (peak RSS): {} MB.\n", gpu::process_peak_rss_bytes() / (1024 * 1024));
    print_ledger(result.memory, backend.device());
    if (profiler) {
      const std::optional<double> peak =
          on_gpu ? gpu::dense_bf16_peak_tflops(
                       gpu::Nvml::instance().device_name(backend.device().index).value_or(""))
                 : std::nullopt;
      const double flops_per_step = training_flops_per_sequence(model.config(), data.seq_len) *
                                    static_cast<double>(args.per_device_train_batch_size);
      ProfileSummary summary = summarize_profile(timings, flops_per_step, peak);
      summary.ceilings = ceilings;
      fmt::print("(The profiled steps wait for their timings: the run's samples/second includes that.)\n");
      print_profile(summary);
      if (!args.output_dir.empty()) write_profile(summary, timings, args.output_dir);
    }
    return 0;
  };
}

}  // namespace anatomy::cli
