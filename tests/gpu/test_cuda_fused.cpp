// test_cuda_fused.cpp: the CUDA backend's fused ops against the CPU backend:
// residual + dropout + LayerNorm (forward and backward) in bf16, fp16 and
// float32 (u = 2^-24: the same bounds, where the absolute terms dominate), and
// the cuBLASLt products (bias epilogue, accumulated input gradients).
//
// 16-bit inputs are rounded on the host and the same values go to both sides
// (as 16-bit bits to the GPU, widened to float to the CPU). Tolerances, with
// u the format's unit roundoff (bf16 2^-8, fp16 2^-11):
// - the rounded sum: the GPU adds in float and rounds once, the CPU adds in
//   float: |gpu − cpu| ≤ u·|cpu| (one rounding; 2u where the shape is not the
//   fused kernel's and dropout and add each round);
// - LayerNorm output: the reference is the CPU LayerNorm of the same rounded
//   sum (what the GPU normalises), so only float-vs-double statistics and the
//   final rounding differ: ≤ u·|ref| + 1e-5·max|ref|; mean and rstd to 1e-5;
// - backward: the GPU sums in float, the CPU in double, and the result
//   cancels (dyγ − mean − x̂·mean'), so besides the rounding (u) an absolute
//   1e-4·max|ref| is allowed; the dropped-out branch is the rounded gradient
//   scaled and rounded again (2u); dgamma and dbeta are float sums over rows
//   of 16-bit-exact products: 1e-5·max.
// A wrong dropout mask changes elements by whole values (x/(1−p) against 0),
// far outside every tolerance. Every op runs twice: same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda_memory.h"
#include "backend_test_util.h"

