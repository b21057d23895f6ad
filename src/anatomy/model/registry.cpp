// registry.cpp: the architectures the engine has (families.cpp has the
// families). Adding a head adds its entry here (docs/DESIGN.md: "Adding a model family").
#include "anatomy/model/registry.h"

#include "anatomy/core/error.h"
#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_config.h"
#include "anatomy/model/bert/bert_inference.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/deberta/deberta.h"
#include "anatomy/model/distilbert/distilbert.h"
#include "anatomy/model/electra/electra.h"
#include "anatomy/model/modernbert/modernbert.h"
#include "anatomy/model/modernbert/modernbert_config.h"
#include "anatomy/model/roberta/roberta.h"

namespace anatomy {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A family laid out as BERT (model/bert/bert_layout.h), with the head of `task`.
// The masked-LM head has no packed inference: its inference is the training
// model's forward on padded batches.
ModelArchitecture bert_style(const BertLayout& family, const std::string& task) {
  const BertLayout& layout = bert_task_layout(family, task);
  // DeBERTa's relative attention has no packed kernels either.
  if (layout.masked_lm() || layout.relative_attention)
    return {layout.architecture, layout.model_type, task,
            [&layout](const ModelConfig& config) { return bert_parameter_specs(config, layout); },
            [&layout](Backend& backend, const ModelConfig& config, DType compute) -> std::unique_ptr<Model> {
              return std::make_unique<BertStyleModel>(backend, config, compute, layout);
            },
            [&layout](Backend& backend, const ModelConfig& config, DType dtype) -> std::unique_ptr<InferenceModel> {
              return make_padded_inference(backend, std::make_unique<BertStyleModel>(backend, config, dtype, layout));
            }};
  return {layout.architecture, layout.model_type, task,
          [&layout](const ModelConfig& config) { return bert_parameter_specs(config, layout); },
          [&layout](Backend& backend, const ModelConfig& config, DType compute) -> std::unique_ptr<Model> {
            return std::make_unique<BertStyleModel>(backend, config, compute, layout);
          },
          [&layout](Backend& backend, const ModelConfig& config, DType dtype) -> std::unique_ptr<InferenceModel> {
            return std::make_unique<BertInference>(backend, config, dtype, layout);
          }};
}

}  // namespace

const std::vector<ModelArchitecture>& model_architectures() {
  static const std::vector<ModelArchitecture> architectures = {
      bert_style(bert_layout(), kSequenceClassification),
      bert_style(roberta_layout("roberta"), kSequenceClassification),
      bert_style(roberta_layout("xlm-roberta"), kSequenceClassification),
      bert_style(roberta_layout("camembert"), kSequenceClassification),
      bert_style(electra_layout(), kSequenceClassification),
      bert_style(distilbert_layout(), kSequenceClassification),
      bert_style(deberta_layout(), kSequenceClassification),
      bert_style(bert_layout(), kTokenClassification),
      bert_style(roberta_layout("roberta"), kTokenClassification),
      bert_style(roberta_layout("xlm-roberta"), kTokenClassification),
      bert_style(roberta_layout("camembert"), kTokenClassification),
      bert_style(electra_layout(), kTokenClassification),
      bert_style(distilbert_layout(), kTokenClassification),
      bert_style(deberta_layout(), kTokenClassification),
      bert_style(bert_layout(), kQuestionAnswering),
      bert_style(roberta_layout("roberta"), kQuestionAnswering),
      bert_style(roberta_layout("xlm-roberta"), kQuestionAnswering),
      bert_style(roberta_layout("camembert"), kQuestionAnswering),
      bert_style(electra_layout(), kQuestionAnswering),
      bert_style(distilbert_layout(), kQuestionAnswering),
      bert_style(deberta_layout(), kQuestionAnswering),
      bert_style(bert_layout(), kMaskedLm),
      bert_style(roberta_layout("roberta"), kMaskedLm),
      bert_style(roberta_layout("xlm-roberta"), kMaskedLm),
      bert_style(roberta_layout("camembert"), kMaskedLm),
      bert_style(electra_layout(), kMaskedLm),
      bert_style(distilbert_layout(), kMaskedLm),
      bert_style(bert_layout(), kMultipleChoice),
      bert_style(roberta_layout("roberta"), kMultipleChoice),
      bert_style(roberta_layout("xlm-roberta"), kMultipleChoice),
      bert_style(roberta_layout("camembert"), kMultipleChoice),
      bert_style(distilbert_layout(), kMultipleChoice),
      {"ModernBertForSequenceClassification", "modernbert", kSequenceClassification, modernbert_parameter_specs,
       [](Backend& backend, const ModelConfig& config, DType compute) -> std::unique_ptr<Model> {
         return std::make_unique<ModernBertForSequenceClassification>(backend, config, compute);
       },
       [](Backend& backend, const ModelConfig& config, DType dtype) -> std::unique_ptr<InferenceModel> {
         return make_padded_inference(backend, std::make_unique<ModernBertForSequenceClassification>(backend, config,
                                                                                                       dtype));
       }},
  };
  return architectures;
}

std::string model_task(const ModelConfig& config, const std::string& requested) {
  if (!requested.empty()) return requested;
  const auto asked = config.extra.find(kRequestedTaskKey);
  if (asked != config.extra.end() && asked->is_string()) return asked->get<std::string>();
  const auto named = config.extra.find("architectures");
  if (named != config.extra.end() && named->is_array())
    for (const nlohmann::json& name : *named)
      for (const ModelArchitecture& a : model_architectures())
        // A *ForMaskedLM class is a pre-training checkpoint's (bert-base-uncased's): fine-tuned for sequence
        // classification unless masked-LM is asked for, as the scripts choose their head.
        if (name.is_string() && a.name == name.get_ref<const std::string&>() && a.model_type == config.model_type &&
            a.task != kMaskedLm)
          return a.task;
  return kSequenceClassification;
}

const ModelArchitecture& model_architecture(const ModelConfig& config, const std::string& requested) {
  const std::string task = model_task(config, requested);
  std::vector<std::string> offered;
  for (const ModelArchitecture& a : model_architectures()) {
    if (a.model_type == config.model_type && a.task == task) return a;
    if (a.model_type == config.model_type) offered.push_back(a.task);
  }
  if (offered.empty()) model_family(config.model_type, "model");  // fails, naming the supported types
  fail("model_type \"{}\" has no {} head (it has: {})", config.model_type, task, joined(offered));
}

void set_model_task(ModelConfig& config, const std::string& task) {
  config.extra["architectures"] = nlohmann::json::array({model_architecture(config, task).name});
  config.extra[kRequestedTaskKey] = task;
}

std::unique_ptr<Model> make_model(Backend& backend, const ModelConfig& config, DType compute,
                                  const std::string& task) {
  return model_architecture(config, task).make(backend, config, compute);
}

std::unique_ptr<InferenceModel> make_inference_model(Backend& backend, const ModelConfig& config, DType dtype,
                                                     const std::string& task) {
  return model_architecture(config, task).make_inference(backend, config, dtype);
}

std::vector<ParamSpec> model_parameter_specs(const ModelConfig& config, const std::string& task) {
  return model_architecture(config, task).parameter_specs(config);
}

}  // namespace anatomy
