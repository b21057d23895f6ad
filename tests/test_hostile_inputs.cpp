// test_hostile_inputs.cpp: inputs that used to crash the program (a signal,
// not an error), through the real `anatomy` binary: JSON nested deeper than
// the stack allows to copy or print, JSON values of a type or range the
// readers did not expect, symbolic-link loops where files are named, and a
// worker count the machine cannot start. Each must end as the project rule
// says: a non-zero exit, exactly one "error:" line naming what is at fault,
// and nothing written.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/io/json.h"
#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using test::failed_cleanly;
using test::nothing_at;

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

class HostileInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = test::copy_fixture(tmp_, "bert-tiny-cls");
    config_ = model_ + "/config.json";
    weights_ = model_ + "/model.safetensors";
    out_ = tmp_.file("out");
    train_file_ = tmp_.file("train.safetensors");
    test::write_i64_tensors(train_file_, test::valid_train_tensors());
  }
  test::CommandResult train(const std::string& extra = "") {
    return test::run_anatomy("train --model " + model_ + " --train-file " + train_file_ +
                             " --max-steps 1 --device cpu --no-progress --output-dir " + out_ + " " + extra);
  }
  // config.json with `key` set to the raw JSON text `value`.
  void set_config(const std::string& key, const std::string& value) {
    std::string text = test::read_all_bytes(config_);
    const size_t brace = text.rfind('}');
    ASSERT_NE(brace, std::string::npos);
    text = text.substr(0, brace) + ", \"" + key + "\": " + value + "}";
    test::write_all_bytes(config_, text);
  }
  // A safetensors file whose header is `header` (padded to 8 bytes) with no data.
  static void write_raw_safetensors(const std::string& path, std::string header) {
    header.append((8 - header.size() % 8) % 8, ' ');
    const uint64_t n = header.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    test::write_all_bytes(path, bytes + header);
  }

  test::TempDir tmp_;
  std::string model_, config_, weights_, out_, train_file_;
};

// ---- nesting: checked before parsing, so nothing is copied or printed recursively ----

