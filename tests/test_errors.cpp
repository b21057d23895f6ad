// test_errors.cpp: bad input through the real `anatomy` binary. Each case
// breaks one thing (a checkpoint, a training file, a flag) and checks the
// project rule: no crash, a non-zero exit, exactly one "error:" line that
// names the file, tensor or flag at fault, and no output left behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "anatomy/io/safetensors.h"
#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using test::failed_cleanly;
using test::I64Tensor;
using test::nothing_at;
using test::tensor_named;

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = test::copy_fixture(tmp_, "bert-tiny-cls");
    weights_ = model_ + "/model.safetensors";
    out_ = tmp_.file("out");
    train_file_ = tmp_.file("train.safetensors");
    test::write_i64_tensors(train_file_, test::valid_train_tensors());
  }

  // `anatomy train` for one step on the CPU, writing to out_.
  test::CommandResult train(const std::string& model, const std::string& train_file, const std::string& extra = "") {
    return test::run_anatomy("train --model " + model + " --train-file " + train_file +
                             " --max-steps 1 --device cpu --no-progress --output-dir " + out_ + " " + extra);
  }
  test::CommandResult train_with_data(const std::vector<I64Tensor>& tensors) {
    const std::string path = tmp_.file("bad.safetensors");
    test::write_i64_tensors(path, tensors);
    return train(model_, path);
  }
  test::CommandResult train_with_flags(const std::string& flags) {
    return test::run_anatomy("train --model " + model_ + " --train-file " + train_file_ +
                             " --max-steps 1 --device cpu --no-progress --output-dir " + out_ + " " + flags);
  }

  test::TempDir tmp_;
  std::string model_, weights_, out_, train_file_;
};

// The baseline every case breaks: the untouched copy and file train and save.
TEST_F(CliErrors, ValidInputsTrainAndSave) {
  const auto r = train(model_, train_file_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("error:"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(out_ + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(out_ + "/config.json"));
}

// A value of ANATOMY_ATTENTION the CUDA backend does not know ends the run
// before anything is written, on the CPU too.
TEST_F(CliErrors, UnknownAttentionChoice) {
  test::ScopedEnv bad("ANATOMY_ATTENTION", "flash3");
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {"ANATOMY_ATTENTION=flash3", "hopper, cudnn or anatomy"}));
  EXPECT_TRUE(nothing_at(out_));
}

// So does a value of ANATOMY_LAST_LAYER the model does not know.
TEST_F(CliErrors, UnknownLastLayerChoice) {
  test::ScopedEnv bad("ANATOMY_LAST_LAYER", "cls");
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {"ANATOMY_LAST_LAYER=cls", "first-token or all"}));
  EXPECT_TRUE(nothing_at(out_));
}

// ---------------------------------------------------------------------------
// Checkpoint weights