namespace anatomy {
namespace {

using test::download;
using test::expect_near;
using test::max_abs;
using test::narrow;
using test::random_vector;
using test::rounded;
using test::unit_roundoff;
using test::upload;
using test::widen;

struct LnCase {
  DType dtype;
  int64_t rows, H;
  float p;
};

class FusedLayerNorm : public ::testing::TestWithParam<LnCase> {};

TEST_P(FusedLayerNorm, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const auto [t, rows, H, p] = GetParam();
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(1);
  const double u = unit_roundoff(t);
  DropoutSpec drop{p, 1234, (7ull << 16) | 5};

  const auto x = rounded(t, random_vector(rows * H, 1)), res = rounded(t, random_vector(rows * H, 2, 3.0f));
  const auto dy = rounded(t, random_vector(rows * H, 3));
  const auto gamma = random_vector(H, 4), beta = random_vector(H, 5);
  const auto dgamma0 = random_vector(H, 6), dbeta0 = random_vector(H, 7), dbias0 = random_vector(H, 8);

  // CPU: the float sum, then the reference LayerNorm of the rounded sum.
  Tensor cx = upload(*cpu, {rows, H}, x, DType::F32, "x"), cres = upload(*cpu, {rows, H}, res, DType::F32, "res");
  Tensor cg = upload(*cpu, {H}, gamma, DType::F32, "g"), cb = upload(*cpu, {H}, beta, DType::F32, "b");
  Tensor csum = upload(*cpu, {rows, H}, std::vector<float>(rows * H), DType::F32, "sum");
  Tensor cy = upload(*cpu, {rows, H}, std::vector<float>(rows * H), DType::F32, "y");
  Tensor cm = upload(*cpu, {rows}, std::vector<float>(rows), DType::F32, "m");
  Tensor cr = upload(*cpu, {rows}, std::vector<float>(rows), DType::F32, "r");
  cpu->residual_layernorm_forward(cx, cres, drop, cg, cb, 1e-12, csum, cy, cm, cr);
  const auto sum_float = download(*cpu, csum);
  const auto sum_rounded = rounded(t, sum_float);
  Tensor csr = upload(*cpu, {rows, H}, sum_rounded, DType::F32, "sum_rounded");
  cpu->layernorm_forward(csr, cg, cb, 1e-12, cy, cm, cr);
  const auto mean_ref = download(*cpu, cm), rstd_ref = download(*cpu, cr);
  // Backward reference on the rounded sum with the reference statistics.
  Tensor cdy = upload(*cpu, {rows, H}, dy, DType::F32, "dy");
  Tensor cdres = upload(*cpu, {rows, H}, std::vector<float>(rows * H), DType::F32, "dres");
  Tensor cdx = upload(*cpu, {rows, H}, std::vector<float>(rows * H), DType::F32, "dx");
  Tensor cdg = upload(*cpu, {H}, dgamma0, DType::F32, "dg"), cdb = upload(*cpu, {H}, dbeta0, DType::F32, "db");
  cpu->residual_layernorm_backward(cdy, csr, cm, cr, cg, drop, cdres, cdx, cdg, cdb);
  const auto dres_ref = download(*cpu, cdres), dx_ref = download(*cpu, cdx);
  const auto dg_ref = download(*cpu, cdg), db_ref = download(*cpu, cdb);

  std::vector<float> first[8];
  for (int run = 0; run < 2; ++run) {
    Tensor gx = upload(*gpu, {rows, H}, x, t, "x"), gres = upload(*gpu, {rows, H}, res, t, "res");
    Tensor gg = upload(*gpu, {H}, gamma, DType::F32, "g"), gb = upload(*gpu, {H}, beta, DType::F32, "b");
    Tensor gsum = upload(*gpu, {rows, H}, std::vector<float>(rows * H), t, "sum");
    Tensor gy = upload(*gpu, {rows, H}, std::vector<float>(rows * H), t, "y");
    Tensor gm = upload(*gpu, {rows}, std::vector<float>(rows), DType::F32, "m");
    Tensor gr = upload(*gpu, {rows}, std::vector<float>(rows), DType::F32, "r");
    gpu->residual_layernorm_forward(gx, gres, drop, gg, gb, 1e-12, gsum, gy, gm, gr);
    const auto sum = download(*gpu, gsum), y = download(*gpu, gy), m = download(*gpu, gm), r = download(*gpu, gr);
    // Shapes the fused kernel does not take (H % 8 != 0) run as dropout, then
    // add, which rounds the dropped-out branch before the sum: one more
    // rounding, of |x|/(1−p) rather than of the sum.
    const bool fused = H % 8 == 0 && H <= 2048;
    {
      int bad = 0;
      for (int64_t i = 0; i < rows * H; ++i) {
        // float32: the CPU rounds x/(1−p) and then the sum, the GPU may fuse both into one rounding.
        const double bound = t == DType::F32 ? 2 * u * (std::abs(sum_float[i]) + std::abs(x[i]) / (1.0 - p))
                                             : u * std::abs(sum_float[i]) + (fused ? 0.0 : u * std::abs(x[i]) / (1.0 - p));
        if (std::abs(static_cast<double>(sum[i]) - sum_float[i]) > bound && bad++ < 5)
          ADD_FAILURE() << "sum[" << i << "]: gpu " << sum[i] << " ref " << sum_float[i];
      }
      EXPECT_EQ(bad, 0) << "sum: " << bad << " elements out of tolerance";
    }
    // The LayerNorm of the GPU's own rounded sum (within one rounding of the
    // reference's, checked above), normalised by the CPU.
    Tensor cgs = upload(*cpu, {rows, H}, sum, DType::F32, "gpu_sum");
    cpu->layernorm_forward(cgs, cg, cb, 1e-12, cy, cm, cr);
    expect_near(y, download(*cpu, cy), u, 1e-5, "y");
    expect_near(m, download(*cpu, cm), 0.0, 1e-5, "mean");
    expect_near(r, download(*cpu, cr), 1e-5, 0.0, "rstd");

    // Backward from the reference's rounded sum and statistics; d_residual written over dy (aliasing allowed).
    Tensor gsr = upload(*gpu, {rows, H}, sum_rounded, t, "sum_rounded");
    Tensor gm2 = upload(*gpu, {rows}, mean_ref, DType::F32, "m2"), gr2 = upload(*gpu, {rows}, rstd_ref, DType::F32, "r2");
    Tensor gdy = upload(*gpu, {rows, H}, dy, t, "dy");
    Tensor gdx = upload(*gpu, {rows, H}, std::vector<float>(rows * H), t, "dx");
    Tensor gdg = upload(*gpu, {H}, dgamma0, DType::F32, "dg"), gdb = upload(*gpu, {H}, dbeta0, DType::F32, "db");
    Tensor gbias = upload(*gpu, {H}, dbias0, DType::F32, "d_bias");
    gpu->residual_layernorm_backward(gdy, gsr, gm2, gr2, gg, drop, gdy, gdx, gdg, gdb, &gbias);
    const auto dres = download(*gpu, gdy), dx = download(*gpu, gdx), dg = download(*gpu, gdg),
               db = download(*gpu, gdb), dbias = download(*gpu, gbias);
    expect_near(dres, dres_ref, u, 1e-4, "d_residual");
    expect_near(dx, dx_ref, 2 * u, 1.2e-4, "d_x (dropout branch)");
    expect_near(dg, dg_ref, 0.0, 1e-5, "dgamma");
    expect_near(db, db_ref, 0.0, 1e-5, "dbeta");
    // The bias gradient is the column sums of d_x as the GPU stored it (float
    // partials: a float32 rounding per addition at most).
    {
      int bad = 0;
      for (int64_t h = 0; h < H; ++h) {
        double ref = dbias0[h], magnitude = std::abs(dbias0[h]);
        for (int64_t r2 = 0; r2 < rows; ++r2) {
          ref += dx[r2 * H + h];
          magnitude += std::abs(dx[r2 * H + h]);
        }
        const double bound = (rows + 2) * 0x1p-24 * magnitude;
        if (std::abs(dbias[h] - ref) > bound && bad++ < 5)
          ADD_FAILURE() << "d_bias[" << h << "]: gpu " << dbias[h] << " ref " << ref << " bound " << bound;
      }
      EXPECT_EQ(bad, 0) << "d_bias: " << bad << " columns out of tolerance";
    }
    const std::vector<float> now[8] = {sum, y, m, r, dres, dx, dg, dbias};
    for (int k = 0; k < 8; ++k) {
      if (run == 0) first[k] = now[k];
      else EXPECT_EQ(std::memcmp(first[k].data(), now[k].data(), now[k].size() * 4), 0) << "run-to-run output " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedLayerNorm,
    ::testing::Values(LnCase{DType::BF16, 37, 1024, 0.1f}, LnCase{DType::BF16, 1, 1024, 0.0f},
                      LnCase{DType::BF16, 300, 768, 0.1f}, LnCase{DType::F16, 37, 128, 0.1f},
                      LnCase{DType::F16, 1000, 2048, 0.5f}, LnCase{DType::BF16, 9, 100, 0.1f},  // H % 8 != 0: unfused
                      LnCase{DType::BF16, 2053, 1024, 0.1f}, LnCase{DType::F32, 37, 1024, 0.1f},
                      LnCase{DType::F32, 300, 128, 0.0f}),
    [](const ::testing::TestParamInfo<LnCase>& info) {
      const LnCase& c = info.param;
      return std::string(c.dtype == DType::BF16 ? "bf16" : c.dtype == DType::F16 ? "fp16" : "fp32") + "_rows" +
             std::to_string(c.rows) + "_H" +
             std::to_string(c.H) + "_p" + std::to_string(static_cast<int>(c.p * 100));
    });

// cuBLASLt products: the bias epilogue and accumulated input gradients, in
// float32 and in 16 bits, against the CPU on the same (rounded) values.
TEST(CudaBackendLt, LinearWithBiasAndAccumulatedDxMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(1);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{7, 13, 5}, {513, 1024, 1000}, {2048, 1024, 4096}}) {
      auto prep = [&](std::vector<float> v) { return t == DType::F32 ? v : rounded(t, std::move(v)); };
      const auto x = prep(random_vector(M * K, 1)), w = prep(random_vector(N * K, 2, 0.05f)),
                 bias = prep(random_vector(N, 3)), dy = prep(random_vector(M * N, 4)),
                 dx0 = prep(random_vector(M * K, 5)), dw0 = random_vector(N * K, 6), db0 = random_vector(N, 7);
      std::vector<float> out[2][4];
      int i = 0;
      for (Backend* b : {gpu.get(), cpu.get()}) {
        const DType bt = b == cpu.get() ? DType::F32 : t;
        Tensor tx = upload(*b, {M, K}, x, bt, "x"), tw = upload(*b, {N, K}, w, bt, "w");
        Tensor tb = upload(*b, {N}, bias, bt, "b"), ty = upload(*b, {M, N}, std::vector<float>(M * N), bt, "y");
        Tensor tdy = upload(*b, {M, N}, dy, bt, "dy"), tdx = upload(*b, {M, K}, dx0, bt, "dx");
        Tensor tdw = upload(*b, {N, K}, dw0, DType::F32, "dw"), tdb = upload(*b, {N}, db0, DType::F32, "db");
        b->linear_forward(tx, tw, &tb, ty);
        b->linear_backward(tdy, tx, tw, &tdx, tdw, &tdb, /*accumulate_dx=*/true);
        out[i][0] = download(*b, ty);
        out[i][1] = download(*b, tdx);
        out[i][2] = download(*b, tdw);
        out[i][3] = download(*b, tdb);
        ++i;
      }
      // Products of exactly representable values; the GPU accumulates in float32
      // in another order (√K·2^-24 of the largest term) and rounds the output
      // once (u); dx adds its old value before rounding.
      const double u = t == DType::F32 ? 0.0 : unit_roundoff(t);
      const double acc = 2e-6 * std::sqrt(static_cast<double>(std::max({K, M, N})));
      const std::string what = std::string(dtype_name(t)) + " " + std::to_string(M) + "x" + std::to_string(K) + "x" +
                               std::to_string(N);
      expect_near(out[0][0], out[1][0], u, acc, what + " y");
      // dx = dx0 + dy·w: the rounding may fall on the product before the old
      // value is added, so it is u of |dx0| + |dy·w| (which may cancel).
      {
        const double floor = acc * std::max(1e-30, max_abs(out[1][1]));
        int bad = 0;
        for (size_t j = 0; j < out[1][1].size(); ++j) {
          const double product = static_cast<double>(out[1][1][j]) - dx0[j];
          const double bound = u * (std::abs(dx0[j]) + std::abs(product) + std::abs(out[1][1][j])) + floor;
          if (std::abs(static_cast<double>(out[0][1][j]) - out[1][1][j]) > bound && bad++ < 5)
            ADD_FAILURE() << what << " dx[" << j << "]: gpu " << out[0][1][j] << " ref " << out[1][1][j];
        }
        EXPECT_EQ(bad, 0) << what << " dx: " << bad << " elements out of tolerance";
      }
      expect_near(out[0][2], out[1][2], 0.0, acc, what + " dw");
      // db: sums of M exactly representable values in float (chunks of <= 32
      // rows, then double): far inside 1e-5 of the largest.
      expect_near(out[0][3], out[1][3], 0.0, 1e-5, what + " db");
    }
  }
}

// The multi-tensor AdamW: segments of both parameter groups, odd sizes, gaps
// that must stay untouched, a 16-bit copy, a clipping coefficient folded into
// one step; the GPU's bits equal the CPU's.
TEST(CudaBackendAdamW, FlatStepEqualsTheCpuBitForBitAndLeavesGapsAlone) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(1);
  const int64_t n = 70000;
  const std::vector<ParamSegment> segments = {{0, 1, true}, {64, 8193, false}, {8320, 40000, true}, {48384, 21000, false}};
  const auto p0 = random_vector(n, 11), g = random_vector(n, 12, 0.1f), m0 = random_vector(n, 13, 0.01f);
  auto v0 = random_vector(n, 14, 0.01f);
  for (auto& x : v0) x = x * x;
  AdamWHyper hp;
  hp.lr = 1e-3;
  hp.weight_decay = 0.01;
  for (DType copy : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<float> out[2][4];
    int i = 0;
    for (Backend* b : {gpu.get(), cpu.get()}) {
      Tensor tp = upload(*b, {n}, p0, DType::F32, "p"), tg = upload(*b, {n}, g, DType::F32, "g");
      Tensor tm = upload(*b, {n}, m0, DType::F32, "m"), tv = upload(*b, {n}, v0, DType::F32, "v");
      Tensor th = copy == DType::F32 ? Tensor() : upload(*b, {n}, std::vector<float>(n), copy, "half");
      for (int64_t step = 1; step <= 3; ++step) {
        hp.step = step;
        hp.grad_scale = step == 2 ? 0.3731 : 1.0;  // a clipped step: the coefficient folded into the update
        b->adamw_step_flat(tp, tg, tm, tv, segments, hp, copy == DType::F32 ? nullptr : &th);
      }
      out[i][0] = download(*b, tp);
      out[i][1] = download(*b, tm);
      out[i][2] = download(*b, tv);
      if (copy != DType::F32) out[i][3] = download(*b, th);
      ++i;
    }
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(std::memcmp(out[0][k].data(), out[1][k].data(), out[0][k].size() * 4), 0) << "output " << k;
    // The gaps between segments keep their values; the copy is the rounded parameter.
    for (int64_t j = 1; j < 64; ++j) EXPECT_EQ(out[0][0][j], p0[j]);
    for (int64_t j = 8257; j < 8320; ++j) EXPECT_EQ(out[0][0][j], p0[j]);
    EXPECT_NE(out[0][0][0], p0[0]);
    if (copy != DType::F32)
      for (int64_t j = 64; j < 8257; ++j) ASSERT_EQ(out[0][3][j], widen(copy, narrow(copy, out[0][0][j])));
  }
}

