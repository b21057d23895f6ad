// cache_environment.cpp: the GPU tests' own cache directory. The CUDA backend
// keeps files under $XDG_CACHE_HOME/anatomy/ (the GEMM tuning choices, the
// profiler's ceilings, cuDNN's attention plans: one file per graph, and the
// suite builds a few hundred). So that a run of the suite neither fills the
// user's cache nor depends on what is in it, the whole run (and every
// `anatomy` it starts) gets a fresh directory, removed at the end. Tests that
// need their own set XDG_CACHE_HOME themselves (test::ScopedEnv).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "../test_util.h"

namespace {

class CacheEnvironment final : public ::testing::Environment {
 public:
  void SetUp() override {
    dir_ = std::make_unique<anatomy::test::TempDir>();
    setenv("XDG_CACHE_HOME", dir_->path().c_str(), 1);
  }
  void TearDown() override { dir_.reset(); }

 private:
  std::unique_ptr<anatomy::test::TempDir> dir_;
};

[[maybe_unused]] ::testing::Environment* const kRegistered =
    ::testing::AddGlobalTestEnvironment(new CacheEnvironment);

}  // namespace
