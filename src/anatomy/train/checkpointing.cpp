// checkpointing.cpp: writing, finding and loading Trainer checkpoints.
#include "anatomy/train/checkpointing.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/distributed/store.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"

namespace anatomy {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOptimizerFile = "optimizer.safetensors";

// The step of a directory named checkpoint-N, or -1.
int64_t checkpoint_step(const fs::path& dir) {
  static const std::regex pattern("checkpoint-([0-9]{1,18})");
  std::smatch m;
  const std::string name = dir.filename().string();
  if (!std::regex_match(name, m, pattern)) return -1;
  return std::stoll(m[1].str());
}

std::vector<std::pair<int64_t, fs::path>> checkpoints_in(const std::string& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const int64_t step = entry.is_directory() ? checkpoint_step(entry.path()) : -1;
    if (step >= 0) out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int rank_of(const CheckpointRanks& r) { return r.comm ? r.comm->rank() : 0; }
int world_of(const CheckpointRanks& r) { return r.comm ? r.comm->world_size() : 1; }

// The metadata that places a shard of the optimizer states.
std::map<std::string, std::string> shard_metadata(const CheckpointRanks& r) {
  std::map<std::string, std::string> meta = {{"rank", std::to_string(rank_of(r))},
                                              {"world_size", std::to_string(world_of(r))},
                                              {"shard_begin", std::to_string(r.shard_begin)},
                                              {"shard_end", std::to_string(r.shard_end)},
                                              {"shard_total", std::to_string(r.shard_total)}};
  if (r.unit_chunks) meta["unit_chunks"] = "1";  // ZeRO 2/3: a chunk of every unit, not one run
  return meta;
}

// "1 process", "2 ranks".
std::string ranks_phrase(int64_t world) { return world == 1 ? "1 process" : fmt::format("{} ranks", world); }

void write_optimizer(const std::string& path, const Optimizer& optimizer, Backend& backend, const std::string& layout,
                     std::map<std::string, std::string> metadata = {}) {
  const auto states = optimizer.state_tensors();
  std::vector<std::vector<uint8_t>> host(states.size());
  std::vector<io::StWriteTensor> tensors;
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& t = states[i].second;
    ANATOMY_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::U8, "optimizer state {} is {}", states[i].first,
                  dtype_name(t.dtype()));
    host[i].resize(t.nbytes());
    backend.copy_to_host(t, host[i].data());
    tensors.push_back({states[i].first, t.dtype() == DType::F32 ? io::StDType::F32 : io::StDType::U8, t.shape(),
                       host[i].data()});
  }
  metadata["optimizer"] = optimizer.name();
  metadata["steps"] = std::to_string(optimizer.steps_taken());
  metadata[kOptimizerLayoutKey] = layout;
  io::write_safetensors(path, tensors, metadata);
}

}  // namespace

std::string optimizer_shard_file(int64_t rank, int64_t world_size) {
  return fmt::format("optimizer-rank-{}-of-{}.safetensors", rank, world_size);
}

