// memory_plan.h: the memory plan of a training run, computed before anything
// is allocated: the real model and Trainer run a few steps on the meta backend
// (kernels/meta), which computes nothing but allocates every buffer through a
// ledger exactly as the target backend would, over a simulated device with
// the real pool's policy (core/pool.h). So the plan lists every buffer the run
// will hold, and predicts both the ledger's peak and the pool's segments; a
// run and `anatomy estimate` compute the same plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/analysis/memory_anatomy.h"
#include "anatomy/core/engine_options.h"
#include "anatomy/core/ledger.h"
#include "anatomy/data/dataset.h"
#include "anatomy/kernels/fp32_products.h"
#include "anatomy/model/config.h"
#include "anatomy/train/arguments.h"

namespace anatomy {

// What of the data shapes memory: the batches' sizes and which inputs exist.
struct DataShape {
  int64_t size = 0, seq_len = 0;
  bool token_type_ids = false, attention_mask = false;
  DType label_dtype = DType::I64;
  int64_t label_width = 1;
  bool token_labels = false;  // a label per token (label_width: the sequence length)
  bool span_labels = false;   // question answering's start and end positions (label_width 2)
  int64_t choices = 0;        // multiple choice: seq_len holds this many sequences an example
  // The validation set of --eval-strategy (eval_size 0: none).
  int64_t eval_size = 0, eval_seq_len = 0;
  bool eval_token_type_ids = false, eval_attention_mask = false;
  static DataShape of(const Dataset& data, const Dataset* eval = nullptr);
};

struct PlanTarget {
  bool gpu = true;              // the CUDA backend's allocations and pool; else the CPU backend's
  Fp32Products fp32_products = Fp32Products::Float32;  // split TF32 takes scratch
  int64_t capacity = 0;         // bytes the pool may take from the device (0: unlimited)
  int64_t context_bytes = 0;    // the CUDA context and kernels, added to predict NVML
  int rank = 0, world = 1;      // data parallelism: the rank simulated, of this many (args.zero_stage applies)
  bool distributed = false;     // the data-parallel path even in a world of one (ANATOMY_DIST_FORCE)
  bool hopper_attention = false;  // the GPU runs the Hopper attention kernels (MetaOptions::hopper_attention)
  EngineOptions options;        // the engine's choices the run makes (attention kernels, the last layer, ...)
};

struct MemoryPlan {
  LedgerSnapshot ledger;              // the simulated run's ledger: peaks, composition at the peak
  std::vector<PhaseSample> timeline;  // per phase of the simulated steps
  PeakBuffers peak_buffers;           // the buffers alive at the plan's peak, kPeakBuffersListed listed
  int64_t parameters = 0;
  int64_t context_bytes = 0;
  bool fits = true;                   // false: the simulated device ran out
  std::string out_of_memory;          // then: what could not be allocated, and where
  std::optional<OutOfMemory> failure; // and the simulated device's ledger at that moment
  int64_t nvml_total() const { return ledger.reserved_peak + context_bytes; }
  MemoryPrediction prediction() const;
};

// Simulates the run of `args` (batch size, precision, ...) on data of `shape`:
// the first two steps and, when the last batch is partial, that one too;
// every other step allocates as these do.
MemoryPlan plan_training(const ModelConfig& config, const TrainingArguments& args, const DataShape& shape,
                         const PlanTarget& target);

// The capacity less a margin for what the plan cannot see coming (the
// driver's own fragmentation, a library's lazy buffers): 2%, at least 256 MiB.
// Settings the program suggests, and --auto-find-batch-size, keep to it.
int64_t capacity_with_headroom(int64_t capacity);

// The largest divisor of n that is at most cap (1 at least): the micro-batch
// that splits a batch of n into equal accumulation steps.
int64_t largest_divisor_at_most(int64_t n, int64_t cap);

// The largest per-device batch size (<= limit) whose plan fits target.capacity,
// or 0 when not even 1 fits.
int64_t largest_fitting_batch(const ModelConfig& config, const TrainingArguments& args, const DataShape& shape,
                              const PlanTarget& target, int64_t limit = 4096);

// --auto-find-batch-size's choice: the largest batch, up to the one asked
// (args), whose plan fits the target's capacity less the headroom
// (capacity_with_headroom); 0 when not even 1 does. `anatomy train` takes it
// before allocating anything, `anatomy estimate` reports it.
int64_t auto_batch_size(const ModelConfig& config, const TrainingArguments& args, const DataShape& shape,
                        const PlanTarget& target);

}  // namespace anatomy
