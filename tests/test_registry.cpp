// test_registry.cpp: the registry of families and heads (model/registry.h):
// config.json's model_type picks the family, a task the architecture, and
// what is not supported is one error naming what is.
#include <gtest/gtest.h>

#include <string>

#include "anatomy/core/error.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/config.h"
#include "anatomy/model/registry.h"

namespace anatomy {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Registry, BertConfigMakesBertForSequenceClassification) {
  const ModelConfig config = parse_model_config(R"({"model_type": "bert", "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100,
      "max_position_embeddings": 32, "num_labels": 3})", "config.json");
  EXPECT_EQ(config.model_type, "bert");
  EXPECT_EQ(model_architecture(config).name, "BertForSequenceClassification");
  auto cpu = make_cpu_backend(1);
  const std::unique_ptr<Model> model = make_model(*cpu, config);
  EXPECT_EQ(model->architecture(), "BertForSequenceClassification");
  EXPECT_EQ(model->weights().parameter_count(), ParameterSet(*cpu, bert_parameter_specs(config),
                                                             Category::Weights, "").parameter_count());
  // The parameter list without allocating it is the model's.
  const std::vector<ParamSpec> specs = model_parameter_specs(config);
  ASSERT_EQ(specs.size(), model->weights().specs().size());
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(specs[i].name, model->weights().specs()[i].name);
  // Units cover the layout in order: the embeddings, each layer, the head.
  const auto& units = model->parameter_units();
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units.front().begin, 0);
  for (size_t u = 1; u < units.size(); ++u) EXPECT_EQ(units[u].begin, units[u - 1].end);
  EXPECT_EQ(units.back().end, model->weights().flat_elements());
  const std::unique_ptr<InferenceModel> inference = make_inference_model(*cpu, config, DType::F32);
  EXPECT_EQ(inference->parameter_count(), model->weights().parameter_count());
}

TEST(Registry, AConfigWithoutModelTypeIsBert) {
  EXPECT_EQ(parse_model_config("{}", "config.json").model_type, "bert");
}

TEST(Registry, AnUnknownFamilyOrTaskNamesWhatIsSupported) {
  const std::string family = error_of([] { parse_model_config(R"({"model_type": "gpt2"})", "dir/config.json"); });
  EXPECT_EQ(family, "dir/config.json: model_type \"gpt2\" is not supported (supported: \"bert\", \"roberta\", "
                    "\"xlm-roberta\", \"camembert\", \"electra\", \"distilbert\", \"deberta-v2\", \"modernbert\")");
  const std::string type = error_of([] { parse_model_config(R"({"model_type": 7})", "config.json"); });
  EXPECT_EQ(type, "config.json: 'model_type' must be a string, got 7");
  const ModelConfig bert = *model_preset("bert-tiny");
  const std::string task = error_of([&] { model_architecture(bert, "text-generation"); });
  EXPECT_EQ(task, "model_type \"bert\" has no text-generation head (it has: sequence-classification, "
                  "token-classification, question-answering, masked-lm, multiple-choice)");
  // ELECTRA's multiple-choice head (a SequenceSummary) is not served.
  const ModelConfig electra = *model_preset("electra-small-discriminator");
  EXPECT_EQ(error_of([&] { model_architecture(electra, "multiple-choice"); }),
            "model_type \"electra\" has no multiple-choice head (it has: sequence-classification, "
            "token-classification, question-answering, masked-lm)");
}

// config.json's architectures choose the head where no task is asked for and
// the engine has the class it names; a pre-training checkpoint's class
// (BertForMaskedLM, as bert-base-uncased's) is fine-tuned as the seed does,
// for sequence classification; a task asked for wins.
TEST(Registry, ArchitecturesInConfigJsonChooseTheHead) {
  const std::string sizes = R"("hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 32)";
  const ModelConfig named =
      parse_model_config(R"({"architectures": ["BertForSequenceClassification"], )" + sizes + "}", "config.json");
  EXPECT_EQ(model_task(named), kSequenceClassification);
  EXPECT_EQ(model_architecture(named).name, "BertForSequenceClassification");
  const ModelConfig pretraining =
      parse_model_config(R"({"architectures": ["BertForMaskedLM"], )" + sizes + "}", "config.json");
  EXPECT_EQ(model_task(pretraining), kSequenceClassification);
  EXPECT_EQ(model_task(pretraining, "masked-lm"), "masked-lm");
  EXPECT_EQ(model_architecture(pretraining, "masked-lm").name, "BertForMaskedLM");
  // Asked for (--task), masked-LM holds for the config, and a saved config.json does not carry the asking.
  ModelConfig asked = pretraining;
  set_model_task(asked, kMaskedLm);
  EXPECT_EQ(model_task(asked), kMaskedLm);
  // A token classifier's checkpoint is one.
  const ModelConfig ner =
      parse_model_config(R"({"architectures": ["BertForTokenClassification"], )" + sizes + "}", "config.json");
  EXPECT_EQ(model_task(ner), kTokenClassification);
  EXPECT_EQ(model_architecture(ner).name, "BertForTokenClassification");
  EXPECT_EQ(error_of([] { parse_model_config(R"({"architectures": "BertModel"})", "dir/config.json"); }),
            "dir/config.json: 'architectures' must be a list of class names, got \"BertModel\"");
  EXPECT_EQ(error_of([] { parse_model_config(R"({"architectures": [1]})", "dir/config.json"); }),
            "dir/config.json: 'architectures' must be a list of class names, got [1]");
}

TEST(Registry, PresetsComeFromTheFamilies) {
  const std::vector<std::string> names = model_preset_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "bert-large-uncased");
  for (const std::string& name : names) {
    const std::optional<ModelConfig> c = model_preset(name);
    ASSERT_TRUE(c.has_value()) << name;
    EXPECT_NO_THROW(model_architecture(*c)) << name;
    // The preset's name says its family (a RoBERTa-family preset may be xlm-roberta or camembert;
    // DeBERTa-v3's model_type is deberta-v2).
    const std::string family = c->model_type == "deberta-v2" ? "deberta-v3" : c->model_type;
    EXPECT_NE(name.find(family), std::string::npos) << name;
  }
  EXPECT_EQ(model_preset("roberta-base")->model_type, "roberta");
  EXPECT_FALSE(model_preset("gpt2-medium").has_value());
}

TEST(Registry, TheOutputsCarryHuggingFacesNames) {
  const ModelConfig config = *model_preset("bert-tiny");
  auto cpu = make_cpu_backend(1);
  ModelConfig small = config;
  small.vocab_size = 64;
  small.max_position_embeddings = 16;
  const std::unique_ptr<Model> model = make_model(*cpu, small);
  ModelInputs in;
  in.input_ids = Tensor::empty(cpu->ledger(), {2, 8}, DType::I64, Category::Data, "input_ids");
  std::vector<int64_t> ids(16, 5);
  cpu->copy_from_host(in.input_ids, ids.data());
  const ForwardOutput out = model->forward(in, ForwardOptions{});
  const auto named = out.named();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "logits");
  EXPECT_EQ(named[0].second.shape(), (Shape{2, small.num_labels}));
  EXPECT_FALSE(out.loss.has_value());
}

}  // namespace
}  // namespace anatomy
