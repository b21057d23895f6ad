// trainer.cpp: the training loop.
#include "anatomy/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/data/loader.h"
#include "anatomy/data/mlm_data.h"
#include "anatomy/distributed/data_parallel.h"
#include "anatomy/distributed/zero.h"
#include "anatomy/distributed/zero_sharding.h"
#include "anatomy/gpu/host_memory.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/optim/optimizer.h"
#include "anatomy/train/checkpointing.h"
#include "anatomy/train/metrics.h"
#include "anatomy/train/trainer_output.h"
#include "anatomy/train/training_data.h"
#include "anatomy/io/files.h"
#include "anatomy/io/tensorboard.h"

namespace anatomy {

namespace {

// The most steps a run may take: 2^53, where a double still counts every
// step (epochs, schedules and logs compute in doubles).
constexpr int64_t kMaxTrainingSteps = int64_t{1} << 53;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

namespace {
// A batch's token tensors: [batch, seq_len], or multiple choice's [batch, choices, tokens].
Shape token_shape(const HostBatch& b) {
  return b.choices > 0 ? Shape{b.batch, b.choices, b.seq_len / b.choices} : Shape{b.batch, b.seq_len};
}
}  // namespace

ModelInputs upload_batch(Backend& backend, const HostBatch& b, DType label_dtype, int64_t label_width) {
  Ledger& ledger = backend.ledger();
  ModelInputs in;
  auto upload_tokens = [&](const std::vector<int64_t>& host, const char* name) {
    if (host.empty()) return Tensor();
    Tensor t = Tensor::empty(ledger, token_shape(b), DType::I64, Category::Data, name);
    backend.copy_from_host(t, host.data());
    return t;
  };
  in.input_ids = upload_tokens(b.input_ids, "input_ids");
  in.token_type_ids = upload_tokens(b.token_type_ids, "token_type_ids");
  in.attention_mask = upload_tokens(b.attention_mask, "attention_mask");
  if (label_width > 0) {
    const Shape shape = b.token_labels   ? Shape{b.batch, b.seq_len}
                        : b.span_labels    ? Shape{2, b.batch}
                        : label_width == 1 ? Shape{b.batch}
                                           : Shape{b.batch, label_width};
    in.labels = Tensor::empty(ledger, shape, label_dtype, Category::Data, "labels");
    if (label_dtype == DType::I64) backend.copy_from_host(in.labels, b.labels_i64.data());
    else backend.copy_from_host(in.labels, b.labels_f32.data());
  }
  return in;
}

namespace {

// The loader's device side: two fixed sets of input buffers (category data),
// so that batch k + 1 is uploaded (Backend::upload_async, pinned memory, its
// own copy queue) into one set while batch k computes from the other.
class InputSlots {
 public:
  InputSlots(Backend& backend, const Dataset& data, int64_t max_batch) : backend_(backend), data_(data) {
    Ledger& ledger = backend.ledger();
    const int64_t n = max_batch * data.seq_len;
    for (int s = 0; s < 2; ++s) {
      Slot& slot = slots_[s];
      const std::string tag = fmt::format("batch_slot{}.", s);
      slot.ids = Tensor::empty(ledger, {n}, DType::I64, Category::Data, tag + "input_ids");
      if (!data.token_type_ids.empty())
        slot.types = Tensor::empty(ledger, {n}, DType::I64, Category::Data, tag + "token_type_ids");
      if (!data.attention_mask.empty())
        slot.mask = Tensor::empty(ledger, {n}, DType::I64, Category::Data, tag + "attention_mask");
      if (data.label_width > 0)
        slot.labels = Tensor::empty(ledger, {max_batch * data.label_width}, data.label_dtype, Category::Data,
                                    tag + "labels");
    }
  }

  // Queues the upload of `b` into slot `s` and returns the inputs as views of it.
  ModelInputs upload(int s, const HostBatch& b) {
    Slot& slot = slots_[s];
    ModelInputs in;
    auto tokens = [&](const Tensor& buffer, const std::vector<int64_t>& host, const char* name) {
      if (host.empty()) return Tensor();
      Tensor t = buffer.slice(0, token_shape(b), name);
      backend_.upload_async(t, host.data());
      return t;
    };
    in.input_ids = tokens(slot.ids, b.input_ids, "input_ids");
    in.token_type_ids = tokens(slot.types, b.token_type_ids, "token_type_ids");
    in.attention_mask = tokens(slot.mask, b.attention_mask, "attention_mask");
    if (data_.label_width > 0) {
      const Shape shape = b.token_labels           ? Shape{b.batch, b.seq_len}
                          : b.span_labels          ? Shape{2, b.batch}
                          : data_.label_width == 1 ? Shape{b.batch}
                                                   : Shape{b.batch, data_.label_width};
      in.labels = slot.labels.slice(0, shape, "labels");
      if (data_.label_dtype == DType::I64) backend_.upload_async(in.labels, b.labels_i64.data());
      else backend_.upload_async(in.labels, b.labels_f32.data());
    }
    return in;
  }

 private:
  struct Slot {
    Tensor ids, types, mask, labels;
  };
  Backend& backend_;
  const Dataset& data_;
  Slot slots_[2];
};

}  // namespace

ModelInputs upload_dataset(Backend& backend, const Dataset& data) {
  const std::vector<int64_t> order = epoch_order(data.size, /*shuffle=*/false, 0, 0);
  return upload_batch(backend, gather_batch(data, order, 0, data.size), data.label_dtype, data.label_width);
}

OptimizerOptions optimizer_options(const TrainingArguments& args) {
  OptimizerOptions o;
  if (!parse_optimizer_kind(args.optim, &o.kind))
    fail("--optim {}: expected adamw, adamw_8bit, sgd or adafactor", args.optim);
  o.adam = AdamWOptions{args.adam_beta1, args.adam_beta2, args.adam_epsilon, args.weight_decay};
  parse_optim_args(args.optim_args, &o);
  if (o.kind != OptimizerKind::Sgd && !args.optim_args.empty())
    fail("--optim-args {}: only --optim sgd takes arguments", args.optim_args);
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0))
    fail("--optim-args {}: Nesterov momentum needs a momentum and zero dampening", args.optim_args);
  return o;
}

