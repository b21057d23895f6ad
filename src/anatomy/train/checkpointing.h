// checkpointing.h: Trainer checkpoints, as Hugging Face's output_dir/checkpoint-N:
// the model (config.json + model.safetensors, loadable by Hugging Face), the
// optimizer's states (optimizer.safetensors), the trainer's state
// (trainer_state.json: step, updates made, batches consumed, the fp16 loss
// scaler, and the settings a resume must share), and the tokenizer (vocab.txt,
// tokenizer_config.json) when the run has one. No RNG state is needed: the shuffle order is a function of
// (seed, epoch) and the dropout masks of (seed, batch), so the counters are
// the whole random state.
//
// A checkpoint appears whole or not at all: it is written into a hidden
// directory beside it and renamed into place, so a run killed while saving
// leaves the previous complete checkpoint and a stale hidden directory (which
// the next save removes), never a checkpoint-N that loads wrong.
//
// Under data parallelism every rank calls save_checkpoint at the same step.
// Rank 0 writes what a single process writes (at ZeRO stage 3 the model
// gathered from the ranks first); with ZeRO stages 1-3 every rank
// also writes its shard of the optimizer states, optimizer-rank-K-of-N.safetensors
// (its run of the flat parameter buffer recorded in the file's metadata), into
// the same hidden directory, and rank 0 renames the directory into place only
// after every rank has written its part (a barrier through the communicator).
// So the ranks must share the output directory (one host, or a shared
// filesystem). A resume needs the world size and ZeRO stage of the checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "anatomy/data/text_dataset.h"
#include "anatomy/distributed/communicator.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/model/model.h"
#include "anatomy/optim/optimizer.h"
#include "anatomy/train/checkpoint_files.h"

namespace anatomy {

// The ranks of a data-parallel run, as its checkpoints see them.
struct CheckpointRanks {
  distributed::Communicator* comm = nullptr;  // null (or a world of one): a single process
  // ZeRO stage 1: this rank holds the optimizer states of [shard_begin,
  // shard_end) of the flat parameter buffer of shard_total elements.
  bool sharded = false;
  int64_t shard_begin = 0, shard_end = 0, shard_total = 0;
  // ZeRO stages 2 and 3: the states are this rank's chunk of every unit
  // (dist/zero_sharding.h), shard_end of them (shard_begin 0), of a flat
  // layout of shard_total elements; the file's metadata says so ("layout").
  bool unit_chunks = false;
  // ZeRO stage 3: the whole float32 flat buffer on rank 0's host (the model
  // holds only its shard), what rank 0 writes as model.safetensors.
  const std::vector<float>* model_weights = nullptr;
};

// "optimizer-rank-1-of-2.safetensors": rank K's shard of the optimizer states.
std::string optimizer_shard_file(int64_t rank, int64_t world_size);

// Writes output_dir/checkpoint-<state.global_step>, with the tokenizer's
// vocab.txt and tokenizer_config.json when `tokenizer` is given. Then keeps
// only the newest `total_limit` checkpoints (0: all), and
// checkpoint-<keep_step> besides (the best model's, as Hugging Face keeps it).
// With `ranks.comm`, every rank of the run calls it (see above).
void save_checkpoint(const std::string& output_dir, const Model& model, Backend& backend,
                     const Optimizer& optimizer, const TrainerState& state, const TokenizerSettings* tokenizer,
                     int64_t total_limit, int64_t keep_step = 0, const CheckpointRanks& ranks = {});

// "latest": the checkpoint-N of output_dir with the largest N (an error when
// there is none); anything else: that directory.
std::string resolve_checkpoint(const std::string& spec, const std::string& output_dir);

// Loads the model's weights and the optimizer's states and steps from a
// checkpoint written by save_checkpoint. `expected` holds this run's settings:
// a checkpoint of other settings (another world size or ZeRO stage included)
// is an error naming the setting. With ZeRO stages 1-3 each rank reads its
// own shard, whose recorded run (or chunks) must be this rank's. The model
// is loaded into the model's whole weights, which ZeRO 3 (and 2 under mixed
// precision) must have allocated (Model::restore_weights).
TrainerState load_checkpoint(const std::string& checkpoint_dir, Model& model,
                             Optimizer& optimizer, Backend& backend, const TrainerState& expected,
                             const CheckpointRanks& ranks = {});

}  // namespace anatomy
