// test_families.cpp: the families laid out as BERT (model/roberta, model/electra,
// model/distilbert): their config.json keys and defaults, the sizes of their
// presets against Hugging Face's parameter counts, what they refuse, and
// RoBERTa's position ids. The numerics are test_fixtures.cpp's (Hugging Face
// fixtures of every family).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/config.h"
#include "anatomy/model/registry.h"
#include "cli_error_util.h"
#include "test_process.h"
#include "test_util.h"

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

int64_t parameter_count(const ModelConfig& c) {
  int64_t total = 0;
  for (const ParamSpec& spec : model_parameter_specs(c)) total += shape_numel(spec.shape);
  return total;
}

// AutoModelForSequenceClassification.from_config(AutoConfig.for_model(...)) with
// each checkpoint's published sizes, counted by transformers 5.24 (2 labels).
TEST(Families, PresetsHaveHuggingFacesParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> counts = {
      {"roberta-base", 124'647'170},
      {"roberta-large", 355'361'794},
      {"xlm-roberta-base", 278'045'186},
      {"camembert-base", 110'623'490},
      {"electra-small-discriminator", 13'549'314},
      {"electra-base-discriminator", 109'483'778},
      {"electra-large-discriminator", 335'143'938},
      {"distilbert-base-uncased", 66'955'010},
      {"distilbert-base-cased", 65'783'042},
      {"modernbert-base", 149'606'402},
      {"modernbert-large", 395'833'346},
      {"deberta-v3-xsmall", 70'830'722},
      {"deberta-v3-small", 141'896'450},
      {"deberta-v3-base", 184'423'682},
      {"deberta-v3-large", 435'063'810},
  };
  for (const auto& [name, count] : counts) {
    const std::optional<ModelConfig> c = model_preset(name);
    ASSERT_TRUE(c.has_value()) << name;
    EXPECT_EQ(parameter_count(*c), count) << name;
  }
}

TEST(Families, EachModelTypeHasItsClass) {
  const std::vector<std::pair<std::string, std::string>> classes = {
      {"roberta", "RobertaForSequenceClassification"},
      {"xlm-roberta", "XLMRobertaForSequenceClassification"},
      {"camembert", "CamembertForSequenceClassification"},
      {"electra", "ElectraForSequenceClassification"},
      {"distilbert", "DistilBertForSequenceClassification"},
  };
  auto cpu = make_cpu_backend(1);
  for (const auto& [type, name] : classes) {
    const ModelConfig c = parse_model_config(
        nlohmann::json{{"model_type", type}, {"vocab_size", 50}, {"hidden_size", 16}, {"dim", 16},
                       {"num_attention_heads", 2}, {"n_heads", 2}, {"num_hidden_layers", 1}, {"n_layers", 1},
                       {"intermediate_size", 32}, {"hidden_dim", 32}, {"embedding_size", 8},
                       {"max_position_embeddings", 20}}
            .dump(),
        "config.json");
    EXPECT_EQ(c.model_type, type);
    const auto model = make_model(*cpu, c);
    EXPECT_EQ(model->architecture(), name);
    // Written back, the config names the class and reads back the same.
    const nlohmann::json j = model_config_to_json(c);
    EXPECT_EQ(j["architectures"][0], name);
    const ModelConfig again = parse_model_config(j.dump(), "saved config.json");
    EXPECT_EQ(again.model_type, type);
    EXPECT_EQ(again.hidden_size, 16);
    EXPECT_EQ(again.num_hidden_layers, 1);
    EXPECT_EQ(again.intermediate_size, 32);
    EXPECT_EQ(again.embedding_width(), c.embedding_width());
    EXPECT_EQ(again.type_vocab_size, c.type_vocab_size);
    EXPECT_EQ(again.pad_token_id, c.pad_token_id);
    EXPECT_EQ(again.classifier_dropout_prob(), c.classifier_dropout_prob());
  }
}

