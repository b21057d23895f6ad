// training_run.cpp: one training run (`anatomy train` and `anatomy
// profile`): rendezvous, device, memory plan, model, Trainer, reports, and the
// out-of-memory fallback. With the defaults it is the seed experiment
// (bert-large-uncased, dummy 512 x 512, batch 4, one epoch); on a machine
// without a GPU, the same experiment scaled to the CPU.
#include "anatomy/run/training_run.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "anatomy/analysis/out_of_memory.h"
#include "anatomy/analysis/profile.h"
#include "anatomy/analysis/time_report_html.h"
#include "anatomy/gpu/busy_gpu.h"
#include "anatomy/data/dataset.h"
#include "anatomy/distributed/communicator.h"
#include "anatomy/distributed/environment.h"
#include "anatomy/distributed/profiled_communicator.h"
#include "anatomy/distributed/store.h"
#include "anatomy/gpu/facts.h"
#include "anatomy/gpu/host_memory.h"
#include "anatomy/io/files.h"
#include "anatomy/kernels/cuda_memory.h"
#include "anatomy/kernels/profiling.h"
#include "anatomy/model/bert/bert_masked_lm_head.h"
#include "anatomy/run/device.h"
#include "anatomy/run/memory_readings.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/registry.h"
#include "anatomy/train/trainer.h"
#include "anatomy/train/trainer_output.h"
#include "anatomy/train/training_data.h"

#ifdef ANATOMY_HAVE_NCCL
#include "anatomy/distributed/cuda/nccl_communicator.h"
#endif

