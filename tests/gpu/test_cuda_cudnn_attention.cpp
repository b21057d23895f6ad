// test_cuda_cudnn_attention.cpp: cuDNN's fused attention (kernels/cuda/
// cudnn_attention.cpp) against a float64 reference computed here from the same
// 16-bit-rounded inputs. Its dropout mask is cuDNN's own Philox draw, not the
// CPU backend's, so the reference takes the keep mask cuDNN reports for the
// same seed (the forward graph with a mask output): the test checks that the
// ordinary forward uses exactly that mask (same bits with and without the
// report), that backward replays it (gradients against the reference built on
// it), that about 1 - p of the probabilities are kept, and that two runs give
// the same bits. Cases: no mask, right padding of different lengths, dropout
// on and off, odd L, D of 32, 64 and 128, bf16 and fp16. Skips without a GPU
// or without cuDNN in the build.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "../test_util.h"
#include "attention_reference.h"
#include "device_buffer.h"
#include "anatomy/kernels/cuda_memory.h"
#include "anatomy/kernels/cuda/flash_attention.cuh"
#ifdef ANATOMY_HAVE_CUDNN
#include "anatomy/kernels/cuda/cudnn_attention.h"
#endif

namespace {

#ifdef ANATOMY_HAVE_CUDNN

using anatomy::DropoutSpec;
using anatomy::EngineOptions;
using anatomy::cuda::CudnnAttention;
using anatomy::cuda::CudnnAttentionShape;

#define SKIP_WITHOUT_GPU() \
  if (anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

using anatomy::test::DeviceBuffer;

struct Case {
  int64_t B, L, heads, D;
  bool padded;
  float p;
  bool bf16;
};

std::string case_name(const Case& c) {
  return std::string(c.bf16 ? "BF16" : "F16") + "_B" + std::to_string(c.B) + "_L" + std::to_string(c.L) + "_H" +
         std::to_string(c.heads) + "_D" + std::to_string(c.D) + (c.padded ? "_Padding" : "_NoMask") +
         (c.p > 0.0f ? "_Dropout" : "_NoDropout");
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

uint16_t to_16(bool bf16, float x) { return bf16 ? anatomy::float_to_bf16(x) : anatomy::float_to_f16(x); }
float from_16(bool bf16, uint16_t x) { return bf16 ? anatomy::bf16_to_float(x) : anatomy::f16_to_float(x); }

struct Rounded {
  std::vector<uint16_t> bits;
  std::vector<double> values;
};
Rounded random_rounded(bool bf16, size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Rounded r{std::vector<uint16_t>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    r.bits[i] = to_16(bf16, dist(rng));
    r.values[i] = from_16(bf16, r.bits[i]);
  }
  return r;
}

// Right padding: entry b keeps its first max(1, L - (b+1)·L/(2B)) keys.
std::vector<int64_t> lengths_of(const Case& c) {
  std::vector<int64_t> len(static_cast<size_t>(c.B), c.L);
  if (c.padded)
    for (int64_t b = 0; b < c.B; ++b) len[static_cast<size_t>(b)] = std::max<int64_t>(1, c.L - (b + 1) * c.L / (2 * c.B));
  return len;
}

using Reference = anatomy::test::AttentionReference;

Reference reference(const Case& c, const Rounded& q, const Rounded& k, const Rounded& v, const Rounded& dout,
                    const std::vector<int64_t>& len, const std::vector<float>& keep, double scale) {
  return anatomy::test::attention_reference(c.B, c.L, c.heads, c.D, c.p, q.values, k.values, v.values, dout.values,
                                            len, keep, scale);
}

struct Errors {
  double rel_norm, rel_max;
};
template <typename G>
Errors errors(const G& gpu, const std::vector<double>& ref) {
  double diff2 = 0.0, ref2 = 0.0, worst = 0.0, ref_max = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(gpu[i]) - ref[i]);
    if (std::isnan(d)) return Errors{INFINITY, INFINITY};
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    worst = std::max(worst, d);
    ref_max = std::max(ref_max, std::fabs(ref[i]));
  }
  return Errors{std::sqrt(diff2 / std::max(ref2, 1e-30)), worst / std::max(ref_max, 1e-30)};
}

// `plan_cache`: EngineOptions::cudnn_plan_cache (plans are never timed here).
std::unique_ptr<CudnnAttention> make_cudnn(cudaStream_t stream, bool plan_cache = true) {
  std::string why;
  EngineOptions options;
  options.cudnn_plan_cache = plan_cache;
  auto c = CudnnAttention::create(stream, options, &why);
  if (!c) ADD_FAILURE() << "cuDNN could not be used: " << why;
  return c;
}

// A bf16 training shape.
CudnnAttentionShape training_shape(int64_t B, int64_t L, int64_t heads, int64_t D, bool masked, float dropout,
                                   float scale) {
  CudnnAttentionShape s;
  s.B = B;
  s.L = L;
  s.heads = heads;
  s.D = D;
  s.masked = masked;
  s.dropout = dropout;
  s.scale = scale;
  return s;
}

class CudaCudnnAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CudaCudnnAttention, MatchesFloat64ReferenceOnItsOwnDropoutMask) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  cudaStream_t stream;
  ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream));
  auto cudnn = make_cudnn(stream);
  ASSERT_TRUE(cudnn);
  const size_t n = static_cast<size_t>(c.B * c.L * c.heads * c.D);
  const Rounded q = random_rounded(c.bf16, n, 1.5f, 31), k = random_rounded(c.bf16, n, 1.5f, 32);
  const Rounded v = random_rounded(c.bf16, n, 1.0f, 33), dout = random_rounded(c.bf16, n, 1.0f, 34);
  const std::vector<int64_t> len = lengths_of(c);
  std::vector<int64_t> mask(static_cast<size_t>(c.B * c.L), 1);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t j = len[static_cast<size_t>(b)]; j < c.L; ++j) mask[static_cast<size_t>(b * c.L + j)] = 0;
  CudnnAttentionShape s;
  s.B = c.B;
  s.L = c.L;
  s.heads = c.heads;
  s.D = c.D;
  s.bf16 = c.bf16;
  s.masked = c.padded;
  s.dropout = c.p;
  s.training = true;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D)));
  ASSERT_TRUE(cudnn->supports(s)) << case_name(c);
  const DropoutSpec dropout{c.p, 0x5eedULL, 7};

  const size_t bytes = n * 2;
  DeviceBuffer dq_(bytes), dk_(bytes), dv_(bytes), q_(bytes), k_(bytes), v_(bytes), o_(bytes), do_(bytes);
  DeviceBuffer lse_(static_cast<size_t>(c.B * c.heads * c.L) * 4), mask_(mask.size() * 8);
  DeviceBuffer scratch_(std::max(cudnn->forward_scratch_bytes(s), cudnn->backward_scratch_bytes(s)));
  DeviceBuffer keep_(c.p > 0.0f ? static_cast<size_t>(c.B * c.heads * c.L * c.L) * 4 : 0);
  q_.upload(q.bits);
  k_.upload(k.bits);
  v_.upload(v.bits);
  do_.upload(dout.bits);
  mask_.upload(mask);
  const int64_t* mask_ptr = c.padded ? mask_.as<int64_t>() : nullptr;

  struct Raw {
    std::vector<uint16_t> ctx, dq, dk, dv;
    std::vector<float> lse;
  };
  auto run = [&](bool dump) {
    for (DeviceBuffer* b : {&o_, &dq_, &dk_, &dv_, &lse_, &scratch_}) b->poison();
    cudnn->forward(s, q_.as<void>(), k_.as<void>(), v_.as<void>(), mask_ptr, dropout, o_.as<void>(), lse_.as<float>(),
                   scratch_.as<void>(), dump ? keep_.as<float>() : nullptr);
    cudnn->backward(s, do_.as<void>(), q_.as<void>(), k_.as<void>(), v_.as<void>(), o_.as<void>(), lse_.as<float>(),
                    mask_ptr, dropout, dq_.as<void>(), dk_.as<void>(), dv_.as<void>(), scratch_.as<void>());
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream));
    return Raw{o_.download<uint16_t>(), dq_.download<uint16_t>(), dk_.download<uint16_t>(), dv_.download<uint16_t>(),
               lse_.download<float>()};
  };
  const Raw first = run(false);
  std::vector<float> keep;
  if (c.p > 0.0f) {
    const Raw dumped = run(true);
    // The forward that reports its mask computes the same bits as the ordinary one: the reported mask is the one used.
    EXPECT_EQ(dumped.ctx, first.ctx) << "ctx with and without the mask report";
    keep = keep_.download<float>();
    int64_t kept = 0, total = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t i = 0; i < c.L; ++i)
          for (int64_t j = 0; j < len[static_cast<size_t>(b)]; ++j) {
            const float x = keep[static_cast<size_t>(((b * c.heads + h) * c.L + i) * c.L + j)];
            ASSERT_TRUE(x == 0.0f || x == 1.0f) << "keep mask value " << x;
            kept += x == 1.0f;
            ++total;
          }
    // Binomial(total, 1 - p): within 6 standard deviations.
    const double expect = (1.0 - c.p) * static_cast<double>(total);
    EXPECT_NEAR(static_cast<double>(kept), expect, 6.0 * std::sqrt(expect * c.p) + 1.0) << "kept of " << total;
  }
  const Reference ref = reference(c, q, k, v, dout, len, keep, s.scale);
  auto widen = [&](const std::vector<uint16_t>& x) {
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = from_16(c.bf16, x[i]);
    return out;
  };
  // The same tolerances, for the same reasons, as our flash kernels' test
  // (test_cuda_flash_attention.cu): 16-bit outputs (2^-9 / 2^-12 relative),
  // the probabilities rounded to 16 bits before the products with v and dO.
  const double tol_norm = c.bf16 ? 1e-2 : 2e-3, tol_max = c.bf16 ? 2.5e-2 : 3e-3;
  struct Named {
    const char* name;
    std::vector<double> gpu;
    const std::vector<double>& ref;
  };
  std::vector<double> lse(first.lse.begin(), first.lse.end());
  std::string margins;
  for (const Named& t : {Named{"ctx", widen(first.ctx), ref.ctx}, Named{"dq", widen(first.dq), ref.dq},
                         Named{"dk", widen(first.dk), ref.dk}, Named{"dv", widen(first.dv), ref.dv}}) {
    const Errors e = errors(t.gpu, t.ref);
    EXPECT_LE(e.rel_norm, tol_norm) << t.name;
    EXPECT_LE(e.rel_max, tol_max) << t.name;
    char text[96];
    std::snprintf(text, sizeof text, " %s %.2e/%.2e", t.name, e.rel_norm, e.rel_max);
    margins += text;
  }
  // The log-sum-exp is float32 from float32 scores of 16-bit inputs.
  const Errors e_lse = errors(lse, ref.lse);
  EXPECT_LE(e_lse.rel_max, 1e-4) << "lse";
  std::printf("relative error (norm/max)%s lse %.2e\n", margins.c_str(), e_lse.rel_max);

  const Raw second = run(false);
  EXPECT_EQ(second.ctx, first.ctx) << "ctx bits";
  EXPECT_EQ(second.dq, first.dq) << "dq bits";
  EXPECT_EQ(second.dk, first.dk) << "dk bits";
  EXPECT_EQ(second.dv, first.dv) << "dv bits";
  EXPECT_EQ(0, std::memcmp(second.lse.data(), first.lse.data(), first.lse.size() * 4)) << "lse bits";
  (void)cudaStreamDestroy(stream);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (bool bf16 : {true, false}) {
    cases.push_back({2, 128, 4, 64, false, 0.0f, bf16});
    cases.push_back({2, 128, 4, 64, true, 0.0f, bf16});
    cases.push_back({2, 128, 4, 64, true, 0.1f, bf16});
    cases.push_back({3, 77, 2, 32, true, 0.1f, bf16});
    cases.push_back({2, 64, 2, 128, false, 0.1f, bf16});
    cases.push_back({1, 512, 16, 64, true, 0.1f, bf16});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaCudnnAttention, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Timing only (--gtest_also_run_disabled_tests): cuDNN against our flash
// kernels, forward + backward at bert-large's attention, batch 32, dropout 0.1.
// The plan files (cudnn_attention.cpp): a new instance loads the plans the
// first one built and wrote, and computes the same bits with them; a damaged
// file, or one whose first line is another key, is ignored and rewritten.
TEST(CudaCudnnAttentionPlanCache, ALoadedPlanGivesTheBuiltPlansBits) {
  SKIP_WITHOUT_GPU();
  namespace fs = std::filesystem;
  anatomy::test::TempDir cache;
  anatomy::test::ScopedEnv xdg("XDG_CACHE_HOME", cache.path().c_str());
  cudaStream_t stream;
  ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream));
  const CudnnAttentionShape s = training_shape(2, 128, 4, 64, /*masked=*/true, 0.1f, 0.125f);
  const size_t n = static_cast<size_t>(s.B * s.L * s.heads * s.D), bytes = n * 2;
  DeviceBuffer q(bytes), k(bytes), v(bytes), o(bytes), dout(bytes), dq(bytes), dk(bytes), dv(bytes);
  DeviceBuffer lse(static_cast<size_t>(s.B * s.heads * s.L) * 4), mask(static_cast<size_t>(s.B * s.L) * 8);
  q.upload(random_rounded(true, n, 1.5f, 41).bits);
  k.upload(random_rounded(true, n, 1.5f, 42).bits);
  v.upload(random_rounded(true, n, 1.0f, 43).bits);
  dout.upload(random_rounded(true, n, 1.0f, 44).bits);
  std::vector<int64_t> m(static_cast<size_t>(s.B * s.L), 1);
  for (int64_t j = 100; j < s.L; ++j) m[static_cast<size_t>(s.L + j)] = 0;  // entry 1: 100 keys
  mask.upload(m);
  const DropoutSpec dropout{s.dropout, 0x5eedULL, 9};
  // Forward and backward with a new instance; every output, as bytes.
  bool plan_cache = true;
  auto run = [&] {
    auto cudnn = make_cudnn(stream, plan_cache);
    EXPECT_TRUE(cudnn && cudnn->supports(s));
    if (!cudnn) return std::vector<uint16_t>();
    DeviceBuffer scratch(std::max(cudnn->forward_scratch_bytes(s), cudnn->backward_scratch_bytes(s)));
    for (DeviceBuffer* b : {&o, &dq, &dk, &dv, &lse}) b->poison();
    cudnn->forward(s, q.as<void>(), k.as<void>(), v.as<void>(), mask.as<int64_t>(), dropout, o.as<void>(),
                   lse.as<float>(), scratch.as<void>());
    cudnn->backward(s, dout.as<void>(), q.as<void>(), k.as<void>(), v.as<void>(), o.as<void>(), lse.as<float>(),
                    mask.as<int64_t>(), dropout, dq.as<void>(), dk.as<void>(), dv.as<void>(), scratch.as<void>());
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> all;
    for (DeviceBuffer* b : {&o, &dq, &dk, &dv}) {
      const auto part = b->download<uint16_t>();
      all.insert(all.end(), part.begin(), part.end());
    }
    const auto l = lse.download<uint16_t>();
    all.insert(all.end(), l.begin(), l.end());
    return all;
  };
  const fs::path dir = cache.path() / "anatomy" / "cudnn_plans";
  auto files = [&] {
    std::vector<fs::path> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) found.push_back(e.path());
    std::sort(found.begin(), found.end());
    return found;
  };
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto write = [](const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; };

  const std::vector<uint16_t> built = run();
  const auto plans = files();
  ASSERT_EQ(plans.size(), 2u) << "one plan file for the forward graph, one for the backward";
  std::vector<std::string> written;
  for (const auto& p : plans) {
    written.push_back(read(p));
    const std::string first_line = written.back().substr(0, written.back().find('\n'));
    EXPECT_EQ(first_line.rfind("cuDNN ", 0), 0u) << first_line;
    EXPECT_NE(first_line.find("B=2 L=128 heads=4 D=64 bf16 masked=1 training=1"), std::string::npos) << first_line;
  }
  const auto stamp = fs::last_write_time(plans[0]);

  // Loaded, not built again: the same bits, and the files are not rewritten.
  EXPECT_EQ(run(), built);
  EXPECT_EQ(fs::last_write_time(plans[0]), stamp);
  EXPECT_EQ(read(plans[0]), written[0]);

  // A damaged plan (its key, then garbage) and another key's plan: built again, same bits, rewritten.
  const std::string key0 = written[0].substr(0, written[0].find('\n') + 1);
  write(plans[0], key0 + "not a plan");
  write(plans[1], "another key\n" + written[1].substr(written[1].find('\n') + 1));
  EXPECT_EQ(run(), built);
  EXPECT_EQ(read(plans[0]).substr(0, key0.size()), key0);
  EXPECT_GT(read(plans[0]).size(), key0.size() + 10);
  EXPECT_EQ(read(plans[1]).substr(0, 6), "cuDNN ");
  EXPECT_EQ(files().size(), 2u);

  // The cache off (--cudnn-plan-cache false): neither read nor written.
  fs::remove_all(dir);
  plan_cache = false;
  EXPECT_EQ(run(), built);
  EXPECT_TRUE(files().empty());
  (void)cudaStreamDestroy(stream);
}