TEST(JsonDepth, NestingBeyondTheLimitIsOneErrorNamingTheSource) {
  EXPECT_NO_THROW(io::parse_json(nested(io::kMaxJsonDepth), "ok.json"));
  try {
    io::parse_json(nested(200000), "deep.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "deep.json: JSON nested more than 100 levels deep (at byte 100)");
  }
  // Brackets inside strings are text, not nesting.
  EXPECT_NO_THROW(io::parse_json("[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]", "s.json"));
}

TEST_F(HostileInputs, DeeplyNestedConfigJson) {
  set_config("architectures", nested(200000, "\"BertModel\""));
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {config_, "nested more than 100 levels"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, DeeplyNestedSafetensorsHeader) {
  write_raw_safetensors(weights_, "{\"__metadata__\": {\"x\": " + nested(200000) + "}}");
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {weights_, "nested more than 100 levels"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, DeeplyNestedShardIndex) {
  fs::remove(weights_);
  const std::string index = model_ + "/model.safetensors.index.json";
  test::write_all_bytes(index, "{\"weight_map\": " + nested(200000, "{}") + "}");
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {index, "nested more than 100 levels"}));
  EXPECT_TRUE(nothing_at(out_));
}

// ---- values the readers did not expect ----

TEST_F(HostileInputs, ANumberBeyondADoubleInConfigJson) {
  set_config("layer_norm_eps", "1e400");
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {config_, "not valid JSON", "1e400"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ANumberWhereConfigJsonWantsABoolean) {
  set_config("is_decoder", "1");
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {config_, "'is_decoder' must be true or false, got 1"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ALabelBeyondADoubleInJsonLines) {
  const std::string text = tmp_.file("train.jsonl");
  test::write_all_bytes(text, "{\"text\": \"a b\", \"label\": 0}\n{\"text\": \"c d\", \"label\": 1e400}\n");
  const std::string vocab = tmp_.file("vocab.txt");
  test::write_all_bytes(vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\nd\n");
  const auto r = test::run_anatomy("train --model " + model_ + " --train-file " + text + " --vocab " + vocab +
                                   " --max-seq-length 32 --max-steps 1 --device cpu --no-progress --output-dir " +
                                   out_);
  EXPECT_TRUE(failed_cleanly(r, {text + ":2", "not valid JSON", "1e400"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ANumberWhereTrainerStateWantsABoolean) {
  ASSERT_EQ(test::run_anatomy("train --model " + model_ + " --train-file " + train_file_ +
                              " --max-steps 1 --save-strategy steps --save-steps 1 --device cpu --no-progress "
                              "--output-dir " + out_).exit_code, 0);
  const std::string checkpoint = out_ + "/checkpoint-1";
  const std::string state = checkpoint + "/trainer_state.json";
  nlohmann::json j = nlohmann::json::parse(test::read_all_bytes(state));
  j["shuffle"] = 1;
  test::write_all_bytes(state, j.dump());
  const std::string again = tmp_.file("again");
  const auto r = test::run_anatomy("train --model " + model_ + " --train-file " + train_file_ +
                                   " --max-steps 2 --device cpu --no-progress --resume-from-checkpoint " +
                                   checkpoint + " --output-dir " + again);
  EXPECT_TRUE(failed_cleanly(r, {state, "shuffle"}));
  EXPECT_TRUE(nothing_at(again));
}

// ---- symbolic-link loops where a file or directory is named ----

TEST_F(HostileInputs, ASymlinkLoopAsConfigJson) {
  fs::remove(config_);
  fs::create_symlink("config.json", config_);
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {config_}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ASymlinkLoopAsModelSafetensors) {
  fs::remove(weights_);
  fs::create_symlink("model.safetensors", weights_);
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {weights_}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ASymlinkLoopAsTheTrainingFile) {
  const std::string loop = tmp_.file("loop.safetensors");
  fs::create_symlink("loop.safetensors", loop);
  const auto r = test::run_anatomy("train --model " + model_ + " --train-file " + loop +
                                   " --max-steps 1 --device cpu --no-progress --output-dir " + out_);
  EXPECT_TRUE(failed_cleanly(r, {loop}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ASymlinkLoopAsTheVocabulary) {
  const std::string text = tmp_.file("train.jsonl");
  test::write_all_bytes(text, "{\"text\": \"a b\", \"label\": 0}\n{\"text\": \"c d\", \"label\": 1}\n");
  const std::string loop = tmp_.file("vocab.txt");
  fs::create_symlink("vocab.txt", loop);
  const auto r = test::run_anatomy("train --model " + model_ + " --train-file " + text + " --vocab " + loop +
                                   " --max-seq-length 32 --max-steps 1 --device cpu --no-progress --output-dir " + out_);
  EXPECT_TRUE(failed_cleanly(r, {loop}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ASymlinkLoopAsTheOutputDirectory) {
  const std::string loop = tmp_.file("loop-out");
  fs::create_symlink("loop-out", loop);
  const auto r = test::run_anatomy("train --model " + model_ + " --train-file " + train_file_ +
                                   " --max-steps 1 --device cpu --no-progress --output-dir " + loop);
  EXPECT_TRUE(failed_cleanly(r, {loop}));
}

TEST_F(HostileInputs, ASymlinkLoopAsTheCheckpoint) {
  const std::string loop = tmp_.file("checkpoint-loop");
  fs::create_symlink("checkpoint-loop", loop);
  const auto r = train("--resume-from-checkpoint " + loop);
  EXPECT_TRUE(failed_cleanly(r, {loop}));
  EXPECT_TRUE(nothing_at(out_));
}

// ---- a worker count the machine cannot start ----

TEST_F(HostileInputs, MoreLoaderWorkersThanTheMachineStarts) {
  const auto r = train("--dataloader-num-workers 100000");
  EXPECT_TRUE(failed_cleanly(r, {"--dataloader-num-workers"}));
  EXPECT_TRUE(nothing_at(out_));
}

}  // namespace
}  // namespace anatomy