// The recomputing activation backward gives the bits of activation_forward
// and activation_backward run separately (same element functions, one
// rounding each), with odd sizes (partial 8-element groups) and dx written over dy.
TEST(CudaBackendActivation, RecomputeEqualsForwardAndBackwardBitForBit) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  for (DType t : {DType::BF16, DType::F16}) {
    for (ActivationKind kind : {ActivationKind::GeluErf, ActivationKind::GeluTanh, ActivationKind::Relu}) {
      for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{4096 * 33 + 5}}) {
        const auto x = random_vector(n, 21, 4.0f), dy = random_vector(n, 22);
        Tensor tx = upload(*gpu, {n}, x, t, "x"), tdy = upload(*gpu, {n}, dy, t, "dy");
        Tensor y1 = upload(*gpu, {n}, std::vector<float>(n), t, "y1"), dx1 = upload(*gpu, {n}, std::vector<float>(n), t, "dx1");
        gpu->activation_forward(kind, tx, y1);
        gpu->activation_backward(kind, tx, tdy, dx1);
        Tensor y2 = upload(*gpu, {n}, std::vector<float>(n), t, "y2");
        gpu->activation_backward_recompute(kind, tx, tdy, tdy, y2);  // dx over dy
        const std::string what = std::string(dtype_name(t)) + " kind " + std::to_string(static_cast<int>(kind)) +
                                 " n " + std::to_string(n);
        EXPECT_EQ(download(*gpu, y1), download(*gpu, y2)) << what << " y";
        EXPECT_EQ(download(*gpu, dx1), download(*gpu, tdy)) << what << " dx";
      }
    }
  }
}

