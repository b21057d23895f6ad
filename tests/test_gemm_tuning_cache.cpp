// test_gemm_tuning_cache.cpp: the cuBLASLt tuning cache without a GPU: the
// file's format read back as written, damaged files refused (and, when
// loaded, ignored with one warning line, never an exception), a choice
// recorded once (a second process's choice for the same product does not
// replace the first, a stale one does), an unwritable cache and the path.
// (The switch is EngineOptions::gemm_tuning: test_engine_flags.cpp.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "anatomy/core/error.h"
#include "anatomy/kernels/gemm_tuning_cache.h"
#include "test_util.h"

namespace anatomy {
namespace {

using cuda::GemmChoices;

using test::ScopedEnv;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

const GemmChoices kChoices = {
    {"NVIDIA H100 80GB HBM3 (132 SMs) | cuBLASLt 120903 | TN m=1024 n=2048 k=1024 ld=1024,1024,1024 bf16->bf16", 3},
    {"NVIDIA H100 80GB HBM3 (132 SMs) | cuBLASLt 120903 | NT m=1024 n=4096 k=2048 \"quoted\" bf16->float32", 0},
    {"another GPU | cuBLASLt 1 | NN", 7},
};

TEST(GemmTuningCache, ReadsBackWhatItWrites) {
  const std::string text = cuda::serialise_gemm_choices(kChoices);
  std::string why;
  const auto parsed = cuda::parse_gemm_choices(text, &why);
  ASSERT_TRUE(parsed) << why;
  EXPECT_EQ(*parsed, kChoices);
  EXPECT_EQ(cuda::serialise_gemm_choices(*parsed), text) << "the same choices, the same file";
  const auto empty = cuda::parse_gemm_choices(cuda::serialise_gemm_choices({}));
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(GemmTuningCache, RefusesDamagedFilesWhole) {
  for (const std::string text : {
           "",
           "{ not json",
           "[1, 2]",
           R"({"choices": {"a": 1}})",                    // no format
           R"({"format": 2, "choices": {"a": 1}})",       // another format
           R"({"format": 1})",                            // no choices
           R"({"format": 1, "choices": [1]})",
           R"({"format": 1, "choices": {"a": 1, "b": -1}})",
           R"({"format": 1, "choices": {"a": "3"}})",
           R"({"format": 1, "choices": {"a": 2.5}})",
           R"({"format": 1, "choices": {"a": 99999999999}})",
       }) {
    std::string why;
    EXPECT_FALSE(cuda::parse_gemm_choices(text, &why)) << text;
    EXPECT_FALSE(why.empty()) << text;
  }
}

TEST(GemmTuningCache, LoadIgnoresAMissingOrDamagedFile) {
  test::TempDir dir;
  const std::string path = dir.file("gemm_algos.json");
  testing::internal::CaptureStderr();
  EXPECT_TRUE(cuda::load_gemm_choices(path, /*warn=*/true).empty());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "a missing cache is not worth a warning";

  write_text(path, cuda::serialise_gemm_choices(kChoices));
  EXPECT_EQ(cuda::load_gemm_choices(path, true), kChoices);

  write_text(path, "{\"format\": 1, \"choices\": {\"a\": ");  // cut short, as by a full disk
  testing::internal::CaptureStderr();
  EXPECT_TRUE(cuda::load_gemm_choices(path, true).empty());
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(warning.rfind("warning: " + path + ": ", 0), 0u) << warning;
  EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1) << "one line: " << warning;
  testing::internal::CaptureStderr();
  EXPECT_TRUE(cuda::load_gemm_choices(path, /*warn=*/false).empty());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");

  std::filesystem::remove(path);
  std::filesystem::create_directory(path);  // exists, cannot be read as a file
  testing::internal::CaptureStderr();
  EXPECT_TRUE(cuda::load_gemm_choices(path, true).empty());
  EXPECT_NE(testing::internal::GetCapturedStderr().find("warning: "), std::string::npos);
}

TEST(GemmTuningCache, RecordsAChoiceOnceAndKeepsTheFirst) {
  test::TempDir dir;
  const std::string path = dir.file("cache/anatomy/gemm_algos.json");  // directories made on the way
  bool stored = false;
  EXPECT_EQ(cuda::record_gemm_choice(path, "k1", 2, 8, &stored), 2);
  EXPECT_TRUE(stored);
  EXPECT_EQ(cuda::load_gemm_choices(path, true), (GemmChoices{{"k1", 2}}));
  // Another process timed k1 as well and found 5 fastest: it gets the
  // recorded 2, and the file does not change.
  const std::string before = read_text(path);
  EXPECT_EQ(cuda::record_gemm_choice(path, "k1", 5, 8, &stored), 2);
  EXPECT_TRUE(stored);
  EXPECT_EQ(read_text(path), before);
  // A new product is added beside it.
  EXPECT_EQ(cuda::record_gemm_choice(path, "k2", 0, 8, &stored), 0);
  EXPECT_EQ(cuda::load_gemm_choices(path, true), (GemmChoices{{"k1", 2}, {"k2", 0}}));
  // An index beyond the caller's candidates is stale (another cuBLASLt list): replaced.
  EXPECT_EQ(cuda::record_gemm_choice(path, "k1", 1, 2, &stored), 1);
  EXPECT_EQ(cuda::load_gemm_choices(path, true), (GemmChoices{{"k1", 1}, {"k2", 0}}));
  // No temp file is left behind: the cache and its lock only.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "gemm_algos.json" || name == "gemm_algos.json.lock") << name;
    ++files;
  }
  EXPECT_EQ(files, 2);
}

TEST(GemmTuningCache, RewritesADamagedFile) {
  test::TempDir dir;
  const std::string path = dir.file("gemm_algos.json");
  write_text(path, "{ not json");
  bool stored = false;
  EXPECT_EQ(cuda::record_gemm_choice(path, "k", 4, 8, &stored), 4);
  EXPECT_TRUE(stored);
  EXPECT_EQ(cuda::load_gemm_choices(path, true), (GemmChoices{{"k", 4}}));
}

TEST(GemmTuningCache, AnUnwritableCacheIsNotAnError) {
  test::TempDir dir;
  write_text(dir.file("plain_file"), "x");
  const std::string path = dir.file("plain_file/anatomy/gemm_algos.json");  // under a file: no directory possible
  bool stored = true;
  EXPECT_NO_THROW(EXPECT_EQ(cuda::record_gemm_choice(path, "k", 3, 8, &stored), 3));
  EXPECT_FALSE(stored);
}

TEST(GemmTuningCache, LivesBesideTheCeilings) {
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/somewhere/cache");
    EXPECT_EQ(cuda::gemm_tuning_cache_path(), "/somewhere/cache/anatomy/gemm_algos.json");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", "/home/someone");
  EXPECT_EQ(cuda::gemm_tuning_cache_path(), "/home/someone/.cache/anatomy/gemm_algos.json");
}

}  // namespace
}  // namespace anatomy
