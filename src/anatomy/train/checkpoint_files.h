// checkpoint_files.h: the files of a Trainer checkpoint that a resume reads
// as bytes, apart from the model: trainer_state.json (the counters and the
// settings a resume must share), the manifest checkpoint_files.json (every
// file's size and hash, written last) and the optimizer's states
// (optimizer.safetensors, or a rank's shard of them). checkpointing.h writes
// and reads them with the rest of a checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anatomy {

inline constexpr const char* kTrainerStateFile = "trainer_state.json";
// Every file of the checkpoint with its size and hash (io::digest_file), written
// last: a resume refuses a file that no longer matches.
inline constexpr const char* kCheckpointManifestFile = "checkpoint_files.json";
// The optimizer file's metadata key for parameter_layout_id (model/checkpoint.h).
inline constexpr const char* kOptimizerLayoutKey = "parameter_layout";

struct TrainerState {
  int64_t global_step = 0;    // optimizer steps done (updates and fp16-skipped ones)
  int64_t updates = 0;        // updates made: the schedule's position
  int64_t micro_batches = 0;  // batches consumed: the data position and the dropout stream
  double loss_scale = 1.0;    // fp16's dynamic loss scale
  int64_t clean_steps = 0;    // fp16: steps since the scale last changed
  int64_t skipped_steps = 0;  // fp16: updates skipped for non-finite gradients
  // Settings the resumed run must share for its steps to be the same ones.
  uint64_t seed = 0;
  std::string optimizer;
  int64_t per_device_train_batch_size = 0, gradient_accumulation_steps = 0, examples = 0;
  bool shuffle = true, drop_last = false, group_by_length = false;
  std::string precision;      // fp32, bf16 or fp16
  // Data parallelism: the ranks of the run and its ZeRO stage (1-3: the
  // optimizer states are sharded, one file per rank). micro_batches then
  // counts the batches of each rank's shard (the same on every rank).
  int64_t world_size = 1;
  int64_t zero_stage = 0;
  // Hugging Face TrainerState's own fields (epoch, max_steps, log_history,
  // best_metric, ...), written beside the counters above so that Trainer's
  // tools read the file; a resume takes back only log_history (absent or not a
  // list in an older checkpoint: empty).
  nlohmann::json trainer_fields = nlohmann::json::object();
  nlohmann::json log_history = nlohmann::json::array();
  // --lr-scheduler-type reduce_lr_on_plateau: its state (lr, best, num_bad_epochs,
  // cooldown_counter), which a resume continues; empty otherwise.
  nlohmann::json lr_scheduler = nlohmann::json::object();
};

// trainer_state.json's object, as save_checkpoint writes it: Trainer's
// fields (trainer_fields, log_history) and the counters.
nlohmann::json trainer_state_json(const TrainerState& state);

// The trainer state of a checkpoint directory (errors name the file): every
// field of the right type, the counters consistent with each other.
TrainerState read_trainer_state(const std::string& checkpoint_dir);

// Writes `dir`/checkpoint_files.json atomically: the size and hash of every
// file of `dir` but itself.
void write_checkpoint_manifest(const std::string& dir);

// Checks the files of checkpoint `dir` that `wanted` accepts against its
// manifest: present, of the recorded size and hash; an error names the file
// otherwise. A checkpoint saved without a manifest is taken as it is.
void verify_checkpoint_manifest(const std::string& dir, const std::function<bool(const std::string&)>& wanted);

// One optimizer state as the run holds it, which the checkpoint must hold alike.
struct OptimizerStateSpec {
  std::string name;
  bool float32 = true;  // float32, else bytes (8-bit states)
  std::vector<int64_t> shape;
};

// What a run expects of its checkpoint's optimizer file.
struct OptimizerFileExpectation {
  std::string optimizer;  // the optimizer's name: metadata "optimizer"
  std::vector<OptimizerStateSpec> states;
  std::string layout;  // the model's parameter_layout_id: metadata "parameter_layout"
  // The states follow the flat parameter layout (one element per parameter
  // element, or a ZeRO shard of them): the file must then record its layout.
  bool flat = false;
  std::map<std::string, std::string> shard;  // the metadata a rank's shard carries (empty: not sharded)
  int rank = 0;                              // the rank reading it, for errors
  int64_t updates = 0;                       // trainer_state.json's: metadata "steps"
};

// Reads `path` (optimizer.safetensors or a rank's shard) and checks it
// against `expected`: the optimizer, shard and layout metadata, every state
// there with its dtype and shape and no other tensor, float32 states finite
// (second moments and 8-bit scales not negative), the step count. Errors name
// the file (and the tensor). Returns the states' bytes in `expected.states`' order.
std::vector<std::vector<uint8_t>> read_optimizer_states(const std::string& path,
                                                        const OptimizerFileExpectation& expected);

}  // namespace anatomy