// Every 16-bit value through the GELU (erf) forward and backward: each result
// is the exact GELU (in double) rounded to the format, ties to even, except
// where the exact value lies so near the midpoint of two neighbours that the
// float evaluation may fall on either side: within 5e-5 of the terms' size
// (Φ(x)·|x| forward; |g|·(Φ(x) + |x|·φ(x)) backward). 5e-5 is the 16-bit erfc's
// largest relative error, 2.3e-5 (activation_math.cuh), with room for the float
// products. Such near-ties are counted and must stay rare.
namespace {
// The finite values of a 16-bit format, ascending, with their bits; rounds a
// double to the nearest, ties to the even bit pattern.
struct Format16 {
  std::vector<std::pair<double, uint16_t>> values;
  explicit Format16(DType t) {
    for (uint32_t b = 0; b < 65536; ++b) {
      const double v = widen(t, static_cast<uint16_t>(b));
      if (std::isfinite(v) && !(v == 0.0 && (b & 0x8000u))) values.push_back({v, static_cast<uint16_t>(b)});
    }
    std::sort(values.begin(), values.end());
  }
  // The neighbours below and above v (equal when v is a value).
  std::pair<size_t, size_t> around(double v) const {
    const auto it = std::lower_bound(values.begin(), values.end(), std::make_pair(v, uint16_t{0}),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t hi = static_cast<size_t>(it - values.begin());
    if (hi < values.size() && values[hi].first == v) return {hi, hi};
    return {hi == 0 ? 0 : hi - 1, std::min(hi, values.size() - 1)};
  }
  double round(double v) const {
    const auto [lo, hi] = around(v);
    const double a = values[lo].first, b = values[hi].first;
    if (v - a < b - v) return a;
    if (b - v < v - a) return b;
    return (values[lo].second & 1u) ? b : a;
  }
  // Whether `got` is v rounded, or v is within `slack` of the midpoint of its neighbours and got is one of them.
  bool accepts(double v, double got, double slack, int64_t* near_ties) const {
    const double want = round(v);
    if (got == want || (got == 0.0 && want == 0.0)) return true;
    const auto [lo, hi] = around(v);
    const double mid = 0.5 * (values[lo].first + values[hi].first);
    if (std::abs(v - mid) <= slack && (got == values[lo].first || got == values[hi].first)) {
      ++*near_ties;
      return true;
    }
    return false;
  }
};
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
}  // namespace

TEST(CudaBackendActivation, GeluFor16BitValuesRoundsTheExactGelu) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  for (DType t : {DType::BF16, DType::F16}) {
    const Format16 format(t);
    std::vector<uint16_t> xs;  // every finite pattern
    for (const auto& [v, bits] : format.values) xs.push_back(bits);
    const int64_t n = static_cast<int64_t>(xs.size());
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> g_dist(-4.0f, 4.0f);
    std::vector<uint16_t> gs(n);
    for (auto& g : gs) g = narrow(t, g_dist(gen));
    auto tensor = [&](const char* name) { return Tensor::empty(gpu->ledger(), {n}, t, Category::Temporary, name); };
    Tensor tx = tensor("x"), tg = tensor("g"), ty = tensor("y"), tdx = tensor("dx"), ty2 = tensor("y2"),
           tdx2 = tensor("dx2");
    gpu->copy_from_host(tx, xs.data());
    gpu->copy_from_host(tg, gs.data());
    gpu->activation_forward(ActivationKind::GeluErf, tx, ty);
    gpu->activation_backward(ActivationKind::GeluErf, tx, tg, tdx);
    gpu->copy_from_host(tdx2, gs.data());
    gpu->activation_backward_recompute(ActivationKind::GeluErf, tx, tdx2, tdx2, ty2);
    const std::vector<float> y = download(*gpu, ty), dx = download(*gpu, tdx), y2 = download(*gpu, ty2),
                             dx2 = download(*gpu, tdx2);
    int64_t near_ties = 0, wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = widen(t, xs[i]), g = widen(t, gs[i]);
      const double exact_y = x * normal_cdf(x);
      const double exact_dx = g * (normal_cdf(x) + x * normal_pdf(x));
      const double slack_dx = 5e-5 * std::abs(g) * (normal_cdf(x) + std::abs(x) * normal_pdf(x));
      const bool ok_y = format.accepts(exact_y, y[i], 5e-5 * std::abs(exact_y), &near_ties);
      const bool ok_dx = format.accepts(exact_dx, dx[i], slack_dx, &near_ties);
      if ((!ok_y || !ok_dx) && ++wrong <= 5)
        ADD_FAILURE() << dtype_name(t) << " x = " << x << " g = " << g << ": y " << y[i] << " (exact " << exact_y
                      << "), dx " << dx[i] << " (exact " << exact_dx << ")";
      // The fused recompute: the same bits.
      if (y2[i] != y[i] || dx2[i] != dx[i]) ADD_FAILURE() << dtype_name(t) << " x = " << x << ": recompute differs";
    }
    EXPECT_EQ(wrong, 0) << dtype_name(t);
    EXPECT_LE(near_ties, n / 1000) << dtype_name(t) << ": " << near_ties << " near-ties of " << 2 * n << " results";
    std::printf("%s: %lld values, %lld results at near-ties\n", std::string(dtype_name(t)).c_str(),
                static_cast<long long>(n), static_cast<long long>(near_ties));
  }
}

// A measurement, not a test: the GELU forward and the recomputing backward with
// the bias gradient at bert-large's intermediate shape (batch 32 × 512 rows of
// 4096, bf16), against the bytes they move (forward: x read, y written;
// backward: x and dy read, dx and y written).
TEST(GeluTiming, DISABLED_AtBertLargeShape) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  const int64_t rows = 32 * 512, N = 4096, n = rows * N;
  const auto x = random_vector(n, 31, 2.0f), dy = random_vector(n, 32);
  Tensor tx = upload(*gpu, {rows, N}, x, DType::BF16, "x"), tdy = upload(*gpu, {rows, N}, dy, DType::BF16, "dy");
  Tensor ty = Tensor::empty(gpu->ledger(), {rows, N}, DType::BF16, Category::Temporary, "y");
  Tensor db = upload(*gpu, {N}, std::vector<float>(N), DType::F32, "db");
  const double mib = static_cast<double>(n) * 2 / (1 << 20);
  auto time = [&](const char* what, double bytes_mib, auto&& f) {
    const double ms = test::mean_ms(*gpu, 20, f);
    std::printf("%s: %.4f ms, %.0f GB/s of the %.0f MiB\n", what, ms, bytes_mib * (1 << 20) / (ms * 1e6), bytes_mib);
  };
  time("GELU forward", 2 * mib, [&] { gpu->activation_forward(ActivationKind::GeluErf, tx, ty); });
  time("GELU backward, recomputing, with the bias gradient", 4 * mib,
       [&] { gpu->activation_backward_recompute(ActivationKind::GeluErf, tx, tdy, tdy, ty, &db); });
}