namespace anatomy::run {

namespace {

// The attention kernels the CUDA backend runs for the encoder layers, as it
// (and the memory plan, through cuda_memory.h) chooses them.
std::string attention_kernels(const Backend& backend, DType compute, int64_t head_dim, int64_t L) {
  const EngineOptions& options = backend.options();
  if (!cuda::fused_attention(compute, head_dim))
    return fmt::format("unfused, in float32 (head size {} has no fused kernel): the probabilities are saved", head_dim);
  if (compute == DType::F32) return "our fused flash kernels, float32";
  if (backend.attention_keeps_dropout_bits(compute, head_dim, L))
    return "our Hopper (wgmma) kernels, the dropout mask kept as bits; cuDNN's forward without dropout "
           "(--attention cudnn selects cuDNN's, anatomy our flash kernels)";
  if (cuda::cudnn_attention_selected(options))
    return "cuDNN's fused attention (--attention anatomy selects our flash kernels)";
  return "our fused flash kernels, 16-bit";
}

// What the seed experiment becomes on a CPU: small enough to end in a minute or two.
constexpr const char* kCpuModel = "bert-mini";
constexpr int64_t kCpuDummySize = 128;
constexpr int64_t kCpuDummySeqLen = 128;

}  // namespace

// The profiled window: `count` steps after `warmup`, moved earlier when the run is shorter.
std::pair<int64_t, int64_t> profile_window(int64_t warmup, int64_t count, int64_t total) {
  const int64_t n = std::min(count, total);
  return {std::max<int64_t>(0, std::min(warmup, total - n)), n};
}

void write_profile(const ProfileSummary& summary, const std::vector<StepTiming>& steps, const std::string& dir,
                   std::FILE* out) {
  namespace fs = std::filesystem;
  const std::string summary_path = (fs::path(dir) / "profile.json").string();
  const std::string trace_path = (fs::path(dir) / "trace.json").string();
  io::write_text_file_atomic(summary_path, profile_json(summary));
  io::write_text_file_atomic(trace_path, trace_json(steps));
  fmt::print(out, "Profile written to {} and {} (open the trace in https://ui.perfetto.dev or chrome://tracing)\n",
             summary_path, trace_path);
}

namespace {

// The seed's three readings of NVML: after the CUDA context, after the model, after training.
void print_gpu_memory(const Backend& backend, std::FILE* out) {
  if (backend.device().is_cpu()) return;
  const auto line = gpu::gpu_memory_occupied_line(nvml_index_of(backend.device().index));
  fmt::print(out, "{}\n", line ? *line : "GPU memory occupied: unknown (NVML unavailable).");
}

// anatomy.json's "model": where the model came from and its weights.
std::vector<std::pair<std::string, std::string>> model_fields(const ModelSource& source) {
  if (!source.preset.empty())
    return {{"name", source.preset}, {"source", "preset"}, {"weights", "random initialisation"}};
  return {{"name", source.name()},
          {"source", source.hub_id.empty() ? "directory" : "Hugging Face cache"},
          {"directory", source.directory},
          {"weights", source.weights}};
}

// What one attempt at training needs besides the flags.
struct RunContext {
  Backend& backend;
  Profiler* profiler;
  const ModelSource& source;
  const Dataset& data;
  const Dataset* eval;  // the validation set, or null
  const std::optional<TokenizerSettings>& tokenizer;  // saved with the model and every checkpoint
  const MemoryPlan& plan;
  const DeviceFacts& facts;
  const std::optional<GpuMemoryProbe>& probe;
  const std::optional<Ceilings>& ceilings;
  distributed::Communicator* comm;  // data parallelism; null in a world of one
};

// Where this rank writes: rank 0 the output directory itself, rank k its
// rank-k/ subdirectory (its memory anatomy); "" without one.
std::string rank_output_dir(const std::string& output_dir, const distributed::Communicator* comm) {
  if (output_dir.empty() || comm == nullptr || comm->rank() == 0) return output_dir;
  return (std::filesystem::path(output_dir) / fmt::format("rank-{}", comm->rank())).string();
}

int64_t own_gpu_use(const std::optional<GpuMemoryProbe>& probe) {
  if (!probe) return -1;
  return probe->own_use().value_or(-1);
}

// Builds the model and trains it; throws OutOfMemory when the device is full.
void train_once(const TrainingRequest& flags, const TrainingArguments& args, RunContext& run) {
  Backend& backend = run.backend;
  const bool on_gpu = !backend.device().is_cpu();
  Ledger& ledger = backend.ledger();
  const DType compute = args.bf16 ? DType::BF16 : args.fp16 ? DType::F16 : DType::F32;
  const std::unique_ptr<Model> made = make_model(backend, run.source.config, compute);
  Model& model = *made;
  if (run.source.directory.empty()) {
    init_weights(model, args.seed);
  } else {
    const LoadReport report = load_weights(model, run.source.directory, args.seed);
    if (!report.initialised.empty())
      fmt::print(flags.out, "Newly initialised (not in the checkpoint): {}\n", fmt::join(report.initialised, ", "));
    if (!report.unused.empty()) fmt::print(flags.out, "Unused checkpoint tensors: {}\n", report.unused.size());
  }
  backend.synchronize();
  print_gpu_memory(backend, flags.out);
  Trainer trainer(backend, model, run.data, args, run.eval);
  trainer.set_communicator(run.comm);
  trainer.set_tokenizer(run.tokenizer);
  const std::string lengths =
      run.data.pad_per_batch
          ? fmt::format("{} examples of up to {} tokens, each batch padded to its longest{}", run.data.size,
                        run.data.seq_len, args.group_by_length ? ", grouped by length" : "")
          : fmt::format("{} examples of {} tokens", run.data.size, run.data.seq_len);
  fmt::print(flags.out, "Training {} ({} parameters) on {}: {}, batch {}{}, {} steps\n",
             run.source.name(), model.weights().parameter_count(), backend.device().str(), lengths,
             args.per_device_train_batch_size,
             run.comm ? fmt::format(" per rank on {} ranks (rank {}, {})", run.comm->world_size(), run.comm->rank(),
                                    run.comm->describe())
                      : std::string(),
             trainer.total_steps());
  if (on_gpu)
    fmt::print(flags.out, "Attention: {}{}\n",
               attention_kernels(backend, compute, run.source.config.head_dim(), run.data.seq_len),
               model.attention_note());
  if (on_gpu) switch (flags.fp32_products) {
      case Fp32Products::Tf32:
        fmt::print(flags.out, "Float32 products: TF32 on tensor cores (inputs rounded to 10-bit mantissas)\n");
        break;
      case Fp32Products::SplitTf32:
        fmt::print(flags.out, "Float32 products: split TF32 on tensor cores (lo*hi + hi*lo + hi*hi, about 22 of 24 bits kept)\n");
        break;
      case Fp32Products::Float32: break;
    }
  std::fflush(flags.out);
  ledger.record_timeline(0, 2);

  // The CUDA context and the kernels the run loads, once the first step has
  // loaded them all: NVML's figure for this process minus the pool's segments.
  int64_t context_bytes = -1;
  auto anatomy_now = [&] {
    const int64_t used = own_gpu_use(run.probe);
    MemoryAnatomy m = take_memory_anatomy(backend, run.facts, on_gpu ? context_bytes : -1, on_gpu ? used : -1, &run.plan);
    m.model = model_fields(run.source);
    if (model.task() == kMaskedLm)
      m.notes.push_back(lm_logits_note(model.config(), args.per_device_train_batch_size, run.data.seq_len,
                                       model.compute_dtype()));
    return m;
  };
  std::vector<StepTiming> timings;
  std::pair<int64_t, int64_t> window{0, 0};
  if (run.profiler)
    window = profile_window(flags.profile_warmup, flags.profile_steps, trainer.total_steps());
  trainer.set_hooks(StepHooks{
      [&](int64_t step) {
        if (run.profiler && step >= window.first && step < window.first + window.second) run.profiler->begin_step();
      },
      [&](int64_t step) {
        if (run.profiler && run.profiler->recording()) timings.push_back(run.profiler->end_step());
        if (step == 0 && on_gpu) {
          backend.synchronize();
          const int64_t used = own_gpu_use(run.probe);
          if (used >= 0) context_bytes = used - ledger.snapshot().reserved;
        }
        if (flags.anatomy_steps > 0 && (step + 1) % flags.anatomy_steps == 0) {
          backend.synchronize();
          fmt::print(flags.out, "\nMemory anatomy after step {}:\n{}", step + 1, format_memory_table(anatomy_now()));
          std::fflush(flags.out);
        }
      }});
  const TrainResult result = trainer.train();
  if (!std::all_of(result.losses.begin(), result.losses.end(), [](double l) { return std::isfinite(l); }))
    fmt::print(flags.out, "warning: the loss was not finite at some step\n");

  const bool writer = run.comm == nullptr || run.comm->rank() == 0;
  const std::string out_dir = rank_output_dir(args.output_dir, run.comm);
  if (!out_dir.empty() && !writer) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) fail("--output-dir {}: cannot create ({})", out_dir, ec.message());
  }
  if (!args.output_dir.empty() && !flags.profile && writer) {
    save_pretrained(model, backend, args.output_dir);
    if (run.tokenizer) save_tokenizer(*run.tokenizer, args.output_dir);
  }

