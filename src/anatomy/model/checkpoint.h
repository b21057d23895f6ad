// checkpoint.h: a model from a Hugging Face directory (config.json +
// model.safetensors, or shards), from a preset with Hugging Face's
// initialisation, and back to a directory that Hugging Face loads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "anatomy/model/config.h"
#include "anatomy/model/model.h"

namespace anatomy {

struct ModelSource {
  ModelConfig config;
  std::string directory;  // empty for a preset
  std::string preset;     // empty for a directory
  std::string hub_id;     // the id, when `directory` is a snapshot in the Hugging Face cache
  std::string weights;    // the directory's weights file ("model.safetensors", "pytorch_model.bin", ...)

  std::string name() const { return !preset.empty() ? preset : !hub_id.empty() ? hub_id : directory; }
};

// `spec` is, in this order: a directory holding config.json; a Hugging Face
// id ("org/name") whose snapshot the local hub cache holds (io/hf_cache.h:
// nothing is downloaded); a preset name. With `need_weights`, a directory
// must hold weights anatomy reads (io::find_weights_file). Errors name what
// is missing, and for an unknown id where it was looked for.
ModelSource resolve_model(const std::string& spec, bool need_weights = true);

// One line for people: where the model comes from and its weights, e.g.
// "bert-mini (a preset: random initialisation, no pretrained weights)".
std::string describe_model(const ModelSource& source);

// Normal(0, initializer_range) for linear and embedding weights, zero biases,
// LayerNorm weights one, the row Model::zero_row_on_init() names zero (the
// padding token's embedding); a pure function of `seed`.
void init_weights(Model& model, uint64_t seed);

struct LoadReport {
  std::vector<std::string> initialised;  // parameters missing from the checkpoint (e.g. a fresh classifier)
  std::vector<std::string> unused;       // checkpoint tensors the model does not have
};

// Reads every parameter from `directory` (F32, F16 or BF16), under any of the
// names Model::checkpoint_names() allows (BERT: old gamma/beta LayerNorm names,
// a bare BertModel's), as Hugging Face accepts them. Missing tensors that
// Model::optional_on_load() allows (BERT: the pooler and classifier) are
// initialised from `seed` and reported; any other missing tensor or a wrong
// shape is an error.
LoadReport load_weights(Model& model, const std::string& directory, uint64_t seed);

// Writes directory/config.json and directory/model.safetensors (float32), each
// atomically; creates the directory.
void save_pretrained(const Model& model, Backend& backend, const std::string& directory);
// The same from a host copy of the float32 flat buffer (the model's layout),
// for a model whose weights are sharded over ranks (ZeRO stage 3).
void save_pretrained_from_host(const Model& model, const std::vector<float>& flat,
                               const std::string& directory);

}  // namespace anatomy