Trainer::Trainer(Backend& backend, Model& model, const Dataset& data, TrainingArguments args,
                 const Dataset* eval_data)
    : backend_(backend), model_(model), data_(data), eval_data_(eval_data), args_(std::move(args)) {
  if (args_.eval_strategy != "no" && args_.eval_strategy != "steps" && args_.eval_strategy != "epoch")
    fail("--eval-strategy {}: expected no, steps or epoch", args_.eval_strategy);
  if (args_.eval_strategy != "no" && eval_data_ == nullptr)
    fail("--eval-strategy {}: needs --validation-file", args_.eval_strategy);
  if (eval_data_ != nullptr && !eval_data_->has_labels())
    fail("{}: evaluation needs labels, and the data has none", eval_data_->source);
  if (args_.eval_steps == 0) args_.eval_steps = args_.logging_steps;
  if (args_.eval_steps < 0) fail("--eval-steps must be positive, got {}", args_.eval_steps);
  if (args_.per_device_eval_batch_size <= 0)
    fail("--per-device-eval-batch-size must be positive, got {}", args_.per_device_eval_batch_size);
  if (args_.load_best_model_at_end) {
    metric_greater_is_better(args_.metric_for_best_model);  // a bad name fails here
    if (args_.eval_strategy == "no" || args_.save_strategy != args_.eval_strategy)
      fail("--load-best-model-at-end: needs --eval-strategy and --save-strategy alike (got {} and {})",
           args_.eval_strategy, args_.save_strategy);
    if (args_.save_strategy == "steps" && args_.save_steps % args_.eval_steps != 0)
      fail("--load-best-model-at-end: --save-steps {} must be a multiple of --eval-steps {}", args_.save_steps,
           args_.eval_steps);
  }
  if (args_.per_device_train_batch_size <= 0)
    fail("--per-device-train-batch-size must be positive, got {}", args_.per_device_train_batch_size);
  if (args_.logging_steps <= 0) fail("--logging-steps must be positive, got {}", args_.logging_steps);
  if (!data_.has_labels()) fail("{}: training needs labels, and the data has none", data_.source);
  optimizer_options(args_);  // bad --optim / --optim-args fail here, before any allocation
  if (args_.gradient_checkpointing_policy != "full" && args_.gradient_checkpointing_policy != "selective")
    fail("--gradient-checkpointing-policy {}: expected full or selective", args_.gradient_checkpointing_policy);
  if (args_.save_strategy != "no" && args_.save_strategy != "steps" && args_.save_strategy != "epoch")
    fail("--save-strategy {}: expected no, steps or epoch", args_.save_strategy);
  if (args_.save_strategy != "no" && args_.output_dir.empty())
    fail("--save-strategy {}: needs --output-dir, where checkpoint-N directories go", args_.save_strategy);
  if (args_.save_strategy == "steps" && args_.save_steps <= 0)
    fail("--save-steps must be positive, got {}", args_.save_steps);
  if (args_.gradient_accumulation_steps <= 0)
    fail("--gradient-accumulation-steps must be positive, got {}", args_.gradient_accumulation_steps);
  if (args_.report_to != "none" && args_.report_to != "tensorboard")
    fail("--report-to {}: expected none or tensorboard", args_.report_to);
  if (args_.report_to == "tensorboard" && args_.output_dir.empty() && args_.logging_dir.empty())
    fail("--report-to tensorboard: needs --output-dir or --logging-dir, where the event files go");
  if (args_.lr_scheduler_type == ScheduleKind::ReduceLROnPlateau) {
    // TrainingArguments: "lr_scheduler_type reduce_lr_on_plateau requires an eval strategy".
    if (args_.eval_strategy == "no")
      fail("--lr-scheduler-type reduce_lr_on_plateau: needs an evaluation (--eval-strategy steps or epoch), as "
           "Trainer's; it steps at each evaluation with --metric-for-best-model");
    metric_greater_is_better(args_.metric_for_best_model);  // a bad name fails here
  }
  check_label_smoothing();
  plan_epochs();
}

// Trainer smooths the labels of a model given `labels` (LabelSmoother over its logits): the single-label
// cross-entropies here. It cannot smooth regression or multi-label targets (float labels; LabelSmoother
// gathers by them and fails) and gives question answering no `labels` (start and end positions), so it
// smooths nothing there: both are refused by name. The masked-LM head's chunked loss does not take it.
void Trainer::check_label_smoothing() const {
  const double eps = args_.label_smoothing_factor;
  if (eps == 0.0) return;
  if (!(eps >= 0.0 && eps <= 1.0)) fail("--label-smoothing-factor {}: expected a value in [0, 1]", eps);
  const std::string& task = model_.task();
  if (task == kQuestionAnswering)
    fail("--label-smoothing-factor: question answering has no class labels (start and end positions, which "
         "Trainer does not smooth)");
  if (task == kMaskedLm)
    fail("--label-smoothing-factor: not implemented for the masked-LM head (its chunked loss); use 0");
  if (task == kTokenClassification || task == kMultipleChoice || data_.choices > 0) return;
  const ProblemType type = resolve_problem_type(model_.config(), data_.label_dtype);
  if (type != ProblemType::SingleLabel)
    fail("--label-smoothing-factor: {} labels are not classes to smooth (Trainer's LabelSmoother takes class "
         "indices: single-label classification, token classification, multiple choice)",
         type == ProblemType::Regression ? "regression" : "multi-label");
}

void Trainer::set_communicator(distributed::Communicator* communicator) {
  comm_ = communicator;
  world_ = comm_ ? comm_->world_size() : 1;
  writer_ = comm_ == nullptr || comm_->rank() == 0;
  plan_epochs();
}

void Trainer::plan_epochs() {
  const int64_t B = args_.per_device_train_batch_size, N = args_.gradient_accumulation_steps;
  const int64_t shard = shard_size(data_.size, world_);  // this rank's examples per epoch
  batches_per_epoch_ = args_.dataloader_drop_last ? shard / B : (shard + B - 1) / B;
  if (batches_per_epoch_ == 0)
    fail("--dataloader-drop-last: {} examples{} make no full batch of {}", shard,
         world_ > 1 ? fmt::format(" per rank ({} in all, {} ranks)", data_.size, world_) : std::string(), B);
  // An update every N batches, and one for the rest of an epoch's batches (as Hugging Face's).
  steps_per_epoch_ = (batches_per_epoch_ + N - 1) / N;
  if (args_.max_steps > 0) {
    if (args_.max_steps > kMaxTrainingSteps)
      fail("--max-steps {}: more than the {} steps a run may take", args_.max_steps, kMaxTrainingSteps);
    total_steps_ = args_.max_steps;
  } else {
    if (!(args_.num_train_epochs > 0)) fail("--num-train-epochs must be positive, got {}", args_.num_train_epochs);
    const double steps = std::ceil(args_.num_train_epochs * static_cast<double>(steps_per_epoch_));
    if (!(steps <= static_cast<double>(kMaxTrainingSteps)))
      fail("--num-train-epochs {}: {:.0f} steps ({} an epoch), more than the {} steps a run may take",
           args_.num_train_epochs, steps, steps_per_epoch_, kMaxTrainingSteps);
    total_steps_ = static_cast<int64_t>(steps);
  }
  if (args_.warmup_ratio > 0)
    args_.warmup_steps = warmup_steps_of_ratio(args_.warmup_ratio, total_steps_);
}

