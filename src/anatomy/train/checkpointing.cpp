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

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
// Every file of the checkpoint with its size and hash (io::digest_file), written
// last: a resume refuses a file that no longer matches.
constexpr const char* kManifestFile = "checkpoint_files.json";
// The optimizer file's metadata key for parameter_layout_id.
constexpr const char* kLayoutKey = "parameter_layout";

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

nlohmann::json state_json(const TrainerState& s) {
  return {{"global_step", s.global_step},
          {"updates", s.updates},
          {"micro_batches", s.micro_batches},
          {"loss_scale", s.loss_scale},
          {"clean_steps", s.clean_steps},
          {"skipped_steps", s.skipped_steps},
          {"seed", s.seed},
          {"optimizer", s.optimizer},
          {"per_device_train_batch_size", s.per_device_train_batch_size},
          {"gradient_accumulation_steps", s.gradient_accumulation_steps},
          {"examples", s.examples},
          {"shuffle", s.shuffle},
          {"drop_last", s.drop_last},
          {"group_by_length", s.group_by_length},
          {"precision", s.precision},
          {"world_size", s.world_size},
          {"zero_stage", s.zero_stage}};
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
  metadata[kLayoutKey] = layout;
  io::write_safetensors(path, tensors, metadata);
}

// A file digest's hash as the manifest records it: 16 hex digits.
std::string hash_text(const io::FileDigest& d) { return fmt::format("{:016x}", d.hash); }

// The manifest of the files in `dir` (all but itself), written atomically.
void write_manifest(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename() != kManifestFile) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    const io::FileDigest d = io::digest_file(path.string());
    files[path.filename().string()] = {{"bytes", d.bytes}, {"hash", hash_text(d)}};
  }
  io::write_text_file_atomic((dir / kManifestFile).string(), nlohmann::json{{"files", files}}.dump(2) + "\n");
}

// The files of checkpoint `dir` that `wanted` accepts against its manifest:
// present, of the recorded size and hash. A checkpoint saved without a
// manifest is taken as it is.
void verify_manifest(const std::string& dir, const std::function<bool(const std::string&)>& wanted) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  if (!io::path_exists(path)) return;
  const nlohmann::json j = io::parse_json(io::read_text_file(path), path);
  if (!j.is_object() || !j.contains("files") || !j["files"].is_object())
    fail("{}: expected an object with \"files\"", path);
  for (const auto& [name, entry] : j["files"].items()) {
    if (!wanted(name)) continue;
    if (!entry.is_object() || !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("hash") || !entry["hash"].is_string())
      fail("{}: the entry of '{}' needs \"bytes\" and \"hash\"", path, name);
    const std::string file = (fs::path(dir) / name).string();
    if (name.find('/') != std::string::npos) fail("{}: the entry '{}' is not a file of the checkpoint", path, name);
    if (!io::path_exists(file)) fail("{}: not a whole checkpoint ({} is missing)", dir, name);
    const io::FileDigest d = io::digest_file(file);
    const uint64_t bytes = entry["bytes"].get<uint64_t>();
    const std::string hash = hash_text(d);
    if (d.bytes != bytes || hash != entry["hash"].get<std::string>())
      fail("{}: {} bytes, hash {}; the checkpoint saved {} bytes, hash {}: the file changed or was damaged after "
           "the save", file, d.bytes, hash, bytes, entry["hash"].get<std::string>());
  }
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
    if (rank == 0) io::write_text_file_atomic((partial / kStateFile).string(), state_json(state).dump(2) + "\n");
  } catch (const distributed::PeerFailure&) {
    throw;  // another rank's failure keeps its own message and exit code
  } catch (const Error& e) {
    fail("{}: not saved, the checkpoints before it are kept ({})", final_dir.string(), e.what());
  }
  // Every rank's part is written: only now may the checkpoint appear.
  if (world > 1) ranks.comm->sum_host({});
  if (rank != 0) return;
  write_manifest(partial);
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