TEST(Families, DefaultsAreTheConfigClasses) {
  const ModelConfig roberta = parse_model_config(R"({"model_type": "roberta"})", "config.json");
  EXPECT_EQ(roberta.vocab_size, 50265);
  EXPECT_EQ(roberta.pad_token_id, 1);
  EXPECT_EQ(roberta.position_ids, PositionIds::PastPadding);
  EXPECT_EQ(roberta.max_sequence_length(), 510);  // 512 positions less pad_token_id + 1
  const ModelConfig electra = parse_model_config(R"({"model_type": "electra"})", "config.json");
  EXPECT_EQ(electra.embedding_width(), 128);
  EXPECT_EQ(electra.hidden_size, 256);
  EXPECT_EQ(electra.num_attention_heads, 4);
  const ModelConfig distil = parse_model_config(R"({"model_type": "distilbert", "dim": 64, "n_heads": 4})",
                                                "config.json");
  EXPECT_EQ(distil.num_hidden_layers, 6);
  EXPECT_EQ(distil.intermediate_size, 3072);  // hidden_dim's default is 4 x 768, not 4 x dim
  EXPECT_EQ(distil.type_vocab_size, 0);
  EXPECT_DOUBLE_EQ(distil.classifier_dropout_prob(), 0.2);  // seq_classif_dropout
  EXPECT_DOUBLE_EQ(distil.layer_norm_eps, 1e-12);
}

// DeBERTa-v3's config.json: what the checkpoints use is read; every other
// computation DebertaV2Config can ask for is refused by name, before any allocation.
TEST(Families, DebertaReadsV3AndRefusesTheRest) {
  const std::string v3 = R"("model_type": "deberta-v2", "hidden_size": 64, "num_attention_heads": 4,
      "num_hidden_layers": 1, "intermediate_size": 96, "relative_attention": true, "position_buckets": 256,
      "norm_rel_ebd": "layer_norm", "share_att_key": true, "pos_att_type": "p2c|c2p", "position_biased_input": false,
      "max_relative_positions": -1)";
  const ModelConfig c = parse_model_config("{" + v3 + "}", "m/config.json");
  EXPECT_EQ(c.relative.span, 256);
  EXPECT_EQ(c.relative.rows(), 512);
  EXPECT_EQ(c.relative.max_position, 512);  // max_position_embeddings when unset
  EXPECT_TRUE(c.relative.c2p && c.relative.p2c && c.relative.layer_norm);
  EXPECT_EQ(c.type_vocab_size, 0);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-7);
  // make_log_bucket_position (transformers): exact within ±127, then logarithmic to ±255 at 511 and beyond.
  EXPECT_EQ(c.relative.index(0), 256);
  EXPECT_EQ(c.relative.index(-127), 129);
  EXPECT_EQ(c.relative.index(200), 256 + 169);
  EXPECT_EQ(c.relative.index(511), 511);
  EXPECT_EQ(c.relative.index(-8000), 0);
  const auto refused = [&](const std::string& extra) {
    return error_of([&] { parse_model_config("{" + v3 + ", " + extra + "}", "m/config.json"); });
  };
  EXPECT_EQ(refused(R"("relative_attention": false)"),
            "m/config.json: relative_attention false is not supported (DeBERTa's disentangled attention only)");
  EXPECT_EQ(refused(R"("position_biased_input": true)"),
            "m/config.json: position_biased_input true is not supported (absolute position embeddings in DeBERTa)");
  EXPECT_EQ(refused(R"("share_att_key": false)"),
            "m/config.json: share_att_key false is not supported (separate pos_key_proj/pos_query_proj)");
  EXPECT_EQ(refused(R"("conv_kernel_size": 3)"),
            "m/config.json: conv_kernel_size 3 is not supported (DeBERTa's convolution layer)");
  EXPECT_EQ(refused(R"("pos_att_type": ["c2p", "p2p"])"),
            "m/config.json: pos_att_type \"p2p\" is not supported (c2p, p2c)");
  EXPECT_EQ(refused(R"("norm_rel_ebd": "layer_norm|batch_norm")"),
            "m/config.json: norm_rel_ebd \"batch_norm\" is not supported (layer_norm, none)");
  EXPECT_EQ(refused(R"("embedding_size": 32)"),
            "m/config.json: embedding_size 32 is not supported (only hidden_size, 64: no embed_proj)");
  EXPECT_EQ(refused(R"("pooler_hidden_act": "tanh")"),
            "m/config.json: pooler_hidden_act \"tanh\" is not supported (only \"gelu\")");
  // The heads transformers has and the engine does not serve yet are refused by name.
  auto cpu = make_cpu_backend(1);
  EXPECT_EQ(error_of([&] { make_model(*cpu, c, DType::F32, kMaskedLm); }),
            "model_type \"deberta-v2\" has no masked-lm head (it has: sequence-classification, "
            "token-classification, question-answering)");
  // A saved config reads back the same relative attention.
  const ModelConfig again = parse_model_config(model_config_to_json(c).dump(), "saved/config.json");
  EXPECT_EQ(again.relative.span, c.relative.span);
  EXPECT_EQ(again.relative.buckets, c.relative.buckets);
  EXPECT_EQ(again.relative.max_position, c.relative.max_position);
  EXPECT_EQ(again.relative.layer_norm, c.relative.layer_norm);
  EXPECT_EQ(again.relative.c2p, c.relative.c2p);
  EXPECT_EQ(again.relative.p2c, c.relative.p2c);
}

