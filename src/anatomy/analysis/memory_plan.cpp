// memory_plan.cpp: the plan, by running the model's allocations on the meta backend.
#include "anatomy/analysis/memory_plan.h"

#include "anatomy/distributed/communicator.h"

#include <algorithm>

#include "anatomy/kernels/meta/meta_backend.h"
#include "anatomy/model/registry.h"
#include "anatomy/model/parameters.h"
#include "anatomy/train/trainer.h"

namespace anatomy {

DataShape DataShape::of(const Dataset& data, const Dataset* eval) {
  DataShape s;
  if (eval != nullptr) {
    s.eval_size = eval->size;
    s.eval_seq_len = eval->seq_len;
    s.eval_token_type_ids = !eval->token_type_ids.empty();
    s.eval_attention_mask = !eval->attention_mask.empty();
  }
  s.size = data.size;
  s.seq_len = data.seq_len;
  s.token_type_ids = !data.token_type_ids.empty();
  s.attention_mask = !data.attention_mask.empty();
  s.label_dtype = data.label_dtype;
  s.label_width = data.label_width;
  s.token_labels = data.token_labels;
  s.span_labels = data.span_labels;
  s.choices = data.choices;
  return s;
}

MemoryPrediction MemoryPlan::prediction() const {
  MemoryPrediction p;
  p.at_peak = ledger.at_peak;
  p.peak_total = ledger.peak_total;
  p.peak_phase = ledger.peak_phase;
  p.reserved_peak = ledger.reserved_peak;
  p.context_bytes = context_bytes;
  p.nvml_total = nvml_total();
  return p;
}

namespace {

// Data of `shape` with `size` examples: zeros, since only the sizes matter.
Dataset synthetic_data(const DataShape& shape, int64_t size) {
  Dataset d;
  d.source = "the memory plan's data";
  d.size = size;
  d.seq_len = shape.seq_len;
  const auto tokens = static_cast<size_t>(size * shape.seq_len);
  d.input_ids.assign(tokens, 0);
  if (shape.token_type_ids) d.token_type_ids.assign(tokens, 0);
  if (shape.attention_mask) d.attention_mask.assign(tokens, 1);
  d.label_dtype = shape.label_dtype;
  d.label_width = shape.token_labels ? shape.seq_len : shape.label_width;
  d.token_labels = shape.token_labels;
  d.span_labels = shape.span_labels;
  d.choices = shape.choices;
  const auto labels = static_cast<size_t>(size * d.label_width);
  if (shape.label_dtype == DType::I64)
    d.labels_i64.assign(labels, 0);
  else
    d.labels_f32.assign(labels, 0.0f);
  return d;
}

}  // namespace

MemoryPlan plan_training(const ModelConfig& config, const TrainingArguments& args, const DataShape& shape,
                         const PlanTarget& target) {
  ANATOMY_CHECK(shape.size > 0 && shape.seq_len > 0, "plan_training: empty data shape");
  const int64_t B = args.per_device_train_batch_size;
  // Steps 0 and 1 (the first allocates what later steps reuse) and a final
  // partial batch when there is one. Fewer when the run itself is shorter.
  // Data parallelism: the same of the simulated rank's shard.
  const int64_t shard = shard_size(shape.size, target.world);
  const int64_t partial = shard > B ? shard % B : 0;
  const int64_t size = (shard <= B ? shard : 2 * B + partial) * target.world;
  int64_t steps = shard <= B ? 2 : (partial > 0 ? 3 : 2);
  if (args.max_steps > 0) steps = std::min(steps, args.max_steps);
  const Dataset data = synthetic_data(shape, size);

  MetaOptions options;
  options.target = target.gpu ? MetaTarget::Cuda : MetaTarget::Cpu;
  options.fp32_products = target.fp32_products;
  options.device_capacity = target.capacity;
  options.hopper_attention = target.hopper_attention;
  MemoryPlan plan;
  plan.context_bytes = target.gpu ? target.context_bytes : 0;
  TrainingArguments simulated = args;
  simulated.max_steps = steps;
  simulated.output_dir.clear();
  simulated.report_to = "none";  // no event files from a simulation
  // Saving and resuming move data between host and device buffers the run already holds: no device memory.
  simulated.save_strategy = "no";
  simulated.resume_from_checkpoint.clear();
  simulated.load_best_model_at_end = false;
  // Evaluation after every simulated step, over two full batches and the
  // partial last one (when there is one): the inputs of one batch are still
  // held while the next is uploaded, as in training.
  Dataset eval;
  const bool evaluates = args.eval_strategy != "no" && shape.eval_size > 0;
  if (evaluates) {
    DataShape eval_shape = shape;
    eval_shape.seq_len = shape.eval_seq_len;
    eval_shape.token_type_ids = shape.eval_token_type_ids;
    eval_shape.attention_mask = shape.eval_attention_mask;
    const int64_t EB = args.per_device_eval_batch_size;
    const int64_t partial = shape.eval_size > EB ? shape.eval_size % EB : 0;
    eval = synthetic_data(eval_shape, shape.eval_size <= EB ? shape.eval_size
                                                            : std::min(shape.eval_size, 2 * EB + partial));
    simulated.print_evaluations = false;
    simulated.eval_strategy = "steps";
    simulated.eval_steps = 1;
  } else {
    simulated.eval_strategy = "no";
  }
  simulated.progress = false;
  simulated.logging_steps = 1 << 30;
  simulated.dataloader_num_workers = 0;  // the host side's threads change no device memory
  std::unique_ptr<Backend> backend;
  try {
    backend = make_meta_backend(options);  // allocates the backend's own buffers, which may not fit either
    backend->set_options(target.options);
    backend->ledger().record_timeline(0, steps);
    const DType compute = args.bf16 ? DType::BF16 : args.fp16 ? DType::F16 : DType::F32;
    const std::unique_ptr<Model> model = make_model(*backend, config, compute);
    plan.parameters = model->weights().parameter_count();
    Trainer trainer(*backend, *model, data, simulated, evaluates ? &eval : nullptr);
    std::unique_ptr<distributed::Communicator> comm;
    if (target.world > 1 || target.distributed) {
      comm = distributed::make_simulated_communicator(target.rank, target.world);
      trainer.set_communicator(comm.get());
    }
    trainer.train();
  } catch (const OutOfMemory& oom) {
    plan.fits = false;
    plan.out_of_memory = oom.message();
    plan.failure = oom;
    plan.ledger = oom.ledger;
  }
  if (backend) {
    plan.ledger = backend->ledger().snapshot();
    plan.timeline = backend->ledger().timeline();
    plan.peak_buffers = backend->ledger().peak_buffers(kPeakBuffersListed);
  }
  if (plan.parameters == 0)  // the model itself did not fit
    for (const ParamSpec& spec : model_parameter_specs(config)) plan.parameters += shape_numel(spec.shape);
  return plan;
}

int64_t largest_divisor_at_most(int64_t n, int64_t cap) {
  for (int64_t d = std::min(n, cap); d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

int64_t capacity_with_headroom(int64_t capacity) {
  if (capacity <= 0) return capacity;
  return std::max<int64_t>(0, capacity - std::max<int64_t>(capacity / 50, int64_t{256} << 20));
}

int64_t auto_batch_size(const ModelConfig& config, const TrainingArguments& args, const DataShape& shape,
                        const PlanTarget& target) {
  PlanTarget roomy = target;
  roomy.capacity = capacity_with_headroom(target.capacity);
  return largest_fitting_batch(config, args, shape, roomy, args.per_device_train_batch_size);
}

int64_t largest_fitting_batch(const ModelConfig& config, const TrainingArguments& args, const DataShape& shape,
                              const PlanTarget& target, int64_t limit) {
  auto fits = [&](int64_t batch) {
    TrainingArguments a = args;
    a.per_device_train_batch_size = batch;
    a.max_steps = -1;
    DataShape s = shape;
    s.size = 2 * batch;  // two full steps: the batch, not the dataset's size, is the question
    return plan_training(config, a, s, target).fits;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // fits(lo); find a hi that does not fit
  while (hi <= limit && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > limit) {
    if (fits(limit)) return limit;
    hi = limit;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace anatomy
