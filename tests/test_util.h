// test_util.h: helpers shared by the CPU tests: temporary directories, running
// the `anatomy` binary, and comparing tensors against references.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/data/dataset.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/registry.h"

namespace anatomy::test {

// Sets (or, with nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The build tree's paths, overridable (ANATOMY_FIXTURES_DIR, ANATOMY_BINARY) when
// the test binary runs on another machine than the one that built it.
inline std::string fixtures_dir() {
  const char* env = std::getenv("ANATOMY_FIXTURES_DIR");
  return env ? env : ANATOMY_FIXTURES_DIR;
}
inline std::string anatomy_binary() {
  const char* env = std::getenv("ANATOMY_BINARY");
  return env ? env : ANATOMY_BINARY;
}
inline std::string fixture(const std::string& name) { return fixtures_dir() + "/" + name; }

// step -> that step's training record (the lines with a loss) of a run's log.jsonl.
inline std::map<int64_t, nlohmann::json> log_records(const std::string& dir) {
  std::map<int64_t, nlohmann::json> out;
  std::ifstream in(dir + "/log.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int64_t>()] = j;
  }
  return out;
}

// |a − b| relative to |b|.
inline double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// Run b's training records (log_records), step for step, within `rtol` of
// run a's: the same steps, and each loss and gradient norm.
inline void expect_records_within(const std::map<int64_t, nlohmann::json>& a,
                                  const std::map<int64_t, nlohmann::json>& b, double rtol) {
  ASSERT_EQ(b.size(), a.size());
  for (const auto& [step, x] : a) {
    ASSERT_TRUE(b.count(step)) << "step " << step;
    const nlohmann::json& y = b.at(step);
    EXPECT_LT(relative(y["loss"].get<double>(), x["loss"].get<double>()), rtol) << "step " << step;
    EXPECT_LT(relative(y["grad_norm"].get<double>(), x["grad_norm"].get<double>()), rtol) << "step " << step;
  }
}

// The largest |a − b| over the weights of two runs' model.safetensors (run
// directories), and the largest |a|: infinite when the files do not hold the
// same tensors of the same sizes.
struct WeightDifference {
  double worst = 0.0, scale = 0.0;
};
inline WeightDifference weight_difference(const std::string& dir_a, const std::string& dir_b) {
  const io::SafetensorsFile a = io::SafetensorsFile::open(dir_a + "/model.safetensors");
  const io::SafetensorsFile b = io::SafetensorsFile::open(dir_b + "/model.safetensors");
  WeightDifference d;
  if (a.names().size() != b.names().size()) return {INFINITY, 1.0};
  for (const std::string& name : a.names()) {
    const std::vector<float> x = a.read_f32(name), y = b.read_f32(name);
    if (x.size() != y.size()) return {INFINITY, 1.0};
    for (size_t i = 0; i < x.size(); ++i) {
      d.worst = std::max(d.worst, static_cast<double>(std::abs(x[i] - y[i])));
      d.scale = std::max(d.scale, static_cast<double>(std::abs(x[i])));
    }
  }
  return d;
}

// The reference's two batches as one training file: with --no-shuffle and the
// reference batch size, step i uses batch i % 2 as the reference did.
inline int64_t write_reference_train_file(const std::string& reference, const std::string& path) {
  const io::SafetensorsFile ref = io::SafetensorsFile::open(reference);
  std::vector<std::vector<int64_t>> integers;
  std::vector<std::vector<float>> floats;
  std::vector<io::StWriteTensor> tensors;
  int64_t batch = 0;
  for (const std::string name :
       {"input_ids", "token_type_ids", "attention_mask", "labels", "start_positions", "end_positions"}) {
    if (!ref.has(name)) continue;
    std::vector<int64_t> shape = ref.info(name).shape;
    batch = shape[0];
    shape[0] += ref.info(name + "_1").shape[0];
    // Float labels (regression, multi-label) go in as float32, integer ones as int64.
    if (io::st_dtype_is_float(ref.info(name).dtype)) {
      std::vector<float> a = ref.read_f32(name), b = ref.read_f32(name + "_1");
      a.insert(a.end(), b.begin(), b.end());
      floats.push_back(std::move(a));
      tensors.push_back({name, io::StDType::F32, shape, floats.back().data()});
    } else {
      std::vector<int64_t> a = ref.read_i64(name), b = ref.read_i64(name + "_1");
      a.insert(a.end(), b.begin(), b.end());
      integers.push_back(std::move(a));
      tensors.push_back({name, io::StDType::I64, shape, integers.back().data()});
    }
  }
  io::write_safetensors(path, tensors);
  return batch;
}

// The Hugging Face reference models in tests/fixtures (see its README).
inline const std::vector<std::string> kHuggingFaceFixtures = {
    "bert-tiny-cls", "bert-tiny-cls-padded", "bert-regression-gelu-new", "bert-multilabel-relu", "bert-cls5-wide",
    "roberta-tiny-padded", "xlm-roberta-regression", "electra-tiny-padded", "distilbert-tiny-multilabel",
    "modernbert-tiny-padded", "modernbert-biases", "modernbert-head64", "deberta-tiny-padded", "deberta-c2p-regression",
    "deberta-tiny-token", "bert-tiny-token", "roberta-tiny-token", "electra-tiny-token",
    "distilbert-tiny-token", "bert-tiny-qa", "roberta-tiny-qa", "electra-tiny-qa", "distilbert-tiny-qa",
    "bert-tiny-mlm", "roberta-tiny-mlm", "electra-tiny-mlm", "distilbert-tiny-mlm",
    "bert-tiny-mc", "roberta-tiny-mc", "distilbert-tiny-mc"};

// Multiple choice's examples as the sequences the model runs (examples × choices
// rows of seq_len / choices tokens, no labels); any other dataset as it is.
inline Dataset choices_as_rows(Dataset d) {
  if (d.choices == 0) return d;
  d.size *= d.choices;
  d.seq_len /= d.choices;
  d.choices = 0;
  d.labels_i64.clear();
  d.label_width = 0;
  return d;
}

// A fixture's model as its tests run it: the masked-LM fixtures are
// *ForMaskedLM checkpoints, which the engine fine-tunes for sequence
// classification unless masked-LM is asked for, so their tests ask.
inline bool masked_lm_fixture(const std::string& dir) {
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  const std::string name = config.value("architectures", nlohmann::json::array({""}))[0].get<std::string>();
  return name.size() > 11 && name.compare(name.size() - 11, 11, "ForMaskedLM") == 0;
}
inline ModelSource fixture_source(const std::string& dir) {
  ModelSource source = resolve_model(dir);
  if (masked_lm_fixture(dir)) set_model_task(source.config, kMaskedLm);
  return source;
}
// The command-line flag that asks for the fixture's head ("" where config.json's architectures do).
inline std::string fixture_task_flag(const std::string& dir) {
  return masked_lm_fixture(dir) ? " --task masked-lm" : "";
}

// Token classification's reference logits [B, L, C] (padding rows included)
// cut to the real tokens' rows, in order: a packed batch's logits.
template <typename T>
std::vector<T> real_token_rows(const std::vector<T>& logits, const Dataset& data) {
  const std::vector<int64_t> lengths = sequence_lengths(data);
  const auto C = static_cast<int64_t>(logits.size()) / (data.size * data.seq_len);
  std::vector<T> out;
  for (int64_t b = 0; b < data.size; ++b)
    out.insert(out.end(), logits.begin() + b * data.seq_len * C, logits.begin() + (b * data.seq_len + lengths[b]) * C);
  return out;
}

// Question answering's reference logits [2, B, L] (start, end; padding
// included) cut to the real tokens: [2, rows], as a packed batch's.
template <typename T>
std::vector<T> real_span_rows(const std::vector<T>& logits, const Dataset& data) {
  const std::vector<int64_t> lengths = sequence_lengths(data);
  const int64_t half = data.size * data.seq_len;
  std::vector<T> out;
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t b = 0; b < data.size; ++b)
      out.insert(out.end(), logits.begin() + k * half + b * data.seq_len,
                 logits.begin() + k * half + b * data.seq_len + lengths[b]);
  return out;
}