TEST(Families, WhatIsNotImplementedIsRefusedNamingTheField) {
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"model_type": "roberta", "position_embedding_type": "relative_key"})",
                                 "m/config.json");
            }),
            "m/config.json: position_embedding_type \"relative_key\" is not supported (only \"absolute\")");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"model_type": "distilbert", "sinusoidal_pos_embds": true})", "m/config.json");
            }),
            "m/config.json: sinusoidal_pos_embds true is not supported (learned position embeddings only)");
  EXPECT_EQ(error_of([] { parse_model_config(R"({"model_type": "electra", "is_decoder": true})", "m/config.json"); }),
            "m/config.json: is_decoder true is not supported");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"model_type": "roberta", "max_position_embeddings": 2})", "m/config.json");
            }),
            "m/config.json: max_position_embeddings 2 leaves no position past pad_token_id 1 (positions start at "
            "pad_token_id + 1)");
  EXPECT_EQ(error_of([] { parse_model_config(R"({"model_type": "roberta", "type_vocab_size": 0})", "m/config.json"); }),
            "m/config.json: 'type_vocab_size' must be positive, got 0");
  EXPECT_EQ(error_of([] { parse_model_config(R"({"model_type": "distilbert", "dim": "big"})", "m/config.json"); }),
            "m/config.json: 'dim' must be an integer, got \"big\"");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"model_type": "modernbert", "classifier_pooling": "mean"})", "m/config.json");
            }),
            "m/config.json: classifier_pooling \"mean\" is not supported (only \"cls\")");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"model_type": "modernbert", "rope_parameters": {"full_attention":
                  {"rope_type": "linear", "factor": 2.0}}})", "m/config.json");
            }),
            "m/config.json: rope_parameters.full_attention.rope_type \"linear\" is not supported (only \"default\")");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"model_type": "modernbert", "num_hidden_layers": 2,
                  "layer_types": ["full_attention", "chunked_attention"]})", "m/config.json");
            }),
            "m/config.json: layer type \"chunked_attention\" is not supported (full_attention, sliding_attention)");
  // Sizes no device holds are refused by name, before their products overflow.
  EXPECT_EQ(error_of([] { parse_model_config(R"({"model_type": "distilbert", "dim": 1000000000000})", "m/config.json"); }),
            "m/config.json: 'dim' is 1000000000000, more than 1048576 (no device holds such a model)");
  EXPECT_EQ(error_of([] { parse_model_config(R"({"model_type": "roberta", "vocab_size": 4000000000})", "m/config.json"); }),
            "m/config.json: 'vocab_size' is 4000000000, more than 1073741824 (no device holds such a model)");
  EXPECT_EQ(error_of([] {
              parse_model_config(R"({"hidden_size": 1048576, "num_attention_heads": 1, "intermediate_size": 4194304,
                                     "num_hidden_layers": 65536})", "m/config.json");
            }),
            "m/config.json: the sizes make about 1.15e+18 parameters, more than any device holds");
  for (const char* type : {"gpt2", "bart"})
    EXPECT_NE(error_of([&] { parse_model_config(nlohmann::json{{"model_type", type}}.dump(), "m/config.json"); })
                  .find(std::string("model_type \"") + type + "\" is not supported"),
              std::string::npos);
}

