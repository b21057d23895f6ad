// test_cuda_gemm_tuning.cpp: timing cuBLASLt's candidate algorithms (the
// first call of each product plan) must not change what the product computes.
// - With an empty cache, bf16 linear forward (bias epilogue, β = 0) and
//   backward (input gradient accumulated in bf16 and weight gradient in
//   float32, both β = 1, onto preset values) match the CPU backend within the
//   tolerances of test_cuda_fused.cpp's cuBLASLt test: the candidates' runs
//   (13 each) added onto C would be far outside them had C not been restored.
// - A second backend reads the choices the first cached: the same bits, and
//   nothing timed again; the cache file is unchanged.
// - ANATOMY_GEMM_TUNING=0 times nothing and writes no cache; any value but 0
//   and 1 is one error line naming the variable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <tuple>

#include "anatomy/core/dtype.h"
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "../test_util.h"
#include "backend_test_util.h"

namespace anatomy {
namespace {

using test::download;
using test::expect_near;
using test::max_abs;
using test::random_vector;
using test::ScopedEnv;
using test::upload;

// bf16 values, exactly representable, so both backends multiply the same numbers.
std::vector<float> rounded_bf16(std::vector<float> v) { return test::rounded(DType::BF16, std::move(v)); }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The products of one linear layer, forward and backward, of M rows of K
// inputs and N outputs, in bf16 on the GPU (float32 on the CPU), from fixed
// random inputs: y, dx, dw, db.
struct Products {
  std::vector<float> out[4];
};

struct Inputs {
  int64_t M, K, N;
  std::vector<float> x, w, bias, dy, dx0, dw0, db0;
  Inputs(int64_t m, int64_t k, int64_t n) : M(m), K(k), N(n) {
    x = rounded_bf16(random_vector(M * K, 1));
    w = rounded_bf16(random_vector(N * K, 2, 0.05f));
    bias = rounded_bf16(random_vector(N, 3));
    dy = rounded_bf16(random_vector(M * N, 4));
    dx0 = rounded_bf16(random_vector(M * K, 5));
    dw0 = random_vector(N * K, 6);  // float32 gradients already accumulated
    db0 = random_vector(N, 7);
  }
};

Products run_linear(Backend& b, const Inputs& in) {
  const bool cpu = b.device().is_cpu();
  const DType t = cpu ? DType::F32 : DType::BF16;
  const int64_t M = in.M, K = in.K, N = in.N;
  Tensor tx = upload(b, {M, K}, in.x, t, "x"), tw = upload(b, {N, K}, in.w, t, "w");
  Tensor tb = upload(b, {N}, in.bias, t, "b"), ty = upload(b, {M, N}, std::vector<float>(M * N), t, "y");
  Tensor tdy = upload(b, {M, N}, in.dy, t, "dy"), tdx = upload(b, {M, K}, in.dx0, t, "dx");
  Tensor tdw = upload(b, {N, K}, in.dw0, DType::F32, "dw"), tdb = upload(b, {N}, in.db0, DType::F32, "db");
  b.linear_forward(tx, tw, &tb, ty);
  b.linear_backward(tdy, tx, tw, &tdx, tdw, &tdb, /*accumulate_dx=*/true);
  return {{download(b, ty), download(b, tdx), download(b, tdw), download(b, tdb)}};
}

// Shapes with several candidates on an H100: an odd one and bert-large's
// feed-forward up-projection at 2048 tokens.
const std::tuple<int64_t, int64_t, int64_t> kShapes[] = {{513, 1024, 1000}, {2048, 1024, 4096}};

TEST(CudaGemmTuning, TimingLeavesAccumulatedGradientsAsTheCpuComputesThem) {
  SKIP_WITHOUT_GPU();
  test::TempDir cache;
  ScopedEnv xdg("XDG_CACHE_HOME", cache.path().c_str());
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(1);
  for (auto [M, K, N] : kShapes) {
    const Inputs in(M, K, N);
    const Products g = run_linear(*gpu, in), c = run_linear(*cpu, in);
    // test_cuda_fused.cpp's CudaBackendLt tolerances: float32 accumulation in
    // another order (√K·2^-24 of the largest term), one rounding to bf16 (u).
    const double u = 1.0 / 256.0;
    const double acc = 2e-6 * std::sqrt(static_cast<double>(std::max({K, M, N})));
    const std::string what = "bf16 " + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N);
    expect_near(g.out[0], c.out[0], u, acc, what + " y");
    // dx = dx0 + dy·w, rounded once: u of |dx0| + |dy·w| (which may cancel).
    {
      const double floor = acc * std::max(1e-30, max_abs(c.out[1]));
      int bad = 0;
      for (size_t j = 0; j < c.out[1].size(); ++j) {
        const double product = static_cast<double>(c.out[1][j]) - in.dx0[j];
        const double bound = u * (std::abs(in.dx0[j]) + std::abs(product) + std::abs(c.out[1][j])) + floor;
        if (std::abs(static_cast<double>(g.out[1][j]) - c.out[1][j]) > bound && bad++ < 5)
          ADD_FAILURE() << what << " dx[" << j << "]: gpu " << g.out[1][j] << " ref " << c.out[1][j];
      }
      EXPECT_EQ(bad, 0) << what << " dx: " << bad << " elements out of tolerance";
    }
    expect_near(g.out[2], c.out[2], 0.0, acc, what + " dw");
    expect_near(g.out[3], c.out[3], 0.0, 1e-5, what + " db");
  }
  // The test means something only if an accumulating product (β = 1, whose C
  // the timing must save and restore) was timed: a cached choice exists only
  // for a timed plan. On an H100 with CUDA 13.0's cuBLASLt the accumulated
  // input gradients (NN) have several candidates; the float32 weight
  // gradients of these shapes had only one, so they are not required here.
  EXPECT_GT(cuda::gemm_plans_tuned(*gpu), 0);
  const std::string text = read_text(cache.file("anatomy/gemm_algos.json"));
  EXPECT_NE(text.find("beta=1"), std::string::npos) << "no accumulating product timed:\n" << text;
}

TEST(CudaGemmTuning, ASecondBackendReadsTheChoicesAndRepeatsTheBits) {
  SKIP_WITHOUT_GPU();
  test::TempDir cache;
  ScopedEnv xdg("XDG_CACHE_HOME", cache.path().c_str());
  const std::string path = cache.file("anatomy/gemm_algos.json");
  std::vector<Products> first;
  {
    auto gpu = cuda::make_cuda_backend(0);
    for (auto [M, K, N] : kShapes) first.push_back(run_linear(*gpu, Inputs(M, K, N)));
    EXPECT_GT(cuda::gemm_plans_tuned(*gpu), 0);
  }
  const std::string written = read_text(path);
  ASSERT_FALSE(written.empty());
  auto again = cuda::make_cuda_backend(0);
  for (size_t s = 0; s < std::size(kShapes); ++s) {
    const auto [M, K, N] = kShapes[s];
    const Products p = run_linear(*again, Inputs(M, K, N));
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ(p.out[k].size(), first[s].out[k].size());
      EXPECT_EQ(std::memcmp(p.out[k].data(), first[s].out[k].data(), p.out[k].size() * sizeof(float)), 0)
          << "shape " << s << " output " << k << " differs from the first backend's";
    }
  }
  EXPECT_EQ(cuda::gemm_plans_tuned(*again), 0) << "the cached choices were timed again";
  EXPECT_EQ(read_text(path), written);
}

