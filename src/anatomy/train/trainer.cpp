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
#include "anatomy/distributed/data_parallel.h"
#include "anatomy/distributed/zero.h"
#include "anatomy/distributed/zero_sharding.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/optim/optimizer.h"
#include "anatomy/train/checkpointing.h"
#include "anatomy/train/metrics.h"

namespace anatomy {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A one-line progress bar on stderr, redrawn in place; only on a terminal.
class ProgressBar {
 public:
  ProgressBar(int64_t total, bool enabled) : total_(total), enabled_(enabled && isatty(STDERR_FILENO)) {}
  void update(int64_t done, double loss, double elapsed) {
    if (!enabled_) return;
    const int width = 30;
    const int filled = static_cast<int>(width * done / std::max<int64_t>(total_, 1));
    const double rate = elapsed > 0 ? done / elapsed : 0.0;
    const double eta = rate > 0 ? (total_ - done) / rate : 0.0;
    fmt::print(stderr, "\r[{}{}] {}/{} loss {:.4f} {:.2f} it/s eta {:.0f}s  ", std::string(filled, '#'),
               std::string(width - filled, '.'), done, total_, loss, rate, eta);
    std::fflush(stderr);
  }
  ~ProgressBar() {
    if (enabled_) fmt::print(stderr, "\n");
  }

 private:
  int64_t total_;
  bool enabled_;
};

}  // namespace

