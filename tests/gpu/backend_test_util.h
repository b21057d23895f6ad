// backend_test_util.h: host-side helpers of the GPU tests that compare a
// backend's ops against the CPU backend: random inputs, 16-bit rounding,
// upload and download through a backend, and the element-wise tolerance check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/core/tensor.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"

#define SKIP_WITHOUT_GPU() \
  if (::anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no GPU"

namespace anatomy::test {

// Normal(0, scale) values from a fixed seed.
inline std::vector<float> random_vector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline uint16_t narrow(DType t, float f) { return t == DType::BF16 ? float_to_bf16(f) : float_to_f16(f); }
inline float widen(DType t, uint16_t h) { return t == DType::BF16 ? bf16_to_float(h) : f16_to_float(h); }
inline double unit_roundoff(DType t) {
  return t == DType::BF16 ? 1.0 / 256.0 : t == DType::F16 ? 1.0 / 2048.0 : 1.0 / 16777216.0;
}

// Rounds to the 16-bit format and back (float32: unchanged).
inline std::vector<float> rounded(DType t, std::vector<float> v) {
  if (t == DType::F32) return v;
  for (auto& x : v) x = widen(t, narrow(t, x));
  return v;
}

// A temporary tensor of `dtype` on `b` holding `host` (rounded to 16 bits when dtype is).
inline Tensor upload(Backend& b, Shape shape, const std::vector<float>& host, DType dtype, const char* name) {
  Tensor t = Tensor::empty(b.ledger(), std::move(shape), dtype, Category::Temporary, name);
  if (dtype == DType::F32) {
    b.copy_from_host(t, host.data());
  } else {
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) bits[i] = narrow(dtype, host[i]);
    b.copy_from_host(t, bits.data());
  }
  return t;
}

inline std::vector<float> download(Backend& b, const Tensor& t) {
  std::vector<float> v(t.numel());
  if (t.dtype() == DType::F32) {
    b.copy_to_host(t, v.data());
  } else {
    std::vector<uint16_t> bits(t.numel());
    b.copy_to_host(t, bits.data());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = widen(t.dtype(), bits[i]);
  }
  return v;
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

// |gpu − ref| ≤ rel·|ref| + abs_of_max·max|ref| everywhere.
inline void expect_near(const std::vector<float>& gpu, const std::vector<float>& ref, double rel, double abs_of_max,
                        const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  const double floor = abs_of_max * std::max(1e-30, max_abs(ref));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(gpu[i]) - ref[i]);
    if (err > rel * std::abs(ref[i]) + floor && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " ref " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance";
}

// The timing tests' measure: the mean wall-clock milliseconds of `runs` calls
// of f, which queues work on `b`, after 3 untimed calls, the queue drained
// before and after.
template <typename F>
double mean_ms(Backend& b, int runs, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  b.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) f();
  b.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / runs;
}

}  // namespace anatomy::test
