// test_question_answering.cpp: the question answering head's data and runs
// (*ForQuestionAnswering). Its numerics are test_fixtures.cpp's (Hugging
// Face's fixtures bert/roberta/electra/distilbert-tiny-qa: start and end
// logits, loss, gradients, 10 AdamW steps).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "anatomy/io/safetensors.h"
#include "test_util.h"

namespace anatomy {
namespace {

// Start and end positions must lie within each example's tokens; the other
// kinds of labels are refused with one line.
TEST(QuestionAnswering, PositionsAreCheckedAgainstEachExample) {
  test::TempDir tmp;
  const std::string model = test::fixture("bert-tiny-qa");
  const std::vector<int64_t> ids = {5, 6, 7, 8, 9, 10}, mask = {1, 1, 1, 1, 1, 0};
  auto write = [&](const std::string& name, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends) {
    std::vector<io::StWriteTensor> tensors = {{"input_ids", io::StDType::I64, {2, 3}, ids.data()},
                                              {"attention_mask", io::StDType::I64, {2, 3}, mask.data()}};
    if (!starts.empty()) tensors.push_back({"start_positions", io::StDType::I64, {2}, starts.data()});
    if (!ends.empty()) tensors.push_back({"end_positions", io::StDType::I64, {2}, ends.data()});
    io::write_safetensors(tmp.file(name), tensors, {});
    return tmp.file(name);
  };
  auto run = [&](const std::string& file) {
    return test::run_anatomy("train --model " + model + " --train-file " + file +
                             " --max-steps 1 --device cpu --no-progress");
  };
  const auto past = run(write("past.safetensors", {0, 1}, {2, 2}));  // example 1 has 2 tokens
  EXPECT_EQ(past.exit_code, 1);
  EXPECT_NE(past.output.find("past.safetensors: end_positions of example 1 is 2, outside its 2 tokens"),
            std::string::npos)
      << past.output;
  const auto half = run(write("half.safetensors", {0, 1}, {}));
  EXPECT_EQ(half.exit_code, 1);
  EXPECT_NE(half.output.find("tensor 'end_positions' is missing"), std::string::npos) << half.output;
  const auto good = run(write("good.safetensors", {0, 1}, {2, 1}));
  EXPECT_EQ(good.exit_code, 0) << good.output;
  // A sequence classifier refuses answer spans.
  const auto other = test::run_anatomy("train --model " + test::fixture("bert-tiny-cls") + " --train-file " +
                                       tmp.file("good.safetensors") + " --max-steps 1 --device cpu --no-progress");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.output.find("start_positions and end_positions are question answering's labels"),
            std::string::npos)
      << other.output;
}

// A preset as a question answering model on the dummy data (every answer at
// the first token): trains, saves BertForQuestionAnswering, and its memory
// plan is the ledger, with evaluation.
TEST(QuestionAnswering, PresetTrainsOnDummyDataAndThePlanHolds) {
  test::TempDir tmp;
  const std::string out = tmp.file("run");
  const auto r = test::run_anatomy(
      "train --model bert-tiny --task question-answering --device cpu --no-progress --dummy-size 24 "
      "--dummy-seq-len 32 --per-device-train-batch-size 8 --max-steps 3 --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto config = nlohmann::json::parse(std::ifstream(out + "/config.json"));
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"BertForQuestionAnswering"}));
  const io::SafetensorsFile saved = io::SafetensorsFile::open(out + "/model.safetensors");
  EXPECT_EQ(saved.info("qa_outputs.weight").shape, (std::vector<int64_t>{2, 128}));
  EXPECT_FALSE(saved.has("bert.pooler.dense.weight"));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(out + "/anatomy.json"));
  EXPECT_EQ(j["predicted"]["peak_total"], j["ledger"]["peak_total"]);
  const auto estimate = test::run_anatomy("estimate --model bert-tiny --task question-answering --device cpu "
                                          "--dummy-seq-len 32 --per-device-train-batch-size 8");
  EXPECT_EQ(estimate.exit_code, 0) << estimate.output;
}

}  // namespace
}  // namespace anatomy