// What the plan files save at bert-large's batch-64 shape: the time to get
// both graphs (supports() builds or loads them) and the first forward and
// backward, built, loaded, and with the files off.
TEST(CudaCudnnAttentionPlanCacheTiming, DISABLED_BuildAgainstLoad) {
  SKIP_WITHOUT_GPU();
  anatomy::test::TempDir cache;
  anatomy::test::ScopedEnv xdg("XDG_CACHE_HOME", cache.path().c_str());
  cudaStream_t stream;
  ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream));
  const CudnnAttentionShape s = training_shape(64, 512, 16, 64, /*masked=*/false, 0.1f, 0.125f);
  const size_t bytes = static_cast<size_t>(s.B * s.L * s.heads * s.D) * 2;
  DeviceBuffer q(bytes), k(bytes), v(bytes), o(bytes), dout(bytes), dq(bytes), dk(bytes), dv(bytes);
  DeviceBuffer lse(static_cast<size_t>(s.B * s.heads * s.L) * 4);
  for (DeviceBuffer* b : {&q, &k, &v, &dout}) ANATOMY_CUDA_CHECK(cudaMemset(b->as<void>(), 0x3c, bytes));
  const DropoutSpec dropout{0.1f, 1, 2};
  auto once = [&](const char* what, const char* cache_switch) {
    ANATOMY_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    auto cudnn = make_cudnn(stream, cache_switch == nullptr || std::string(cache_switch) != "0");
    ASSERT_TRUE(cudnn && cudnn->supports(s));
    const auto t1 = std::chrono::steady_clock::now();
    DeviceBuffer scratch(std::max(cudnn->forward_scratch_bytes(s), cudnn->backward_scratch_bytes(s)));
    const auto t2 = std::chrono::steady_clock::now();
    cudnn->forward(s, q.as<void>(), k.as<void>(), v.as<void>(), nullptr, dropout, o.as<void>(), lse.as<float>(),
                   scratch.as<void>());
    cudnn->backward(s, dout.as<void>(), q.as<void>(), k.as<void>(), v.as<void>(), o.as<void>(), lse.as<float>(),
                    nullptr, dropout, dq.as<void>(), dk.as<void>(), dv.as<void>(), scratch.as<void>());
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto t3 = std::chrono::steady_clock::now();
    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::printf("%s: both graphs %.1f ms, first forward + backward %.1f ms\n", what, ms(t0, t1), ms(t2, t3));
  };
  for (int round = 0; round < 2; ++round) {
    std::filesystem::remove_all(cache.path() / "anatomy" / "cudnn_plans");
    once("built and written", nullptr);
    once("loaded", nullptr);
    once("files off", "0");
  }
  (void)cudaStreamDestroy(stream);
}