std::map<std::string, double> Trainer::evaluate() {
  ANATOMY_CHECK(eval_data_ != nullptr, "evaluate: no validation set");
  const Dataset& eval = *eval_data_;
  Ledger& ledger = backend_.ledger();
  // Multiple choice: a logit per choice, classified as single-label over the choices.
  const int64_t C = eval.choices > 0 ? eval.choices : model_.config().num_labels;
  const int64_t B = args_.per_device_eval_batch_size;
  const bool per_token = model_.task() == kTokenClassification;
  const bool spans = model_.task() == kQuestionAnswering;
  const int64_t rows = per_token ? eval.seq_len : 1;  // logits rows per example
  double span_loss = 0.0;  // question answering: the sum over examples of (start + end cross-entropy) / 2
  const std::vector<int64_t> order = epoch_order(eval.size, /*shuffle=*/false, 0, 0);
  if (model_.task() == kMaskedLm) {
    // The model's loss over each batch's masked tokens (masked with a fixed
    // seed: every evaluation sees the same masks), weighted by the batch's
    // examples as Trainer's evaluation loop weights it; run_mlm's perplexity
    // is exp(eval_loss).
    double total = 0.0;
    for (int64_t begin = 0; begin < eval.size; begin += B) {
      ledger.set_phase("evaluation");
      HostBatch host = gather_batch(eval, order, begin, std::min(eval.size, begin + B));
      if (eval.masking) mask_tokens(host, *eval.masking, args_.seed, eval_masking_stream(begin));
      const ModelInputs inputs = upload_batch(backend_, host, DType::I64, host.seq_len);
      const ForwardOutput out = model_.forward(inputs, ForwardOptions{});
      total += *out.loss * static_cast<double>(host.batch);
    }
    const double loss = total / static_cast<double>(eval.size);
    return {{"eval_loss", loss}, {"perplexity", std::exp(loss)}};
  }
  std::vector<float> logits(static_cast<size_t>(eval.size * rows * C), 0.0f);
  std::vector<float> batch_logits;
  for (int64_t begin = 0; begin < eval.size; begin += B) {
    ledger.set_phase("evaluation");
    // No labels on the device: the loss is computed on the host, from the logits.
    HostBatch host = gather_batch(eval, order, begin, std::min(eval.size, begin + B));
    host.labels_i64.clear();
    const ModelInputs inputs = upload_batch(backend_, host, eval.label_dtype, 0);
    ForwardOptions options;  // dropout off, nothing kept for backward
    const ForwardOutput out = model_.forward(inputs, options);
    if (spans) {
      // [2, b, L']: each example's start and end logits against its positions.
      batch_logits.resize(static_cast<size_t>(out.logits.numel()));
      backend_.copy_to_host(out.logits, batch_logits.data());
      const int64_t b = host.batch, length = host.seq_len;
      for (int64_t i = 0; i < b; ++i)
        for (int64_t k = 0; k < 2; ++k) {
          const float* x = batch_logits.data() + (k * b + i) * length;
          const float max = *std::max_element(x, x + length);
          double sum = 0.0;
          for (int64_t t = 0; t < length; ++t) sum += std::exp(static_cast<double>(x[t]) - max);
          const int64_t position = eval.labels_i64[static_cast<size_t>(2 * (begin + i) + k)];
          span_loss += (std::log(sum) + max - x[position]) / 2.0;
        }
      continue;
    }
    if (!per_token) {
      backend_.copy_to_host(out.logits, logits.data() + begin * C);
      continue;
    }
    // [b, L', C] of a batch cut to its longest row, into [N, L, C].
    batch_logits.resize(static_cast<size_t>(out.logits.numel()));
    backend_.copy_to_host(out.logits, batch_logits.data());
    const int64_t length = host.seq_len;
    for (int64_t i = 0; i < host.batch; ++i)
      std::copy_n(batch_logits.data() + i * length * C, length * C, logits.data() + ((begin + i) * rows) * C);
  }
  // Question answering on tensors (no contexts to extract answers from): the loss, as Trainer's mean over examples.
  if (spans) return {{"eval_loss", span_loss / static_cast<double>(eval.size)}};
  if (per_token)
    return token_classification_metrics(logits, C, eval, model_label_names(model_.config()), B,
                                        args_.label_smoothing_factor);
  return classification_metrics(
      logits, C, eval.choices > 0 ? ProblemType::SingleLabel : resolve_problem_type(model_.config(), eval.label_dtype),
      eval, args_.label_smoothing_factor);
}

// What one call of train() holds, from setup to finish. The members are
// declared in the order the loop acquires them, so that they are released in
// the reverse order, however train() ends.
struct Trainer::Run {
  explicit Run(Model& m) : units_reset{m}, hook_reset{m} {}
  bool sharded = false;        // ZeRO stage >= 1 under data parallelism
  int stage = 0;
  bool grads_sharded = false;  // stages 2 and 3: no whole gradient buffer
  bool masters_sharded = false;  // the float32 weights sharded: the model holds no whole copy
  std::unique_ptr<distributed::ZeroSharding> zero;
  ParameterSet* grads = nullptr;
  std::unique_ptr<Optimizer> optimizer;
  TrainerState state;  // what a checkpoint records and a resumed run must share
  CheckpointRanks ranks;
  struct UnitsReset {  // the model reads its own buffers again
    Model& model;
    ~UnitsReset() { model.set_parameter_units(nullptr); }
  } units_reset;
  int64_t first_step = 0;
  std::optional<TokenizerSettings> tokenizer;
  std::ofstream log;
  TrainResult result;
  std::optional<Progress> bar;
  nlohmann::json log_history = nlohmann::json::array();  // Trainer's (trainer_state.json)
  std::optional<io::EventFileWriter> tensorboard;  // --report-to tensorboard (rank 0)
  std::optional<PlateauSchedule> plateau;           // --lr-scheduler-type reduce_lr_on_plateau
  double total_loss = 0.0;  // the sum of this run's finite step losses: Trainer's train_loss over the steps
  int64_t nonfinite_steps = 0;  // this run's steps whose loss was not finite (--skip-nonfinite-steps)
  std::optional<BatchLoader> loader;
  std::optional<InputSlots> slots;
  // Data parallelism: each update's last backward all-reduces the gradients in buckets as they become final.
  std::optional<distributed::GradientReducer> reducer;
  struct HookReset {
    Model& model;
    ~HookReset() { model.set_gradients_ready_hook({}); }
  } hook_reset;
  int64_t window = 0;  // batches of the current update
  int64_t micro = 0;   // batches begun so far, over the whole run: picks the upload slot and the dropout masks
  ModelInputs next_inputs;
  // Since the last log record.
  double window_loss = 0.0;
  int64_t window_steps = 0, window_samples = 0, window_nonfinite = 0;
  Clock::time_point window_start, start, steady_start;
  int64_t steady_from = -1;  // samples done when the steady state's clock started (-1: not started)
  // Dynamic loss scaling as torch.cuda.amp.GradScaler: start at 2^16, halve and
  // skip the update on a non-finite gradient, double after 2000 clean steps.
  double loss_scale = 1.0;
  int64_t clean_steps = 0, updates = 0;
};