// A measurement, not a test (run with --gtest_also_run_disabled_tests): the
// fused residual LayerNorm forward and backward at bert-large's shape (batch
// 32 × 512 rows of 1024, bf16), with and without dropout (and the backward's
// bias gradient), against the 128 MiB each must move at least (forward: x and
// the residual read, the sum and y written; backward: dy and the sum read, two
// gradients written).
TEST(FusedLayerNormTiming, DISABLED_BackwardAtBertLargeShape) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  const int64_t rows = 32 * 512, H = 1024;
  const DType t = DType::BF16;
  const auto a = random_vector(rows * H, 1);
  Tensor dy = upload(*gpu, {rows, H}, a, t, "dy"), sum = upload(*gpu, {rows, H}, a, t, "sum");
  Tensor dres = upload(*gpu, {rows, H}, a, t, "dres"), dx = upload(*gpu, {rows, H}, a, t, "dx");
  Tensor mean = upload(*gpu, {rows}, std::vector<float>(rows), DType::F32, "m");
  Tensor rstd = upload(*gpu, {rows}, std::vector<float>(rows, 1.0f), DType::F32, "r");
  Tensor gamma = upload(*gpu, {H}, random_vector(H, 2), DType::F32, "g");
  Tensor dg = upload(*gpu, {H}, std::vector<float>(H), DType::F32, "dg");
  Tensor db = upload(*gpu, {H}, std::vector<float>(H), DType::F32, "db");
  Tensor dbias = upload(*gpu, {H}, std::vector<float>(H), DType::F32, "dbias");
  Tensor y = upload(*gpu, {rows, H}, a, t, "y");
  Tensor beta = upload(*gpu, {H}, random_vector(H, 3), DType::F32, "b");
  for (float p : {0.0f, 0.1f}) {
    const DropoutSpec drop{p, 1234, 77};
    const auto run = [&] { gpu->residual_layernorm_forward(dx, dres, drop, gamma, beta, 1e-12, sum, y, mean, rstd); };
    const double ms = test::mean_ms(*gpu, 50, run);
    std::printf("residual LayerNorm forward, p %.1f: %.4f ms, %.0f GB/s of the 128 MiB floor\n", p, ms,
                4.0 * rows * H * 2 / ms / 1e6);
  }
  for (float p : {0.0f, 0.1f}) {
    for (bool bias : {false, true}) {
      const DropoutSpec drop{p, 1234, 77};
      const auto run = [&] {
        gpu->residual_layernorm_backward(dy, sum, mean, rstd, gamma, drop, dres, dx, dg, db, bias ? &dbias : nullptr);
      };
      const double ms = test::mean_ms(*gpu, 50, run);
      std::printf("residual LayerNorm backward, p %.1f, bias %d: %.4f ms, %.0f GB/s of the 128 MiB floor\n", p,
                  static_cast<int>(bias), ms, 4.0 * rows * H * 2 / ms / 1e6);
    }
  }
}

// With the bias gradient: rows × N; N % 8 == 0 takes the fused pass, whose
// column sums add in the order of the backend's own 16-bit bias gradient (bit
// for bit what linear_backward sums from the same dx); other N the separate
// one. In float32 linear_backward sums in another order: there the bias
// gradient is checked against double sums of dx within float rounding.
TEST(CudaBackendActivation, RecomputeWithBiasGradientIsTheLinearBackwardsBias) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    for (auto [rows, N] : {std::pair<int64_t, int64_t>{37, 4096}, {2053, 1024}, {1, 8}, {300, 100}}) {
      const int64_t n = rows * N, K = 8;
      const auto x = random_vector(n, 31, 4.0f), dy = random_vector(n, 32), bias0 = random_vector(N, 33);
      Tensor tx = upload(*gpu, {rows, N}, x, t, "x"), tdy = upload(*gpu, {rows, N}, dy, t, "dy");
      Tensor y1 = upload(*gpu, {rows, N}, std::vector<float>(n), t, "y1");
      Tensor dx1 = upload(*gpu, {rows, N}, std::vector<float>(n), t, "dx1");
      gpu->activation_forward(ActivationKind::GeluErf, tx, y1);
      gpu->activation_backward(ActivationKind::GeluErf, tx, tdy, dx1);
      // The reference bias gradient: linear_backward's, from the separate ops' dx.
      Tensor lin_x = upload(*gpu, {rows, K}, std::vector<float>(rows * K), t, "lin_x");
      Tensor lin_w = upload(*gpu, {N, K}, std::vector<float>(N * K), t, "lin_w");
      Tensor bias_ref = upload(*gpu, {N}, bias0, DType::F32, "bias_ref");
      gpu->linear_backward(dx1, lin_x, lin_w, nullptr, Tensor(), &bias_ref);
      Tensor y2 = upload(*gpu, {rows, N}, std::vector<float>(n), t, "y2");
      Tensor bias = upload(*gpu, {N}, bias0, DType::F32, "bias");
      gpu->activation_backward_recompute(ActivationKind::GeluErf, tx, tdy, tdy, y2, &bias);  // dx over dy
      const std::string what = std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " N " + std::to_string(N);
      const auto dx = download(*gpu, tdy), got = download(*gpu, bias);
      EXPECT_EQ(download(*gpu, y1), download(*gpu, y2)) << what << " y";
      EXPECT_EQ(download(*gpu, dx1), dx) << what << " dx";
      EXPECT_NE(got, bias0) << what << " d_bias unchanged";
      if (t != DType::F32) {
        EXPECT_EQ(download(*gpu, bias_ref), got) << what << " d_bias";
        continue;
      }
      int bad = 0;
      for (int64_t c = 0; c < N; ++c) {
        double ref = bias0[c], magnitude = std::abs(bias0[c]);
        for (int64_t r = 0; r < rows; ++r) ref += dx[r * N + c], magnitude += std::abs(dx[r * N + c]);
        const double bound = (rows + 2) * 0x1p-24 * magnitude;
        if (std::abs(got[c] - ref) > bound && bad++ < 5)
          ADD_FAILURE() << what << " d_bias[" << c << "]: " << got[c] << " ref " << ref << " bound " << bound;
      }
      EXPECT_EQ(bad, 0) << what << ": " << bad << " columns of d_bias out of tolerance";
    }
  }
}

