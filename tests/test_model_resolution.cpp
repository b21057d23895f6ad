// test_model_resolution.cpp: what --model names, offline. A Hugging Face id
// found in the local hub cache (a fake one in a temp directory, laid out as
// huggingface_hub lays it out: refs/main, snapshots/<commit>/ links into
// blobs/), before the presets; --model_name_or_path as its alias on every
// command; a preset's "random initialisation" on the run's first line and in
// anatomy.json; one error line for a directory of TensorFlow-only weights and
// for an id that is nowhere.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/io/hf_cache.h"
#include "anatomy/model/checkpoint.h"
#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using test::failed_cleanly;
using test::ScopedEnv;

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

// The first line of a command's output.
std::string first_line(const std::string& output) { return output.substr(0, output.find('\n')); }

class ModelResolution : public ::testing::Test {
 protected:
  void SetUp() override { test::write_i64_tensors(data_, test::valid_train_tensors()); }

  // Puts `files` (name -> source path) into the fake cache as repository `id`
  // at kCommit, each a symbolic link into blobs/ as huggingface_hub makes them;
  // refs/main names the commit unless `with_ref` is false.
  std::string cache_model(const std::string& id, const std::vector<std::pair<std::string, std::string>>& files,
                          bool with_ref = true) {
    std::string folder = "models--";
    for (char c : id) folder += c == '/' ? std::string("--") : std::string(1, c);
    const fs::path repo = fs::path(cache_) / folder;
    const fs::path snapshot = repo / "snapshots" / kCommit;
    fs::create_directories(repo / "blobs");
    fs::create_directories(snapshot);
    int n = 0;
    for (const auto& [name, source] : files) {
      const std::string blob = "blob" + std::to_string(n++);
      fs::copy_file(source, repo / "blobs" / blob);
      fs::create_symlink(fs::path("..") / ".." / "blobs" / blob, snapshot / name);
    }
    if (with_ref) {
      fs::create_directories(repo / "refs");
      test::write_all_bytes((repo / "refs" / "main").string(), kCommit);
    }
    return snapshot.string();
  }
  // `anatomy <command>` with HF_HUB_CACHE pointing at the fake cache.
  test::CommandResult anatomy(const std::string& command) {
    return test::run_anatomy(command, "HF_HUB_CACHE=" + cache_);
  }
  test::CommandResult train(const std::string& model_flag, const std::string& out) {
    return anatomy("train " + model_flag + " --train-file " + data_ +
                   " --device cpu --no-progress --max-steps 1 --output-dir " + out);
  }
  static nlohmann::json anatomy_json(const std::string& out) {
    return nlohmann::json::parse(test::read_all_bytes(out + "/anatomy.json"));
  }

  test::TempDir tmp_;
  std::string cache_ = tmp_.file("hub");
  std::string data_ = tmp_.file("train.safetensors");
};

TEST(HubCache, TheDirectoryFollowsHuggingFaceHubsVariables) {
  ScopedEnv a("HF_HUB_CACHE", nullptr), b("HUGGINGFACE_HUB_CACHE", nullptr), c("HF_HOME", nullptr),
      d("XDG_CACHE_HOME", nullptr), e("HOME", "/home/someone");
  EXPECT_EQ(io::hf_hub_cache_dir(), "/home/someone/.cache/huggingface/hub");
  {
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(io::hf_hub_cache_dir(), "/xdg/huggingface/hub");
    ScopedEnv h("HF_HOME", "~/hf");
    EXPECT_EQ(io::hf_hub_cache_dir(), "/home/someone/hf/hub");
    ScopedEnv old("HUGGINGFACE_HUB_CACHE", "/old");
    EXPECT_EQ(io::hf_hub_cache_dir(), "/old");
    ScopedEnv hub("HF_HUB_CACHE", "/hub");
    EXPECT_EQ(io::hf_hub_cache_dir(), "/hub");
  }
  ScopedEnv empty("HF_HOME", "");  // set but empty: as if unset
  EXPECT_EQ(io::hf_hub_cache_dir(), "/home/someone/.cache/huggingface/hub");
}

TEST(HubCache, IdsHaveTheHubsForm) {
  for (const char* id : {"bert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2", "google-bert/bert-base-uncased",
                         "a/b", "x_y.z"})
    EXPECT_TRUE(io::is_hub_model_id(id)) << id;
  for (const char* id : {"", "/abs", "a/b/c", "../up", "a/..", "a--b", "-a", "a.", "a b", "org/", "./x", "a/b\n"})
    EXPECT_FALSE(io::is_hub_model_id(id)) << id;
}