// A fixture name as a GoogleTest parameter name (letters, digits, underscores).
inline std::string test_name(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("anatomy-test-" + std::to_string(getpid()) + "-" +
                                                      std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `anatomy <args>` through the shell, capturing both streams; `shell`
// goes before it on the command line ("ulimit -f 64; exec").
inline CommandResult run_anatomy(const std::string& args, const std::string& shell = "") {
  CommandResult r;
  const std::string command = (shell.empty() ? "" : shell + " ") + anatomy_binary() + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

template <typename A>
double max_abs_diff(const std::vector<A>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < b.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Relative closeness as the acceptance lists state it: |a - ref| <= tol * |ref| per value.
inline void expect_relative(const std::vector<float>& got, const std::vector<double>& ref, double tol,
                            const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_LE(std::abs(got[i] - ref[i]), tol * std::abs(ref[i])) << what << "[" << i << "] = " << got[i] << " vs "
                                                                 << ref[i];
}

// The largest value of any reference gradient ("grad." tensors): the scale
// of a gradient that is zero in exact arithmetic (question answering's
// qa_outputs.bias and the last LayerNorm's bias: a shift of every position's
// logit leaves the softmax as it is), whose float32 value is rounding of sums
// of terms at that scale.
inline double largest_reference_gradient(const io::SafetensorsFile& ref) {
  double m = 0.0;
  for (const std::string& name : ref.names())
    if (name.rfind("grad.", 0) == 0) m = std::max(m, max_abs(ref.read_f64(name)));
  return m;
}

// Closeness at the scale of the whole output: |a - ref| <= tol * max |ref|
// per value, as the gradients are compared. For outputs of many values of
// which some are near zero (token classification's logits), where a float32
// computation's error follows the output's scale, not each value's.
inline void expect_close_at_scale(const std::vector<float>& got, const std::vector<double>& ref, double tol,
                                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const double scale = max_abs(ref);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_LE(std::abs(got[i] - ref[i]), tol * scale) << what << "[" << i << "] = " << got[i] << " vs " << ref[i];
}

}  // namespace anatomy::test
