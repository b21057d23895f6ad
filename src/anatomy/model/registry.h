// registry.h: which model families and architectures the engine has, and the
// one place that maps a config.json (its model_type and architectures) and a
// task to the class that implements them. Everything above model/ makes its models here.
//
// A family (model_type "bert", ...) reads and writes its config.json and has
// built-in sizes; an architecture (Hugging Face's class name, e.g.
// BertForSequenceClassification) is a family with a task head, which trains
// (Model) and runs inference (InferenceModel).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/config.h"
#include "anatomy/model/inference.h"
#include "anatomy/model/model.h"
#include "anatomy/model/parameters.h"
#include "anatomy/model/tasks.h"

namespace anatomy {

struct ModelFamily {
  std::string model_type;  // config.json's, e.g. "bert"
  // config.json's object -> ModelConfig (`source` names the file in errors).
  std::function<ModelConfig(const nlohmann::json&, const std::string& source)> parse_config;
  std::function<nlohmann::json(const ModelConfig&)> config_to_json;
  std::function<std::optional<ModelConfig>(const std::string& name)> preset;
  std::function<std::vector<std::string>()> preset_names;
};

struct ModelArchitecture {
  std::string name;        // Hugging Face's class name, e.g. "BertForSequenceClassification"
  std::string model_type;  // its family's
  std::string task;        // e.g. kSequenceClassification
  std::function<std::vector<ParamSpec>(const ModelConfig&)> parameter_specs;
  std::function<std::unique_ptr<Model>(Backend&, const ModelConfig&, DType compute)> make;
  std::function<std::unique_ptr<InferenceModel>(Backend&, const ModelConfig&, DType dtype)> make_inference;
};

const std::vector<ModelFamily>& model_families();
const std::vector<ModelArchitecture>& model_architectures();

// The family of `model_type`; an unknown one fails, naming `source` and the supported types.
const ModelFamily& model_family(const std::string& model_type, const std::string& source);
// The task a model of `config` is built for: `requested` when given; else
// the task of the first class config.json's "architectures" names that the
// engine has for the family, *ForMaskedLM aside; else sequence
// classification (a pre-training checkpoint, e.g. BertForMaskedLM, is
// fine-tuned as the seed does; masked-LM only when `requested`).
std::string model_task(const ModelConfig& config, const std::string& requested = "");
// Where set_model_task() records the task asked for, in the config's extra
// keys (a saved config.json leaves it out).
inline constexpr const char* kRequestedTaskKey = "anatomy_task";
// Makes `config` a model of `task`: its "architectures" names the family's
// class for it (fails as model_architecture does).
void set_model_task(ModelConfig& config, const std::string& task);
// The architecture of `config`'s family for model_task(config, task); fails naming what is supported.
const ModelArchitecture& model_architecture(const ModelConfig& config, const std::string& task = "");

// A trainable model of `config`'s architecture for `task` (as above), its
// weights zeroed (model/checkpoint.h initialises or loads them); `compute` as Model's.
std::unique_ptr<Model> make_model(Backend& backend, const ModelConfig& config, DType compute = DType::F32,
                                  const std::string& task = "");
// The same architecture for inference only, its weights in `dtype`.
std::unique_ptr<InferenceModel> make_inference_model(Backend& backend, const ModelConfig& config, DType dtype,
                                                     const std::string& task = "");
// The architecture's parameters, without allocating them (the plan of a model that does not fit).
std::vector<ParamSpec> model_parameter_specs(const ModelConfig& config, const std::string& task = "");

}  // namespace anatomy
