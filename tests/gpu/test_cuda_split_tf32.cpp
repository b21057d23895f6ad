// test_cuda_split_tf32.cpp: split-TF32 float32 products (Fp32Products::SplitTf32)
// against float64 references computed here, beside plain float32 and TF32
// products of the same inputs: a product's error is measured as
// max_i |c_i - ref_i| / Σ_k |a_ik b_kj| (the magnitude the rounding errors
// scale with), for the three products of a linear layer (forward with its
// bias, input gradient, weight gradient accumulated onto a non-zero start),
// which between them take both operands transposed and not.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU"

std::vector<float> normal(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

Tensor upload(Backend& b, Shape shape, const std::vector<float>& host, const char* name) {
  Tensor t = Tensor::empty(b.ledger(), std::move(shape), DType::F32, Category::Temporary, name);
  b.copy_from_host(t, host.data());
  return t;
}

std::vector<float> download(Backend& b, const Tensor& t) {
  std::vector<float> v(t.numel());
  b.copy_to_host(t, v.data());
  return v;
}

// A float64 result and, per element, the sum of its terms' magnitudes.
struct Reference {
  std::vector<double> value, magnitude;
};

// y[M,N] = x[M,K] · w[N,K]ᵀ + b; dx[M,K] = dy[M,N] · w[N,K]; dw[N,K] = dw0 + dy[M,N]ᵀ · x[M,K].
Reference forward_reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                            int64_t M, int64_t K, int64_t N) {
  Reference r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = b[j], m = std::abs(b[j]);
      for (int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(x[i * K + k]) * w[j * K + k];
        s += t;
        m += std::abs(t);
      }
      r.value[i * N + j] = s;
      r.magnitude[i * N + j] = m;
    }
  return r;
}
Reference input_gradient_reference(const std::vector<float>& dy, const std::vector<float>& w, int64_t M, int64_t K,
                                   int64_t N) {
  Reference r{std::vector<double>(M * K, 0.0), std::vector<double>(M * K, 0.0)};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(dy[i * N + j]) * w[j * K + k];
        r.value[i * K + k] += t;
        r.magnitude[i * K + k] += std::abs(t);
      }
  return r;
}
Reference weight_gradient_reference(const std::vector<float>& dy, const std::vector<float>& x,
                                    const std::vector<float>& dw0, int64_t M, int64_t K, int64_t N) {
  Reference r{std::vector<double>(N * K), std::vector<double>(N * K)};
  for (int64_t n = 0; n < N * K; ++n) {
    r.value[n] = dw0[n];
    r.magnitude[n] = std::abs(dw0[n]);
  }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(dy[i * N + j]) * x[i * K + k];
        r.value[j * K + k] += t;
        r.magnitude[j * K + k] += std::abs(t);
      }
  return r;
}

double relative_error(const std::vector<float>& got, const Reference& ref) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - ref.value[i]) / std::max(ref.magnitude[i], 1e-30));
  return worst;
}

// Forward, input gradient and weight gradient errors of one linear layer in
// the given mode.
std::vector<double> linear_errors(Fp32Products mode, int64_t M, int64_t K, int64_t N, const Reference refs[3]) {
  auto gpu = cuda::make_cuda_backend(0, mode);
  const auto x = normal(M * K, 1), w = normal(N * K, 2), bias = normal(N, 3), dy = normal(M * N, 4),
             dw0 = normal(N * K, 5);
  Tensor tx = upload(*gpu, {M, K}, x, "x"), tw = upload(*gpu, {N, K}, w, "w"), tb = upload(*gpu, {N}, bias, "b");
  Tensor ty = upload(*gpu, {M, N}, std::vector<float>(M * N), "y"), tdy = upload(*gpu, {M, N}, dy, "dy");
  Tensor tdx = upload(*gpu, {M, K}, std::vector<float>(M * K), "dx"), tdw = upload(*gpu, {N, K}, dw0, "dw");
  gpu->linear_forward(tx, tw, &tb, ty);
  gpu->linear_backward(tdy, tx, tw, &tdx, tdw, nullptr);
  return {relative_error(download(*gpu, ty), refs[0]), relative_error(download(*gpu, tdx), refs[1]),
          relative_error(download(*gpu, tdw), refs[2])};
}