// Hugging Face's create_position_ids_from_input_ids: padding tokens get the
// padding id, the others count up from it past the padding tokens before them.
TEST(Families, RobertaPositionsSkipPaddingTokens) {
  auto cpu = make_cpu_backend(1);
  const std::vector<int64_t> ids = {0, 5, 1, 7, 2, 1, 1, 1,   // a padding id among real tokens, then padding
                                    0, 9, 9, 9, 9, 9, 9, 2};  // no padding
  const std::vector<int64_t> expected = {2, 3, 1, 4, 5, 1, 1, 1,  //
                                         2, 3, 4, 5, 6, 7, 8, 9};
  Tensor t = Tensor::empty(cpu->ledger(), {2, 8}, DType::I64, Category::Data, "input_ids");
  Tensor p = Tensor::empty(cpu->ledger(), {2, 8}, DType::I64, Category::Data, "position_ids");
  cpu->copy_from_host(t, ids.data());
  cpu->positions_past_padding(t, 1, p);
  std::vector<int64_t> got(16);
  cpu->copy_to_host(p, got.data());
  EXPECT_EQ(got, expected);
}

// A sequence as long as the positions allow trains; one token more is refused with the reason.
TEST(Families, RobertaSequencesEndTwoShortOfThePositions) {
  test::TempDir tmp;
  const std::string model = test::copy_fixture(tmp, "roberta-tiny-padded");  // 24 positions, pad_token_id 1
  const std::string train = tmp.file("train.safetensors");
  const auto tensors = [](int64_t len) {  // ids within the fixture's 300, no token types, 3 labels
    test::I64Tensor ids{"input_ids", {4, len}, {}}, labels{"labels", {4}, {0, 1, 2, 0}};
    for (int64_t i = 0; i < 4 * len; ++i) ids.values.push_back(3 + (i * 37) % 290);
    return std::vector<test::I64Tensor>{ids, labels};
  };
  test::write_i64_tensors(train, tensors(23));
  const auto r = test::run_anatomy("train --model " + model + " --train-file " + train +
                                   " --max-steps 1 --device cpu --no-progress --output-dir " + tmp.file("out"));
  EXPECT_TRUE(test::failed_cleanly(r, {train, "23 tokens", "max_position_embeddings 24 less pad_token_id + 1 (22)"}));
  test::write_i64_tensors(train, tensors(22));
  const auto ok = test::run_anatomy("train --model " + model + " --train-file " + train +
                                    " --max-steps 1 --device cpu --no-progress --output-dir " + tmp.file("out"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

}  // namespace
}  // namespace anatomy

namespace anatomy {
namespace {

// Every technique on each family, on the CPU: both checkpointing policies
// give the plain run's losses; two batches of b accumulated give one batch of
// 2b; two ranks under ZeRO stage 3 give one process; the other optimizers,
// profile and estimate run, and each run's memory plan is its ledger.
class FamilyTechniques : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyTechniques, EveryTechniqueRuns) {
  test::TempDir tmp;
  const std::string model = test::fixture(GetParam());
  const std::string data = tmp.file("train.safetensors");
  const int64_t b = test::write_reference_train_file(model + "/reference.safetensors", data);
  const std::string common = " --device cpu --no-progress --model " + model + " --train-file " + data +
                             " --num-train-epochs 2 --logging-steps 1 --learning-rate 1e-3 --no-shuffle --seed 3";
  const auto train = [&](const std::string& name, const std::string& flags, int64_t batch) {
    const auto r = test::run_anatomy("train" + common + " --per-device-train-batch-size " + std::to_string(batch) +
                                     flags + " --output-dir " + tmp.file(name));
    EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.output;
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(tmp.file(name) + "/anatomy.json"));
    EXPECT_EQ(j["predicted"]["peak_total"], j["ledger"]["peak_total"]) << name;
    return test::log_records(tmp.file(name));
  };
  const auto plain = train("plain", "", b);
  ASSERT_EQ(plain.size(), 4u);
  test::expect_records_within(plain, train("full", " --gradient-checkpointing", b), 1e-6);
  test::expect_records_within(
      plain, train("selective", " --gradient-checkpointing --gradient-checkpointing-policy selective", b), 1e-6);
  // Token classification's loss is a mean over a batch's labelled tokens: two
  // batches accumulated (or two ranks) average two means, as Trainer does,
  // which is not the mean of one batch of both unless their counts are equal.
  const bool per_token = GetParam().find("-token") != std::string::npos;
  const auto whole = train("whole", "", 2 * b);
  const auto accumulated = train("accumulated", " --gradient-accumulation-steps 2", b);
  if (!per_token) test::expect_records_within(whole, accumulated, 1e-5);
  for (const char* optim : {"adafactor", "sgd", "adamw_8bit"}) {
    const auto records = train(optim, std::string(" --optim ") + optim, b);
    ASSERT_EQ(records.size(), 4u) << optim;
    for (const auto& [step, record] : records) EXPECT_TRUE(std::isfinite(record["loss"].get<double>())) << optim;
  }
  const auto ranks = test::run_anatomy("launch --nproc-per-node 2 --master-port " + std::to_string(test::free_port()) +
                                       " -- train" + common + " --zero-stage 3 --per-device-train-batch-size " +
                                       std::to_string(b) + " --output-dir " + tmp.file("zero3"));
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  if (!per_token) test::expect_records_within(whole, test::log_records(tmp.file("zero3")), 1e-5);
  else EXPECT_EQ(test::log_records(tmp.file("zero3")).size(), accumulated.size());
  for (const std::string command : {"profile", "estimate"}) {
    const auto r = test::run_anatomy(command + common + " --per-device-train-batch-size " + std::to_string(b) +
                                     (command == "profile" ? " --max-steps 2 --output-dir " + tmp.file("profile") : ""));
    EXPECT_EQ(r.exit_code, 0) << command << ":\n" << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTechniques,
                         ::testing::Values("roberta-tiny-padded", "electra-tiny-padded", "distilbert-tiny-multilabel",
                                           "modernbert-tiny-padded", "bert-tiny-token", "roberta-tiny-token",
                                           "distilbert-tiny-token", "bert-tiny-qa", "distilbert-tiny-qa", "deberta-tiny-padded",
                                           "deberta-tiny-token"),
                         [](const auto& info) { return test::test_name(info.param); });

}  // namespace
}  // namespace anatomy

