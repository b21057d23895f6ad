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
#include <iterator>
#include <tuple>
#include <utility>
#include <vector>

#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/kernels.cuh"
#include "backend_test_util.h"
#include "device_buffer.h"

namespace anatomy {
namespace {

using test::download;

std::vector<float> normal(int64_t n, uint32_t seed) { return test::random_vector(n, seed); }

Tensor upload(Backend& b, Shape shape, const std::vector<float>& host, const char* name) {
  return test::upload(b, std::move(shape), host, DType::F32, name);
}

// A float64 result and, per element, the sum of its terms' magnitudes.
struct Reference {
  std::vector<double> value, magnitude;
};

// C[i, j] = start(i, j) + Σ_k a(i, k) · b(k, j), row-major [rows, cols].
template <class A, class B, class Start>
Reference product_reference(int64_t rows, int64_t cols, int64_t depth, A a, B b, Start start) {
  Reference r{std::vector<double>(rows * cols), std::vector<double>(rows * cols)};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double sum = start(i, j), magnitude = std::abs(sum);
      for (int64_t k = 0; k < depth; ++k) {
        const double t = a(i, k) * b(k, j);
        sum += t;
        magnitude += std::abs(t);
      }
      r.value[i * cols + j] = sum;
      r.magnitude[i * cols + j] = magnitude;
    }
  return r;
}

// y[M,N] = x[M,K] · w[N,K]ᵀ + b.
Reference forward_reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                            int64_t M, int64_t K, int64_t N) {
  return product_reference(
      M, N, K, [&](int64_t i, int64_t k) { return x[i * K + k]; }, [&](int64_t k, int64_t j) { return w[j * K + k]; },
      [&](int64_t, int64_t j) { return b[j]; });
}
// dx[M,K] = dy[M,N] · w[N,K].
Reference input_gradient_reference(const std::vector<float>& dy, const std::vector<float>& w, int64_t M, int64_t K,
                                   int64_t N) {
  return product_reference(
      M, K, N, [&](int64_t i, int64_t n) { return dy[i * N + n]; }, [&](int64_t n, int64_t k) { return w[n * K + k]; },
      [](int64_t, int64_t) { return 0.0; });
}
// dw[N,K] = dw0 + dy[M,N]ᵀ · x[M,K].
Reference weight_gradient_reference(const std::vector<float>& dy, const std::vector<float>& x,
                                    const std::vector<float>& dw0, int64_t M, int64_t K, int64_t N) {
  return product_reference(
      N, K, M, [&](int64_t n, int64_t i) { return dy[i * N + n]; }, [&](int64_t i, int64_t k) { return x[i * K + k]; },
      [&](int64_t n, int64_t k) { return dw0[n * K + k]; });
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

// The split on the host, as split_tf32.cu's contract says: hi = x rounded to
// TF32 (half away from zero; truncated where that would overflow to
// infinity; infinities and NaNs unchanged), lo = x - hi rounded the same way
// (0 for a non-finite x).
uint32_t bits_of(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  return u;
}
float float_of(uint32_t u) {
  float x = 0.0f;
  std::memcpy(&x, &u, 4);
  return x;
}
float round_tf32(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  const uint32_t r = (u + 0x1000u) & 0xffffe000u;
  return float_of((r & 0x7f800000u) == 0x7f800000u ? u & 0xffffe000u : r);
}
std::pair<float, float> split_on_host(float x) {
  const float hi = round_tf32(x);
  return {hi, std::isfinite(x) ? round_tf32(x - hi) : 0.0f};
}

// The kernel against the host, bit for bit: both layouts, a leading
// dimension above the rows, the 16-byte path and the scalar one, and values
// at the edges (ties, the largest float, subnormals, zeros of both signs,
// infinities, NaN).
TEST(CudaSplitTf32, SplitKernelMatchesItsContractBitForBit) {
  SKIP_WITHOUT_GPU();
  const float specials[] = {0.0f,     -0.0f,      1.0f,     float_of(0x3f801000u), float_of(0x3f803000u),
                            FLT_MAX,  -FLT_MAX,   FLT_MIN,  float_of(0x00000001u), float_of(0x807fffffu),
                            INFINITY, -INFINITY,  NAN,      float_of(0x7f7ff000u), -1.5e-39f};
  for (auto [rows, cols, ld] : {std::tuple<int64_t, int64_t, int64_t>{8, 5, 8}, {12, 7, 16}, {7, 5, 9}, {1, 3, 1}}) {
    std::vector<float> src = normal(ld * cols, 60 + static_cast<uint32_t>(rows));
    for (size_t i = 0; i < std::size(specials) && i < src.size(); ++i) src[i * 3 % src.size()] = specials[i];
    test::DeviceBuffer in(src.size() * 4), out(3 * rows * cols * 4);
    in.upload(src);
    for (bool along_rows : {false, true})
      for (unsigned lo_mask : {0b001u, 0b010u, 0b100u}) {
        out.poison();
        cuda::split_tf32(nullptr, in.as<float>(), rows, cols, ld, along_rows, lo_mask, out.as<float>());
        ANATOMY_CUDA_CHECK(cudaDeviceSynchronize());
        const auto got = out.download<float>();
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < rows; ++r)
            for (int seg = 0; seg < 3; ++seg) {
              const auto [hi, lo] = split_on_host(src[c * ld + r]);
              const float want = (lo_mask >> seg) & 1u ? lo : hi;
              const int64_t at = along_rows ? c * 3 * rows + seg * rows + r : (seg * cols + c) * rows + r;
              ASSERT_EQ(bits_of(got[at]), bits_of(want))
                  << "rows " << rows << " cols " << cols << " ld " << ld << (along_rows ? " along rows" : " along columns")
                  << " mask " << lo_mask << " at (" << r << ", " << c << ") segment " << seg << " of "
                  << src[c * ld + r];
            }
      }
  }
}

// The products. Each split input is within 2^-22 of its float32 value, so the
// split itself is off by at most 3·2^-22 (7.2e-7) of Σ|a·b| (worst case;
// random errors cancel far below that); the rest is the tensor cores'
// accumulation of 3k terms. What the feature promises, and this checks, is
// at least 19 bits: errors within 2^-19 (1.9e-6) of Σ|a·b|, against 2^-11
// of a TF32 input. On an H100 the split products were off by 2-8e-7, float32
// ones by 0.4-4e-7 and TF32 ones by 3-29e-5 (docs/BENCHMARKS.md). The
// split must also beat TF32 alone by 8 times (3 bits) at least wherever TF32
// runs on tensor cores: without its lo pieces it would be TF32. (Tiny
// products run on CUDA cores even in TF32 mode: there TF32's error is
// float32's and there is nothing to beat.)
//
// The order of the terms matters: with hi·hi first, the small terms were
// added onto an accumulator already holding the result, and the products
// were off by up to 3.1e-6, which this test rejects (cuda_backend.cu).
TEST(CudaSplitTf32, ProductsKeepNineteenBits) {
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
    for (int p = 0; p < 3; ++p) {
      std::printf("%s M=%lld K=%lld N=%lld: float32 %.3g, tf32 %.3g, split %.3g\n", names[p],
                  static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), f32[p], tf32[p],
                  split[p]);
      SCOPED_TRACE(::testing::Message() << names[p] << " M=" << M << " K=" << K << " N=" << N);
      EXPECT_LE(split[p], std::ldexp(1.0, -19));
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
