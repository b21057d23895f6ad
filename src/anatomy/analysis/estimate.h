// estimate.h: `anatomy estimate`: the memory plan of a training run on a GPU
// that need not be present, whether it fits, the largest batch that fits, and
// the seed's textbook bytes per parameter next to this engine's.
#pragma once

#include <cstdint>
#include <string>

#include "anatomy/analysis/memory_plan.h"

namespace anatomy {

struct EstimateRequest {
  ModelConfig config;
  std::string model_name;        // for the report: a preset or a directory
  TrainingArguments args;
  DataShape shape;
  bool gpu = true;               // false: the CPU backend's plan (no pool, no context)
  Fp32Products fp32_products = Fp32Products::Float32;
  std::string device_name;       // "NVIDIA H100 80GB HBM3", "16.0 GiB GPU", "cpu"
  int64_t device_total = 0;      // bytes (0: unknown, no fit question)
  int64_t context_bytes = 0;     // CUDA context and kernels assumed
  std::string context_source;    // how that figure was obtained ("measured on an H100", ...)
  int64_t nccl_bytes = 0;        // NCCL's own buffers per GPU assumed (GPU, nproc >= 2), beside the context
  std::string nccl_source;
  int64_t other_processes = 0;   // bytes in use before the run: the driver's share, other processes
  int64_t batch_limit = 4096;    // the largest batch searched
  int nproc = 1;                 // data-parallel ranks (args.zero_stage applies); the plan is rank 0's
  bool hopper_attention = false;  // the GPU runs the Hopper attention kernels (compute capability 9.0)
  EngineOptions options;          // the engine's choices (attention kernels, the last layer, ...)
};

struct Estimate {
  MemoryPlan plan;               // the requested batch, on an unlimited device
  bool fits = true;              // its NVML total fits the device
  int64_t capacity = 0;          // what the pool may take: total − context − other processes (0: unknown)
  int64_t largest_batch = -1;    // the largest batch that fits (-1: not asked, no device size)
  int64_t largest_plain = -1;         // without gradient checkpointing
  int64_t largest_checkpointed = -1;  // with it
  // The requested effective batch (batch × accumulation) as micro-batches that
  // fit: batch `accumulate_batch` × `accumulate_steps` (0 when none fits).
  int64_t accumulate_batch = 0, accumulate_steps = 0;
};

Estimate estimate_training(const EstimateRequest& request);
// --auto-find-batch-size on the plan alone: the batch `anatomy train` would
// take on the request's device (memory_plan.h's auto_batch_size with the
// capacity estimate_training gives the pool); -1 without a device size.
int64_t estimate_auto_batch(const EstimateRequest& request);
std::string format_estimate(const EstimateRequest& request, const Estimate& estimate);
// The whole estimate as JSON, every figure in bytes: what format_estimate
// prints (the run, the device, each category at the peak in bytes and per
// parameter, the pool, the context, predicted NVML use, the textbook's bytes
// per parameter, the ZeRO comparison, whether it fits and the batch search),
// the plan's ledger (peaks, composition at the peak), its timeline phase by
// phase and the buffers alive at its peak. `estimate --json` prints it,
// `--plan-json` writes it.
std::string estimate_json(const EstimateRequest& request, const Estimate& estimate);

// The seed's "Anatomy of Model's Memory" figures, bytes per parameter
// (optimizer: a negative figure when the seed gives none, as for Adafactor,
// whose factored states depend on the shapes).
struct TextbookBytes {
  double weights, optimizer, gradients;
  std::string optimizer_name;
};
TextbookBytes textbook_bytes_per_parameter(const TrainingArguments& args);

// The ZeRO paper's model-state bytes per GPU for mixed-precision Adam
// (Rajbhandari et al. 2020, fig. 1: fp16 weights and gradients, K = 12 bytes of
// fp32 master weights and moments per parameter), for `parameters` over
// `ranks` GPUs at stage 0 (plain data parallelism) to 3.
double zero_paper_bytes(int stage, double parameters, int ranks);

}  // namespace anatomy