BertInputs upload_batch(Backend& backend, const HostBatch& b, DType label_dtype, int64_t label_width) {
  Ledger& ledger = backend.ledger();
  BertInputs in;
  auto upload_tokens = [&](const std::vector<int64_t>& host, const char* name) {
    if (host.empty()) return Tensor();
    Tensor t = Tensor::empty(ledger, {b.batch, b.seq_len}, DType::I64, Category::Data, name);
    backend.copy_from_host(t, host.data());
    return t;
  };
  in.input_ids = upload_tokens(b.input_ids, "input_ids");
  in.token_type_ids = upload_tokens(b.token_type_ids, "token_type_ids");
  in.attention_mask = upload_tokens(b.attention_mask, "attention_mask");
  if (label_width > 0) {
    Shape shape = label_width == 1 ? Shape{b.batch} : Shape{b.batch, label_width};
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
  BertInputs upload(int s, const HostBatch& b) {
    Slot& slot = slots_[s];
    BertInputs in;
    auto tokens = [&](const Tensor& buffer, const std::vector<int64_t>& host, const char* name) {
      if (host.empty()) return Tensor();
      Tensor t = buffer.slice(0, {b.batch, b.seq_len}, name);
      backend_.upload_async(t, host.data());
      return t;
    };
    in.input_ids = tokens(slot.ids, b.input_ids, "input_ids");
    in.token_type_ids = tokens(slot.types, b.token_type_ids, "token_type_ids");
    in.attention_mask = tokens(slot.mask, b.attention_mask, "attention_mask");
    if (data_.label_width > 0) {
      const Shape shape = data_.label_width == 1 ? Shape{b.batch} : Shape{b.batch, data_.label_width};
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

BertInputs upload_dataset(Backend& backend, const Dataset& data) {
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

Trainer::Trainer(Backend& backend, BertForSequenceClassification& model, const Dataset& data, TrainingArguments args,
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
  plan_epochs();
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
    total_steps_ = args_.max_steps;
  } else {
    if (!(args_.num_train_epochs > 0)) fail("--num-train-epochs must be positive, got {}", args_.num_train_epochs);
    total_steps_ = static_cast<int64_t>(std::ceil(args_.num_train_epochs * steps_per_epoch_));
  }
}

std::map<std::string, double> Trainer::evaluate() {
  ANATOMY_CHECK(eval_data_ != nullptr, "evaluate: no validation set");
  const Dataset& eval = *eval_data_;
  Ledger& ledger = backend_.ledger();
  const int64_t C = model_.config().num_labels, B = args_.per_device_eval_batch_size;
  const std::vector<int64_t> order = epoch_order(eval.size, /*shuffle=*/false, 0, 0);
  std::vector<float> logits(static_cast<size_t>(eval.size * C));
  for (int64_t begin = 0; begin < eval.size; begin += B) {
    ledger.set_phase("evaluation");
    // No labels on the device: the loss is computed on the host, from the logits.
    const BertInputs inputs = upload_batch(backend_, gather_batch(eval, order, begin, std::min(eval.size, begin + B)),
                                           eval.label_dtype, 0);
    ForwardOptions options;  // dropout off, nothing kept for backward
    const ForwardOutput out = model_.forward(inputs, options);
    backend_.copy_to_host(out.logits, logits.data() + begin * C);
  }
  return classification_metrics(logits, C, resolve_problem_type(model_.config(), eval.label_dtype), eval);
}

TrainResult Trainer::train(const std::function<void(const StepLog&)>& on_log) {
  namespace fs = std::filesystem;
  Ledger& ledger = backend_.ledger();
  const bool sharded = comm_ && args_.zero_stage >= 1;
  const int stage = sharded ? static_cast<int>(args_.zero_stage) : 0;
  // ZeRO stages 2 and 3: no whole gradient buffer (and at stage 3 no whole
  // weights): the model reads and writes unit by unit through `zero`. Under
  // mixed precision stage 1 shards by unit too, for its float32 masters.
  const bool mixed = model_.compute_dtype() != DType::F32;
  const bool grads_sharded = stage >= 2;
  std::unique_ptr<distributed::ZeroSharding> zero;
  if (grads_sharded || (stage == 1 && mixed))
    zero = std::make_unique<distributed::ZeroSharding>(backend_, *comm_, model_, stage);
  // The float32 weights sharded (stage 3; stages 1 and 2 under mixed precision): the model holds no whole copy.
  const bool masters_sharded = zero && zero->shards_masters();
  ParameterSet* grads = grads_sharded ? nullptr : &model_.gradients();
  std::unique_ptr<Optimizer> optimizer =
      zero      ? distributed::make_zero_sharded_optimizer(backend_, *zero, model_.weights(), optimizer_options(args_))
      : sharded ? distributed::make_zero1_optimizer(backend_, *comm_, model_.weights(), optimizer_options(args_))
                : make_optimizer(backend_, model_.weights(), optimizer_options(args_));

  // What a checkpoint records and a resumed run must share.
  TrainerState state;
  state.seed = args_.seed;
  state.optimizer = optimizer->name();
  state.per_device_train_batch_size = args_.per_device_train_batch_size;
  state.gradient_accumulation_steps = args_.gradient_accumulation_steps;
  state.examples = data_.size;
  state.shuffle = args_.shuffle;
  state.drop_last = args_.dataloader_drop_last;
  state.group_by_length = args_.group_by_length;
  state.precision = args_.bf16 ? "bf16" : args_.fp16 ? "fp16" : "fp32";
  state.loss_scale = args_.fp16 ? 65536.0 : 1.0;
  state.world_size = world_;
  state.zero_stage = stage;
  // Where this rank's part of a checkpoint goes (ZeRO: its shard of the optimizer states).
  CheckpointRanks ranks;
  ranks.comm = world_ > 1 ? comm_ : nullptr;
  if (zero) {  // its chunk of every unit, one after the other
    ranks.sharded = true;
    ranks.unit_chunks = true;
    ranks.shard_begin = 0;
    ranks.shard_end = zero->shards().shard_elements;
    ranks.shard_total = zero->shards().flat_elements;
  } else if (sharded) {
    const distributed::ShardRange mine = distributed::shard_range(model_.weights().flat().numel(), comm_->rank(), world_);
    ranks.sharded = true;
    ranks.shard_begin = mine.begin;
    ranks.shard_end = mine.end;
    ranks.shard_total = model_.weights().flat().numel();
  }
  if (!args_.resume_from_checkpoint.empty()) {
    const std::string dir = resolve_checkpoint(args_.resume_from_checkpoint, args_.output_dir);
    if (masters_sharded) model_.restore_weights();  // the checkpoint's whole model, then sharded again below
    state = load_checkpoint(dir, model_, *optimizer, backend_, state, ranks);
    if (state.global_step > total_steps_)
      fail("--resume-from-checkpoint {}: the checkpoint is at step {}, past this run's {} steps", dir,
           state.global_step, total_steps_);
    if (ranks.comm) {
      // Every rank must continue from the same step: the same checkpoint, seen by all.
      const std::vector<double> all = distributed::gather_host(*comm_, {static_cast<double>(state.global_step)});
      for (int r = 1; r < world_; ++r)
        if (all[static_cast<size_t>(r)] != all[0])
          fail("--resume-from-checkpoint {}: rank 0 resumed from step {} and rank {} from step {}: every rank must "
               "see the same checkpoints (a shared --output-dir)",
               args_.resume_from_checkpoint, all[0], r, all[static_cast<size_t>(r)]);
    }
    fmt::print("Resuming from {}: step {} of {}\n", dir, state.global_step, total_steps_);
  }
  if (masters_sharded && model_.weights().allocated()) zero->shard_model_weights();  // resumed
  model_.set_parameter_units(grads_sharded ? zero.get() : nullptr);
  struct UnitsReset {  // however train() ends, the model reads its own buffers again
    BertForSequenceClassification& model;
    ~UnitsReset() { model.set_parameter_units(nullptr); }
  } units_reset{model_};
  const int64_t first_step = state.global_step;
  std::optional<TokenizerSettings> tokenizer = tokenizer_;
  if (!tokenizer && args_.save_strategy != "no" && fs::is_directory(args_.model))
    tokenizer = read_tokenizer_settings(args_.model);

  std::ofstream log;
  std::string log_path;
  if (!args_.output_dir.empty() && writer_) {
    std::error_code ec;
    fs::create_directories(args_.output_dir, ec);
    if (ec) fail("--output-dir {}: cannot create ({})", args_.output_dir, ec.message());
    log_path = (fs::path(args_.output_dir) / "log.jsonl").string();
    // A resumed run keeps the records up to its checkpoint and continues the file.
    std::string kept;
    if (first_step > 0 && fs::exists(log_path)) {
      std::ifstream old(log_path);
      for (std::string line; std::getline(old, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
            j["step"].get<int64_t>() <= first_step)
          kept += line + "\n";
      }
    }
    log.open(log_path, std::ios::trunc);
    if (!log) fail("{}: cannot open for writing", log_path);
    log << kept << std::flush;
  }

  TrainResult result;
  ProgressBar bar(total_steps_ - first_step, args_.progress);
  const int64_t B = args_.per_device_train_batch_size;
  // The batches of update `step`: as many as the window of its epoch holds.
  const int64_t N = args_.gradient_accumulation_steps;
  auto window_of = [&](int64_t step) {
    const int64_t first = (step % steps_per_epoch_) * N;
    return std::min(first + N, batches_per_epoch_) - first;
  };
  LoaderOptions loader_options;
  loader_options.batch_size = B;
  loader_options.shuffle = args_.shuffle;
  loader_options.seed = args_.seed;
  loader_options.drop_last = args_.dataloader_drop_last;
  loader_options.num_workers = args_.dataloader_num_workers;
  loader_options.prefetch_factor = args_.dataloader_prefetch_factor;
  loader_options.first_batch = state.micro_batches;
  loader_options.rank = comm_ ? comm_->rank() : 0;
  loader_options.world_size = world_;
  loader_options.group_by_length = args_.group_by_length;
  BatchLoader loader(data_, loader_options);
  ledger.set_phase("data");
  InputSlots slots(backend_, data_, std::min(B, data_.size));
  // Data parallelism: each update's last backward all-reduces the gradients in buckets as they become final.
  std::optional<distributed::GradientReducer> reducer;
  if (comm_ && grads != nullptr) {
    reducer.emplace(*comm_, grads->flat());
    model_.set_gradients_ready_hook([&reducer](int64_t from) { reducer->ready(from); });
  }
  struct HookReset {
    BertForSequenceClassification& model;
    ~HookReset() { model.set_gradients_ready_hook({}); }
  } hook_reset{model_};
  int64_t window = window_of(first_step);
  int64_t micro = state.micro_batches;  // batches begun so far, over the whole run: picks the upload slot and the dropout masks
  BertInputs next_inputs = first_step < total_steps_ ? slots.upload(static_cast<int>(micro % 2), loader.next())
                                                     : BertInputs();
  double window_loss = 0.0;
  int64_t window_steps = 0, window_samples = 0;
  auto window_start = Clock::now();
  const auto start = Clock::now();
  auto steady_start = start;
  int64_t steady_from = -1;  // samples done when the steady state's clock started (-1: not started)
  // Dynamic loss scaling as torch.cuda.amp.GradScaler: start at 2^16, halve and
  // skip the update on a non-finite gradient, double after 2000 clean steps.
  double loss_scale = state.loss_scale;
  int64_t clean_steps = state.clean_steps, updates = state.updates;
  result.skipped_steps = state.skipped_steps;

  for (int64_t step = first_step; step < total_steps_; ++step) {
    if (hooks_.before) hooks_.before(step);
    ledger.set_step(step);
    const double step_scale = loss_scale;
    const int64_t count = window;
    double loss = 0.0;  // the mean of the batches' losses, as Hugging Face logs it
    int64_t samples = 0;
    if (grads_sharded) zero->zero_gradients();
    else model_.zero_gradients();
    for (int64_t m = 0; m < count; ++m, ++micro) {
      ledger.set_phase("data");
      backend_.upload_wait();  // this batch, uploaded during the previous one
      const BertInputs inputs = next_inputs;
      samples += inputs.input_ids.dim(0);
      ForwardOptions options;
      options.training = true;
      options.save_for_backward = true;
      options.gradient_checkpointing = args_.gradient_checkpointing;
      options.selective_checkpointing = args_.gradient_checkpointing_policy == "selective";
      options.seed = args_.seed;
      // Dropout masks are a function of (seed, step, site, element): each rank draws its own.
      options.step = static_cast<uint64_t>(micro * world_ + (comm_ ? comm_->rank() : 0));
      const ForwardOutput out = model_.forward(inputs, options);
      loss += *out.loss / static_cast<double>(count);
      // Each batch's loss counts 1/count: count batches of b make one batch of count·b;
      // and 1/world: the ranks' gradients are summed, so that they average.
      if (reducer && m + 1 == count) reducer->arm();
      model_.backward(step_scale / static_cast<double>(count * world_));
      // ZeRO 2/3: the embeddings' reduce-scatter, the backward's last, lands in the shard before the next forward.
      if (grads_sharded) zero->finish_gradients();
      if (m + 1 < count) {  // the window's next batch uploads while this one's work runs
        ledger.set_phase("data");
        next_inputs = slots.upload(static_cast<int>((micro + 1) % 2), loader.next());
      }
    }
    if (comm_) {
      if (reducer) {
        ledger.set_phase("gradient all-reduce");
        reducer->finish();
      } else {
        ledger.set_phase("gradient reduce-scatter");
        zero->finish_gradients();
      }
      // The world's loss (the mean of the ranks' means: equal batches) and samples.
      const std::vector<double> sums = comm_->sum_host({loss, static_cast<double>(samples)});
      loss = sums[0] / world_;
      samples = static_cast<int64_t>(std::llround(sums[1]));
    }
    ledger.set_phase("optimizer step");
    if (step_scale != 1.0) {
      if (grads_sharded) zero->scale_gradients(1.0 / step_scale);
      else backend_.scale(grads->flat(), 1.0 / step_scale);
    }
    // Under ZeRO 2/3 the norm sums every rank's shard: the same on every rank, so is fp16's overflow verdict.
    // The clipping coefficient goes to the optimizer, which multiplies it into each gradient as it reads it
    // (the same bits as scaling them first, without a pass of its own over the gradients).
    const double grad_norm = grads_sharded ? zero->gradient_norm() : gradient_norm(backend_, *grads);
    const double grad_scale = clip_coefficient(grad_norm, args_.max_grad_norm);
    // The schedule advances with the updates made, as Hugging Face's does when GradScaler skips one.
    const double lr =
        scheduled_lr(args_.lr_scheduler_type, args_.learning_rate, updates, args_.warmup_steps, total_steps_);
    bool skip = false;
    if (args_.fp16) {
      if (!std::isfinite(grad_norm)) {
        skip = true;
        loss_scale *= 0.5;
        clean_steps = 0;
        ++result.skipped_steps;
      } else if (++clean_steps == 2000) {
        loss_scale *= 2.0;
        clean_steps = 0;
      }
    }
    if (!skip) {
      // Refreshes the 16-bit copy too (ZeRO 2/3: the gradients are its shard's, and every rank gets the update).
      optimizer->step(model_.weights(), grads ? *grads : model_.weights(), lr, model_.half_weights(), grad_scale);
      ++updates;
    }
    if (step + 1 < total_steps_) {  // the next update's first batch uploads while this one's work runs
      window = window_of(step + 1);
      ledger.set_phase("data");
      next_inputs = slots.upload(static_cast<int>(micro % 2), loader.next());
    }
    if (hooks_.after) hooks_.after(step);

    result.losses.push_back(loss);
    result.samples += samples;
    if (step == first_step && step + 1 < total_steps_) {  // the steady state's clock starts once this step is done
      backend_.synchronize();
      steady_start = Clock::now();
      steady_from = result.samples;
    }
    window_loss += loss;
    window_steps += 1;
    window_samples += samples;
    bar.update(step + 1 - first_step, loss, seconds_since(start));

    if ((step + 1) % args_.logging_steps == 0 || step + 1 == total_steps_) {
      backend_.synchronize();
      StepLog record{step + 1,
                     static_cast<double>(step + 1) / steps_per_epoch_,
                     loss,
                     window_loss / window_steps,
                     lr,
                     grad_norm,
                     window_samples / std::max(seconds_since(window_start), 1e-9),
                     step_scale,
                     result.skipped_steps};
      if (log.is_open()) {
        nlohmann::json j = {{"step", record.step},          {"epoch", record.epoch},
                            {"loss", record.loss},          {"mean_loss", record.mean_loss},
                            {"learning_rate", record.learning_rate}, {"grad_norm", record.grad_norm},
                            {"samples_per_second", record.samples_per_second},
                            {"data_wait_seconds", loader.wait_seconds()}};  // so far in the run
        if (args_.fp16) {
          j["loss_scale"] = record.loss_scale;
          j["skipped_steps"] = record.skipped_steps;
        }
        log << j.dump() << "\n" << std::flush;
      }
      if (on_log) on_log(record);
      window_loss = 0.0;
      window_steps = window_samples = 0;
      window_start = Clock::now();
    }
    const bool evaluate_now = (args_.eval_strategy == "steps" && (step + 1) % args_.eval_steps == 0) ||
                              (args_.eval_strategy == "epoch" && (step + 1) % steps_per_epoch_ == 0);
    if (evaluate_now) {
      result.last_evaluation = evaluate();
      nlohmann::json j = {{"step", step + 1}, {"epoch", static_cast<double>(step + 1) / steps_per_epoch_}};
      std::vector<std::string> shown;
      for (const auto& [name, value] : result.last_evaluation) {
        j[name] = value;
        shown.push_back(fmt::format("{} {:.6g}", name, value));
      }
      if (log.is_open()) log << j.dump() << "\n" << std::flush;
      if (args_.print_evaluations) {
        if (args_.progress) fmt::print(stderr, "\n");
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
    if (save) {  // every rank: rank 0 writes the checkpoint, each rank its shard of the optimizer states
      backend_.synchronize();
      state.global_step = step + 1;
      state.updates = updates;
      state.micro_batches = micro;
      state.loss_scale = loss_scale;
      state.clean_steps = clean_steps;
      state.skipped_steps = result.skipped_steps;
      // The masters sharded: the whole model gathered, unit by unit, to rank 0's host memory.
      std::vector<float> gathered;
      if (masters_sharded) gathered = zero->gather_weights_to_host();
      ranks.model_weights = masters_sharded ? &gathered : nullptr;
      save_checkpoint(args_.output_dir, model_, backend_, *optimizer, state, tokenizer ? &*tokenizer : nullptr,
                      args_.save_total_limit, best_step_, ranks);
      ranks.model_weights = nullptr;
    }
  }
  backend_.synchronize();
  result.seconds = seconds_since(start);
  const double steady_seconds = seconds_since(steady_start);
  if (comm_) comm_->sum_host({});  // a barrier: rank 0 has written every checkpoint
  if (masters_sharded) {  // the whole model again on every rank, for what follows training (saving, evaluating)
    ledger.set_phase("gather weights");
    optimizer.reset();          // the states and the gradient shard first: training is over
    zero->release_gradients();
    zero->restore_model_weights();
  }
  model_.set_parameter_units(nullptr);
  if (args_.load_best_model_at_end && best_step_ > 0) {
    const std::string dir = (fs::path(args_.output_dir) / fmt::format("checkpoint-{}", best_step_)).string();
    load_weights(model_, dir, args_.seed);
    result.best_step = best_step_;
    fmt::print("Loaded the best model from {} ({} {:.6g})\n", dir, args_.metric_for_best_model, best_value_);
  }
  result.steps = total_steps_ - first_step;
  result.samples_per_second = result.samples / std::max(result.seconds, 1e-9);
  if (steady_from >= 0)
    result.steady_samples_per_second =
        static_cast<double>(result.samples - steady_from) / std::max(steady_seconds, 1e-9);
  result.data_wait_seconds = loader.wait_seconds();
  ledger.set_step(-1);
  ledger.set_phase("done");
  result.memory = ledger.snapshot();
  return result;
}

}  // namespace anatomy