// One optimizer update's figures.
struct Trainer::Update {
  double loss = 0.0;         // the mean of the batches' losses, as Hugging Face logs it
  int64_t samples = 0;
  double grad_norm = 0.0;    // before clipping
  double learning_rate = 0.0;
  double loss_scale = 1.0;   // the scale this update's backwards used
};

TrainResult Trainer::train(const std::function<void(const StepLog&)>& on_log) {
  Run run(model_);
  setup(run);
  resume(run);
  open_log(run);
  start_loop(run);
  for (int64_t step = run.first_step; step < total_steps_; ++step) {
    if (hooks_.before) hooks_.before(step);
    const Update update = update_once(run, step);
    if (hooks_.after) hooks_.after(step);
    record(run, step, update, on_log);
    evaluate_and_save(run, step);
    backend_.ledger().end_step();  // the whole-run memory series: what the step left live
  }
  return finish(run);
}

// The ZeRO sharding, the gradients, the optimizer, and the state a checkpoint shares.
void Trainer::setup(Run& run) {
  run.sharded = comm_ && args_.zero_stage >= 1;
  run.stage = run.sharded ? static_cast<int>(args_.zero_stage) : 0;
  if (run.stage >= 2 && model_.task() == kMaskedLm)
    fail("--zero-stage {}: the masked-LM head's decoder is the word embeddings (one tied parameter of two units), "
         "which stages 2 and 3 would lend unit by unit; use --zero-stage 0 or 1", run.stage);
  // ZeRO stages 2 and 3: no whole gradient buffer (and at stage 3 no whole
  // weights): the model reads and writes unit by unit through `zero`. Under
  // mixed precision stage 1 shards by unit too, for its float32 masters.
  const bool mixed = model_.compute_dtype() != DType::F32;
  run.grads_sharded = run.stage >= 2;
  if (run.grads_sharded || (run.stage == 1 && mixed))
    run.zero = std::make_unique<distributed::ZeroSharding>(backend_, *comm_, model_, run.stage);
  run.masters_sharded = run.zero && run.zero->shards_masters();
  run.grads = run.grads_sharded ? nullptr : &model_.gradients();
  run.optimizer =
      run.zero      ? distributed::make_zero_sharded_optimizer(backend_, *run.zero, model_.weights(), optimizer_options(args_))
      : run.sharded ? distributed::make_zero1_optimizer(backend_, *comm_, model_.weights(), optimizer_options(args_))
                    : make_optimizer(backend_, model_.weights(), optimizer_options(args_));

  TrainerState& state = run.state;
  state.seed = args_.seed;
  state.optimizer = run.optimizer->name();
  state.per_device_train_batch_size = args_.per_device_train_batch_size;
  state.gradient_accumulation_steps = args_.gradient_accumulation_steps;
  state.examples = data_.size;
  state.shuffle = args_.shuffle;
  state.drop_last = args_.dataloader_drop_last;
  state.group_by_length = args_.group_by_length;
  state.precision = args_.bf16 ? "bf16" : args_.fp16 ? "fp16" : "fp32";
  state.loss_scale = args_.fp16 ? 65536.0 : 1.0;
  state.world_size = world_;
  state.zero_stage = run.stage;
  // Where this rank's part of a checkpoint goes (ZeRO: its shard of the optimizer states).
  CheckpointRanks& ranks = run.ranks;
  ranks.comm = world_ > 1 ? comm_ : nullptr;
  if (run.zero) {  // its chunk of every unit, one after the other
    ranks.sharded = true;
    ranks.unit_chunks = true;
    ranks.shard_begin = 0;
    ranks.shard_end = run.zero->shards().shard_elements;
    ranks.shard_total = run.zero->shards().flat_elements;
  } else if (run.sharded) {
    const distributed::ShardRange mine =
        distributed::shard_range(model_.weights().flat().numel(), comm_->rank(), world_);
    ranks.sharded = true;
    ranks.shard_begin = mine.begin;
    ranks.shard_end = mine.end;
    ranks.shard_total = model_.weights().flat().numel();
  }
}

