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
};

// `spec` is a directory holding config.json, or a preset name. Errors name what is missing.
ModelSource resolve_model(const std::string& spec);

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
