// checkpoint.cpp: loading, initialising and saving a model's parameters.
#include "anatomy/model/checkpoint.h"

#include "anatomy/model/registry.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "anatomy/core/random.h"
#include "anatomy/io/files.h"
#include "anatomy/io/hf_cache.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/registry.h"

namespace anatomy {

namespace fs = std::filesystem;

namespace {

// Random streams of initialisation live in their own range, apart from dropout's.
constexpr uint64_t kInitStreamBase = uint64_t{1} << 62;

void init_one(const Model& model, const Tensor& t, const ParamSpec& spec, size_t index, uint64_t seed) {
  const ModelConfig& c = model.config();
  std::vector<float> host(t.numel(), 0.0f);
  switch (spec.init) {
    case ParamInit::Zeros: break;
    case ParamInit::Ones: std::fill(host.begin(), host.end(), 1.0f); break;
    case ParamInit::Normal: {
      const double std = spec.init_std > 0.0 ? spec.init_std : c.initializer_range;
      const uint64_t n = host.size();
      for (size_t i = 0; i < host.size(); ++i) {
        double z = random_normal(seed, kInitStreamBase + index, i);
        // Truncated: a value beyond the cutoff is drawn again (from the next counters of the same stream).
        for (uint64_t again = 1; spec.init_cutoff > 0.0 && std::abs(z) > spec.init_cutoff; ++again)
          z = random_normal(seed, kInitStreamBase + index, i + again * n);
        host[i] = static_cast<float>(std * z);
      }
      if (const int64_t row = model.zero_row_on_init(spec); row >= 0) {
        const int64_t width = spec.shape[1];
        std::fill(host.begin() + row * width, host.begin() + (row + 1) * width, 0.0f);
      }
      break;
    }
  }
  model.backend().copy_from_host(t, host.data());
}

}  // namespace

ModelSource resolve_model(const std::string& spec, bool need_weights) {
  ModelSource source;
  auto from_directory = [&](const std::string& dir) {
    const std::string config_path = (fs::path(dir) / "config.json").string();
    if (!io::path_exists(config_path)) fail("{}: no config.json in the model directory", dir);
    source.config = load_model_config(config_path);
    source.directory = dir;
    if (need_weights) source.weights = io::find_weights_file(dir);
  };
  if (io::is_directory(spec)) {
    from_directory(spec);
    return source;
  }
  if (const auto cached = io::find_cached_model(spec)) {
    from_directory(cached->snapshot);
    source.hub_id = spec;
    return source;
  }
  if (auto preset = model_preset(spec)) {
    source.config = *preset;
    source.preset = spec;
    return source;
  }
  // The smallest preset as the example (docs/models.md's "Model families" lists them all).
  std::string smallest;
  int64_t fewest = 0;
  const std::vector<std::string> presets = model_preset_names();
  for (const std::string& name : presets) {
    int64_t count = 0;
    for (const ParamSpec& spec : model_parameter_specs(*model_preset(name))) count += shape_numel(spec.shape);
    if (smallest.empty() || count < fewest) smallest = name, fewest = count;
  }
  const std::string names = fmt::format("there are {}, such as {}; docs/models.md lists them", presets.size(), smallest);
  if (io::is_hub_model_id(spec)) {
    std::string folder = "models--";
    for (char c : spec) folder += c == '/' ? std::string("--") : std::string(1, c);
    fail("--model {}: not a directory, not in the Hugging Face cache (no {}) and not a preset ({}); anatomy "
         "downloads nothing: fetch it first (hf download {}) or give its directory",
         spec, (fs::path(io::hf_hub_cache_dir()) / folder).string(), names, spec);
  }
  fail("--model {}: neither a directory with config.json nor a preset ({})", spec, names);
}

std::string describe_model(const ModelSource& source) {
  if (!source.preset.empty())
    return fmt::format("{} (a preset: random initialisation, no pretrained weights)", source.preset);
  const std::string weights = source.weights.empty() ? std::string() : fmt::format(", weights from {}", source.weights);
  if (!source.hub_id.empty())
    return fmt::format("{} from the Hugging Face cache ({}){}", source.hub_id, source.directory, weights);
  return source.directory + weights;
}

void init_weights(Model& model, uint64_t seed) {
  const auto& set = model.weights();
  for (size_t i = 0; i < set.specs().size(); ++i)
    init_one(model, set.tensors()[i], set.specs()[i], i, seed);
  model.refresh_half_weights();
}

LoadReport load_weights(Model& model, const std::string& directory, uint64_t seed) {
  const io::SafetensorsSet files = io::SafetensorsSet::open_dir(directory);
  const auto& set = model.weights();
  LoadReport report;
  std::map<std::string, bool> used;
  for (const auto& name : files.names()) used[name] = false;
  for (size_t i = 0; i < set.specs().size(); ++i) {
    const ParamSpec& spec = set.specs()[i];
    std::string found;
    for (const auto& candidate : model.checkpoint_names(spec.name))
      if (files.has(candidate)) {
        found = candidate;
        break;
      }
    if (found.empty()) {
      if (!model.optional_on_load(spec.name)) fail("{}: tensor '{}' is missing from the checkpoint", directory, spec.name);
      init_one(model, set.tensors()[i], spec, i, seed);
      report.initialised.push_back(spec.name);
      continue;
    }
    used[found] = true;
    const io::SafetensorsFile& file = files.file_of(found);
    const std::vector<float> values = file.read_f32(found, spec.shape);
    for (size_t k = 0; k < values.size(); ++k)
      if (!std::isfinite(values[k]))
        fail("{}: tensor '{}' holds {} at element {} (weights must be finite)", file.path(), found, values[k], k);
    model.backend().copy_from_host(set.tensors()[i], values.data());
  }
  model.refresh_half_weights();
  for (const auto& [name, was_used] : used)
    if (!was_used && name.find("position_ids") == std::string::npos) report.unused.push_back(name);
  return report;
}

namespace {

// config.json and model.safetensors, each tensor's float32 values from `read`.
void write_pretrained(const Model& model, const std::string& directory,
                      const std::function<void(size_t, float*)>& read) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) fail("{}: cannot create the directory ({})", directory, ec.message());
  const auto& set = model.weights();
  std::vector<std::vector<float>> host(set.specs().size());
  std::vector<io::StWriteTensor> tensors;
  for (size_t i = 0; i < set.specs().size(); ++i) {
    host[i].resize(static_cast<size_t>(shape_numel(set.specs()[i].shape)));
    read(i, host[i].data());
    tensors.push_back({set.specs()[i].name, io::StDType::F32, set.specs()[i].shape, host[i].data()});
  }
  io::write_safetensors((fs::path(directory) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  // "architectures" names the model's class (its head), whatever the family's default.
  nlohmann::json config = model_config_to_json(model.config());
  config["architectures"] = nlohmann::json::array({model.architecture()});
  config.erase(kRequestedTaskKey);  // the run's choice, not the checkpoint's
  io::write_text_file_atomic((fs::path(directory) / "config.json").string(), config.dump(2) + "\n");
}

}  // namespace

void save_pretrained(const Model& model, Backend& backend, const std::string& directory) {
  const auto& set = model.weights();
  write_pretrained(model, directory, [&](size_t i, float* out) { backend.copy_to_host(set.tensors()[i], out); });
}

void save_pretrained_from_host(const Model& model, const std::vector<float>& flat,
                               const std::string& directory) {
  const auto& set = model.weights();
  ANATOMY_CHECK(static_cast<int64_t>(flat.size()) == set.flat_elements(), "save_pretrained_from_host: {} of {} elements",
                flat.size(), set.flat_elements());
  write_pretrained(model, directory, [&](size_t i, float* out) {
    const ParamSpec& spec = set.specs()[i];
    const auto offset = static_cast<size_t>(set.offset_of(spec.name));
    std::copy(flat.begin() + offset, flat.begin() + offset + shape_numel(spec.shape), out);
  });
}

}  // namespace anatomy
