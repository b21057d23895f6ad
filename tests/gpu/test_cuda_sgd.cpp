// test_cuda_sgd.cpp: the CUDA SGD against the CPU reference, bit for bit (both
// round as torch does: each add-with-alpha one fused multiply-add), with and without
// momentum, dampening and Nesterov, odd segment sizes, the bf16/fp16 copy, and a
// clipping coefficient folded into one step.
#include <gtest/gtest.h>

#include <random>

#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy {
namespace {

struct Buffers {
  Tensor p, g, buf, half;
};

Buffers make(Backend& b, int64_t n, DType half) {
  Ledger& l = b.ledger();
  return {Tensor::empty(l, {n}, DType::F32, Category::Weights, "p"),
          Tensor::empty(l, {n}, DType::F32, Category::Gradients, "g"),
          Tensor::empty(l, {n}, DType::F32, Category::OptimizerStates, "buf"),
          Tensor::empty(l, {n}, half, Category::WeightsHalf, "half")};
}

TEST(CudaSgd, MatchesTheCpuBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(1);
  const int64_t n = 100003;
  // Segments of odd sizes, some decaying, with a gap that must stay untouched.
  const std::vector<ParamSegment> segments = {{0, 777, true}, {777, 1, false}, {800, 60000, true}, {60800, 39203, false}};
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p0(n);
  for (float& v : p0) v = normal(rng);
  for (const DType half : {DType::BF16, DType::F16})
    for (const auto& [momentum, dampening, nesterov] :
         {std::tuple{0.0, 0.0, false}, std::tuple{0.9, 0.1, false}, std::tuple{0.9, 0.0, true}}) {
      Buffers c = make(*cpu, n, half), d = make(*gpu, n, half);
      cpu->copy_from_host(c.p, p0.data());
      gpu->copy_from_host(d.p, p0.data());
      SgdHyper h;
      h.lr = 0.03;
      h.momentum = momentum;
      h.dampening = dampening;
      h.nesterov = nesterov;
      h.weight_decay = 0.01;
      for (int s = 0; s < 4; ++s) {
        std::vector<float> g(n);
        for (float& v : g) v = normal(rng);
        cpu->copy_from_host(c.g, g.data());
        gpu->copy_from_host(d.g, g.data());
        h.first_step = s == 0;
        h.grad_scale = s == 2 ? 0.3731 : 1.0;  // a clipped step: the coefficient folded into the update
        cpu->sgd_step_flat(c.p, c.g, momentum != 0.0 ? c.buf : Tensor(), segments, h, &c.half);
        gpu->sgd_step_flat(d.p, d.g, momentum != 0.0 ? d.buf : Tensor(), segments, h, &d.half);
      }
      std::vector<float> pc(n), pd(n);
      cpu->copy_to_host(c.p, pc.data());
      gpu->copy_to_host(d.p, pd.data());
      EXPECT_TRUE(pc == pd) << "momentum " << momentum << " nesterov " << nesterov;
      for (int64_t i = 777 + 1; i < 800; ++i) EXPECT_EQ(pd[i], p0[i]) << "outside every segment";
      std::vector<uint16_t> hc(n), hd(n);
      cpu->copy_to_host(c.half, hc.data());
      gpu->copy_to_host(d.half, hd.data());
      for (const ParamSegment& seg : segments)  // the gap's half copy was never written, on either side
        for (int64_t i = seg.offset; i < seg.offset + seg.count; ++i) ASSERT_EQ(hc[i], hd[i]) << i;
    }
}

}  // namespace
}  // namespace anatomy
