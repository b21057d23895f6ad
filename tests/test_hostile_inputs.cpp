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
#include <fstream>
#include <limits>
#include <string>
#include <vector>

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
  // `anatomy train` of the model copy on the CPU from `data`, into `out`, with `flags`.
  test::CommandResult run(const std::string& data, const std::string& out, const std::string& flags,
                          const std::string& shell = "") {
    return test::run_anatomy("train --model " + model_ + " --train-file " + data +
                                 " --device cpu --no-progress --output-dir " + out + " " + flags,
                             shell);
  }
  test::CommandResult train(const std::string& extra = "") { return run(train_file_, out_, "--max-steps 1 " + extra); }
  // Text data in `text`, tokenized with a vocabulary of a few words.
  test::CommandResult train_text(const std::string& text, const std::string& vocab = "") {
    std::string words = vocab;
    if (words.empty()) {
      words = tmp_.file("vocab.txt");
      test::write_all_bytes(words, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\nd\n");
    }
    return run(text, out_, "--vocab " + words + " --max-seq-length 32 --max-steps 1");
  }
  // One step saved as out_/checkpoint-1 (call under ASSERT_NO_FATAL_FAILURE).
  void save_one_step() {
    const auto r = run(train_file_, out_, "--max-steps 1 --save-strategy steps --save-steps 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // A second step resumed from `checkpoint` into `out`.
  test::CommandResult resume(const std::string& checkpoint, const std::string& out) {
    return run(train_file_, out, "--max-steps 2 --resume-from-checkpoint " + checkpoint);
  }
  // Where tensor `name`'s data starts in safetensors bytes (throws, failing the test, without it).
  static uint64_t data_offset(const std::string& bytes, const std::string& name) {
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
    return 8 + n + header.at(name).at("data_offsets").at(0).get<uint64_t>();
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

// Every error is one line: a line break that a name or value brings into a
// message is written as an escape, whichever reader made the message.
TEST(ErrorMessages, LineBreaksAreEscaped) {
  const Error e("t.safetensors: tensor 'a\nb\r' of dtype \x01Q8\x7f\tunknown");
  EXPECT_EQ(std::string(e.what()), "t.safetensors: tensor 'a\\nb\\r' of dtype \\x01Q8\\x7f\tunknown");
  try {
    fail("{}: {}", "f.json", std::string("x\ny"));
  } catch (const Error& thrown) {
    EXPECT_EQ(std::string(thrown.what()), "f.json: x\\ny");
  }
}

TEST_F(HostileInputs, ATensorNameWithALineBreakIsOneErrorLine) {
  write_raw_safetensors(weights_, R"({"bad\nname": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 0]}})");
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {weights_, "bad\\nname"})) << r.output;
  EXPECT_TRUE(nothing_at(out_));
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
  const auto r = train_text(text);
  EXPECT_TRUE(failed_cleanly(r, {text + ":2", "not valid JSON", "1e400"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ANumberWhereTrainerStateWantsABoolean) {
  ASSERT_NO_FATAL_FAILURE(save_one_step());
  const std::string checkpoint = out_ + "/checkpoint-1";
  const std::string state = checkpoint + "/trainer_state.json";
  nlohmann::json j = nlohmann::json::parse(test::read_all_bytes(state));
  j["shuffle"] = 1;
  test::write_all_bytes(state, j.dump());
  fs::remove(checkpoint + "/checkpoint_files.json");  // else the manifest names the changed file first
  const std::string again = tmp_.file("again");
  const auto r = resume(checkpoint, again);
  EXPECT_TRUE(failed_cleanly(r, {state, "shuffle"}));
  EXPECT_TRUE(nothing_at(again));
  // Counters that no run writes: 2^62 batches consumed in one step.
  j["shuffle"] = true;
  j["micro_batches"] = int64_t{1} << 62;
  test::write_all_bytes(state, j.dump());
  const auto counters = resume(checkpoint, again);
  EXPECT_TRUE(failed_cleanly(counters, {state, "inconsistent counters", "micro_batches 4611686018427387904"}));
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
  const auto r = run(loop, out_, "--max-steps 1");
  EXPECT_TRUE(failed_cleanly(r, {loop}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ASymlinkLoopAsTheVocabulary) {
  const std::string text = tmp_.file("train.jsonl");
  test::write_all_bytes(text, "{\"text\": \"a b\", \"label\": 0}\n{\"text\": \"c d\", \"label\": 1}\n");
  const std::string loop = tmp_.file("vocab.txt");
  fs::create_symlink("vocab.txt", loop);
  const auto r = train_text(text, loop);
  EXPECT_TRUE(failed_cleanly(r, {loop}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, ASymlinkLoopAsTheOutputDirectory) {
  const std::string loop = tmp_.file("loop-out");
  fs::create_symlink("loop-out", loop);
  const auto r = run(train_file_, loop, "--max-steps 1");
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

// ---- what used to be accepted silently ----

TEST_F(HostileInputs, ABetaThatIsNotANumber) {
  const auto r = train("--adam-beta1 nan");
  EXPECT_TRUE(failed_cleanly(r, {"--adam-beta1", "expected a number in [0, 1), got nan"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(nothing_at(out_));
  EXPECT_TRUE(failed_cleanly(train("--adam-beta2 1"), {"--adam-beta2", "[0, 1)"}));
}

TEST_F(HostileInputs, AStepCountThatDoesNotFit) {
  const auto steps = [&](const std::string& flags) { return run(train_file_, out_, flags); };
  const auto r = steps("--num-train-epochs 1e30");
  EXPECT_TRUE(failed_cleanly(r, {"--num-train-epochs 1e+30", "more than the 9007199254740992 steps a run may take"}));
  EXPECT_TRUE(nothing_at(out_));
  const auto huge = steps("--max-steps 99999999999999999999");
  EXPECT_TRUE(failed_cleanly(huge, {"--max-steps", "fits 64 bits", "99999999999999999999"}));
  EXPECT_TRUE(nothing_at(out_));
  EXPECT_TRUE(failed_cleanly(steps("--max-steps 9007199254740993"), {"--max-steps 9007199254740993"}));
  EXPECT_TRUE(nothing_at(out_));
  EXPECT_TRUE(failed_cleanly(train("--seed 18446744073709551616"), {"--seed", "fits 64 bits"}));
  EXPECT_TRUE(failed_cleanly(train("--per-device-train-batch-size 1.5"), {"--per-device-train-batch-size"}));
}

// Every label ignored (-100): no loss to learn from. The run stops at the
// step, and no trained model is written.
TEST_F(HostileInputs, LabelsAllIgnoredStopTheRun) {
  auto tensors = test::valid_train_tensors();
  for (int64_t& label : test::tensor_named(tensors, "labels").values) label = -100;
  test::write_i64_tensors(train_file_, tensors);
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {"step 1: the training loss is nan", "-100"}));
  EXPECT_FALSE(fs::exists(out_ + "/model.safetensors"));
}

// Asked to, the run goes on past such a step: its update is skipped, stderr
// says so once, log.jsonl counts it, and the logged loss leaves it out.
TEST_F(HostileInputs, SkipNonfiniteStepsGoesOnAndSaysSo) {
  auto tensors = test::valid_train_tensors();
  auto& labels = test::tensor_named(tensors, "labels").values;
  labels[0] = labels[1] = -100;  // the first batch of two has no loss
  test::write_i64_tensors(train_file_, tensors);
  const auto r = run(train_file_, out_,
                     "--max-steps 2 --per-device-train-batch-size 2 --no-shuffle --logging-steps 1 "
                     "--skip-nonfinite-steps");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: step 1: the training loss is nan, not finite; its update is skipped"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("warning: step 2"), std::string::npos) << r.output;
  std::ifstream log(out_ + "/log.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(log, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_TRUE(records[0]["loss"].is_null());
  EXPECT_EQ(records[0]["skipped_steps"], 1);
  EXPECT_TRUE(records[1]["loss"].is_number()) << records[1].dump();
  EXPECT_EQ(records[1]["skipped_steps"], 1);
  EXPECT_TRUE(fs::exists(out_ + "/model.safetensors"));
}

// A label the trained classifier does not have is the data file's error, at
// its line, not a classifier shape that model.safetensors does not match.
TEST_F(HostileInputs, AStrayLabelIsNamedAtItsLine) {
  set_config("id2label", R"({"0": "negative", "1": "positive"})");
  const std::string text = tmp_.file("train.jsonl");
  test::write_all_bytes(text, "{\"text\": \"a b\", \"label\": \"negative\"}\n"
                              "{\"text\": \"c d\", \"label\": \"positive\"}\n"
                              "{\"text\": \"a d\", \"label\": \"postive\"}\n");
  const auto r = train_text(text);
  EXPECT_TRUE(failed_cleanly(r, {text + ":3", "label 'postive'", "negative, positive"}));
  EXPECT_TRUE(nothing_at(out_));
}

// A weight that is not finite, in a model or in a checkpoint's optimizer
// states, is named when loaded instead of trained into NaN.
TEST_F(HostileInputs, NonFiniteWeightsAreRefusedWhenLoaded) {
  const std::string name = "bert.encoder.layer.0.output.dense.bias";
  std::string bytes = test::read_all_bytes(weights_);
  const uint64_t at = data_offset(bytes, name) + 3 * sizeof(float);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + at, &nan, sizeof nan);
  test::write_all_bytes(weights_, bytes);
  const auto r = train();
  EXPECT_TRUE(failed_cleanly(r, {weights_, "'" + name + "'", "nan at element 3", "finite"}));
  EXPECT_TRUE(nothing_at(out_));
}

TEST_F(HostileInputs, NegativeSecondMomentsAreRefusedOnResume) {
  ASSERT_NO_FATAL_FAILURE(save_one_step());
  const std::string checkpoint = out_ + "/checkpoint-1";
  const std::string states = checkpoint + "/optimizer.safetensors";
  std::string bytes = test::read_all_bytes(states);
  const uint64_t at = data_offset(bytes, "exp_avg_sq");
  const float negative = -1.0f;
  std::memcpy(bytes.data() + at, &negative, sizeof negative);
  test::write_all_bytes(states, bytes);
  fs::remove(checkpoint + "/checkpoint_files.json");  // else the manifest names the changed file first
  const std::string again = tmp_.file("again");
  const auto r = resume(checkpoint, again);
  EXPECT_TRUE(failed_cleanly(r, {states, "'exp_avg_sq'", "-1 at element 0"}));
  EXPECT_FALSE(fs::exists(again + "/model.safetensors"));
}

// ---- durable checkpoints ----

// A save that fails for want of space leaves the checkpoint before it whole,
// removes its partial directory, and names the file and the reason.
TEST_F(HostileInputs, AFullDiskDuringASaveLosesNothingSavedBefore) {
  ASSERT_NO_FATAL_FAILURE(save_one_step());
  const std::string first = out_ + "/checkpoint-1";
  const std::string second_step =
      "--max-steps 2 --save-strategy steps --save-steps 1 --resume-from-checkpoint " + first;
  const std::string before = test::read_all_bytes(first + "/optimizer.safetensors");
  // Under a file-size limit of 64 KiB (ulimit -f), as a disk that fills up mid-save.
  const auto r = run(train_file_, out_, second_step, "ulimit -f 64; exec");
  EXPECT_TRUE(
      failed_cleanly(r, {out_ + "/checkpoint-2: not saved, the checkpoints before it are kept", "File too large"}));
  EXPECT_FALSE(fs::exists(out_ + "/checkpoint-2"));
  for (const auto& entry : fs::directory_iterator(out_))
    EXPECT_NE(entry.path().filename().string().rfind(".checkpoint-", 0), 0u) << entry.path();
  EXPECT_EQ(test::read_all_bytes(first + "/optimizer.safetensors"), before);
  // And the checkpoint still resumes, its files matching their manifest.
  const auto again = run(train_file_, out_, second_step);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(fs::exists(out_ + "/checkpoint-2/checkpoint_files.json"));
}

// A checkpoint file changed after the save (a flipped byte, a truncation) is
// refused on resume, naming it.
TEST_F(HostileInputs, ADamagedCheckpointFileIsRefusedOnResume) {
  ASSERT_NO_FATAL_FAILURE(save_one_step());
  const std::string checkpoint = out_ + "/checkpoint-1";
  const std::string states = checkpoint + "/optimizer.safetensors";
  std::string bytes = test::read_all_bytes(states);
  bytes[bytes.size() - 5] ^= 0x40;  // a bit of the last state's data
  test::write_all_bytes(states, bytes);
  const std::string again = tmp_.file("again");
  EXPECT_TRUE(failed_cleanly(resume(checkpoint, again), {states, "changed or was damaged after the save"}));
  EXPECT_TRUE(nothing_at(again));
  bytes[bytes.size() - 5] ^= 0x40;
  test::write_all_bytes(states, bytes);
  const std::string weights = checkpoint + "/model.safetensors";
  const std::string model_bytes = test::read_all_bytes(weights);
  test::write_all_bytes(weights, model_bytes + "x");
  EXPECT_TRUE(failed_cleanly(resume(checkpoint, again), {weights, std::to_string(model_bytes.size() + 1) + " bytes"}));
  EXPECT_TRUE(nothing_at(again));
}

}  // namespace
}  // namespace anatomy
