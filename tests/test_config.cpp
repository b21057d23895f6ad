// test_config.cpp: config.json parsing with Hugging Face's defaults and rules,
// the round trip through model_config_to_json, the presets' parameter counts,
// and broken config.json files through the real `anatomy` binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/core/error.h"
#include "anatomy/model/config.h"
#include "anatomy/model/parameters.h"
#include "cli_error_util.h"
#include "anatomy/model/registry.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "test/config.json"); }

// parse_model_config fails with one line naming the source and every one of `parts`.
void expect_parse_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    parse(j);
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("test/config.json"), std::string::npos) << message;
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message << "\nmissing: " << part;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// ---------------------------------------------------------------------------
// parse_model_config

TEST(Config, OnlyModelTypeGetsHuggingFaceDefaults) {
  const ModelConfig c = parse({{"model_type", "bert"}});
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.num_hidden_layers, 12);
  EXPECT_EQ(c.num_attention_heads, 12);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.hidden_act, Activation::Gelu);
  EXPECT_DOUBLE_EQ(c.hidden_dropout_prob, 0.1);
  EXPECT_DOUBLE_EQ(c.attention_probs_dropout_prob, 0.1);
  EXPECT_FALSE(c.classifier_dropout.has_value());
  EXPECT_DOUBLE_EQ(c.classifier_dropout_prob(), 0.1);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_DOUBLE_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.num_labels, 2);
  EXPECT_EQ(c.problem_type, ProblemType::Unset);
  EXPECT_TRUE(c.id2label.empty());
  EXPECT_EQ(c.head_dim(), 64);
}

TEST(Config, ReadsEveryKeyOfTheFixture) {
  const ModelConfig c = load_model_config(test::fixture("bert-tiny-cls") + "/config.json");
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.intermediate_size, 256);
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.hidden_dropout_prob, 0.0);
  EXPECT_EQ(c.num_labels, 2);
  // Keys the engine does not interpret are kept.
  EXPECT_TRUE(c.extra.contains("tie_word_embeddings"));
  EXPECT_TRUE(c.extra.contains("transformers_version"));
}

TEST(Config, NumLabelsFromId2label) {
  const ModelConfig c = parse({{"model_type", "bert"}, {"id2label", {{"0", "neg"}, {"1", "neu"}, {"2", "pos"}}}});
  EXPECT_EQ(c.num_labels, 3);
  EXPECT_EQ(c.id2label.at(2), "pos");
  // As in transformers, id2label wins over num_labels.
  EXPECT_EQ(parse({{"num_labels", 5}, {"id2label", {{"0", "a"}, {"1", "b"}, {"2", "c"}}}}).num_labels, 3);
  // Without id2label, num_labels; without either, 2.
  EXPECT_EQ(parse({{"num_labels", 5}}).num_labels, 5);
  EXPECT_EQ(parse({{"num_labels", 1}}).num_labels, 1);
  EXPECT_EQ(parse({{"id2label", nullptr}}).num_labels, 2);
  expect_parse_error({{"id2label", {{"0", "a"}, {"2", "c"}}}}, {"id2label", "1"});
  expect_parse_error({{"id2label", {{"zero", "a"}}}}, {"id2label", "zero"});
  expect_parse_error({{"id2label", {{"0", 7}}}}, {"id2label"});
}

TEST(Config, ProblemType) {
  EXPECT_EQ(parse(json::object()).problem_type, ProblemType::Unset);
  EXPECT_EQ(parse({{"problem_type", nullptr}}).problem_type, ProblemType::Unset);
  EXPECT_EQ(parse({{"problem_type", "regression"}}).problem_type, ProblemType::Regression);
  EXPECT_EQ(parse({{"problem_type", "single_label_classification"}}).problem_type, ProblemType::SingleLabel);
  EXPECT_EQ(parse({{"problem_type", "multi_label_classification"}}).problem_type, ProblemType::MultiLabel);
  expect_parse_error({{"problem_type", "ranking"}}, {"problem_type", "ranking"});
  expect_parse_error({{"problem_type", 3}}, {"problem_type", "3"});
}

