// trainer.h: the training loop (Hugging Face Trainer's, for one device):
// seeded shuffling, forward, backward, clipping, AdamW, schedule, logging to
// log.jsonl, and the seed's summary figures.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/core/ledger.h"
#include "anatomy/data/dataset.h"
#include "anatomy/distributed/communicator.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/model/model.h"
#include "anatomy/optim/optimizer.h"
#include "anatomy/optim/plateau.h"
#include "anatomy/train/arguments.h"

namespace anatomy {

struct StepLog {
  int64_t step;  // 1-based, as Hugging Face counts global steps
  double epoch;
  double loss;   // Trainer's: the mean of the step losses since the previous record
  double step_loss;  // this step's own loss, computed before its update
  double learning_rate;  // the rate this step's update used
  double grad_norm;      // before clipping
  double samples_per_second;
  double loss_scale;     // fp16: the scale this step's backward used (1 otherwise)
  int64_t skipped_steps; // fp16: updates skipped so far for non-finite gradients
};

struct TrainResult {
  int64_t steps = 0;
  int64_t samples = 0;
  double seconds = 0.0;
  double samples_per_second = 0.0;
  // The steady state: the samples of the steps after the first over the time
  // from the first step's end (its one-time work, such as loading cuDNN's
  // plans and growing the memory pool, left out). 0 when one step ran.
  double steady_samples_per_second = 0.0;
  std::vector<double> losses;  // every step's loss
  // Trainer's final metrics (its log_history's last record): train_runtime,
  // train_samples_per_second, train_steps_per_second (rounded as
  // speed_metrics rounds them), train_loss (the mean step loss of this run),
  // epoch.
  std::map<std::string, double> train_metrics;
  // run_glue's final evaluation (a validation set given): the metrics, with
  // Trainer's speed figures, epoch and eval_samples; empty without one.
  std::map<std::string, double> eval_metrics;
  int64_t skipped_steps = 0;   // fp16 steps whose update was skipped (overflow)
  double data_wait_seconds = 0.0;  // the loop's wait for batches the loader had not built yet
  std::map<std::string, double> last_evaluation;  // the metrics of the last evaluation (none: empty)
  int64_t best_step = 0;       // load_best_model_at_end: the checkpoint the model was reloaded from
  LedgerSnapshot memory;       // the ledger at the end (with its peaks)
};

// Called around every step (0-based index): `before` ahead of the batch's
// upload, `after` once the update is queued. The profiler hangs here.
struct StepHooks {
  std::function<void(int64_t)> before, after;
};

class Trainer {
 public:
  // `eval_data` (may be null): the validation set of --eval-strategy.
  Trainer(Backend& backend, Model& model, const Dataset& data, TrainingArguments args,
          const Dataset* eval_data = nullptr);
  // Optimizer updates (each of gradient_accumulation_steps batches).
  int64_t total_steps() const { return total_steps_; }
  // Runs the loop; `on_log` sees each logging record (also written to
  // output_dir/log.jsonl when an output directory is set).
  TrainResult train(const std::function<void(const StepLog&)>& on_log = {});
  void set_hooks(StepHooks hooks) { hooks_ = std::move(hooks); }
  // Data parallelism (set before train()): this rank trains on its shard of
  // every epoch (torch's DistributedSampler), gradients are averaged over the
  // ranks during backward, and the logged loss and samples are the world's.
  // Only rank 0 writes log.jsonl and the checkpoints (every rank takes part
  // in a save: under ZeRO stages 1-3 each writes its shard of the optimizer
  // states; see checkpointing.h). --zero-stage 2 and 3 shard the gradients
  // and the weights unit by unit (dist/zero_sharding.h); train() then gives
  // the model back its whole weights at the end.
  void set_communicator(distributed::Communicator* communicator);
  // The tokenizer each checkpoint carries (vocab.txt, tokenizer_config.json).
  // Unset: the model directory's, when it has a vocab.txt.
  void set_tokenizer(std::optional<TokenizerSettings> tokenizer) { tokenizer_ = std::move(tokenizer); }
  // The model on the validation set, no gradients, dropout off, in batches of
  // per_device_eval_batch_size: train/metrics.h's metrics.
  std::map<std::string, double> evaluate();

 private:
  void plan_epochs();  // batches and updates per epoch, for this rank's shard
  void check_label_smoothing() const;  // --label-smoothing-factor: refused by name where Trainer does not smooth
  // train(), in its parts (trainer.cpp): setup, resume, the log, the loop's
  // start; per update its computation, its record, evaluation and saving; the end.
  struct Run;
  struct Update;
  void setup(Run& run);
  void resume(Run& run);
  void open_log(Run& run);
  void start_loop(Run& run);
  int64_t window_of(int64_t step) const;
  Update update_once(Run& run, int64_t step);
  void record(Run& run, int64_t step, const Update& update, const std::function<void(const StepLog&)>& on_log);
  void evaluate_and_save(Run& run, int64_t step);
  // A record of Trainer's log_history (trainer_state.json), also sent to TensorBoard.
  void add_history(Run& run, nlohmann::json record);
  // Trainer's eval_runtime, eval_samples_per_second, eval_steps_per_second of an evaluation that took `seconds`.
  std::map<std::string, double> eval_speed_metrics(double seconds) const;
  // Trainer's TrainerState fields (all but log_history) after `global_step`.
  nlohmann::json trainer_fields(const Run& run, int64_t global_step) const;
  TrainResult finish(Run& run);
  Backend& backend_;
  Model& model_;
  const Dataset& data_;
  const Dataset* eval_data_;
  TrainingArguments args_;
  int64_t batches_per_epoch_ = 0;
  int64_t steps_per_epoch_ = 0;  // optimizer updates per epoch
  int64_t total_steps_ = 0;
  StepHooks hooks_;
  distributed::Communicator* comm_ = nullptr;
  int world_ = 1;
  bool writer_ = true;  // rank 0: writes log.jsonl and checkpoints
  std::optional<TokenizerSettings> tokenizer_;
  int64_t best_step_ = 0;  // load_best_model_at_end: the best evaluation's step, and its value
  double best_value_ = 0.0;
};

// The optimizer --optim and --optim-args ask for (errors name the flag).
OptimizerOptions optimizer_options(const TrainingArguments& args);

// Copies a host batch to the backend's device (category "data").
ModelInputs upload_batch(Backend& backend, const HostBatch& batch, DType label_dtype, int64_t label_width);
// The whole dataset, in order, as one batch on the backend's device.
ModelInputs upload_dataset(Backend& backend, const Dataset& data);

}  // namespace anatomy