TEST(CudaCudnnAttentionTiming, DISABLED_AgainstFlashKernels) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 32, L = 512, heads = 16, D = 64;
  cudaStream_t stream;
  ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream));
  auto cudnn = make_cudnn(stream);
  ASSERT_TRUE(cudnn);
  const CudnnAttentionShape s = training_shape(B, L, heads, D, /*masked=*/false, 0.1f, 0.125f);
  ASSERT_TRUE(cudnn->supports(s));
  const DropoutSpec dropout{0.1f, 1, 2};
  const size_t bytes = static_cast<size_t>(B * L * heads * D) * 2;
  DeviceBuffer q(bytes), k(bytes), v(bytes), o(bytes), dout(bytes), dq(bytes), dk(bytes), dv(bytes);
  DeviceBuffer lse(static_cast<size_t>(B * heads * L) * 4);
  for (DeviceBuffer* b : {&q, &k, &v, &dout}) ANATOMY_CUDA_CHECK(cudaMemset(b->as<void>(), 0x3c, bytes));
  DeviceBuffer scratch(std::max({cudnn->forward_scratch_bytes(s), cudnn->backward_scratch_bytes(s),
                                 anatomy::cuda::flash_attention_scratch_bytes(B, L, heads, D)}));
  std::printf("cuDNN scratch: forward %zu bytes, backward %zu bytes; flash backward scratch %zu bytes\n",
              cudnn->forward_scratch_bytes(s), cudnn->backward_scratch_bytes(s),
              anatomy::cuda::flash_attention_scratch_bytes(B, L, heads, D));
  auto time = [&](const char* what, auto&& fn) {
    fn();
    cudaEvent_t a, b;
    ANATOMY_CUDA_CHECK(cudaEventCreate(&a));
    ANATOMY_CUDA_CHECK(cudaEventCreate(&b));
    constexpr int kRuns = 20;
    ANATOMY_CUDA_CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < kRuns; ++i) fn();
    ANATOMY_CUDA_CHECK(cudaEventRecord(b, stream));
    ANATOMY_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    std::printf("%s: %.3f ms\n", what, ms / kRuns);
  };
  time("cuDNN forward", [&] {
    cudnn->forward(s, q.as<void>(), k.as<void>(), v.as<void>(), nullptr, dropout, o.as<void>(), lse.as<float>(),
                   scratch.as<void>());
  });
  time("cuDNN backward", [&] {
    cudnn->backward(s, dout.as<void>(), q.as<void>(), k.as<void>(), v.as<void>(), o.as<void>(), lse.as<float>(),
                    nullptr, dropout, dq.as<void>(), dk.as<void>(), dv.as<void>(), scratch.as<void>());
  });
  using anatomy::cuda::AttnType;
  time("flash forward", [&] {
    anatomy::cuda::flash_attention_forward(stream, AttnType::BF16, q.as<void>(), k.as<void>(), v.as<void>(), nullptr,
                                           B, L, heads, D, 0.125f, dropout, o.as<void>(), lse.as<float>());
  });
  time("flash backward", [&] {
    anatomy::cuda::flash_attention_backward(stream, AttnType::BF16, dout.as<void>(), q.as<void>(), k.as<void>(),
                                            v.as<void>(), o.as<void>(), lse.as<float>(), nullptr, B, L, heads, D,
                                            0.125f, dropout, dq.as<void>(), dk.as<void>(), dv.as<void>(),
                                            scratch.as<void>());
  });
  (void)cudaStreamDestroy(stream);
}

