// test_cuda_adamw_8bit.cpp: the CUDA 8-bit AdamW against the CPU reference.
// Both do the AdamW arithmetic in double with every operation rounded alike,
// the absmax is a max (order-free), and value / absmax is one IEEE division
// on both, so parameters, absmax and state bytes are expected to be
// identical: a byte could differ (by one index) only if the two computed a
// different float for a moment, which would already show as a parameter
// difference. So the test asserts no differing byte at all.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/optim/quantization_maps.h"

namespace anatomy {
namespace {

struct Buffers {
  Tensor param, grad, state1, state2, absmax1, absmax2, qmap1, qmap2, copy;
};

Buffers make_buffers(Backend& b, int64_t n, bool with_copy) {
  const int64_t blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
  Ledger& l = b.ledger();
  Buffers x;
  x.param = Tensor::empty(l, {n}, DType::F32, Category::Weights, "p");
  x.grad = Tensor::empty(l, {n}, DType::F32, Category::Gradients, "g");
  x.state1 = Tensor::empty(l, {n}, DType::U8, Category::OptimizerStates, "s1");
  x.state2 = Tensor::empty(l, {n}, DType::U8, Category::OptimizerStates, "s2");
  x.absmax1 = Tensor::empty(l, {blocks}, DType::F32, Category::OptimizerStates, "a1");
  x.absmax2 = Tensor::empty(l, {blocks}, DType::F32, Category::OptimizerStates, "a2");
  x.qmap1 = Tensor::empty(l, {256}, DType::F32, Category::OptimizerStates, "q1");
  x.qmap2 = Tensor::empty(l, {256}, DType::F32, Category::OptimizerStates, "q2");
  if (with_copy) x.copy = Tensor::empty(l, {n}, DType::BF16, Category::WeightsHalf, "p16");
  for (const Tensor* t : {&x.state1, &x.state2, &x.absmax1, &x.absmax2}) b.zero(*t);
  const QuantizationMap s = dynamic_quantization_map(true), u = dynamic_quantization_map(false);
  b.copy_from_host(x.qmap1, s.data());
  b.copy_from_host(x.qmap2, u.data());
  return x;
}

template <typename T>
std::vector<T> download(Backend& b, const Tensor& t) {
  std::vector<T> v(t.nbytes() / sizeof(T));
  b.copy_to_host(t, v.data());
  return v;
}

TEST(CudaAdamW8bit, MatchesTheCpuReferenceByteForByte) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
  auto cpu = make_cpu_backend(1);
  auto gpu = cuda::make_cuda_backend(0);
  const int64_t n = 5 * kAdam8bitBlock + 77;  // a tail block
  Buffers c = make_buffers(*cpu, n, true), g = make_buffers(*gpu, n, true);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(n), grad(n);
  for (auto& x : p) x = 0.1f * normal(rng);
  cpu->copy_from_host(c.param, p.data());
  gpu->copy_from_host(g.param, p.data());
  AdamWHyper h;
  h.lr = 1e-3, h.weight_decay = 0.01;
  for (int step = 1; step <= 5; ++step) {
    for (int64_t i = 0; i < n; ++i) {
      // Per block another scale, and a block of exact zeros (absmax 0).
      const int64_t block = i / kAdam8bitBlock;
      grad[i] = block == 2 ? 0.0f : normal(rng) * std::pow(10.0f, -float(block));
    }
    cpu->copy_from_host(c.grad, grad.data());
    gpu->copy_from_host(g.grad, grad.data());
    h.step = step;
    h.grad_scale = step == 3 ? 0.3731 : 1.0;  // a clipped step: the coefficient folded into the update
    cpu->adamw8bit_step(c.param, c.grad, c.state1, c.state2, c.absmax1, c.absmax2, c.qmap1, c.qmap2, h, &c.copy);
    gpu->adamw8bit_step(g.param, g.grad, g.state1, g.state2, g.absmax1, g.absmax2, g.qmap1, g.qmap2, h, &g.copy);
    gpu->synchronize();
    EXPECT_EQ(download<float>(*cpu, c.param), download<float>(*gpu, g.param)) << "step " << step;
    EXPECT_EQ(download<uint16_t>(*cpu, c.copy), download<uint16_t>(*gpu, g.copy)) << "step " << step;
    EXPECT_EQ(download<float>(*cpu, c.absmax1), download<float>(*gpu, g.absmax1)) << "step " << step;
    EXPECT_EQ(download<float>(*cpu, c.absmax2), download<float>(*gpu, g.absmax2)) << "step " << step;
    const auto s1c = download<uint8_t>(*cpu, c.state1), s1g = download<uint8_t>(*gpu, g.state1);
    const auto s2c = download<uint8_t>(*cpu, c.state2), s2g = download<uint8_t>(*gpu, g.state2);
    int64_t differing = 0;
    for (int64_t i = 0; i < n; ++i) differing += (s1c[i] != s1g[i]) + (s2c[i] != s2g[i]);
    EXPECT_EQ(differing, 0) << "step " << step;
  }
}

}  // namespace
}  // namespace anatomy