// x rounded to TF32 as split_tf32.cu rounds (half away from zero).
float round_tf32(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  float r = 0.0f;
  std::memcpy(&r, &u, 4);
  return r;
}

// The tensor cores' own accumulation error at depth `depth`: a TF32 product
// (256 x depth by depth x 256) of inputs that are exactly TF32, so that no
// input is rounded and all the error is the accumulation's.
double tf32_accumulation_error(int64_t depth) {
  const int64_t M = 256, N = 256;
  auto x = normal(M * depth, 11), w = normal(N * depth, 12);
  for (auto& v : x) v = round_tf32(v);
  for (auto& v : w) v = round_tf32(v);
  const Reference ref = forward_reference(x, w, std::vector<float>(N, 0.0f), M, depth, N);
  auto gpu = cuda::make_cuda_backend(0, Fp32Products::Tf32);
  Tensor tx = upload(*gpu, {M, depth}, x, "x"), tw = upload(*gpu, {N, depth}, w, "w");
  Tensor ty = upload(*gpu, {M, N}, std::vector<float>(M * N), "y");
  gpu->linear_forward(tx, tw, nullptr, ty);
  return relative_error(download(*gpu, ty), ref);
}

// What the split can and cannot give. Its inputs are within 2^-22 of the
// float32 inputs and the dropped lo·lo term is below 2^-22 of a term: at most
// 3·2^-22 of Σ|a·b| from the split itself. The rest is the accumulation of 3k
// terms on tensor cores, measured here as the error of a TF32 product of
// exactly-TF32 inputs at the same depth (no input rounded: all its error is
// the accumulation's; on an H100 about 1.4e-7 of Σ|a·b| at depth 3000, as a
// float32 product on CUDA cores). So the split must come within 3·2^-22 plus
// twice that floor (twice: the spread of a maximum over other random inputs).
// It must also beat TF32 alone, whose inputs are rounded to 2^-11, wherever
// TF32 runs on tensor cores, by 8 times (3 bits) at least: without its lo
// pieces it would be TF32. (Tiny products run on CUDA cores even in TF32
// mode: there TF32's error is float32's and there is nothing to beat.)
//
// The order of the terms matters: with hi·hi first, the small terms were
// added onto an accumulator already holding the result, and the products
// came out 20 times less accurate than this floor (cuda_backend.cu).
TEST(CudaSplitTf32, ProductsReachTheTensorCoresAccumulationFloor) {
  SKIP_WITHOUT_GPU();
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{7, 13, 5}, {513, 1024, 1000}, {64, 4096, 1024},
                         {300, 1000, 257}}) {
    const auto x = normal(M * K, 1), w = normal(N * K, 2), bias = normal(N, 3), dy = normal(M * N, 4),
               dw0 = normal(N * K, 5);
    const Reference refs[3] = {forward_reference(x, w, bias, M, K, N), input_gradient_reference(dy, w, M, K, N),
                               weight_gradient_reference(dy, x, dw0, M, K, N)};
    const auto f32 = linear_errors(Fp32Products::Float32, M, K, N, refs);
    const auto tf32 = linear_errors(Fp32Products::Tf32, M, K, N, refs);
    const auto split = linear_errors(Fp32Products::SplitTf32, M, K, N, refs);
    const char* names[3] = {"forward", "input gradient", "weight gradient"};
    const int64_t depths[3] = {K, N, M};
    for (int p = 0; p < 3; ++p) {
      const double floor = tf32_accumulation_error(3 * depths[p]);
      SCOPED_TRACE(::testing::Message() << names[p] << " M=" << M << " K=" << K << " N=" << N << ": float32 "
                                        << f32[p] << ", tf32 " << tf32[p] << ", split " << split[p]
                                        << ", tensor-core accumulation at depth " << 3 * depths[p] << " " << floor);
      std::printf("%s M=%lld K=%lld N=%lld: float32 %.3g, tf32 %.3g, split %.3g, tensor-core accumulation %.3g\n",
                  names[p], static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), f32[p],
                  tf32[p], split[p], floor);
      EXPECT_LE(split[p], 3.0 * std::ldexp(1.0, -22) + 2.0 * floor);
      if (tf32[p] > 8.0 * f32[p]) EXPECT_LT(split[p], tf32[p] / 8.0);
    }
  }
}