// linear_backward_weights_n in 16 bits: the weight gradients as one
// strided-batched product and, where batched_bias_sums holds, every bias
// gradient in one launch pair over the planes. Each bias gradient must be the
// same bits as linear_backward's own (the same chunks of rows, added in the
// same order), onto non-zero starting values; a plane read or written at the
// wrong offset would be far off. The weight gradients against separate
// products: float sums of M exact products of 16-bit values onto dw0, each
// within (M + 2)·2^-24·(|dw0| + Σ_m |x·dy|) of the exact sum in any order, so
// the two within twice that of each other (cuBLASLt may pick another
// algorithm, another order, for the batch), not bits.
TEST(CudaBackendLinear, BatchedWeightGradientsAreTheSeparateOnes) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  struct Case {
    int64_t M, K, N, planes;
  };
  for (DType t : {DType::BF16, DType::F16}) {
    for (const Case c : {Case{1000, 72, 264, 3}, Case{4096, 64, 1024, 3}, Case{37, 16, 8, 2}, Case{2053, 24, 40, 4}}) {
      const int64_t bias_stride = c.N + 8;  // biases apart, as the model's (a weight between them)
      const auto x = random_vector(c.M * c.K, 41), w = random_vector(c.planes * c.N * c.K, 42),
                 dy = random_vector(c.planes * c.M * c.N, 43), dw0 = random_vector(c.planes * c.N * c.K, 44),
                 db0 = random_vector(c.planes * bias_stride, 45);
      Tensor tx = upload(*gpu, {c.M, c.K}, x, t, "x"), tw = upload(*gpu, {c.planes * c.N, c.K}, w, t, "w");
      Tensor tdy = upload(*gpu, {c.planes * c.M, c.N}, dy, t, "dy");
      Tensor dw[2], db[2];
      std::vector<Tensor> ws, dys, dws[2], dbs[2];
      for (int k = 0; k < 2; ++k) {
        dw[k] = upload(*gpu, {c.planes * c.N, c.K}, dw0, DType::F32, "dw");
        db[k] = upload(*gpu, {c.planes * bias_stride}, db0, DType::F32, "db");
      }
      for (int64_t i = 0; i < c.planes; ++i) {
        ws.push_back(tw.slice(i * c.N * c.K, {c.N, c.K}));
        dys.push_back(tdy.slice(i * c.M * c.N, {c.M, c.N}));
        for (int k = 0; k < 2; ++k) {
          dws[k].push_back(dw[k].slice(i * c.N * c.K, {c.N, c.K}));
          dbs[k].push_back(db[k].slice(i * bias_stride, {c.N}));
        }
      }
      const std::string what = std::string(dtype_name(t)) + " M " + std::to_string(c.M) + " N " +
                               std::to_string(c.N) + " planes " + std::to_string(c.planes);
      ASSERT_TRUE(cuda::batched_weight_gradients(dys, tx, ws, dws[0], dbs[0])) << what;
      ASSERT_TRUE(cuda::batched_bias_sums(dys, dbs[0])) << what;
      gpu->linear_backward_weights_n(dys, tx, ws, dws[0], dbs[0]);
      for (int64_t i = 0; i < c.planes; ++i) gpu->linear_backward(dys[i], tx, ws[i], nullptr, dws[1][i], &dbs[1][i]);
      const auto got_db = download(*gpu, db[0]), ref_db = download(*gpu, db[1]);
      EXPECT_EQ(got_db, ref_db) << what << " bias gradients";
      EXPECT_NE(got_db, db0) << what << " bias gradients unchanged";
      for (int64_t i = 0; i < c.planes; ++i)  // the gaps between the biases untouched
        for (int64_t j = c.N; j < bias_stride; ++j) EXPECT_EQ(got_db[i * bias_stride + j], db0[i * bias_stride + j]);
      const auto got_dw = download(*gpu, dw[0]), ref_dw = download(*gpu, dw[1]);
      const auto rx = rounded(t, x), rdy = rounded(t, dy);
      int bad = 0;
      for (int64_t i = 0; i < c.planes; ++i)
        for (int64_t n = 0; n < c.N; ++n)
          for (int64_t k = 0; k < c.K; ++k) {
            const size_t at = static_cast<size_t>((i * c.N + n) * c.K + k);
            double magnitude = std::abs(dw0[at]);
            for (int64_t m = 0; m < c.M; ++m)
              magnitude += std::abs(double{rx[m * c.K + k]} * rdy[(i * c.M + m) * c.N + n]);
            const double bound = 2.0 * (c.M + 2) * 0x1p-24 * magnitude;
            if (std::abs(double{got_dw[at]} - ref_dw[at]) > bound && bad++ < 5)
              ADD_FAILURE() << what << " dw[" << at << "]: " << got_dw[at] << " separate " << ref_dw[at];
          }
      EXPECT_EQ(bad, 0) << what << ": " << bad << " weight gradients out of tolerance";
    }
  }
}

// The loader's double buffering: batch k + 1 is uploaded into the buffer
// that batch k − 1 used while batch k computes (slow products keep the
// device busy). Every batch must be seen whole by the op after upload_wait(),
// and no upload may overwrite a buffer before the compute queue is done with
// it: the accumulated sum tells.
TEST(CudaBackendUpload, DoubleBufferedUploadsAreOrderedWithCompute) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  const int64_t n = 1 << 20, M = 2048;
  Tensor slots[2] = {upload(*gpu, {n}, std::vector<float>(n), DType::F32, "slot0"),
                     upload(*gpu, {n}, std::vector<float>(n), DType::F32, "slot1")};
  Tensor acc = upload(*gpu, {n}, std::vector<float>(n), DType::F32, "acc");
  Tensor x = upload(*gpu, {M, M}, random_vector(M * M, 1), DType::F32, "x");
  Tensor y = upload(*gpu, {M, M}, std::vector<float>(M * M), DType::F32, "y");
  std::vector<float> host(n);
  auto fill = [&](int k) {
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(k + 1 + (i % 7));
  };
  const int steps = 50;
  fill(0);
  gpu->upload_async(slots[0], host.data());
  for (int k = 0; k < steps; ++k) {
    gpu->upload_wait();
    gpu->linear_forward(x, x, nullptr, y);  // keeps the device busy before the add reads the slot
    gpu->add_inplace(acc, slots[k % 2]);
    if (k + 1 < steps) {
      fill(k + 1);  // the host buffer is reused at once: upload_async staged it
      gpu->upload_async(slots[(k + 1) % 2], host.data());
    }
  }
  const auto result = download(*gpu, acc);
  for (int64_t i = 0; i < n; i += 4099) {
    double expected = 0;
    for (int k = 0; k < steps; ++k) expected += k + 1 + (i % 7);
    ASSERT_EQ(result[i], static_cast<float>(expected)) << "element " << i;
  }
}