void save_checkpoint(const std::string& output_dir, const Model& model, Backend& backend,
                     const Optimizer& optimizer, const TrainerState& state, const TokenizerSettings* tokenizer,
                     int64_t total_limit, int64_t keep_step, const CheckpointRanks& ranks) {
  const int rank = rank_of(ranks), world = world_of(ranks);
  ANATOMY_CHECK(state.world_size == world, "save_checkpoint: a state of {} ranks saved by {}", state.world_size, world);
  const fs::path final_dir = fs::path(output_dir) / fmt::format("checkpoint-{}", state.global_step);
  std::error_code ec;
  // Rank 0 owns the directory: stale hidden directories are what a killed
  // save leaves; this process's own name is unique.
  int64_t owner = getpid();
  if (rank == 0) {
    for (const auto& entry : fs::directory_iterator(output_dir, ec))
      if (entry.path().filename().string().rfind(".checkpoint-", 0) == 0) fs::remove_all(entry.path(), ec);
    const fs::path partial = fs::path(output_dir) / fmt::format(".checkpoint-{}.partial.{}", state.global_step, owner);
    fs::create_directories(partial, ec);
    if (ec) fail("{}: cannot create ({})", partial.string(), ec.message());
  }
  // Every rank learns rank 0's process id, so the directory's name, once rank 0 has made it.
  if (world > 1)
    owner = std::llround(ranks.comm->sum_host({rank == 0 ? static_cast<double>(owner) : 0.0}).at(0));
  const fs::path partial = fs::path(output_dir) / fmt::format(".checkpoint-{}.partial.{}", state.global_step, owner);
  if (rank != 0 && !io::is_directory(partial.string()))
    fail("{}: rank 0 made this directory and rank {} does not see it: the ranks of a run that saves checkpoints "
         "must share --output-dir (one host, or a shared filesystem)",
         partial.string(), rank);
  // A save that fails (a full disk) leaves the checkpoints before it as they
  // were: rank 0 removes the partial directory and the error names the file.
  struct RemoveOnFailure {
    fs::path dir;
    bool armed;
    ~RemoveOnFailure() {
      if (!armed) return;
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{partial, rank == 0};
  try {
    if (rank == 0) {
      if (ranks.model_weights != nullptr) save_pretrained_from_host(model, *ranks.model_weights, partial.string());
      else save_pretrained(model, backend, partial.string());
      if (tokenizer != nullptr) save_tokenizer(*tokenizer, partial.string());
    }
    if (ranks.sharded)
      write_optimizer((partial / optimizer_shard_file(rank, world)).string(), optimizer, backend,
                      parameter_layout_id(model.weights()), shard_metadata(ranks));
    else if (rank == 0)
      write_optimizer((partial / kOptimizerFile).string(), optimizer, backend, parameter_layout_id(model.weights()));
    if (rank == 0) io::write_text_file_atomic((partial / kTrainerStateFile).string(), trainer_state_json(state).dump(2) + "\n");
  } catch (const distributed::PeerFailure&) {
    throw;  // another rank's failure keeps its own message and exit code
  } catch (const Error& e) {
    fail("{}: not saved, the checkpoints before it are kept ({})", final_dir.string(), e.what());
  }
  // Every rank's part is written: only now may the checkpoint appear.
  if (world > 1) ranks.comm->sum_host({});
  if (rank != 0) return;
  write_checkpoint_manifest(partial.string());
  io::sync_directory(partial.string());
  // An older checkpoint of the same step (a run repeated into this directory)
  // is moved aside first: rename cannot replace a directory that has files.
  if (io::path_exists(final_dir.string())) {
    const fs::path old = fs::path(output_dir) / fmt::format(".checkpoint-{}.old.{}", state.global_step, getpid());
    fs::rename(final_dir, old, ec);
    if (ec) fail("{}: cannot move the old checkpoint aside ({})", final_dir.string(), ec.message());
    fs::rename(partial, final_dir, ec);
    if (ec) fail("{}: cannot rename into place ({})", final_dir.string(), ec.message());
    fs::remove_all(old, ec);
  } else {
    fs::rename(partial, final_dir, ec);
    if (ec) fail("{}: cannot rename into place ({})", final_dir.string(), ec.message());
  }
  cleanup.armed = false;
  io::sync_directory(output_dir);
  if (total_limit > 0) {
    // Each old checkpoint is first renamed out of sight (atomic), then
    // deleted: a kill during the deletion leaves a hidden directory, not a
    // checkpoint-N with files missing.
    auto all = checkpoints_in(output_dir);
    if (keep_step > 0)
      all.erase(std::remove_if(all.begin(), all.end(), [&](const auto& c) { return c.first == keep_step; }),
                all.end());
    for (size_t i = 0; i + static_cast<size_t>(total_limit) < all.size(); ++i) {
      const fs::path doomed = fs::path(output_dir) / fmt::format(".checkpoint-{}.deleting.{}", all[i].first, getpid());
      fs::rename(all[i].second, doomed, ec);
      if (ec) fail("{}: cannot remove ({})", all[i].second.string(), ec.message());
      fs::remove_all(doomed, ec);
    }
  }
}

std::string resolve_checkpoint(const std::string& spec, const std::string& output_dir) {
  if (spec != "latest") {
    if (!io::is_directory(spec)) fail("--resume-from-checkpoint {}: no such directory", spec);
    return spec;
  }
  if (output_dir.empty()) fail("--resume-from-checkpoint latest: needs --output-dir, where the checkpoints are");
  const auto all = checkpoints_in(output_dir);
  if (all.empty()) fail("--resume-from-checkpoint latest: no checkpoint-N directory in {}", output_dir);
  return all.back().second.string();
}

TrainerState load_checkpoint(const std::string& dir, Model& model, Optimizer& optimizer,
                             Backend& backend, const TrainerState& expected, const CheckpointRanks& ranks) {
  // Each rank checks the files it reads: the shared ones (rank 0) and its own optimizer shard.
  const std::string own_shard = optimizer_shard_file(rank_of(ranks), world_of(ranks));
  verify_checkpoint_manifest(dir, [&](const std::string& name) {
    const bool shard = name.rfind("optimizer-rank-", 0) == 0;
    return shard ? name == own_shard : rank_of(ranks) == 0;
  });
  const TrainerState s = read_trainer_state(dir);
  // The data position counts batches of each rank's shard, and stage 1's
  // states are cut per rank: another world or stage cannot continue this run.
  if (s.world_size != expected.world_size || s.zero_stage != expected.zero_stage)
    fail("--resume-from-checkpoint {}: the checkpoint was made by {} with ZeRO stage {}, this run is {} with ZeRO "
         "stage {}; resume with the same number of ranks and --zero-stage",
         dir, ranks_phrase(s.world_size), s.zero_stage, ranks_phrase(expected.world_size), expected.zero_stage);
  ANATOMY_CHECK(expected.world_size == world_of(ranks), "load_checkpoint: a state of {} ranks loaded by {}",
                expected.world_size, world_of(ranks));
  auto same = [&](const char* what, const auto& theirs, const auto& ours) {
    if (theirs != ours)
      fail("--resume-from-checkpoint {}: the checkpoint was made with {} {}, this run has {}", dir, what,
           fmt::format("{}", theirs), fmt::format("{}", ours));
  };
  same("seed", s.seed, expected.seed);
  same("optimizer", s.optimizer, expected.optimizer);
  same("per-device batch size", s.per_device_train_batch_size, expected.per_device_train_batch_size);
  same("gradient accumulation steps", s.gradient_accumulation_steps, expected.gradient_accumulation_steps);
  same("a dataset of examples", s.examples, expected.examples);
  same("shuffle", s.shuffle, expected.shuffle);
  same("drop_last", s.drop_last, expected.drop_last);
  same("group_by_length", s.group_by_length, expected.group_by_length);
  same("precision", s.precision, expected.precision);

  const LoadReport report = load_weights(model, dir, s.seed);
  if (!report.initialised.empty())
    fail("{}: the checkpoint lacks {} (and {} more)", dir, report.initialised.front(), report.initialised.size() - 1);

  const std::string path =
      (fs::path(dir) / (ranks.sharded ? optimizer_shard_file(rank_of(ranks), world_of(ranks)) : kOptimizerFile))
          .string();
  if (!io::path_exists(path)) fail("{}: not a whole checkpoint ({} is missing)", dir, fs::path(path).filename().string());
  const auto states = optimizer.state_tensors();
  OptimizerFileExpectation want;
  want.optimizer = optimizer.name();
  for (const auto& [name, tensor] : states) want.states.push_back({name, tensor.dtype() == DType::F32, tensor.shape()});
  // Flat states (one element per element of the flat parameters, or a ZeRO
  // shard of them) hold each parameter where the saving run's layout put it.
  want.layout = parameter_layout_id(model.weights());
  want.flat = std::any_of(states.begin(), states.end(), [&](const auto& state) {
    return state.second.rank() == 1 && (state.second.numel() == model.weights().flat_elements() || ranks.sharded);
  });
  if (ranks.sharded) want.shard = shard_metadata(ranks);
  want.rank = rank_of(ranks);
  want.updates = s.updates;
  const std::vector<std::vector<uint8_t>> bytes = read_optimizer_states(path, want);
  for (size_t i = 0; i < states.size(); ++i) {
    ANATOMY_CHECK(bytes[i].size() == states[i].second.nbytes(), "{}: tensor '{}' has {} bytes", path,
                  states[i].first, bytes[i].size());
    backend.copy_from_host(states[i].second, bytes[i].data());
  }
  optimizer.restore_steps(s.updates);
  return s;
}

}  // namespace anatomy