  fmt::print(flags.out, "Time: {:.2f}\n", result.seconds);
  fmt::print(flags.out, "Samples/second: {:.2f}\n", result.samples_per_second);
  if (result.steady_samples_per_second > 0.0)
    fmt::print(flags.out, "Samples/second after the first step: {:.2f}\n", result.steady_samples_per_second);
  fmt::print(flags.out, "Data wait: {:.3f} s ({:.1f}% of the time; --dataloader-num-workers {})\n", result.data_wait_seconds,
             100.0 * result.data_wait_seconds / std::max(result.seconds, 1e-9), args.dataloader_num_workers);
  if (writer && !result.train_metrics.empty()) {
    // As run_glue prints them (Trainer.log_metrics): train_samples beside Trainer's final record.
    std::map<std::string, double> train = result.train_metrics;
    train["train_samples"] = static_cast<double>(run.data.size);
    fmt::print(flags.out, "{}", format_metrics("train", train));
    if (!result.eval_metrics.empty()) fmt::print(flags.out, "{}", format_metrics("eval", result.eval_metrics));
  }
  if (on_gpu)
    print_gpu_memory(backend, flags.out);
  else
    fmt::print(flags.out, "CPU memory occupied (peak RSS): {} MB.\n", gpu::process_peak_rss_bytes() / (1024 * 1024));
  const MemoryAnatomy anatomy = anatomy_now();
  fmt::print(flags.out, "\n{}", format_memory_table(anatomy));
  std::string time_section;
  if (run.profiler) {
    const std::optional<double> peak =
        on_gpu ? gpu::dense_bf16_peak_tflops(run.facts.name) : std::nullopt;
    const double flops_per_step = training_flops_per_sequence(model.config(), run.data.seq_len) *
                                  static_cast<double>(args.per_device_train_batch_size);
    ProfileSummary summary = summarize_profile(timings, flops_per_step, peak);
    summary.ceilings = run.ceilings;
    if (run.comm && run.comm->world_size() > 1) {
      // Every rank's step, gathered on every rank (a collective: all take part).
      const std::vector<double> all = distributed::gather_host(*run.comm, rank_time_fields(summary));
      if (writer)
        for (size_t r = 0; r < static_cast<size_t>(run.comm->world_size()); ++r)
          summary.ranks.push_back(rank_time_from_fields(static_cast<int>(r), &all[r * kRankTimeFields]));
    }
    if (writer) {
      fmt::print(flags.out, "(The profiled steps wait for their timings: the run's samples/second includes that.)\n");
      print_profile(summary, flags.out);
      if (!summary.ranks.empty()) fmt::print(flags.out, "{}", format_rank_time_table(summary.ranks));
    } else {
      print_profile_line(summary, flags.out);  // rank 0 prints the whole anatomy; each rank writes its profile.json
    }
    if (!out_dir.empty()) write_profile(summary, timings, out_dir, flags.out);
    time_section = time_report_section_html(summary);
  }
  if (!out_dir.empty()) write_memory_reports(anatomy, out_dir, time_section);
  if (run.comm && run.comm->world_size() > 1) {
    // The anatomy across the ranks, on rank 0.
    const std::vector<RankMemory> ranks = gather_rank_memory(*run.comm, anatomy.ledger);
    if (writer) {
      fmt::print(flags.out, "\n{}", format_rank_memory_table(ranks));
      if (!args.output_dir.empty()) {
        const std::string path = (std::filesystem::path(args.output_dir) / "ranks.json").string();
        io::write_text_file_atomic(path, rank_memory_json(ranks, args.zero_stage));
        fmt::print(flags.out, "Memory per rank written to {}\n", path);
      }
    }
  }
}

}  // namespace

