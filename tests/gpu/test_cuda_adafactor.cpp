// test_cuda_adafactor.cpp: the CUDA Adafactor step against the CPU reference
// on random inputs: matrices of odd shapes (one row, one column, [7, 33]),
// matrices whose column sums go through slices of rows ([300, 64], [1024,
// 4096]), vectors ([1000]), with weight decay and a bf16 copy; and that it is
// deterministic (the same inputs give the same bits twice).
//
// Each step starts both backends from the same weights and states (the CPU's,
// copied to the GPU), so each comparison is of one step. Element-wise the two
// run the same float32 operations; only the order of their double-precision
// sums differs, which moves a float32 mean by at most one ulp (the two doubles
// differ far below a float's ulp, so they round apart only across a rounding
// boundary). What follows, with ε = 2^-23:
//   - a vector's state is element-wise: bit for bit;
//   - a matrix's row or column state, mean · (1 − β) + state · β with a mean
//     one ulp apart: within 3 ulps (one of the mean, at most two of the state,
//     plus the final rounding);
//   - the update: the row factor (row state over the mean of the row states,
//     each within 3 ulps, under a root: 4ε), the column factor (1.5ε), the
//     clipping divisor (the update's RMS, about the same 6ε, plus a rounding):
//     within 16ε of itself; a weight, within 16ε of its change plus one ulp
//     where p − update rounds the other way.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "anatomy/core/dtype.h"
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"

namespace anatomy {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

float ulp(float x) {
  const float a = std::fabs(x);
  return std::nextafter(a, std::numeric_limits<float>::infinity()) - a;
}

struct Buffers {
  Tensor p, g, row, col, v, half;
};

Buffers make(Backend& b, const Shape& shape) {
  Ledger& l = b.ledger();
  Buffers x;
  x.p = Tensor::empty(l, shape, DType::F32, Category::Weights, "p");
  x.g = Tensor::empty(l, shape, DType::F32, Category::Gradients, "g");
  x.half = Tensor::empty(l, shape, DType::BF16, Category::WeightsHalf, "half");
  if (shape.size() == 2) {
    x.row = Tensor::empty(l, {shape[0]}, DType::F32, Category::OptimizerStates, "row");
    x.col = Tensor::empty(l, {shape[1]}, DType::F32, Category::OptimizerStates, "col");
  } else {
    x.v = Tensor::empty(l, shape, DType::F32, Category::OptimizerStates, "v");
  }
  return x;
}

std::vector<float> host(Backend& b, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  b.copy_to_host(t, out.data());
  return out;
}

void expect_states_close(const std::vector<float>& gpu, const std::vector<float>& cpu, float ulps,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    ASSERT_LE(std::fabs(gpu[i] - cpu[i]), ulps * ulp(cpu[i])) << what << " " << i << ": " << gpu[i] << " vs " << cpu[i];
}

TEST(CudaAdafactor, MatchesTheCpuReference) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(2);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.1f, 3.0f);
  const std::vector<Shape> shapes = {{7, 33}, {1, 5}, {33, 1}, {300, 64}, {1000}, {1}, {1024, 4096}};
  for (const Shape& shape : shapes) {
    const std::string what = "[" + shape_str(shape) + "]";
    const bool matrix = shape.size() == 2;
    const int64_t n = shape_numel(shape), rows = shape[0];
    Buffers c = make(*cpu, shape), d = make(*gpu, shape);
    std::vector<float> p0(static_cast<size_t>(n));
    for (float& v : p0) v = normal(rng);
    cpu->copy_from_host(c.p, p0.data());
    for (const Tensor* t : {&c.row, &c.col, &c.v})
      if (t->defined()) cpu->zero(*t);
    for (int64_t step = 1; step <= 3; ++step) {
      // Both start from the CPU's weights and states.
      for (const auto& [from, to] : {std::pair{&c.row, &d.row}, std::pair{&c.col, &d.col}, std::pair{&c.v, &d.v}})
        if (from->defined()) gpu->copy_from_host(*to, host(*cpu, *from).data());
      gpu->copy_from_host(d.p, host(*cpu, c.p).data());
      const std::vector<float> before = host(*cpu, c.p);
      // Gradients whose rows differ in scale, so the factored statistics matter.
      std::vector<float> g(static_cast<size_t>(n));
      const int64_t per_row = n / rows;
      for (int64_t r = 0; r < rows; ++r) {
        const float s = scale(rng);
        for (int64_t j = 0; j < per_row; ++j) g[r * per_row + j] = s * normal(rng);
      }
      cpu->copy_from_host(c.g, g.data());
      gpu->copy_from_host(d.g, g.data());
      AdafactorHyper h;
      h.lr = 0.01;
      h.weight_decay = step == 2 ? 0.0 : 0.05;
      h.step = step;
      cpu->adafactor_step(c.p, c.g, c.row, c.col, c.v, h, &c.half);
      gpu->adafactor_step(d.p, d.g, d.row, d.col, d.v, h, &d.half);
      const std::string at = what + " step " + std::to_string(step);
      if (matrix) {
        expect_states_close(host(*gpu, d.row), host(*cpu, c.row), 3, at + " row state");
        expect_states_close(host(*gpu, d.col), host(*cpu, c.col), 3, at + " column state");
      } else {
        expect_states_close(host(*gpu, d.v), host(*cpu, c.v), 0, at + " state");
      }
      const std::vector<float> pc = host(*cpu, c.p), pd = host(*gpu, d.p);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(std::fabs(double(pd[i]) - pc[i]), ulp(pc[i]) + 16 * kEps * std::fabs(double(pc[i]) - before[i]))
            << at << " weight " << i << ": " << pd[i] << " vs " << pc[i];
      std::vector<uint16_t> half(static_cast<size_t>(n));
      gpu->copy_to_host(d.half, half.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(half[i], float_to_bf16(pd[i])) << at << " bf16 copy " << i;
    }
  }
}

TEST(CudaAdafactor, IsDeterministic) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  auto gpu = cuda::make_cuda_backend(0);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Shape& shape : {Shape{1024, 4096}, Shape{30522, 128}, Shape{100003}}) {
    const int64_t n = shape_numel(shape);
    std::vector<float> p0(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (float& v : p0) v = normal(rng);
    for (float& v : g) v = normal(rng);
    std::vector<std::vector<float>> results[2];
    for (auto& result : results) {
      Buffers d = make(*gpu, shape);
      gpu->copy_from_host(d.p, p0.data());
      gpu->copy_from_host(d.g, g.data());
      for (const Tensor* t : {&d.row, &d.col, &d.v})
        if (t->defined()) gpu->zero(*t);
      AdafactorHyper h;
      h.lr = 0.001;
      h.weight_decay = 0.01;
      for (int64_t step = 1; step <= 2; ++step) {
        h.step = step;
        gpu->adafactor_step(d.p, d.g, d.row, d.col, d.v, h, nullptr);
      }
      for (const Tensor* t : {&d.p, &d.row, &d.col, &d.v})
        if (t->defined()) result.push_back(host(*gpu, *t));
    }
    EXPECT_TRUE(results[0] == results[1]) << "[" << shape_str(shape) << "]";
  }
}

}  // namespace
}  // namespace anatomy