#endif  // ANATOMY_HAVE_CUDNN

}  // namespace

#ifdef ANATOMY_HAVE_CUDNN
namespace {
// The scratch the memory plan reserves for cuDNN (cuda_memory.h) holds what
// cuDNN asks for: exactly the forward's, and at least the backward's (exactly
// plus 4 KiB at L a multiple of 128), so that the backend allocates the
// planned size. Printed: how much of the reservation cuDNN uses.
TEST(CudaCudnnAttention, ScratchFitsThePlannedOne) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream));
  auto cudnn = make_cudnn(stream);
  ASSERT_TRUE(cudnn);
  const int64_t shapes[][4] = {{32, 512, 16, 64}, {64, 512, 16, 64}, {1, 512, 16, 64}, {4, 128, 12, 64},
                               {16, 256, 16, 64}, {2, 64, 2, 128},   {4, 1024, 16, 64}, {128, 128, 12, 64},
                               {3, 77, 2, 32},    {5, 300, 4, 64}};
  for (const auto& sh : shapes)
    for (bool bf16 : {true, false})
      for (bool masked : {false, true})
        for (float p : {0.0f, 0.1f}) {
          CudnnAttentionShape s;
          s.B = sh[0];
          s.L = sh[1];
          s.heads = sh[2];
          s.D = sh[3];
          s.bf16 = bf16;
          s.masked = masked;
          s.dropout = p;
          s.scale = 0.125f;
          ASSERT_TRUE(cudnn->supports(s));
          const size_t fwd = cudnn->forward_scratch_bytes(s), bwd = cudnn->backward_scratch_bytes(s);
          const size_t plan_fwd = anatomy::cuda::cudnn_attention_forward_scratch_bytes(s.B);
          const size_t plan_bwd = anatomy::cuda::cudnn_attention_backward_scratch_bytes(s.B, s.L, s.heads);
          const std::string name = case_name({s.B, s.L, s.heads, s.D, masked, p, bf16});
          EXPECT_EQ(fwd, plan_fwd) << name;
          EXPECT_LE(bwd, plan_bwd) << name;
          if (s.L % 128 == 0) EXPECT_EQ(bwd + 4096, plan_bwd) << name;
          std::printf("%s: backward %zu of the planned %zu\n", name.c_str(), bwd, plan_bwd);
        }
  (void)cudaStreamDestroy(stream);
}
}  // namespace
#endif