namespace anatomy {
namespace {

// A RoBERTa model directory with its byte-level BPE tokenizer.json (no
// vocab.txt) trains on text with validation, saves a directory that reads
// back as RoBERTa with its tokenizer, and predicts every validation example.
TEST(Families, RobertaTrainsOnTextWithItsTokenizerJson) {
  test::TempDir tmp;
  const std::string dir = tmp.file("roberta");
  std::filesystem::create_directories(dir);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::fixture("tokenizers/roberta-bpe/") + file, dir + "/" + file);
  const ModelConfig config = parse_model_config(
      R"({"model_type": "roberta", "vocab_size": 2000, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 130,
          "type_vocab_size": 1, "pad_token_id": 1, "num_labels": 10})",
      "config.json");
  auto cpu = make_cpu_backend(1);
  const auto model = make_model(*cpu, config);
  init_weights(*model, 7);
  save_pretrained(*model, *cpu, dir);

  const std::string data = test::fixture("license-text");
  const std::string out = tmp.file("out");
  const auto r = test::run_anatomy("train --model " + dir + " --train-file " + data + "/train.jsonl --validation-file " +
                                   data + "/validation.jsonl --max-seq-length 128 --num-train-epochs 1 "
                                   "--per-device-train-batch-size 16 --device cpu --no-progress --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ModelSource saved = resolve_model(out);
  EXPECT_EQ(saved.config.model_type, "roberta");
  EXPECT_TRUE(std::filesystem::exists(out + "/tokenizer.json"));
  const auto predicted = test::run_anatomy("predict --model " + out + " --validation-file " + data +
                                           "/validation.jsonl --device cpu --output " + tmp.file("p.jsonl"));
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  std::ifstream in(tmp.file("p.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 87);  // the validation paragraphs
}

}  // namespace
}  // namespace anatomy