// --resume-from-checkpoint: the weights, the optimizer states and the counters
// of a checkpoint (the same on every rank); then the model lends its units to
// ZeRO stages 2 and 3.
void Trainer::resume(Run& run) {
  if (!args_.resume_from_checkpoint.empty()) {
    const std::string dir = resolve_checkpoint(args_.resume_from_checkpoint, args_.output_dir);
    if (run.masters_sharded) model_.restore_weights();  // the checkpoint's whole model, then sharded again below
    run.state = load_checkpoint(dir, model_, *run.optimizer, backend_, run.state, run.ranks);
    if (run.state.global_step > total_steps_)
      fail("--resume-from-checkpoint {}: the checkpoint is at step {}, past this run's {} steps", dir,
           run.state.global_step, total_steps_);
    if (run.ranks.comm) {
      // Every rank must continue from the same step: the same checkpoint, seen by all.
      const std::vector<double> all =
          distributed::gather_host(*comm_, {static_cast<double>(run.state.global_step)});
      for (int r = 1; r < world_; ++r)
        if (all[static_cast<size_t>(r)] != all[0])
          fail("--resume-from-checkpoint {}: rank 0 resumed from step {} and rank {} from step {}: every rank must "
               "see the same checkpoints (a shared --output-dir)",
               args_.resume_from_checkpoint, all[0], r, all[static_cast<size_t>(r)]);
    }
    fmt::print("Resuming from {}: step {} of {}\n", dir, run.state.global_step, total_steps_);
  }
  if (run.masters_sharded && model_.weights().allocated()) run.zero->shard_model_weights();  // resumed
  model_.set_parameter_units(run.grads_sharded ? run.zero.get() : nullptr);
  run.first_step = run.state.global_step;
  run.log_history = run.state.log_history;  // Trainer's records up to the checkpoint, continued
  if (args_.lr_scheduler_type == ScheduleKind::ReduceLROnPlateau) {
    run.plateau.emplace(args_.learning_rate);
    const nlohmann::json& saved = run.state.lr_scheduler;
    if (!saved.empty()) {
      const auto number = [&](const char* key) {
        if (!saved.contains(key) || !saved[key].is_number())
          fail("--resume-from-checkpoint: trainer_state.json's lr_scheduler has no number '{}'", key);
        return saved[key];
      };
      run.plateau->lr = number("lr").get<double>();
      if (saved.contains("best") && !saved["best"].is_null()) run.plateau->best = number("best").get<double>();
      run.plateau->num_bad_epochs = number("num_bad_epochs").get<int64_t>();
      run.plateau->cooldown_counter = number("cooldown_counter").get<int64_t>();
    }
  }
  run.tokenizer = tokenizer_;
  if (!run.tokenizer && args_.save_strategy != "no" && io::is_directory(args_.model))
    run.tokenizer = read_tokenizer_settings(args_.model);
}

// output_dir/log.jsonl (rank 0): a resumed run keeps the records up to its checkpoint and continues the file.
void Trainer::open_log(Run& run) {
  namespace fs = std::filesystem;
  if (writer_ && args_.report_to == "tensorboard")  // Trainer's TensorBoardCallback, on rank 0
    run.tensorboard.emplace(args_.logging_dir.empty() ? io::default_logging_dir(args_.output_dir) : args_.logging_dir);
  if (args_.output_dir.empty() || !writer_) return;
  std::error_code ec;
  fs::create_directories(args_.output_dir, ec);
  if (ec) fail("--output-dir {}: cannot create ({})", args_.output_dir, ec.message());
  const std::string log_path = (fs::path(args_.output_dir) / "log.jsonl").string();
  std::string kept;
  if (run.first_step > 0 && io::path_exists(log_path)) {
    std::ifstream old(log_path);
    for (std::string line; std::getline(old, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= run.first_step)
        kept += line + "\n";
    }
  }
  run.log.open(log_path, std::ios::trunc);
  if (!run.log) fail("{}: cannot open for writing", log_path);
  run.log << kept << std::flush;
}

// The batches of update `step`: as many as the window of its epoch holds.
int64_t Trainer::window_of(int64_t step) const {
  const int64_t N = args_.gradient_accumulation_steps;
  const int64_t first = (step % steps_per_epoch_) * N;
  return std::min(first + N, batches_per_epoch_) - first;
}

// The loader, the device's input slots, the gradient reducer, the first
// batch's upload, the clocks and the loss scaler.
void Trainer::start_loop(Run& run) {
  Ledger& ledger = backend_.ledger();
  run.bar.emplace(total_steps_, run.first_step, args_.progress && writer_, isatty(STDERR_FILENO) != 0);
  const int64_t B = args_.per_device_train_batch_size;
  LoaderOptions loader_options;
  loader_options.batch_size = B;
  loader_options.shuffle = args_.shuffle;
  loader_options.seed = args_.seed;
  loader_options.drop_last = args_.dataloader_drop_last;
  loader_options.num_workers = args_.dataloader_num_workers;
  loader_options.prefetch_factor = args_.dataloader_prefetch_factor;
  loader_options.first_batch = run.state.micro_batches;
  loader_options.rank = comm_ ? comm_->rank() : 0;
  loader_options.world_size = world_;
  loader_options.group_by_length = args_.group_by_length;
  run.loader.emplace(data_, loader_options);
  ledger.set_phase("data");
  run.slots.emplace(backend_, data_, std::min(B, data_.size));
  if (comm_ && run.grads != nullptr) {
    run.reducer.emplace(*comm_, run.grads->flat());
    model_.set_gradients_ready_hook([&reducer = run.reducer](int64_t from) { reducer->ready(from); });
  }
  run.window = window_of(run.first_step);
  run.micro = run.state.micro_batches;
  if (run.first_step < total_steps_)
    run.next_inputs = run.slots->upload(static_cast<int>(run.micro % 2), run.loader->next());
  run.window_start = run.start = run.steady_start = Clock::now();
  run.loss_scale = run.state.loss_scale;
  run.clean_steps = run.state.clean_steps;
  run.updates = run.state.updates;
  run.result.skipped_steps = run.state.skipped_steps;
}