// linear_forward_n and linear_backward_weights_n split their shared x once
// for all the products: the same bits as one product at a time, each
// splitting x anew. Two calls in a row, with x changed in between, so that a
// split kept from the first call would show.
TEST(CudaSplitTf32, SharedOperandSplitOnceGivesTheSameBits) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0, Fp32Products::SplitTf32);
  const int64_t M = 96, K = 64, N = 64;
  for (int call = 0; call < 2; ++call) {
    Tensor x = upload(*gpu, {M, K}, normal(M * K, 20 + call), "x");
    std::vector<Tensor> w, b, y, y1, dy, dw, dw1, db, db1;
    for (int i = 0; i < 3; ++i) {
      w.push_back(upload(*gpu, {N, K}, normal(N * K, 30 + i), "w"));
      b.push_back(upload(*gpu, {N}, normal(N, 40 + i), "b"));
      y.push_back(upload(*gpu, {M, N}, std::vector<float>(M * N), "y"));
      y1.push_back(upload(*gpu, {M, N}, std::vector<float>(M * N), "y1"));
      dy.push_back(upload(*gpu, {M, N}, normal(M * N, 50 + i), "dy"));
      dw.push_back(upload(*gpu, {N, K}, std::vector<float>(N * K), "dw"));
      dw1.push_back(upload(*gpu, {N, K}, std::vector<float>(N * K), "dw1"));
      db.push_back(upload(*gpu, {N}, std::vector<float>(N), "db"));
      db1.push_back(upload(*gpu, {N}, std::vector<float>(N), "db1"));
    }
    gpu->linear_forward_n(x, w, b, y);
    gpu->linear_backward_weights_n(dy, x, w, dw, db);
    for (int i = 0; i < 3; ++i) {
      gpu->linear_forward(x, w[i], &b[i], y1[i]);
      gpu->linear_backward(dy[i], x, w[i], nullptr, dw1[i], &db1[i]);
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(download(*gpu, y[i]), download(*gpu, y1[i])) << "call " << call << " product " << i;
      EXPECT_EQ(download(*gpu, dw[i]), download(*gpu, dw1[i])) << "call " << call << " product " << i;
    }
  }
}

TEST(CudaSplitTf32, ExtremeInputs) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0, Fp32Products::SplitTf32);
  const int64_t M = 3, K = 8, N = 4;
  std::vector<float> x(M * K, 0.0f), w = normal(N * K, 7);
  // Row 0: the largest float32, whose rounding to TF32 would overflow (the
  // split truncates it instead), times w = 0.5 in column 0 only.
  x[0] = FLT_MAX;
  for (int64_t j = 0; j < N; ++j) w[j * K + 0] = 0.5f;
  // Rows 1 and 2: an infinity and a NaN, which must not come out finite.
  x[1 * K + 3] = INFINITY;
  x[2 * K + 5] = NAN;
  for (int64_t j = 0; j < N; ++j) w[j * K + 3] = w[j * K + 5] = 1.5f;
  Tensor tx = upload(*gpu, {M, K}, x, "x"), tw = upload(*gpu, {N, K}, w, "w");
  Tensor ty = upload(*gpu, {M, N}, std::vector<float>(M * N), "y");
  gpu->linear_forward(tx, tw, nullptr, ty);
  const auto y = download(*gpu, ty);
  for (int64_t j = 0; j < N; ++j) {
    EXPECT_TRUE(std::isfinite(y[j])) << "FLT_MAX * 0.5 overflowed in column " << j;
    EXPECT_NEAR(y[j] / (0.5 * FLT_MAX), 1.0, std::ldexp(1.0, -20)) << j;
    EXPECT_FALSE(std::isfinite(y[N + j])) << "an infinite input gave a finite output in column " << j;
    EXPECT_TRUE(std::isnan(y[2 * N + j])) << "a NaN input gave a number in column " << j;
  }
}

}  // namespace
}  // namespace anatomy