namespace anatomy {
namespace {

// ModernBERT's random initialisation is Hugging Face's: truncated normals at
// ±2 std (initializer_cutoff_factor), "out" products at initializer_range /
// sqrt(2 · layers), the classifier at hidden_size^-1/2, no zeroed padding row.
TEST(Families, ModernBertInitialisesAsHuggingFace) {
  const ModelConfig config = parse_model_config(
      R"({"model_type": "modernbert", "vocab_size": 500, "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "intermediate_size": 96, "pad_token_id": 0, "num_labels": 8})",
      "config.json");
  auto cpu = make_cpu_backend(1);
  const auto model = make_model(*cpu, config);
  init_weights(*model, 3);
  const auto stats = [&](const std::string& name) {
    const Tensor& t = model->weights().get(name);
    std::vector<float> v(t.numel());
    cpu->copy_to_host(t, v.data());
    double sq = 0.0, largest = 0.0;
    for (float x : v) sq += static_cast<double>(x) * x, largest = std::max(largest, std::abs(static_cast<double>(x)));
    return std::make_pair(std::sqrt(sq / static_cast<double>(v.size())), largest);
  };
  // The standard deviation of a normal truncated at ±2: 0.8796 of the untruncated one.
  const double truncated = 0.8796;
  const auto expect_std = [&](const std::string& name, double std, double rtol) {
    const auto [rms, largest] = stats(name);
    EXPECT_NEAR(rms, truncated * std, rtol * truncated * std) << name;
    EXPECT_LE(largest, 2.0 * std * (1 + 1e-6)) << name << ": beyond the cutoff";
  };
  expect_std("model.embeddings.tok_embeddings.weight", 0.02, 0.03);
  expect_std("model.layers.1.attn.Wqkv.weight", 0.02, 0.03);
  expect_std("model.layers.1.attn.Wo.weight", 0.02 / std::sqrt(8.0), 0.05);
  expect_std("model.layers.2.mlp.Wo.weight", 0.02 / std::sqrt(8.0), 0.05);
  expect_std("head.dense.weight", 0.02 / std::sqrt(8.0), 0.05);
  expect_std("classifier.weight", 1.0 / 8.0, 0.1);
  std::vector<float> pad_row(64);
  cpu->copy_to_host(model->weights().get("model.embeddings.tok_embeddings.weight").slice(0, {64}, "row 0"),
                    pad_row.data());
  EXPECT_NE(*std::max_element(pad_row.begin(), pad_row.end()), 0.0f) << "the padding row is initialised too";
}

}  // namespace
}  // namespace anatomy