// One optimizer update: the window's batches forward and backward (gradients
// accumulated, scaled by the loss scale, averaged over the ranks), the
// reduction, unscaling, the norm and clipping, fp16's overflow check, the
// step and the schedule; the next update's first batch is uploaded meanwhile.
Trainer::Update Trainer::update_once(Run& run, int64_t step) {
  Ledger& ledger = backend_.ledger();
  ledger.set_step(step);
  Update u;
  u.loss_scale = run.loss_scale;
  const int64_t count = run.window;
  if (run.grads_sharded) run.zero->zero_gradients();
  else model_.zero_gradients();
  for (int64_t m = 0; m < count; ++m, ++run.micro) {
    ledger.set_phase("data");
    backend_.upload_wait();  // this batch, uploaded during the previous one
    const ModelInputs inputs = run.next_inputs;
    u.samples += inputs.input_ids.dim(0);
    ForwardOptions options;
    options.training = true;
    options.save_for_backward = true;
    options.gradient_checkpointing = args_.gradient_checkpointing;
    options.selective_checkpointing = args_.gradient_checkpointing_policy == "selective";
    options.seed = args_.seed;
    // Dropout masks are a function of (seed, step, site, element): each rank draws its own.
    options.step = static_cast<uint64_t>(run.micro * world_ + (comm_ ? comm_->rank() : 0));
    options.label_smoothing = args_.label_smoothing_factor;
    const ForwardOutput out = model_.forward(inputs, options);
    u.loss += *out.loss / static_cast<double>(count);
    // Each batch's loss counts 1/count: count batches of b make one batch of count·b;
    // and 1/world: the ranks' gradients are summed, so that they average.
    if (run.reducer && m + 1 == count) run.reducer->arm();
    model_.backward(u.loss_scale / static_cast<double>(count * world_));
    // ZeRO 2/3: the embeddings' reduce-scatter, the backward's last, lands in the shard before the next forward.
    if (run.grads_sharded) run.zero->finish_gradients();
    if (m + 1 < count) {  // the window's next batch uploads while this one's work runs
      ledger.set_phase("data");
      run.next_inputs = run.slots->upload(static_cast<int>((run.micro + 1) % 2), run.loader->next());
    }
  }
  if (comm_) {
    if (run.reducer) {
      ledger.set_phase("gradient all-reduce");
      run.reducer->finish();
    } else {
      ledger.set_phase("gradient reduce-scatter");
      run.zero->finish_gradients();
    }
    // The world's loss (the mean of the ranks' means: equal batches) and samples.
    const std::vector<double> sums = comm_->sum_host({u.loss, static_cast<double>(u.samples)});
    u.loss = sums[0] / world_;
    u.samples = static_cast<int64_t>(std::llround(sums[1]));
  }
  ledger.set_phase("optimizer step");
  if (u.loss_scale != 1.0) {
    if (run.grads_sharded) run.zero->scale_gradients(1.0 / u.loss_scale);
    else backend_.scale(run.grads->flat(), 1.0 / u.loss_scale);
  }
  // Under ZeRO 2/3 the norm sums every rank's shard: the same on every rank, so is fp16's overflow verdict.
  // The clipping coefficient goes to the optimizer, which multiplies it into each gradient as it reads it
  // (the same bits as scaling them first, without a pass of its own over the gradients).
  u.grad_norm = run.grads_sharded ? run.zero->gradient_norm() : gradient_norm(backend_, *run.grads);
  const double grad_scale = clip_coefficient(u.grad_norm, args_.max_grad_norm);
  // The schedule advances with the updates made, as Hugging Face's does when GradScaler skips one.
  u.learning_rate =
      run.plateau ? run.plateau->lr
                  : scheduled_lr(args_.lr_scheduler_type, args_.learning_rate, run.updates, args_.warmup_steps,
                                 total_steps_);
  // Outside fp16's scaler a non-finite loss or gradient would end in NaN
  // weights saved as a trained model: the run stops before the update takes it.
  // With --skip-nonfinite-steps the update is skipped instead (counted as
  // fp16's skipped steps are), and stderr and log.jsonl say so.
  bool skip = false;
  if (!args_.fp16 && !(std::isfinite(u.loss) && std::isfinite(u.grad_norm))) {
    const char* what = std::isfinite(u.loss) ? "gradient norm" : "loss";
    const double value = std::isfinite(u.loss) ? u.grad_norm : u.loss;
    if (!args_.skip_nonfinite_steps)
      fail("step {}: the training {} is {}, not finite; stopping before the update (a batch whose labels are all "
           "ignored, -100, has no loss; a learning rate too high diverges; --skip-nonfinite-steps skips such "
           "steps instead)",
           step + 1, what, value);
    if (writer_)
      std::fprintf(stderr, "warning: step %lld: the training %s is %s, not finite; its update is skipped "
                           "(--skip-nonfinite-steps)\n",
                   static_cast<long long>(step + 1), what, fmt::format("{}", value).c_str());
    skip = true;
    ++run.result.skipped_steps;
  }
  if (args_.fp16) {
    if (!std::isfinite(u.grad_norm)) {
      skip = true;
      run.loss_scale *= 0.5;
      run.clean_steps = 0;
      ++run.result.skipped_steps;
    } else if (++run.clean_steps == 2000) {
      run.loss_scale *= 2.0;
      run.clean_steps = 0;
    }
  }
  if (!skip) {
    // Refreshes the 16-bit copy too (ZeRO 2/3: the gradients are its shard's, and every rank gets the update).
    run.optimizer->step(model_.weights(), run.grads ? *run.grads : model_.weights(), u.learning_rate,
                        model_.half_weights(), grad_scale);
    ++run.updates;
  }
  if (step + 1 < total_steps_) {  // the next update's first batch uploads while this one's work runs
    run.window = window_of(step + 1);
    ledger.set_phase("data");
    run.next_inputs = run.slots->upload(static_cast<int>(run.micro % 2), run.loader->next());
  }
  return u;
}

// The update's figures: the result, the steady state's clock, the progress
// bar, and every logging_steps a record (log.jsonl and `on_log`).
void Trainer::record(Run& run, int64_t step, const Update& u, const std::function<void(const StepLog&)>& on_log) {
  TrainResult& result = run.result;
  result.losses.push_back(u.loss);
  result.samples += u.samples;
  if (step == run.first_step && step + 1 < total_steps_) {  // the steady state's clock starts once this step is done
    backend_.synchronize();
    run.steady_start = Clock::now();
    run.steady_from = result.samples;
  }
  // Trainer's logging_nan_inf_filter: a step whose loss is not finite (one
  // --skip-nonfinite-steps skipped) stays out of the logged means.
  const bool finite = std::isfinite(u.loss);
  run.window_loss += finite ? u.loss : 0.0;
  run.window_nonfinite += finite ? 0 : 1;
  run.nonfinite_steps += finite ? 0 : 1;
  run.window_steps += 1;
  run.window_samples += u.samples;
  run.total_loss += finite ? u.loss : 0.0;
  run.bar->step(step + 1, u.loss, seconds_since(run.start));
  if ((step + 1) % args_.logging_steps != 0 && step + 1 != total_steps_) return;
  backend_.synchronize();
  // Trainer's logged loss: the mean of the step losses since the previous
  // record (each step's the mean of its batches, and of the ranks).
  const StepLog record{step + 1,
                       static_cast<double>(step + 1) / steps_per_epoch_,
                       run.window_steps > run.window_nonfinite
                           ? run.window_loss / static_cast<double>(run.window_steps - run.window_nonfinite)
                           : std::nan(""),
                       u.loss,
                       u.learning_rate,
                       u.grad_norm,
                       run.window_samples / std::max(seconds_since(run.window_start), 1e-9),
                       u.loss_scale,
                       result.skipped_steps};
  if (run.log.is_open()) {
    const LedgerSnapshot memory = backend_.ledger().snapshot();
    nlohmann::json j = {{"step", record.step},          {"epoch", record.epoch},
                        {"loss", record.loss},          {"step_loss", record.step_loss},
                        {"learning_rate", record.learning_rate}, {"grad_norm", record.grad_norm},
                        {"samples_per_second", record.samples_per_second},
                        {"data_wait_seconds", run.loader->wait_seconds()},  // so far in the run
                        // memory now, for growth over a long run: the ledger's live bytes and the pool's, the
                        // process's resident set
                        {"device_live_bytes", memory.live_total},
                        {"device_reserved_bytes", memory.reserved},
                        {"host_rss_bytes", gpu::process_rss_bytes()}};
    if (args_.fp16) j["loss_scale"] = record.loss_scale;
    if (args_.fp16 || args_.skip_nonfinite_steps) j["skipped_steps"] = record.skipped_steps;
    run.log << j.dump() << "\n" << std::flush;
  }
  if (writer_)
    add_history(run, {{"loss", record.loss},
                      {"grad_norm", record.grad_norm},
                      {"learning_rate", record.learning_rate},
                      {"epoch", record.epoch},
                      {"step", record.step}});
  ProgressRecord line;
  line.step = record.step;
  line.total = total_steps_;
  line.epoch = record.epoch;
  line.loss = record.loss;
  line.learning_rate = record.learning_rate;
  line.grad_norm = record.grad_norm;
  line.samples_per_second = record.samples_per_second;
  line.elapsed = seconds_since(run.start);
  line.done = step + 1 - run.first_step;
  run.bar->record(line);
  if (on_log) on_log(record);
  run.window_loss = 0.0;
  run.window_steps = run.window_samples = run.window_nonfinite = 0;
  run.window_start = Clock::now();
}