TEST_F(CliErrors, ModelSafetensorsMissing) {
  fs::remove(weights_);
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {model_, "model.safetensors"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, HeaderLengthLargerThanTheFile) {
  std::string bytes = test::read_all_bytes(weights_);
  const uint64_t n = bytes.size() + 100;  // under the 100 MB header limit, beyond the file
  std::memcpy(bytes.data(), &n, 8);
  test::write_all_bytes(weights_, bytes);
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {weights_, "header length"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, TruncatedDataBuffer) {
  const std::string bytes = test::read_all_bytes(weights_);
  test::write_all_bytes(weights_, bytes.substr(0, bytes.size() - 1000));
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {weights_, "tensor '", "data_offsets", "beyond"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, UnknownDtype) {
  const std::string name = "bert.encoder.layer.0.attention.self.query.weight";
  test::edit_safetensors_header(weights_, [&](nlohmann::json& h) { h[name]["dtype"] = "F8_E4M3"; });
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {weights_, name, "F8_E4M3"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, MissingTensor) {
  const std::string name = "bert.encoder.layer.1.output.dense.weight";
  const std::string full = tmp_.file("full.safetensors");
  fs::copy_file(weights_, full);
  test::filter_safetensors(full, weights_, [&](const std::string& n) { return n != name; });
  ASSERT_FALSE(io::SafetensorsFile::open(weights_).has(name));
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {model_, "'" + name + "'", "missing"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, TensorWithTheWrongShape) {
  // The same bytes, declared [32, 128] instead of [64, 64].
  const std::string name = "bert.encoder.layer.0.attention.self.query.weight";
  test::edit_safetensors_header(weights_, [&](nlohmann::json& h) { h[name]["shape"] = {32, 128}; });
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {weights_, "'" + name + "'", "[32, 128]", "[64, 64]"}));
  EXPECT_TRUE(nothing_at(out_));
}

// Splits model.safetensors into two shards with an index; returns the shard names.
std::pair<std::string, std::string> shard_checkpoint(const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  const std::string first = "model-00001-of-00002.safetensors", second = "model-00002-of-00002.safetensors";
  auto in_first = [](const std::string& n) { return n.find("encoder.layer.1.") == std::string::npos; };
  test::filter_safetensors(single, dir + "/" + first, in_first);
  test::filter_safetensors(single, dir + "/" + second, [&](const std::string& n) { return !in_first(n); });
  nlohmann::json map = nlohmann::json::object();
  for (const std::string& n : io::SafetensorsFile::open(single).names()) map[n] = in_first(n) ? first : second;
  test::write_all_bytes(dir + "/model.safetensors.index.json",
                        nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump(2));
  fs::remove(single);
  return {first, second};
}

TEST_F(CliErrors, ShardedCheckpointTrains) {
  shard_checkpoint(model_);
  const auto r = train(model_, train_file_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out_ + "/model.safetensors"));
}

TEST_F(CliErrors, ShardedIndexNamesAMissingShard) {
  const auto [first, second] = shard_checkpoint(model_);
  fs::remove(model_ + "/" + second);
  const auto r = train(model_, train_file_);
  EXPECT_TRUE(failed_cleanly(r, {model_ + "/model.safetensors.index.json", second}));
  EXPECT_TRUE(nothing_at(out_));
}

// ---------------------------------------------------------------------------
// --train-file

TEST_F(CliErrors, TrainFileMissing) {
  const std::string missing = tmp_.file("no-such-file.safetensors");
  const auto r = train(model_, missing);
  EXPECT_TRUE(failed_cleanly(r, {missing}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, TrainFileWithoutInputIds) {
  auto tensors = test::valid_train_tensors();
  tensors.erase(tensors.begin());  // input_ids
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "input_ids"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, InputIdsOneDimensional) {
  auto tensors = test::valid_train_tensors();
  tensor_named(tensors, "input_ids").shape = {32};
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "input_ids", "2-D"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, TokenIdNotInTheVocabulary) {
  auto tensors = test::valid_train_tensors();
  tensor_named(tensors, "input_ids").values[1 * 8 + 3] = 1024;  // vocab_size is 1024
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "input_ids", "example 1", "1024"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, NegativeTokenId) {
  auto tensors = test::valid_train_tensors();
  tensor_named(tensors, "input_ids").values[2 * 8 + 5] = -7;
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "input_ids", "example 2", "-7"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, SequenceLongerThanMaxPositionEmbeddings) {
  const auto r = train_with_data(test::valid_train_tensors(4, 65));  // max_position_embeddings is 64
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "65", "max_position_embeddings"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, LabelOutOfRange) {
  auto tensors = test::valid_train_tensors();
  tensor_named(tensors, "labels").values[3] = 5;  // 2 labels
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "labels", "example 3", "5", "num_labels 2"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, LabelsWithTheWrongFirstDimension) {
  auto tensors = test::valid_train_tensors();
  I64Tensor& labels = tensor_named(tensors, "labels");
  labels.shape = {3};
  labels.values.resize(3);
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "'labels'", "[3]", "[4]"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, AttentionMaskValueTwo) {
  auto tensors = test::valid_train_tensors();
  tensor_named(tensors, "attention_mask").values[0 * 8 + 2] = 2;
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "attention_mask", "example 0", "2"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, EmptyDataset) {
  const auto r = train_with_data({{"input_ids", {0, 8}, {}}, {"labels", {0}, {}}});
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "empty"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, TokenTypeIdNotBelowTypeVocabSize) {
  auto tensors = test::valid_train_tensors();
  tensor_named(tensors, "token_type_ids").values[3 * 8 + 7] = 2;  // type_vocab_size is 2
  const auto r = train_with_data(tensors);
  EXPECT_TRUE(failed_cleanly(r, {tmp_.file("bad.safetensors"), "token_type_ids", "example 3", "2"}));
  EXPECT_TRUE(nothing_at(out_));
}

// ---------------------------------------------------------------------------
// Flags

TEST_F(CliErrors, BatchSizeZero) {
  const auto r = train_with_flags("--per-device-train-batch-size 0");
  EXPECT_TRUE(failed_cleanly(r, {"--per-device-train-batch-size", "positive", "0"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, NegativeLearningRate) {
  const auto r = train_with_flags("--learning-rate -1");
  EXPECT_TRUE(failed_cleanly(r, {"--learning-rate", "non-negative", "-1"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, UnknownSchedulerType) {
  // A transformers schedule that is not here (cosine_with_min_lr) is refused by name.
  const auto r = train_with_flags("--lr-scheduler-type cosine_with_min_lr");
  EXPECT_TRUE(failed_cleanly(r, {"--lr-scheduler-type", "cosine_with_min_lr"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, UnknownDevice) {
  const auto r = test::run_anatomy("train --model " + model_ + " --train-file " + train_file_ +
                                   " --max-steps 1 --device tpu --no-progress --output-dir " + out_);
  EXPECT_TRUE(failed_cleanly(r, {"--device", "tpu"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, SplitTf32OnTheCpu) {
  const auto r = train_with_flags("--split-tf32");
  EXPECT_TRUE(failed_cleanly(r, {"--split-tf32", "GPU", "CPU"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, Tf32AndSplitTf32Together) {
  const auto r = train_with_flags("--tf32 --split-tf32");
  EXPECT_TRUE(failed_cleanly(r, {"--tf32", "--split-tf32"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, MaxGradNormNotANumber) {
  const auto r = train_with_flags("--max-grad-norm abc");
  EXPECT_TRUE(failed_cleanly(r, {"--max-grad-norm", "number", "abc"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, UnknownFlag) {
  const auto r = train_with_flags("--no-such-flag 3");
  EXPECT_TRUE(failed_cleanly(r, {"--no-such-flag"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, UnknownModelPreset) {
  const auto r = test::run_anatomy("train --model no-such-preset --train-file " + train_file_ +
                                   " --max-steps 1 --device cpu --no-progress --output-dir " + out_);
  EXPECT_TRUE(failed_cleanly(r, {"--model", "no-such-preset"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(CliErrors, UnknownDataset) {
  const auto r = test::run_anatomy("train --model " + model_ +
                                   " --dataset foo --max-steps 1 --device cpu --no-progress --output-dir " + out_);
  EXPECT_TRUE(failed_cleanly(r, {"--dataset", "foo"}));
  EXPECT_TRUE(nothing_at(out_));
}

// ---------------------------------------------------------------------------
// anatomy forward

TEST_F(CliErrors, ForwardBackwardWithoutLabels) {
  auto tensors = test::valid_train_tensors();
  tensors.pop_back();  // labels
  const std::string inputs = tmp_.file("inputs.safetensors");
  test::write_i64_tensors(inputs, tensors);
  const std::string output = tmp_.file("forward.safetensors");
  const auto r = test::run_anatomy("forward --model " + model_ + " --inputs " + inputs + " --output " + output +
                                   " --backward --device cpu");
  EXPECT_TRUE(failed_cleanly(r, {inputs, "--backward", "labels"}));
  EXPECT_TRUE(nothing_at(output));
}

// forward reads the engine's choices as train does: a bad ANATOMY_* value is
// one line, before anything is written.
TEST_F(CliErrors, ForwardRefusesABadEngineChoice) {
  const std::string inputs = tmp_.file("inputs.safetensors");
  test::write_i64_tensors(inputs, test::valid_train_tensors());
  const std::string output = tmp_.file("forward.safetensors");
  test::ScopedEnv bad("ANATOMY_LAST_LAYER", "cls");
  const auto r = test::run_anatomy("forward --model " + model_ + " --inputs " + inputs + " --output " + output +
                                   " --backward --device cpu");
  EXPECT_TRUE(failed_cleanly(r, {"ANATOMY_LAST_LAYER=cls", "first-token or all"}));
  EXPECT_TRUE(nothing_at(output));
}

TEST_F(CliErrors, ForwardWithoutLabelsAndWithoutBackwardWritesLogits) {
  auto tensors = test::valid_train_tensors();
  tensors.pop_back();  // labels
  const std::string inputs = tmp_.file("inputs.safetensors");
  test::write_i64_tensors(inputs, tensors);
  const std::string output = tmp_.file("forward.safetensors");
  const auto r = test::run_anatomy("forward --model " + model_ + " --inputs " + inputs + " --output " + output +
                                   " --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const io::SafetensorsFile got = io::SafetensorsFile::open(output);
  EXPECT_EQ(got.info("logits").shape, (std::vector<int64_t>{4, 2}));
  EXPECT_FALSE(got.has("loss"));
}

TEST_F(CliErrors, ForwardInputsNotSafetensors) {
  const std::string inputs = tmp_.file("inputs.safetensors");
  test::write_all_bytes(inputs, "this is a text file, not a safetensors file\n");
  const std::string output = tmp_.file("forward.safetensors");
  const auto r = test::run_anatomy("forward --model " + model_ + " --inputs " + inputs + " --output " + output +
                                   " --device cpu");
  EXPECT_TRUE(failed_cleanly(r, {inputs, "header"}));
  EXPECT_TRUE(nothing_at(output));
}

TEST_F(CliErrors, ForwardInputsMissing) {
  const std::string inputs = tmp_.file("no-such-inputs.safetensors");
  const std::string output = tmp_.file("forward.safetensors");
  const auto r = test::run_anatomy("forward --model " + model_ + " --inputs " + inputs + " --output " + output +
                                   " --device cpu");
  EXPECT_TRUE(failed_cleanly(r, {inputs}));
  EXPECT_TRUE(nothing_at(output));
}

TEST_F(CliErrors, ForwardInputsWithTokenIdNotInTheVocabulary) {
  auto tensors = test::valid_train_tensors();
  tensor_named(tensors, "input_ids").values[0] = 5000;
  const std::string inputs = tmp_.file("inputs.safetensors");
  test::write_i64_tensors(inputs, tensors);
  const std::string output = tmp_.file("forward.safetensors");
  const auto r = test::run_anatomy("forward --model " + model_ + " --inputs " + inputs + " --output " + output +
                                   " --backward --device cpu");
  EXPECT_TRUE(failed_cleanly(r, {inputs, "input_ids", "example 0", "5000"}));
  EXPECT_TRUE(nothing_at(output));
}

}  // namespace
}  // namespace anatomy