TEST(CudaGemmTuning, OffTimesNothingAndWritesNoCache) {
  SKIP_WITHOUT_GPU();
  test::TempDir cache;
  ScopedEnv xdg("XDG_CACHE_HOME", cache.path().c_str());
  EngineOptions off;
  off.gemm_tuning = false;
  auto gpu = cuda::make_cuda_backend(0, Fp32Products::Float32, off);
  for (auto [M, K, N] : kShapes) run_linear(*gpu, Inputs(M, K, N));
  EXPECT_EQ(cuda::gemm_plans_tuned(*gpu), 0);
  EXPECT_FALSE(std::filesystem::exists(cache.file("anatomy/gemm_algos.json")));
}

// A measurement, not a test (run with --gtest_also_run_disabled_tests): the
// query/key/value products at bert-large's shape (batch 32 x 512 tokens,
// hidden 1024, bf16) as the model runs them: the strided-batched forward with
// its bias, the strided-batched weight gradients with their three bias sums,
// the bias sums alone, and the input gradient as three products adding into
// one. bench/torch_kernels.py times PyTorch's products at the same shapes.
TEST(QkvProductsTiming, DISABLED_AtBertLargeShape) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  const int64_t T = 32 * 512, H = 1024;
  const DType t = DType::BF16;
  Tensor x = upload(*gpu, {T, H}, random_vector(T * H, 1), t, "x");
  Tensor w = upload(*gpu, {3 * H, H}, random_vector(3 * H * H, 2, 0.02f), t, "w");
  Tensor b = upload(*gpu, {3 * H}, random_vector(3 * H, 3), t, "b");
  Tensor dy = upload(*gpu, {3 * T, H}, random_vector(3 * T * H, 4), t, "dy");
  Tensor y = Tensor::empty(gpu->ledger(), {3 * T, H}, t, Category::Temporary, "y");
  Tensor dx = Tensor::empty(gpu->ledger(), {T, H}, t, Category::Temporary, "dx");
  Tensor dw = upload(*gpu, {3 * H, H}, std::vector<float>(3 * H * H), DType::F32, "dw");
  Tensor db = upload(*gpu, {3 * H}, std::vector<float>(3 * H), DType::F32, "db");
  std::vector<Tensor> ws, bs, ys, dys, dws, dbs;
  for (int64_t i = 0; i < 3; ++i) {
    ws.push_back(w.slice(i * H * H, {H, H}));
    bs.push_back(b.slice(i * H, {H}));
    ys.push_back(y.slice(i * T * H, {T, H}));
    dys.push_back(dy.slice(i * T * H, {T, H}));
    dws.push_back(dw.slice(i * H * H, {H, H}));
    dbs.push_back(db.slice(i * H, {H}));
  }
  const double flops = 3.0 * 2 * T * H * H;
  auto time = [&](const char* what, auto&& f) {
    const double ms = test::mean_ms(*gpu, 50, f);
    std::printf("%s: %.4f ms (%.0f TFLOP/s of the three products)\n", what, ms, flops / (ms * 1e9));
  };
  time("forward, strided-batched, bias epilogue", [&] { gpu->linear_forward_n(x, ws, bs, ys); });
  time("weight gradients, strided-batched, with the three bias sums",
       [&] { gpu->linear_backward_weights_n(dys, x, ws, dws, dbs); });
  time("the three bias sums alone", [&] {
    for (int i = 0; i < 3; ++i) gpu->linear_backward(dys[i], x, ws[i], nullptr, Tensor(), &dbs[i], false);
  });
  time("input gradient, three products adding into one", [&] {
    for (int i = 0; i < 3; ++i) gpu->linear_backward(dys[i], x, ws[i], &dx, Tensor(), nullptr, i > 0);
  });
}

}  // namespace
}  // namespace anatomy