std::map<std::string, double> Trainer::eval_speed_metrics(double seconds) const {
  // speed_metrics("eval", ...): the examples and the batches of every rank.
  const int64_t n = eval_data_ ? eval_data_->size : 0;
  const int64_t batch = args_.per_device_eval_batch_size * world_;
  std::map<std::string, double> m{{"eval_runtime", round_to(seconds, 4)}};
  if (seconds > 0) {
    m["eval_samples_per_second"] = round_to(static_cast<double>(n) / seconds, 3);
    m["eval_steps_per_second"] = round_to(static_cast<double>((n + batch - 1) / batch) / seconds, 3);
  }
  return m;
}

void Trainer::add_history(Run& run, nlohmann::json record) {
  if (run.tensorboard) {
    // Trainer's TensorBoardCallback.on_log: rewrite_logs (eval_* under eval/, the rest under train/), every
    // number but the step, at the global step.
    const int64_t step = record["step"].get<int64_t>();
    for (const auto& [key, value] : record.items()) {
      if (key == "step" || !value.is_number()) continue;
      const std::string tag = key.rfind("eval_", 0) == 0 ? "eval/" + key.substr(5) : "train/" + key;
      run.tensorboard->add_scalar(tag, value.get<double>(), step);
    }
    run.tensorboard->flush();
  }
  run.log_history.push_back(std::move(record));
}