int run_training(const TrainingRequest& flags) {
  const EngineOptions& options = flags.options;
  TrainingArguments args = flags.args;
  if (flags.profile && flags.profile_steps <= 0) fail("--profile-steps must be positive for anatomy profile");
  // Data parallelism: a rank of a run that torchrun, anatomy launch, srun or
  // mpirun started joins the others (rank 0 runs the store) and takes the GPU
  // of its LOCAL_RANK.
  distributed::DistEnvironment env = distributed::read_dist_environment();
  if (options.distributed_timeout_seconds > 0) env.timeout_seconds = options.distributed_timeout_seconds;
  std::optional<distributed::DistSession> session;
  // --force-distributed: a world of one through the whole data-parallel path
  // (store, communicator, bucketed all-reduce, ZeRO), to test it on one GPU.
  if (env.distributed() || options.force_distributed) {
    session.emplace(distributed::rendezvous(env, distributed::Seconds(env.timeout_seconds)));
    session->store().start_watchdog(distributed::Seconds(env.timeout_seconds));
  }
  const int gpu_index = env.local_rank;            // CUDA's numbering (after CUDA_VISIBLE_DEVICES)
  const int nvml_index = flags.device == "cpu" ? gpu_index : nvml_index_of(gpu_index);  // NVML's, by PCI bus id
  // NVML's reading before this process makes a CUDA context: what others hold.
  std::optional<GpuMemoryProbe> probe;
  if (flags.device != "cpu" && gpu::Nvml::instance().available() && gpu::Nvml::instance().device_count() > nvml_index)
    probe.emplace(nvml_index);
  if (probe) gpu::warn_if_gpu_busy(nvml_index);  // before our context, which NVML would list too
  const Fp32Products fp32_products = flags.fp32_products;
  DeviceChoice device = choose_device(flags.device, fp32_products, gpu_index, options);
  Backend& backend = *device.backend;
  std::unique_ptr<Profiler> profiler;
  if (flags.profile_steps > 0) profiler = std::make_unique<Profiler>(backend);
  if ((args.bf16 || args.fp16) && backend.device().is_cpu())
    fail("--{}: mixed precision runs on the GPU; this run is on the CPU", args.bf16 ? "bf16" : "fp16");
  // The model first, so that the run's first line says what it trains: a
  // preset's random initialisation, or where the weights come from. (The seed
  // experiment scaled to the CPU trains bert-mini unless --model says otherwise.)
  if (backend.device().is_cpu() && flags.device == "auto" && !flags.model_given) args.model = kCpuModel;
  ModelSource source = resolve_model(args.model);
  fmt::print(flags.out, "Model: {}\n", describe_model(source));
  if (!device.note.empty()) fmt::print(flags.out, "{}\n", device.note);
  const bool on_gpu = !backend.device().is_cpu();
  if (!on_gpu) probe.reset();
  std::unique_ptr<distributed::Communicator> comm;
  if (session) {
    if (on_gpu) {
#ifdef ANATOMY_HAVE_NCCL
      comm = distributed::make_nccl_communicator(*device.backend, session->store(), env.timeout_seconds);
      fmt::print(flags.out, "{}: rank {} of {} on GPU {}; NCCL's own buffers {} (outside the ledger: NVML counts them, and "
                 "the anatomy's \"CUDA context and kernels\" row includes them)\n",
                 comm->describe(), comm->rank(), comm->world_size(), gpu_index,
                 format_bytes(distributed::nccl_own_bytes(*comm)));
#else
      fail("{} ranks on GPUs need NCCL, and this build has none (it was not found when anatomy was built)",
           env.world_size);
#endif
    } else {
      comm = distributed::make_store_communicator(*device.backend, session->store(), env.timeout_seconds);
    }
    // Every rank profiles (the same markers' cost on each); the exchanges are
    // timed as communication ops.
    if (profiler) comm = distributed::profile_communicator(std::move(comm), *profiler);
  }
  DeviceFacts facts;
  if (on_gpu) {
    facts.name = gpu::Nvml::instance().device_name(nvml_index).value_or("");
    if (const auto m = gpu::Nvml::instance().memory(nvml_index))
      facts.total = static_cast<int64_t>(m->total);
    fmt::print(flags.out, "GPU: {}\n", facts.name.empty() ? "unknown" : facts.name);
    print_gpu_memory(backend, flags.out);
  }
  if (backend.device().is_cpu() && flags.device == "auto") {
    // The seed experiment, scaled: only what the user did not choose changes.
    std::vector<std::string> scaled;
    if (!flags.model_given) {
      args.model = kCpuModel;
      scaled.push_back(fmt::format("model {}", kCpuModel));
    }
    if (args.train_file.empty() && !flags.dummy_size_given) {
      args.dummy_size = kCpuDummySize;
      scaled.push_back(fmt::format("{} sequences", kCpuDummySize));
    }
    if (args.train_file.empty() && !flags.dummy_seq_len_given) {
      args.dummy_seq_len = kCpuDummySeqLen;
      scaled.push_back(fmt::format("{} tokens each", kCpuDummySeqLen));
    }
    if (!scaled.empty())
      fmt::print(flags.out, "The seed experiment scaled to the CPU: {} (set --model, --dummy-size, --dummy-seq-len to change).\n",
                 fmt::join(scaled, ", "));
  }

  // The profiler's yardsticks, measured (or read from the cache) before the model exists.
  std::optional<Ceilings> ceilings;
  if (profiler) {
    const std::string name = on_gpu ? (facts.name.empty() ? "unknown GPU" : facts.name) : "cpu";
    const DType product_dtype = args.bf16 ? DType::BF16 : args.fp16 ? DType::F16 : DType::F32;
    ceilings = device_ceilings(*device.backend, name, product_dtype, on_gpu ? fp32_products : Fp32Products::Float32);
    // The plan does not include the ceilings' buffers, nor the scratch that a
    // split-TF32 product of their size takes.
    device.backend->release_scratch();
    device.backend->ledger().release_unused();
    device.backend->ledger().reset_peaks();
  }
  // Dummy, tensor or text data; text sets the model's labels (and a preset's vocabulary size).
  TrainingData loaded = load_training_data(args, source);
  for (const std::string& note : loaded.notes) fmt::print(flags.out, "{}\n", note);
  const Dataset& data = loaded.train;
  const std::optional<Dataset>& eval = loaded.eval;

  // The memory plan, before the model allocates anything. The pool may take
  // what NVML says is free plus the segments it already holds.
  const DataShape shape = DataShape::of(data, eval ? &*eval : nullptr);
  PlanTarget target;
  target.gpu = on_gpu;
  target.fp32_products = fp32_products;
  target.rank = env.rank;
  target.world = env.world_size;
  target.distributed = session.has_value();
  target.options = options;
  // Whether this device runs the Hopper attention kernels (the backend's answer at BERT's head size and a length they take).
  target.hopper_attention = on_gpu && backend.attention_keeps_dropout_bits(DType::BF16, 64, 512);
  const int64_t reserved = backend.ledger().snapshot().reserved;
  if (probe)
    if (const auto m = probe->device()) target.capacity = static_cast<int64_t>(m->free) + reserved;
  if (const int64_t used = own_gpu_use(probe); used >= 0) target.context_bytes = used - reserved;
  auto report_out_of_memory = [&](const OutOfMemory& oom, bool predicted) {
    std::fflush(flags.out);
    const auto settings = settings_that_fit(source.config, args, shape, target);
    const int64_t available = target.capacity > 0 ? target.capacity + target.context_bytes : 0;
    fmt::print(flags.err, "{}", out_of_memory_report(oom, predicted, probe ? probe->device() : std::nullopt,
                                                  settings, available));
    return 3;
  };
  if (flags.auto_find_batch_size) {
    const int64_t batch = auto_batch_size(source.config, args, shape, target);
    if (batch == 0) fail("--auto-find-batch-size: not even a batch of 1 fits this device");
    if (batch < args.per_device_train_batch_size)
      fmt::print(flags.out, "--auto-find-batch-size: batch {} does not fit; using {}\n", args.per_device_train_batch_size,
                 batch);
    args.per_device_train_batch_size = batch;
  }

  for (;;) {
    const MemoryPlan plan = plan_training(source.config, args, shape, target);
    if (!plan.fits) return report_out_of_memory(*plan.failure, /*predicted=*/true);
    fmt::print(flags.out, "Memory plan: ledger peak {} during \"{}\"{}\n", format_bytes(plan.ledger.peak_total),
               plan.ledger.peak_phase,
               on_gpu ? fmt::format("; pool segments {}, NVML {} with the context", format_bytes(plan.ledger.reserved_peak),
                                    format_bytes(plan.nvml_total()))
                      : "");
    if (data.pad_per_batch)
      fmt::print(flags.out, "(The plan pads every batch to the longest example, {} tokens: the worst case; shorter batches use "
                 "less.)\n", data.seq_len);
    const bool log_existed =
        !args.output_dir.empty() && io::path_exists((std::filesystem::path(args.output_dir) / "log.jsonl").string());
    try {
      RunContext run{backend,  profiler.get(), source,   data,     eval ? &*eval : nullptr, loaded.tokenizer, plan,
                     facts,    probe,          ceilings, comm.get()};
      train_once(flags, args, run);
      comm.reset();
      if (session) session->finish();
      return 0;
    } catch (const OutOfMemory& oom) {
      // Nothing half-written: a log this attempt began goes.
      if (!args.output_dir.empty() && !log_existed)
        std::filesystem::remove(std::filesystem::path(args.output_dir) / "log.jsonl");
      backend.ledger().release_unused();
      if (flags.auto_find_batch_size && args.per_device_train_batch_size > 1) {
        const int64_t smaller = std::max<int64_t>(1, args.per_device_train_batch_size * 7 / 8);
        fmt::print(flags.out, "--auto-find-batch-size: batch {} ran out of memory on the device; backing off to {}\n",
                   args.per_device_train_batch_size, smaller);
        args.per_device_train_batch_size = smaller;
        continue;
      }
      return report_out_of_memory(oom, /*predicted=*/false);
    }
  }
}

}  // namespace anatomy::run