TEST_F(ModelResolution, ACachedIdResolvesToItsSnapshot) {
  const std::string snapshot = cache_model("sentence-transformers/all-MiniLM-L6-v2",
                                           {{"config.json", test::fixture("bert-tiny-cls/config.json")},
                                            {"pytorch_model.bin", test::fixture("pytorch-bin/single/pytorch_model.bin")}});
  ScopedEnv env("HF_HUB_CACHE", cache_.c_str());
  const auto cached = io::find_cached_model("sentence-transformers/all-MiniLM-L6-v2");
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ(cached->snapshot, snapshot);
  EXPECT_EQ(cached->revision, kCommit);
  EXPECT_FALSE(io::find_cached_model("sentence-transformers/other").has_value());
  const ModelSource source = resolve_model("sentence-transformers/all-MiniLM-L6-v2");
  EXPECT_EQ(source.directory, snapshot);
  EXPECT_EQ(source.hub_id, "sentence-transformers/all-MiniLM-L6-v2");
  EXPECT_EQ(source.weights, "pytorch_model.bin");
  EXPECT_EQ(source.config.hidden_size, 64);
}

TEST_F(ModelResolution, TrainsACachedIdGivenAsModelNameOrPath) {
  cache_model("sentence-transformers/all-MiniLM-L6-v2",
              {{"config.json", test::fixture("bert-tiny-cls/config.json")},
               {"pytorch_model.bin", test::fixture("pytorch-bin/single/pytorch_model.bin")}});
  const std::string out = tmp_.file("out");
  const auto r = train("--model_name_or_path sentence-transformers/all-MiniLM-L6-v2", out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(first_line(r.output).rfind("Model: sentence-transformers/all-MiniLM-L6-v2 from the Hugging Face cache (", 0), 0u)
      << r.output;
  EXPECT_NE(first_line(r.output).find("weights from pytorch_model.bin"), std::string::npos) << r.output;
  const nlohmann::json model = anatomy_json(out)["model"];
  EXPECT_EQ(model["name"], "sentence-transformers/all-MiniLM-L6-v2");
  EXPECT_EQ(model["source"], "Hugging Face cache");
  EXPECT_EQ(model["weights"], "pytorch_model.bin");
}

TEST_F(ModelResolution, ACachedModelComesBeforeThePresetOfItsName) {
  cache_model("bert-tiny", {{"config.json", test::fixture("bert-tiny-cls/config.json")},
                            {"model.safetensors", test::fixture("bert-tiny-cls/model.safetensors")}});
  const auto r = train("--model bert-tiny", tmp_.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(first_line(r.output).rfind("Model: bert-tiny from the Hugging Face cache", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find("random initialisation"), std::string::npos) << r.output;
}

TEST_F(ModelResolution, APresetSaysRandomInitialisationFirstAndInAnatomyJson) {
  const std::string out = tmp_.file("out");
  const auto r = train("--model bert-tiny", out);  // the cache is empty
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(first_line(r.output), "Model: bert-tiny (a preset: random initialisation, no pretrained weights)")
      << r.output;
  const nlohmann::json model = anatomy_json(out)["model"];
  EXPECT_EQ(model["name"], "bert-tiny");
  EXPECT_EQ(model["source"], "preset");
  EXPECT_EQ(model["weights"], "random initialisation");
}

TEST_F(ModelResolution, ADirectorySaysWhichWeightsItRead) {
  const std::string out = tmp_.file("out");
  const auto r = train("--model " + test::fixture("pytorch-bin/sharded"), out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(first_line(r.output),
            "Model: " + test::fixture("pytorch-bin/sharded") + ", weights from pytorch_model.bin.index.json")
      << r.output;
  EXPECT_EQ(anatomy_json(out)["model"]["source"], "directory");
}

TEST_F(ModelResolution, TheAliasWorksOnEveryCommandThatTakesModel) {
  const std::string dir = test::fixture("bert-tiny-cls");
  const auto estimate = anatomy("estimate --model_name_or_path bert-tiny --device cpu --dummy-seq-len 16");
  EXPECT_EQ(estimate.exit_code, 0) << estimate.output;
  const auto evaluate =
      anatomy("evaluate --model_name_or_path " + dir + " --device cpu --input " + data_);
  EXPECT_EQ(evaluate.exit_code, 0) << evaluate.output;
  EXPECT_EQ(first_line(evaluate.output), "Model: " + dir + ", weights from model.safetensors") << evaluate.output;
  const auto predict = anatomy("predict --model_name_or_path bert-tiny --device cpu --dummy-size 4 --dummy-min-len 8 --dummy-max-len 16 "
                               "--output " + tmp_.file("predictions.jsonl"));
  EXPECT_EQ(predict.exit_code, 0) << predict.output;
  EXPECT_EQ(first_line(predict.output).rfind("Model: bert-tiny (a preset: random initialisation", 0), 0u)
      << predict.output;
  const auto forward = anatomy("forward --model_name_or_path " + dir + " --inputs " + data_ + " --output " +
                               tmp_.file("forward.safetensors") + " --device cpu");
  EXPECT_EQ(forward.exit_code, 0) << forward.output;
  // Given twice, under both names: CLI11 refuses it as any repeated option.
  const auto both = train("--model bert-tiny --model_name_or_path bert-tiny", tmp_.file("both"));
  EXPECT_NE(both.exit_code, 0);
}

TEST_F(ModelResolution, ADirectoryOfTensorFlowWeightsNamesWhatIsThereAndWhatIsMissing) {
  const std::string dir = tmp_.file("tf-only");
  fs::create_directories(dir);
  fs::copy_file(test::fixture("bert-tiny-cls/config.json"), dir + "/config.json");
  test::write_all_bytes(dir + "/tf_model.h5", "HDF");
  test::write_all_bytes(dir + "/flax_model.msgpack", "msgpack");
  const auto r = train("--model " + dir, tmp_.file("out"));
  EXPECT_TRUE(failed_cleanly(r, {dir, "tf_model.h5 (TensorFlow weights)", "flax_model.msgpack (Flax weights)",
                                 "model.safetensors", "pytorch_model.bin"}));
  EXPECT_TRUE(test::nothing_at(tmp_.file("out")));
  // The same from the cache, as a GGUF-only repository would be.
  cache_model("someone/gguf-only", {{"config.json", test::fixture("bert-tiny-cls/config.json")},
                                    {"model-q4_0.gguf", test::fixture("bert-tiny-cls/config.json")}});
  const auto g = train("--model someone/gguf-only", tmp_.file("out"));
  EXPECT_TRUE(failed_cleanly(g, {"models--someone--gguf-only", "model-q4_0.gguf (GGUF weights", "model.safetensors"}));
}

TEST_F(ModelResolution, AnIdThatIsNowhereSaysWhereItLooked) {
  const auto r = train("--model someorg/no-such-model", tmp_.file("out"));
  EXPECT_TRUE(failed_cleanly(r, {"someorg/no-such-model", cache_ + "/models--someorg--no-such-model",
                                 "not a preset", "bert-tiny"}));
  EXPECT_TRUE(test::nothing_at(tmp_.file("out")));
}

// A --revision that is no ref name (fuzz/fuzz_hf_cache: one with a newline) is named on one line.
TEST_F(ModelResolution, ARevisionThatIsNoRefIsNamedOnOneLine) {
  cache_model("org/name", {{"config.json", test::fixture("bert-tiny-cls/config.json")}});
  ScopedEnv env("HF_HUB_CACHE", cache_.c_str());
  try {
    io::find_cached_model("org/name", "main\nx");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "revision \"main\\nx\": not a branch, tag or commit name");
  }
}

TEST_F(ModelResolution, ABrokenCacheEntryIsNamed) {
  cache_model("org/no-ref", {{"config.json", test::fixture("bert-tiny-cls/config.json")}}, /*with_ref=*/false);
  const auto r = train("--model org/no-ref", tmp_.file("out"));
  EXPECT_TRUE(failed_cleanly(r, {"models--org--no-ref", "refs/main", kCommit}));
  cache_model("org/no-config", {{"model.safetensors", test::fixture("bert-tiny-cls/model.safetensors")}});
  const auto c = train("--model org/no-config", tmp_.file("out"));
  EXPECT_TRUE(failed_cleanly(c, {"models--org--no-config", "no config.json"}));
}

}  // namespace
}  // namespace anatomy