namespace {

// A field of trainer_state.json, of the type asked, or one error naming the file and the field.
class StateFields {
 public:
  StateFields(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {}
  const nlohmann::json* find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const nlohmann::json& at(const char* key) const {
    const nlohmann::json* v = find(key);
    if (!v) fail("{}: '{}' is missing", path_, key);
    return *v;
  }
  [[noreturn]] void wrong(const char* key, const char* expected) const {
    fail("{}: '{}' must be {}, got {}", path_, key, expected, io::short_dump(at(key)));
  }
  int64_t integer(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
      wrong(key, "an integer");
    return v.get<int64_t>();
  }
  int64_t integer(const char* key, int64_t absent) const { return find(key) ? integer(key) : absent; }
  uint64_t unsigned_integer(const char* key) const {
    if (!at(key).is_number_unsigned()) wrong(key, "a non-negative integer");
    return at(key).get<uint64_t>();
  }
  double number(const char* key) const {
    if (!at(key).is_number()) wrong(key, "a number");
    return at(key).get<double>();
  }
  bool boolean(const char* key) const {
    if (!at(key).is_boolean()) wrong(key, "true or false");
    return at(key).get<bool>();
  }
  bool boolean(const char* key, bool absent) const { return find(key) ? boolean(key) : absent; }
  std::string text(const char* key) const {
    if (!at(key).is_string()) wrong(key, "a string");
    return at(key).get<std::string>();
  }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace

TrainerState read_trainer_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / kStateFile).string();
  if (!io::path_exists(path)) fail("{}: not a checkpoint ({} is missing)", dir, kStateFile);
  const nlohmann::json j = io::parse_json(io::read_text_file(path), path);
  if (!j.is_object()) fail("{}: expected a JSON object", path);
  const StateFields f(j, path);
  TrainerState s;
  s.global_step = f.integer("global_step");
  s.updates = f.integer("updates");
  s.micro_batches = f.integer("micro_batches");
  s.loss_scale = f.number("loss_scale");
  s.clean_steps = f.integer("clean_steps");
  s.skipped_steps = f.integer("skipped_steps");
  s.seed = f.unsigned_integer("seed");
  s.optimizer = f.text("optimizer");
  s.per_device_train_batch_size = f.integer("per_device_train_batch_size");
  s.gradient_accumulation_steps = f.integer("gradient_accumulation_steps");
  s.examples = f.integer("examples");
  s.shuffle = f.boolean("shuffle");
  s.drop_last = f.boolean("drop_last");
  s.group_by_length = f.boolean("group_by_length", false);  // absent from checkpoints made before it existed
  s.precision = f.text("precision");
  s.world_size = f.integer("world_size", 1);  // absent from checkpoints made before data parallelism
  s.zero_stage = f.integer("zero_stage", 0);
  // The counters as a run writes them: every step an update or (fp16) a
  // skipped one; one to gradient_accumulation_steps batches a step.
  auto inconsistent = [&](const std::string& what) { fail("{}: inconsistent counters: {}", path, what); };
  if (s.global_step < 0 || s.global_step > (int64_t{1} << 53)) inconsistent("global_step out of range");
  if (s.per_device_train_batch_size < 1 || s.gradient_accumulation_steps < 1 || s.examples < 1)
    inconsistent("per_device_train_batch_size, gradient_accumulation_steps and examples must be positive");
  if (s.updates < 0 || s.skipped_steps < 0 || s.updates + s.skipped_steps != s.global_step)
    inconsistent(fmt::format("updates {} and skipped_steps {} do not add up to global_step {}", s.updates,
                             s.skipped_steps, s.global_step));
  if (s.micro_batches < s.global_step || s.micro_batches / s.gradient_accumulation_steps > s.global_step)
    inconsistent(fmt::format("micro_batches {} for {} steps of at most {} batches", s.micro_batches, s.global_step,
                             s.gradient_accumulation_steps));
  if (s.clean_steps < 0 || s.clean_steps >= 2000) inconsistent("clean_steps must be in [0, 2000)");
  if (!(s.loss_scale > 0) || !std::isfinite(s.loss_scale)) inconsistent("loss_scale must be positive and finite");
  if (s.world_size < 1 || s.zero_stage < 0 || s.zero_stage > 3) inconsistent("world_size or zero_stage out of range");
  return s;
}

namespace {

// A float32 optimizer state of a checkpoint: finite, and where it is a second
// moment (exp_avg_sq, Adafactor's factors) or an 8-bit block's absmax, not negative.
void check_state_values(const std::string& path, const std::string& name, const std::vector<uint8_t>& bytes) {
  const bool non_negative = name.find("exp_avg_sq") != std::string::npos || name.find("absmax") != std::string::npos;
  const size_t n = bytes.size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof v);
    if (!std::isfinite(v) || (non_negative && v < 0.0f))
      fail("{}: optimizer state '{}' holds {} at element {} ({})", path, name, v, i,
           std::isfinite(v) ? "a second moment or scale is never negative" : "states must be finite");
  }
}

}  // namespace