// attention_backward_interleaved writes what attention_backward writes, bit for
// bit, at columns 0, H and 2H of each token's row: on every path, the two that
// write the interleaved rows themselves (float32 flash, cuDNN) and the ones
// that go through temporaries (the materialised float32 attention at a head
// size without a flash kernel, 16-bit through float32). dqkv starts as NaN, so
// an element left unwritten fails too.
TEST(CudaBackendAttention, InterleavedGradientsAreTheSeparateOnes) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  struct Case {
    DType t;
    int64_t B, L, heads, D;
    float p;
  };
  for (const Case c : {Case{DType::F32, 2, 70, 2, 64, 0.1f}, Case{DType::F32, 3, 33, 3, 32, 0.0f},
                       Case{DType::F32, 2, 40, 2, 16, 0.1f}, Case{DType::BF16, 2, 130, 2, 64, 0.1f},
                       Case{DType::F16, 2, 64, 4, 32, 0.0f}, Case{DType::BF16, 2, 24, 2, 16, 0.1f}}) {
    const int64_t H = c.heads * c.D, n = c.B * c.L * H;
    const std::string what = std::string(dtype_name(c.t)) + " B " + std::to_string(c.B) + " L " +
                             std::to_string(c.L) + " heads " + std::to_string(c.heads) + " D " + std::to_string(c.D);
    Tensor q = upload(*gpu, {c.B, c.L, H}, random_vector(n, 51), c.t, "q");
    Tensor k = upload(*gpu, {c.B, c.L, H}, random_vector(n, 52), c.t, "k");
    Tensor v = upload(*gpu, {c.B, c.L, H}, random_vector(n, 53), c.t, "v");
    Tensor dctx = upload(*gpu, {c.B, c.L, H}, random_vector(n, 54), c.t, "dctx");
    std::vector<int64_t> mask(static_cast<size_t>(c.B * c.L), 1);  // right padding: entry b keeps L - 5b keys
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t j = std::max<int64_t>(1, c.L - 5 * b); j < c.L; ++j) mask[static_cast<size_t>(b * c.L + j)] = 0;
    Tensor key_mask = Tensor::empty(gpu->ledger(), {c.B, c.L}, DType::I64, Category::Temporary, "mask");
    gpu->copy_from_host(key_mask, mask.data());
    const bool probs = gpu->attention_saves_probabilities(c.t, c.D);
    Tensor saved = Tensor::empty(gpu->ledger(), probs ? Shape{c.B, c.heads, c.L, c.L} : Shape{c.B, c.heads, c.L},
                                 DType::F32, Category::Temporary, "saved");
    Tensor ctx = Tensor::empty(gpu->ledger(), {c.B, c.L, H}, c.t, Category::Temporary, "ctx");
    const DropoutSpec dropout{c.p, 7, 3};
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
    gpu->attention_forward(q, k, v, key_mask, c.heads, scale, dropout, saved, ctx);
    Tensor dq = Tensor::empty(gpu->ledger(), {c.B, c.L, H}, c.t, Category::Temporary, "dq");
    Tensor dk = Tensor::empty(gpu->ledger(), {c.B, c.L, H}, c.t, Category::Temporary, "dk");
    Tensor dv = Tensor::empty(gpu->ledger(), {c.B, c.L, H}, c.t, Category::Temporary, "dv");
    gpu->attention_backward(dctx, q, k, v, ctx, saved, key_mask, c.heads, scale, dropout, dq, dk, dv);
    Tensor dqkv = upload(*gpu, {c.B, c.L, 3 * H}, std::vector<float>(3 * n, NAN), c.t, "dqkv");
    gpu->attention_backward_interleaved(dctx, q, k, v, ctx, saved, key_mask, c.heads, scale, dropout, dqkv);
    const auto got = download(*gpu, dqkv);
    const std::vector<float> parts[3] = {download(*gpu, dq), download(*gpu, dk), download(*gpu, dv)};
    ASSERT_GT(max_abs(parts[0]), 0.0) << what;
    int64_t differing = 0;
    for (int64_t t = 0; t < c.B * c.L; ++t)
      for (int i = 0; i < 3; ++i)
        for (int64_t j = 0; j < H; ++j) {
          const float a = got[static_cast<size_t>(t * 3 * H + i * H + j)], b = parts[i][static_cast<size_t>(t * H + j)];
          if (std::memcmp(&a, &b, sizeof a) != 0 && ++differing <= 3)
            ADD_FAILURE() << what << ": token " << t << " part " << i << " column " << j << ": " << a << " against "
                          << b;
        }
    EXPECT_EQ(differing, 0) << what;
  }
}

}  // namespace
}  // namespace anatomy