TEST(Config, ActivationNames) {
  EXPECT_EQ(parse({{"hidden_act", "gelu"}}).hidden_act, Activation::Gelu);
  EXPECT_EQ(parse({{"hidden_act", "gelu_new"}}).hidden_act, Activation::GeluNew);
  EXPECT_EQ(parse({{"hidden_act", "gelu_pytorch_tanh"}}).hidden_act, Activation::GeluNew);
  EXPECT_EQ(parse({{"hidden_act", "relu"}}).hidden_act, Activation::Relu);
}

TEST(Config, RoundTripThroughJson) {
  json j = json::parse(test::read_all_bytes(test::fixture("bert-tiny-cls") + "/config.json"));
  j["hidden_act"] = "gelu_new";
  j["classifier_dropout"] = 0.25;
  j["problem_type"] = "multi_label_classification";
  j["id2label"] = {{"0", "sports"}, {"1", "politics"}, {"2", "science"}};
  j["pad_token_id"] = 3;
  j["layer_norm_eps"] = 1e-7;
  j["custom_key"] = {{"nested", true}};
  const ModelConfig a = parse(j);
  const json written = model_config_to_json(a);
  EXPECT_EQ(written["model_type"], "bert");
  EXPECT_EQ(written["architectures"], json::array({"BertForSequenceClassification"}));
  EXPECT_EQ(written["label2id"]["science"], 2);
  EXPECT_EQ(written["custom_key"], j["custom_key"]);
  const ModelConfig b = parse_model_config(written.dump(2), "written/config.json");
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.hidden_size, a.hidden_size);
  EXPECT_EQ(b.num_hidden_layers, a.num_hidden_layers);
  EXPECT_EQ(b.num_attention_heads, a.num_attention_heads);
  EXPECT_EQ(b.intermediate_size, a.intermediate_size);
  EXPECT_EQ(b.hidden_act, Activation::GeluNew);
  EXPECT_EQ(b.hidden_dropout_prob, a.hidden_dropout_prob);
  EXPECT_EQ(b.attention_probs_dropout_prob, a.attention_probs_dropout_prob);
  EXPECT_EQ(b.classifier_dropout, std::optional<double>(0.25));
  EXPECT_EQ(b.max_position_embeddings, a.max_position_embeddings);
  EXPECT_EQ(b.type_vocab_size, a.type_vocab_size);
  EXPECT_EQ(b.initializer_range, a.initializer_range);
  EXPECT_EQ(b.layer_norm_eps, 1e-7);
  EXPECT_EQ(b.pad_token_id, 3);
  EXPECT_EQ(b.num_labels, 3);
  EXPECT_EQ(b.problem_type, ProblemType::MultiLabel);
  EXPECT_EQ(b.id2label, a.id2label);
  EXPECT_EQ(b.extra, a.extra);
  // And the second trip writes the same JSON.
  EXPECT_EQ(model_config_to_json(b), written);
}

TEST(Config, DefaultsRoundTripWithGeneratedLabels) {
  const ModelConfig a = parse({{"model_type", "bert"}});
  const json written = model_config_to_json(a);
  EXPECT_EQ(written["id2label"], json({{"0", "LABEL_0"}, {"1", "LABEL_1"}}));
  EXPECT_TRUE(written["classifier_dropout"].is_null());
  EXPECT_FALSE(written.contains("problem_type"));
  const ModelConfig b = parse_model_config(written.dump(), "written/config.json");
  EXPECT_EQ(b.num_labels, 2);
  EXPECT_EQ(b.problem_type, ProblemType::Unset);
  EXPECT_FALSE(b.classifier_dropout.has_value());
  EXPECT_EQ(model_config_to_json(b), written);
}

