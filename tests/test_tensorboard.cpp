// test_tensorboard.cpp: --report-to tensorboard.
// - CRC-32C against the standard check values (RFC 3720's test vectors).
// - A short run's event file decoded here (every record's CRCs checked): the
//   scalars are those of trainer_state.json's log_history under Trainer's
//   TensorBoardCallback tags (train/loss, train/learning_rate, train/grad_norm,
//   train/epoch, eval/loss, ..., train/train_runtime).
// - TensorBoard's own reader (EventAccumulator, tests/tools/check_tensorboard.py)
//   loads the same file with the same scalars. It needs Python with the
//   tensorboard package (scripts/install-test-python.sh, which CI's
//   install-deps.sh runs): .venv-tests in the repository, or
//   ANATOMY_TEST_PYTHON; missing, the test skips saying so, unless
//   ANATOMY_REQUIRE_TENSORBOARD=1 (CI), where it fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "anatomy/io/files.h"
#include "anatomy/io/tensorboard.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;

using Scalars = std::map<std::string, std::vector<std::pair<int64_t, double>>>;

// `command`'s exit code and stdout (stderr goes to `err`).
test::CommandResult run_command(const std::string& command, const std::string& err) {
  test::CommandResult r;
  FILE* pipe = popen((command + " 2> " + err).c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Trainer's TensorBoardCallback: each log_history record's numbers but "step",
// eval_* under eval/, the rest under train/, at the record's step.
Scalars expected_scalars(const std::string& state_path) {
  const auto state = nlohmann::json::parse(io::read_text_file(state_path));
  Scalars out;
  for (const auto& record : state["log_history"]) {
    const int64_t step = record["step"].get<int64_t>();
    for (const auto& [key, value] : record.items()) {
      if (key == "step" || !value.is_number()) continue;
      const std::string tag = key.rfind("eval_", 0) == 0 ? "eval/" + key.substr(5) : "train/" + key;
      out[tag].emplace_back(step, value.get<double>());
    }
  }
  return out;
}

std::string event_file_in(const std::string& dir) {
  std::string found;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      EXPECT_TRUE(found.empty()) << "two event files: " << found << ", " << entry.path();
      found = entry.path().string();
    }
  return found;
}

void expect_same(const Scalars& got, const Scalars& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [tag, points] : want) {
    ASSERT_TRUE(got.count(tag)) << tag;
    const auto& g = got.at(tag);
    ASSERT_EQ(g.size(), points.size()) << tag;
    for (size_t i = 0; i < points.size(); ++i) {
      EXPECT_EQ(g[i].first, points[i].first) << tag;
      // simple_value is a float: the record's double rounded to float32.
      EXPECT_EQ(g[i].second, static_cast<double>(static_cast<float>(points[i].second))) << tag << " " << i;
    }
  }
}

TEST(TensorBoard, Crc32cMatchesTheStandardCheckValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(io::crc32c(reinterpret_cast<const uint8_t*>(digits.data()), digits.size()), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(io::crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(io::crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(io::crc32c(up.data(), 32), 0x46DD794Eu);
}

TEST(TensorBoard, ACorruptRecordIsRefusedByItsCrc) {
  test::TempDir tmp;
  std::string path;
  {
    io::EventFileWriter w(tmp.file("tb"));
    w.add_scalar("train/loss", 0.5, 3, 1.0);
    w.flush();
    path = w.path();
  }
  const auto events = io::read_event_file(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].tag, "train/loss");
  EXPECT_EQ(events[1].values[0].simple_value, 0.5f);
  EXPECT_EQ(events[1].step, 3);
  EXPECT_EQ(events[1].wall_time, 1.0);
  std::vector<uint8_t> bytes = io::read_file_bytes(path);
  bytes[bytes.size() - 6] ^= 1;  // a byte of the last event's value
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  try {
    io::read_event_file(path);
    ADD_FAILURE() << "a corrupt record was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("record 1: the data's CRC does not match"), std::string::npos) << e.what();
  }
}

class TensorBoardRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new test::TempDir;
    const std::string fixture = test::fixture("bert-tiny-cls-padded");
    const std::string data = fixture + "/reference.safetensors";
    result_ = new test::CommandResult(test::run_anatomy(
        "train --model " + fixture + " --train-file " + data + " --validation-file " + data +
        " --device cpu --per-device-train-batch-size 1 --max-steps 6 --learning-rate 1e-3 --logging-steps 2 "
        "--eval-strategy steps --eval-steps 3 --no-progress --report_to tensorboard --output-dir " +
        tmp_->file("run")));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete tmp_;
  }
  static test::TempDir* tmp_;
  static test::CommandResult* result_;
};
test::TempDir* TensorBoardRun::tmp_ = nullptr;
test::CommandResult* TensorBoardRun::result_ = nullptr;