namespace anatomy {
namespace {

// The embeddings block in one kernel each way (embedding_norm.cu) against
// Backend's sequence of ops on the same GPU and against the CPU backend, for
// every output dtype, hidden sizes with a partial last group of 128 and the
// largest one, with and without dropout. The sum is the same float additions
// (bits); the LayerNorm sums in double in another order, so mean, rstd, out
// and d_sum may differ by a float rounding (and then out by one 16-bit
// rounding); the dropout masks must be the same elements; work is the same
// bits, and so dgamma and dbeta, summed by the same column kernels.
TEST(CudaBackendEmbeddings, FusedLayerNormBlockMatchesTheOpsAndTheCpu) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(1);
  struct Case {
    int64_t rows, H;
  };
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (const Case c : {Case{74, 1024}, Case{15, 96}, Case{1, 4}, Case{33, 2048}, Case{9, 260}}) {
      for (float p : {0.0f, 0.1f}) {
        const int64_t V = 50, P = 40, Y = 2, n = c.rows * c.H;
        const std::string what = std::string(dtype_name(t)) + " rows " + std::to_string(c.rows) + " H " +
                                 std::to_string(c.H) + " p " + std::to_string(p);
        std::vector<int64_t> ids(c.rows), pos(c.rows), types(c.rows);
        for (int64_t r = 0; r < c.rows; ++r) {
          ids[r] = (r * 7 + 3) % V;
          pos[r] = r % P;
          types[r] = (r / 3) % Y;
        }
        const auto word = random_vector(V * c.H, 41), ptab = random_vector(P * c.H, 42, 0.3f),
                   ytab = random_vector(Y * c.H, 43, 0.2f), gamma = random_vector(c.H, 44),
                   beta = random_vector(c.H, 45, 0.1f), dout = random_vector(n, 46);
        const DropoutSpec drop{p, 99, 5};
        struct Outs {
          std::vector<float> sum, mean, rstd, out, work, d_sum, dgamma, dbeta;
        };
        // which: 0 the GPU's fused override, 1 Backend's ops on the GPU, 2 the CPU.
        auto run = [&](int which, const std::vector<float>* mean_in, const std::vector<float>* rstd_in) {
          Backend& b = which == 2 ? *cpu : *gpu;
          auto ints = [&](const std::vector<int64_t>& v, const char* name) {
            Tensor x = Tensor::empty(b.ledger(), {c.rows}, DType::I64, Category::Temporary, name);
            b.copy_from_host(x, v.data());
            return x;
          };
          const Tensor tids = ints(ids, "ids"), tpos = ints(pos, "pos"), ttypes = ints(types, "types");
          const Tensor tw = upload(b, {V, c.H}, word, DType::F32, "word"), tp = upload(b, {P, c.H}, ptab, DType::F32, "p"),
                       ty = upload(b, {Y, c.H}, ytab, DType::F32, "y");
          const Tensor tg = upload(b, {c.H}, gamma, DType::F32, "g"), tb = upload(b, {c.H}, beta, DType::F32, "b");
          const Tensor sum = upload(b, {c.rows, c.H}, std::vector<float>(n), DType::F32, "sum");
          const Tensor mean = upload(b, {c.rows}, std::vector<float>(c.rows), DType::F32, "mean");
          const Tensor rstd = upload(b, {c.rows}, std::vector<float>(c.rows), DType::F32, "rstd");
          const Tensor out = upload(b, {c.rows, c.H}, std::vector<float>(n), t, "out");
          const Tensor work = t == DType::F32 ? out : upload(b, {c.rows, c.H}, std::vector<float>(n), DType::F32, "w");
          if (which == 0)
            b.embeddings_layernorm_forward(tids, tpos, ttypes, tw, tp, ty, tg, tb, 1e-12, drop, sum, mean, rstd, work,
                                           out);
          else
            b.embeddings_layernorm_forward_unfused(tids, tpos, ttypes, tw, tp, ty, tg, tb, 1e-12, drop, sum, mean,
                                                   rstd, work, out);
          Outs o;
          o.sum = download(b, sum);
          o.mean = download(b, mean);
          o.rstd = download(b, rstd);
          o.out = download(b, out);
          // The backward from the same statistics on every path.
          const Tensor m2 = upload(b, {c.rows}, mean_in ? *mean_in : o.mean, DType::F32, "m2");
          const Tensor r2 = upload(b, {c.rows}, rstd_in ? *rstd_in : o.rstd, DType::F32, "r2");
          const Tensor tdout = upload(b, {c.rows, c.H}, dout, t, "dout");
          const Tensor bwork =
              t == DType::F32 ? tdout : upload(b, {c.rows, c.H}, std::vector<float>(n), DType::F32, "bw");
          const Tensor d_sum = upload(b, {c.rows, c.H}, std::vector<float>(n), DType::F32, "d_sum");
          const Tensor dg = upload(b, {c.H}, std::vector<float>(c.H, 0.5f), DType::F32, "dg");
          const Tensor db = upload(b, {c.H}, std::vector<float>(c.H, -0.25f), DType::F32, "db");
          if (which == 0)
            b.embeddings_layernorm_backward(tdout, sum, m2, r2, tg, drop, bwork, d_sum, dg, db);
          else
            b.embeddings_layernorm_backward_unfused(tdout, sum, m2, r2, tg, drop, bwork, d_sum, dg, db);
          o.work = download(b, bwork);
          o.d_sum = download(b, d_sum);
          o.dgamma = download(b, dg);
          o.dbeta = download(b, db);
          return o;
        };
        const Outs fused = run(0, nullptr, nullptr);
        const Outs ops = run(1, &fused.mean, &fused.rstd);
        const Outs ref = run(2, &fused.mean, &fused.rstd);
        const double u = 2 * unit_roundoff(t), f = 2 * unit_roundoff(DType::F32);
        EXPECT_EQ(fused.sum, ops.sum) << what << " sum";
        expect_near(fused.mean, ops.mean, f, 1e-7, what + " mean");
        expect_near(fused.rstd, ops.rstd, f, 0.0, what + " rstd");
        expect_near(fused.out, ops.out, u, 1e-7, what + " out");
        int64_t zeros_differ = 0, dropped = 0;
        for (int64_t i = 0; i < n; ++i) {
          zeros_differ += (fused.out[i] == 0.0f) != (ops.out[i] == 0.0f);
          dropped += ops.out[i] == 0.0f;
        }
        EXPECT_EQ(zeros_differ, 0) << what << ": dropout masks differ";
        if (p > 0.0f && n >= 1000) EXPECT_GT(dropped, n / 20) << what << ": no dropout";
        EXPECT_EQ(fused.work, ops.work) << what << " work";
        expect_near(fused.d_sum, ops.d_sum, f, 1e-6, what + " d_sum");
        EXPECT_EQ(fused.dgamma, ops.dgamma) << what << " dgamma";
        EXPECT_EQ(fused.dbeta, ops.dbeta) << what << " dbeta";
        // The CPU: the same float sums, LayerNorm in double.
        EXPECT_EQ(fused.sum, ref.sum) << what << " sum (cpu)";
        expect_near(fused.out, ref.out, u, 1e-7, what + " out (cpu)");
        EXPECT_EQ(fused.work, ref.work) << what << " work (cpu)";
        expect_near(fused.d_sum, ref.d_sum, f, 1e-6, what + " d_sum (cpu)");
        expect_near(fused.dgamma, ref.dgamma, 1e-6, 1e-6, what + " dgamma (cpu)");
        expect_near(fused.dbeta, ref.dbeta, 1e-6, 1e-6, what + " dbeta (cpu)");
      }
    }
  }
}

}  // namespace
}  // namespace anatomy