TEST(Config, RejectsBadValuesNamingTheFileAndKey) {
  expect_parse_error({{"hidden_size", 100}, {"num_attention_heads", 12}}, {"hidden_size", "num_attention_heads"});
  expect_parse_error({{"hidden_act", "swish"}}, {"hidden_act", "swish"});
  expect_parse_error({{"vocab_size", -5}}, {"vocab_size", "-5"});
  expect_parse_error({{"model_type", "gpt2"}}, {"model_type", "gpt2"});
  expect_parse_error({{"num_hidden_layers", 0}}, {"num_hidden_layers"});
  expect_parse_error({{"hidden_size", "768"}}, {"hidden_size"});
  expect_parse_error({{"hidden_dropout_prob", 1.5}}, {"hidden_dropout_prob"});
  expect_parse_error({{"num_labels", 0}}, {"num_labels"});
  expect_parse_error({{"pad_token_id", 40000}}, {"pad_token_id"});
  expect_parse_error({{"position_embedding_type", "relative_key"}}, {"position_embedding_type"});
  expect_parse_error(json::array({1, 2}), {"object"});
  try {
    parse_model_config("{\"vocab_size\": 12,", "test/config.json");
    ADD_FAILURE() << "accepted truncated JSON";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("JSON"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------
// Presets

int64_t parameter_count(const ModelConfig& c) {
  int64_t total = 0;
  for (const ParamSpec& spec : model_parameter_specs(c)) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    total += n;
  }
  return total;
}

TEST(Presets, ParameterCountsMatchHuggingFace) {
  const auto large = model_preset("bert-large-uncased");
  const auto base = model_preset("bert-base-uncased");
  ASSERT_TRUE(large && base);
  EXPECT_EQ(large->num_labels, 2);
  EXPECT_EQ(parameter_count(*large), 335'143'938);
  EXPECT_EQ(parameter_count(*base), 109'483'778);
  EXPECT_FALSE(model_preset("no-such-preset").has_value());
  for (const std::string& name : model_preset_names()) {
    const auto c = model_preset(name);
    ASSERT_TRUE(c.has_value()) << name;
    EXPECT_NO_THROW(validate_model_config(*c, name));
  }
}

// ---------------------------------------------------------------------------
// Broken config.json through `anatomy train`

class ConfigErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = test::copy_fixture(tmp_, "bert-tiny-cls");
    config_ = model_ + "/config.json";
    out_ = tmp_.file("out");
    train_file_ = tmp_.file("train.safetensors");
    test::write_i64_tensors(train_file_, test::valid_train_tensors());
  }
  void edit_config(const std::function<void(json&)>& edit) {
    json j = json::parse(test::read_all_bytes(config_));
    edit(j);
    test::write_all_bytes(config_, j.dump(2));
  }
  test::CommandResult train() {
    return test::run_anatomy("train --model " + model_ + " --train-file " + train_file_ +
                             " --max-steps 1 --device cpu --no-progress --output-dir " + out_);
  }

  test::TempDir tmp_;
  std::string model_, config_, out_, train_file_;
};

TEST_F(ConfigErrors, UntouchedCopyTrains) {
  const auto r = train();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out_ + "/model.safetensors"));
}

TEST_F(ConfigErrors, ConfigMissing) {
  fs::remove(config_);
  const auto r = train();
  EXPECT_TRUE(test::failed_cleanly(r, {model_, "config.json"}));
  EXPECT_TRUE(test::nothing_at(out_));
}

TEST_F(ConfigErrors, ConfigNotJson) {
  test::write_all_bytes(config_, "hidden_size = 64\nnum_attention_heads = 4\n");
  const auto r = train();
  EXPECT_TRUE(test::failed_cleanly(r, {config_, "JSON"}));
  EXPECT_TRUE(test::nothing_at(out_));
}

TEST_F(ConfigErrors, HiddenSizeNotAMultipleOfHeads) {
  edit_config([](json& j) { j["hidden_size"] = 66; });
  const auto r = train();
  EXPECT_TRUE(test::failed_cleanly(r, {config_, "hidden_size", "66", "num_attention_heads"}));
  EXPECT_TRUE(test::nothing_at(out_));
}

TEST_F(ConfigErrors, UnknownHiddenAct) {
  edit_config([](json& j) { j["hidden_act"] = "swish"; });
  const auto r = train();
  EXPECT_TRUE(test::failed_cleanly(r, {config_, "hidden_act", "swish"}));
  EXPECT_TRUE(test::nothing_at(out_));
}

TEST_F(ConfigErrors, NegativeVocabSize) {
  edit_config([](json& j) { j["vocab_size"] = -1024; });
  const auto r = train();
  EXPECT_TRUE(test::failed_cleanly(r, {config_, "vocab_size", "-1024"}));
  EXPECT_TRUE(test::nothing_at(out_));
}

TEST_F(ConfigErrors, ModelTypeGpt2) {
  edit_config([](json& j) { j["model_type"] = "gpt2"; });
  const auto r = train();
  EXPECT_TRUE(test::failed_cleanly(r, {config_, "model_type", "gpt2"}));
  EXPECT_TRUE(test::nothing_at(out_));
}

}  // namespace
}  // namespace anatomy
