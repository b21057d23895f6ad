// checkpoint_files.cpp: a checkpoint's trainer_state.json, its manifest
// (checkpoint_files.json) and its optimizer file, read (and the first two
// written); only files, JSON and safetensors, so that these readers of
// outside bytes stand apart from the model and the optimizer
// (fuzz/fuzz_trainer_state.cpp and fuzz/fuzz_optimizer_state.cpp link them alone).
#include "anatomy/train/checkpoint_files.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"
#include "anatomy/io/safetensors.h"

namespace anatomy {

namespace fs = std::filesystem;

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

// A file digest's hash as the manifest records it: 16 hex digits.
std::string hash_text(const io::FileDigest& d) { return fmt::format("{:016x}", d.hash); }

}  // namespace

nlohmann::json trainer_state_json(const TrainerState& s) {
  nlohmann::json j = s.trainer_fields.is_object() ? s.trainer_fields : nlohmann::json::object();
  j["log_history"] = s.log_history;
  if (!s.lr_scheduler.empty()) j["lr_scheduler"] = s.lr_scheduler;
  j.update(nlohmann::json{{"global_step", s.global_step},
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
          {"zero_stage", s.zero_stage}});
  return j;
}

TrainerState read_trainer_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / kTrainerStateFile).string();
  if (!io::path_exists(path)) fail("{}: not a checkpoint ({} is missing)", dir, kTrainerStateFile);
  const nlohmann::json j = io::parse_json(io::read_text_file(path), path);
  if (!j.is_object()) fail("{}: expected a JSON object", path);
  const StateFields f(j, path);
  if (!j.contains("updates") && j.contains("log_history"))
    fail("{}: a Hugging Face Trainer state without this engine's counters (an output directory's, not a "
         "checkpoint-N's); resume from a checkpoint-N directory", path);
  TrainerState s;
  if (const nlohmann::json* history = f.find("log_history"); history && history->is_array()) s.log_history = *history;
  if (const nlohmann::json* scheduler = f.find("lr_scheduler")) {
    if (!scheduler->is_object()) f.wrong("lr_scheduler", "an object");
    s.lr_scheduler = *scheduler;
  }
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

void write_checkpoint_manifest(const std::string& dir_path) {
  const fs::path dir(dir_path);
  nlohmann::json files = nlohmann::json::object();
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename() != kCheckpointManifestFile) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    const io::FileDigest d = io::digest_file(path.string());
    files[path.filename().string()] = {{"bytes", d.bytes}, {"hash", hash_text(d)}};
  }
  io::write_text_file_atomic((dir / kCheckpointManifestFile).string(), nlohmann::json{{"files", files}}.dump(2) + "\n");
}

void verify_checkpoint_manifest(const std::string& dir, const std::function<bool(const std::string&)>& wanted) {
  const std::string path = (fs::path(dir) / kCheckpointManifestFile).string();
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

std::vector<std::vector<uint8_t>> read_optimizer_states(const std::string& path,
                                                        const OptimizerFileExpectation& expected) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  const auto meta = file.metadata();
  if (!meta.count("optimizer") || meta.at("optimizer") != expected.optimizer)
    fail("{}: holds the states of optimizer '{}', this run uses {}", path,
         meta.count("optimizer") ? meta.at("optimizer") : "?", expected.optimizer);
  for (const auto& [key, value] : expected.shard)
    if (!meta.count(key) || meta.at(key) != value)
      fail("{}: its {} is {}, rank {} of this run has {} (a shard of another model or world)", path, key,
           meta.count(key) ? meta.at(key) : "missing", expected.rank, value);
  if (meta.count(kOptimizerLayoutKey) ? meta.at(kOptimizerLayoutKey) != expected.layout : expected.flat)
    fail("{}: its optimizer states follow another layout of the parameters ({}, this build lays them out as {}); "
         "an anatomy of another version saved them, and they cannot be resumed",
         path, meta.count(kOptimizerLayoutKey) ? meta.at(kOptimizerLayoutKey) : "not recorded", expected.layout);
  std::vector<std::vector<uint8_t>> out;
  for (const OptimizerStateSpec& state : expected.states) {
    const io::StTensorInfo& info = file.info(state.name);
    const io::StDType want = state.float32 ? io::StDType::F32 : io::StDType::U8;
    if (info.dtype != want) fail("{}: tensor '{}' is {}, expected {}", path, state.name, io::st_dtype_name(info.dtype),
                                 io::st_dtype_name(want));
    file.check_shape(state.name, state.shape);
    const auto bytes = file.raw(state.name);
    std::vector<uint8_t> aligned(bytes.begin(), bytes.end());
    if (state.float32) check_state_values(path, state.name, aligned);
    out.push_back(std::move(aligned));
  }
  if (file.names().size() != expected.states.size())
    fail("{}: {} tensors, the optimizer has {} states", path, file.names().size(), expected.states.size());
  int64_t steps = -1;
  try {
    steps = meta.count("steps") ? std::stoll(meta.at("steps")) : -1;
  } catch (const std::exception&) {
  }
  if (steps < 0 || steps != expected.updates) fail("{}: its step count disagrees with {}", path, kTrainerStateFile);
  return out;
}

}  // namespace anatomy