TEST_F(TensorBoardRun, EventsDecodeToTheLogHistoryUnderTrainersTags) {
  ASSERT_EQ(result_->exit_code, 0) << result_->output;
  // Trainer's default logging directory: OUTPUT_DIR/runs/<Mon DD_HH-MM-SS>_<host>.
  const std::string file = event_file_in(tmp_->file("run/runs"));
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(fs::path(file).parent_path().parent_path(), fs::path(tmp_->file("run/runs")));
  const auto events = io::read_event_file(file);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  Scalars got;
  for (const auto& e : events)
    for (const auto& v : e.values) got[v.tag].emplace_back(e.step, v.simple_value);
  const Scalars want = expected_scalars(tmp_->file("run/trainer_state.json"));
  for (const char* tag : {"train/loss", "train/learning_rate", "train/grad_norm", "train/epoch", "eval/loss",
                          "eval/accuracy", "eval/runtime", "train/train_loss", "train/train_runtime"})
    EXPECT_TRUE(want.count(tag)) << tag;
  expect_same(got, want);
}

TEST_F(TensorBoardRun, TensorBoardsOwnReaderLoadsTheScalars) {
  ASSERT_EQ(result_->exit_code, 0) << result_->output;
  std::string python;
  if (const char* p = std::getenv("ANATOMY_TEST_PYTHON")) python = p;
  else if (fs::exists(fs::path(ANATOMY_FIXTURES_DIR) / "../../.venv-tests/bin/python"))
    python = (fs::path(ANATOMY_FIXTURES_DIR) / "../../.venv-tests/bin/python").lexically_normal().string();
  else python = "python3";
  const std::string script = (fs::path(ANATOMY_FIXTURES_DIR) / "../tools/check_tensorboard.py").lexically_normal();
  const std::string err = tmp_->file("python-stderr.txt");
  const test::CommandResult r = run_command(python + " " + script + " " + tmp_->file("run/runs"), err);
  if (r.exit_code != 0) {
    const char* required = std::getenv("ANATOMY_REQUIRE_TENSORBOARD");
    std::string why = r.output + (fs::exists(err) ? io::read_text_file(err) : std::string());
    if (why.size() > 400) why = why.substr(why.size() - 400);
    why = python + " cannot read the events with TensorBoard's reader (" + why +
          "); scripts/install-test-python.sh installs the tensorboard package";
    if (required && std::string(required) == "1") FAIL() << why;
    GTEST_SKIP() << why;
  }
  const auto j = nlohmann::json::parse(r.output);
  Scalars got;
  for (const auto& [tag, points] : j.items())
    for (const auto& p : points) got[tag].emplace_back(p[0].get<int64_t>(), p[1].get<double>());
  expect_same(got, expected_scalars(tmp_->file("run/trainer_state.json")));
}

TEST(TensorBoard, ReportToAndLoggingDirAreChecked) {
  test::TempDir tmp;
  const std::string base = "train --model bert-tiny --device cpu --dummy-size 4 --dummy-seq-len 8 --max-steps 2 "
                           "--no-progress ";
  const test::CommandResult bad = test::run_anatomy(base + "--report-to wandb --output-dir " + tmp.file("a"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--report-to"), std::string::npos) << bad.output;
  const test::CommandResult nowhere = test::run_anatomy(base + "--report-to tensorboard");
  EXPECT_NE(nowhere.exit_code, 0);
  EXPECT_NE(nowhere.output.find("--report-to tensorboard: needs --output-dir or --logging-dir"), std::string::npos)
      << nowhere.output;
  const test::CommandResult chosen =
      test::run_anatomy(base + "--report-to tensorboard --logging-dir " + tmp.file("logs"));
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  const std::string file = event_file_in(tmp.file("logs"));
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(fs::path(file).parent_path(), fs::path(tmp.file("logs")));
  EXPECT_GE(io::read_event_file(file).size(), 2u);
}

}  // namespace
}  // namespace anatomy