TrainerState load_checkpoint(const std::string& dir, Model& model, Optimizer& optimizer,
                             Backend& backend, const TrainerState& expected, const CheckpointRanks& ranks) {
  // Each rank checks the files it reads: the shared ones (rank 0) and its own optimizer shard.
  const std::string own_shard = optimizer_shard_file(rank_of(ranks), world_of(ranks));
  verify_manifest(dir, [&](const std::string& name) {
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
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  const auto meta = file.metadata();
  if (!meta.count("optimizer") || meta.at("optimizer") != optimizer.name())
    fail("{}: holds the states of optimizer '{}', this run uses {}", path,
         meta.count("optimizer") ? meta.at("optimizer") : "?", optimizer.name());
  if (ranks.sharded)
    for (const auto& [key, value] : shard_metadata(ranks))
      if (!meta.count(key) || meta.at(key) != value)
        fail("{}: its {} is {}, rank {} of this run has {} (a shard of another model or world)", path, key,
             meta.count(key) ? meta.at(key) : "missing", rank_of(ranks), value);
  const auto states = optimizer.state_tensors();
  // Flat states (one element per element of the flat parameters, or a ZeRO
  // shard of them) hold each parameter where the saving run's layout put it.
  const std::string layout = parameter_layout_id(model.weights());
  const bool flat = std::any_of(states.begin(), states.end(), [&](const auto& state) {
    return state.second.rank() == 1 && (state.second.numel() == model.weights().flat_elements() || ranks.sharded);
  });
  if (meta.count(kLayoutKey) ? meta.at(kLayoutKey) != layout : flat)
    fail("{}: its optimizer states follow another layout of the parameters ({}, this build lays them out as {}); "
         "an anatomy of another version saved them, and they cannot be resumed",
         path, meta.count(kLayoutKey) ? meta.at(kLayoutKey) : "not recorded", layout);
  for (const auto& [name, tensor] : states) {
    const io::StTensorInfo& info = file.info(name);
    const io::StDType want = tensor.dtype() == DType::F32 ? io::StDType::F32 : io::StDType::U8;
    if (info.dtype != want) fail("{}: tensor '{}' is {}, expected {}", path, name, io::st_dtype_name(info.dtype),
                                 io::st_dtype_name(want));
    file.check_shape(name, tensor.shape());
    const auto bytes = file.raw(name);
    ANATOMY_CHECK(bytes.size() == tensor.nbytes(), "{}: tensor '{}' has {} bytes", path, name, bytes.size());
    std::vector<uint8_t> aligned(bytes.begin(), bytes.end());
    if (tensor.dtype() == DType::F32) check_state_values(path, name, aligned);
    backend.copy_from_host(tensor, aligned.data());
  }
  if (file.names().size() != states.size())
    fail("{}: {} tensors, the optimizer has {} states", path, file.names().size(), states.size());
  int64_t steps = -1;
  try {
    steps = meta.count("steps") ? std::stoll(meta.at("steps")) : -1;
  } catch (const std::exception&) {
  }
  if (steps < 0 || steps != s.updates) fail("{}: its step count disagrees with {}", path, kStateFile);
  optimizer.restore_steps(steps);
  return s;
}

}  // namespace anatomy