nlohmann::json Trainer::trainer_fields(const Run& run, int64_t global_step) const {
  (void)run;
  const nlohmann::json none;  // null
  nlohmann::json j = {
      {"epoch", static_cast<double>(global_step) / steps_per_epoch_},
      {"global_step", global_step},
      {"max_steps", total_steps_},
      {"logging_steps", args_.logging_steps},
      {"eval_steps", args_.eval_steps},
      {"save_steps", args_.save_steps},
      {"train_batch_size", args_.per_device_train_batch_size},
      {"num_train_epochs", (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_},
      {"num_input_tokens_seen", 0},
      {"total_flos", 0},
      {"best_metric", best_step_ > 0 ? nlohmann::json(best_value_) : none},
      {"best_global_step", best_step_ > 0 ? nlohmann::json(best_step_) : none},
      {"best_model_checkpoint",
       best_step_ > 0
           ? nlohmann::json((std::filesystem::path(args_.output_dir) / fmt::format("checkpoint-{}", best_step_)).string())
           : none},
      {"is_local_process_zero", writer_},
      {"is_world_process_zero", writer_},
      {"is_hyper_param_search", false},
      {"trial_name", none},
      {"trial_params", none},
      {"stateful_callbacks", nlohmann::json::object()}};
  return j;
}

// --eval-strategy and --save-strategy after update `step`: the metrics (and
// the best so far for --load-best-model-at-end), and a checkpoint, which every
// rank takes part in.
void Trainer::evaluate_and_save(Run& run, int64_t step) {
  TrainResult& result = run.result;
  const bool evaluate_now = (args_.eval_strategy == "steps" && (step + 1) % args_.eval_steps == 0) ||
                            (args_.eval_strategy == "epoch" && (step + 1) % steps_per_epoch_ == 0);
  if (evaluate_now) {
    const Clock::time_point eval_start = Clock::now();
    result.last_evaluation = evaluate();
    const std::map<std::string, double> speed = eval_speed_metrics(seconds_since(eval_start));
    const double epoch = static_cast<double>(step + 1) / steps_per_epoch_;
    nlohmann::json j = {{"step", step + 1}, {"epoch", epoch}};
    nlohmann::json history = nlohmann::json::object();  // Trainer's record: eval_* metrics, speed, epoch, step
    std::vector<std::string> shown;
    for (const auto& [name, value] : result.last_evaluation) {
      j[name] = value;
      if (name.rfind("eval_", 0) == 0) history[name] = value;  // run_mlm's perplexity is no Trainer metric
      shown.push_back(fmt::format("{} {:.6g}", name, value));
    }
    for (const auto& [name, value] : speed) j[name] = history[name] = value;
    history["epoch"] = epoch;
    history["step"] = step + 1;
    if (run.log.is_open()) run.log << j.dump() << "\n" << std::flush;
    if (writer_) add_history(run, std::move(history));
    if (run.plateau) {
      // Trainer steps ReduceLROnPlateau with metric_for_best_model after each evaluation.
      const std::string key = args_.metric_for_best_model.rfind("eval_", 0) == 0 ? args_.metric_for_best_model
                                                                                 : "eval_" + args_.metric_for_best_model;
      const auto it = result.last_evaluation.find(key);
      if (it == result.last_evaluation.end())
        fail("--metric-for-best-model {}: this problem type's evaluation has no {}, which "
             "--lr-scheduler-type reduce_lr_on_plateau steps with", args_.metric_for_best_model, key);
      run.plateau->step(it->second);
    }
    if (args_.print_evaluations) {
      run.bar->break_line();
      fmt::print("Evaluation at step {}: {}\n", step + 1, fmt::join(shown, ", "));
      std::fflush(stdout);
    }
    if (args_.load_best_model_at_end) {
      const std::string key = args_.metric_for_best_model.rfind("eval_", 0) == 0
                                  ? args_.metric_for_best_model
                                  : "eval_" + args_.metric_for_best_model;
      auto it = result.last_evaluation.find(key);
      if (it == result.last_evaluation.end())
        fail("--metric-for-best-model {}: this problem type's evaluation has no {}", args_.metric_for_best_model,
             key);
      const bool greater = metric_greater_is_better(key);
      if (best_step_ == 0 || (greater ? it->second > best_value_ : it->second < best_value_)) {
        best_step_ = step + 1;
        best_value_ = it->second;
      }
    }
  }
  const bool save = (args_.save_strategy == "steps" && (step + 1) % args_.save_steps == 0) ||
                    (args_.save_strategy == "epoch" && (step + 1) % steps_per_epoch_ == 0);
  if (!save) return;
  // Every rank: rank 0 writes the checkpoint, each rank its shard of the optimizer states.
  backend_.synchronize();
  TrainerState& state = run.state;
  state.global_step = step + 1;
  state.updates = run.updates;
  state.micro_batches = run.micro;
  state.loss_scale = run.loss_scale;
  state.clean_steps = run.clean_steps;
  state.skipped_steps = result.skipped_steps;
  state.trainer_fields = trainer_fields(run, step + 1);
  state.log_history = run.log_history;
  if (run.plateau)
    state.lr_scheduler = {{"lr", run.plateau->lr},
                          {"best", std::isfinite(run.plateau->best) ? nlohmann::json(run.plateau->best) : nlohmann::json()},
                          {"num_bad_epochs", run.plateau->num_bad_epochs},
                          {"cooldown_counter", run.plateau->cooldown_counter}};
  // The masters sharded: the whole model gathered, unit by unit, to rank 0's host memory.
  std::vector<float> gathered;
  if (run.masters_sharded) gathered = run.zero->gather_weights_to_host();
  run.ranks.model_weights = run.masters_sharded ? &gathered : nullptr;
  save_checkpoint(args_.output_dir, model_, backend_, *run.optimizer, state,
                  run.tokenizer ? &*run.tokenizer : nullptr, args_.save_total_limit, best_step_, run.ranks);
  run.ranks.model_weights = nullptr;
}

// The end of the run: the time, the whole model back on every rank (ZeRO),
// the best checkpoint reloaded when asked, and the figures.
TrainResult Trainer::finish(Run& run) {
  Ledger& ledger = backend_.ledger();
  TrainResult& result = run.result;
  backend_.synchronize();
  result.seconds = seconds_since(run.start);
  const double steady_seconds = seconds_since(run.steady_start);
  if (comm_) comm_->sum_host({});  // a barrier: rank 0 has written every checkpoint
  if (run.masters_sharded) {  // the whole model again on every rank, for what follows training (saving, evaluating)
    ledger.set_phase("gather weights");
    run.optimizer.reset();  // the states and the gradient shard first: training is over
    run.zero->release_gradients();
    run.zero->restore_model_weights();
  }
  model_.set_parameter_units(nullptr);
  if (args_.load_best_model_at_end && best_step_ > 0) {
    const std::string dir =
        (std::filesystem::path(args_.output_dir) / fmt::format("checkpoint-{}", best_step_)).string();
    load_weights(model_, dir, args_.seed);
    result.best_step = best_step_;
    fmt::print("Loaded the best model from {} ({} {:.6g})\n", dir, args_.metric_for_best_model, best_value_);
  }
  result.steps = total_steps_ - run.first_step;
  result.samples_per_second = result.samples / std::max(result.seconds, 1e-9);
  // Trainer's final record: speed_metrics("train", ...) over this run's steps,
  // train_loss the mean of their losses, and the epoch.
  const double epoch = static_cast<double>(total_steps_) / steps_per_epoch_;
  std::map<std::string, double>& m = result.train_metrics;
  m["train_runtime"] = round_to(result.seconds, 4);
  if (result.seconds > 0) {
    m["train_samples_per_second"] = round_to(static_cast<double>(result.samples) / result.seconds, 3);
    m["train_steps_per_second"] = round_to(static_cast<double>(result.steps) / result.seconds, 3);
  }
  m["train_loss"] = run.total_loss / std::max(static_cast<double>(result.steps - run.nonfinite_steps), 0.001);
  m["epoch"] = epoch;
  if (writer_) {
    nlohmann::json last = metrics_json(m);
    last["step"] = total_steps_;
    add_history(run, std::move(last));
  }
  // run_glue's do_eval: the final model on the validation set (the last
  // evaluation's figures when it was of this very model).
  if (eval_data_ && writer_ && args_.print_evaluations) {
    const bool fresh = !result.last_evaluation.empty() && !result.best_step &&
                       ((args_.eval_strategy == "steps" && total_steps_ % args_.eval_steps == 0) ||
                        (args_.eval_strategy == "epoch" && total_steps_ % steps_per_epoch_ == 0));
    const Clock::time_point eval_start = Clock::now();
    result.eval_metrics = fresh ? result.last_evaluation : evaluate();
    if (!fresh)
      for (const auto& [name, value] : eval_speed_metrics(seconds_since(eval_start))) result.eval_metrics[name] = value;
    else {
      // The speed of that evaluation: its record's.
      for (auto it = run.log_history.rbegin(); it != run.log_history.rend(); ++it)
        if (it->contains("eval_runtime")) {
          for (const char* key : {"eval_runtime", "eval_samples_per_second", "eval_steps_per_second"})
            if (it->contains(key)) result.eval_metrics[key] = (*it)[key].get<double>();
          break;
        }
    }
    result.eval_metrics["epoch"] = epoch;
    result.eval_metrics["eval_samples"] = static_cast<double>(eval_data_->size);
  }
  if (!args_.output_dir.empty() && writer_) {
    // Trainer.save_state() and save_metrics() as run_glue calls them after training.
    nlohmann::json state = trainer_fields(run, total_steps_);
    state["log_history"] = run.log_history;
    io::write_text_file_atomic((std::filesystem::path(args_.output_dir) / kTrainerStateFile).string(),
                               state.dump(2) + "\n");
    std::map<std::string, double> train = m;
    train["train_samples"] = static_cast<double>(data_.size);
    save_metrics(args_.output_dir, "train", train);
    if (!result.eval_metrics.empty()) save_metrics(args_.output_dir, "eval", result.eval_metrics);
  }
  if (run.steady_from >= 0)
    result.steady_samples_per_second =
        static_cast<double>(result.samples - run.steady_from) / std::max(steady_seconds, 1e-9);
  result.data_wait_seconds = run.loader->wait_seconds();
  ledger.set_step(-1);
  ledger.set_phase("done");
  result.memory = ledger.snapshot();
  return std::move(result);
}

}  // namespace anatomy
