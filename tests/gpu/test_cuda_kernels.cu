// test_cuda_kernels.cu: every launcher of kernels/cuda/kernels.cuh (but the
// attention ones) against the CPU backend, the reference, on the same random
// inputs: odd sizes that leave blocks and float4 groups partly filled,
// misaligned pointers for the scalar paths, repeated ids and the padding id,
// ignored labels. Each comparison allows max|gpu − cpu| ≤ 1e-5·max(1, max|cpu|)
// (exact where both sides do the same float operations), and each kernel runs
// twice to show that it gives the same bits every time. Every test skips
// itself on a machine without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "anatomy/core/random.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace {

using anatomy::ActivationKind;
using anatomy::Backend;
using anatomy::Category;
using anatomy::DType;
using anatomy::Shape;
using anatomy::Tensor;
namespace cu = anatomy::cuda;

#define SKIP_WITHOUT_GPU() \
  if (anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

constexpr double kTolerance = 1e-5;

// ---- device memory ----

// cudaMalloc'ed array of n T (at least one, so that n == 0 is a valid pointer).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    ANATOMY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { (void)cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    ASSERT_LE(host.size(), n_);
    ANATOMY_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Waits for the kernels before it (all run on the legacy default stream).
  std::vector<T> download(size_t offset = 0, size_t count = SIZE_MAX) const {
    ANATOMY_CUDA_CHECK(cudaDeviceSynchronize());
    count = std::min(count, n_ - offset);
    std::vector<T> host(count);
    ANATOMY_CUDA_CHECK(cudaMemcpy(host.data(), ptr_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// ---- the CPU reference ----

class Cpu {
 public:
  Cpu() : backend_(anatomy::make_cpu_backend(1)) {}
  Backend* operator->() { return backend_.get(); }

  Tensor f32(Shape shape, const std::vector<float>& values) {
    Tensor t = Tensor::empty(backend_->ledger(), std::move(shape), DType::F32, Category::Temporary, "t");
    EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
    std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
    return t;
  }
  Tensor i64(Shape shape, const std::vector<int64_t>& values) {
    Tensor t = Tensor::empty(backend_->ledger(), std::move(shape), DType::I64, Category::Temporary, "ids");
    std::memcpy(t.raw(), values.data(), values.size() * sizeof(int64_t));
    return t;
  }
  static std::vector<float> values(const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  }

 private:
  std::unique_ptr<Backend> backend_;
};

// ---- inputs and comparisons ----

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// max|gpu − cpu| ≤ tol·max(1, max|cpu|), NaN where the CPU has NaN. Prints how
// many elements differ at all, to show where the kernels are bit-exact.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::string& what,
                  double tol = kTolerance) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double max_cpu = 0.0, max_diff = 0.0;
  size_t differing = 0, nan_mismatch = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isnan(cpu[i]) || std::isnan(gpu[i])) {
      nan_mismatch += std::isnan(cpu[i]) != std::isnan(gpu[i]);
      continue;
    }
    max_cpu = std::max(max_cpu, std::fabs(static_cast<double>(cpu[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(gpu[i]) - cpu[i]));
    differing += std::memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(nan_mismatch, 0u) << what;
  EXPECT_LE(max_diff, tol * std::max(1.0, max_cpu)) << what << ": max |cpu| " << max_cpu;
  std::printf("  %-58s max diff %.3g (max |cpu| %.3g), %zu of %zu not bit-identical\n", what.c_str(), max_diff,
              max_cpu, differing, cpu.size());
}

void expect_close(double gpu, double cpu, const std::string& what, double tol = kTolerance) {
  if (std::isnan(cpu)) {
    EXPECT_TRUE(std::isnan(gpu)) << what << ": " << gpu;
    return;
  }
  EXPECT_LE(std::fabs(gpu - cpu), tol * std::max(1.0, std::fabs(cpu))) << what << ": gpu " << gpu << ", cpu " << cpu;
}

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0)
      << what << ": two runs gave different bits";
}

void expect_same_bits(double a, double b, const std::string& what) {
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(double)), 0) << what << ": two runs gave " << a << " and " << b;
}

std::string label(const char* op, int64_t a, int64_t b = -1, int64_t c = -1) {
  std::string s = std::string(op) + " " + std::to_string(a);
  if (b >= 0) s += "x" + std::to_string(b);
  if (c >= 0) s += "x" + std::to_string(c);
  return s;
}

double read_double(const DeviceArray<double>& d) { return d.download()[0]; }

const std::vector<int64_t> kSizes = {1, 7, 1000, 4097};

// ---- element-wise ----

TEST(CudaKernels, AddAddInplaceAndScaleMatchCpuExactly) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (int64_t n : {0, 1, 7, 1000, 4097}) {
    // Offset 1 makes the pointers misaligned for float4, exercising the scalar path.
    for (size_t off : {0, 1}) {
      const auto a = random_floats(n, 1), b = random_floats(n, 2);
      std::vector<float> pa(off, 0.0f), pb(off, 0.0f);
      pa.insert(pa.end(), a.begin(), a.end());
      pb.insert(pb.end(), b.begin(), b.end());
      DeviceArray<float> da(pa), db(pb), dout(n + off);
      cu::add(nullptr, da.get() + off, db.get() + off, dout.get() + off, n);
      const auto sum = dout.download(off);
      cu::add_inplace(nullptr, da.get() + off, db.get() + off, n);
      const auto inplace = da.download(off);
      cu::scale(nullptr, db.get() + off, 0.37f, n);
      const auto scaled = db.download(off);
      if (n == 0) continue;  // nothing to compare; the launches must simply not fail

      Tensor ta = cpu.f32({n}, a), tb = cpu.f32({n}, b), tout = cpu.f32({n}, std::vector<float>(n));
      cpu->add(ta, tb, tout);
      cpu->add_inplace(ta, tb);
      cpu->scale(tb, 0.37f);
      const std::string tag = " n=" + std::to_string(n) + " offset=" + std::to_string(off);
      EXPECT_EQ(sum, Cpu::values(tout)) << "add" << tag;
      EXPECT_EQ(inplace, Cpu::values(ta)) << "add_inplace" << tag;
      EXPECT_EQ(scaled, Cpu::values(tb)) << "scale" << tag;
    }
  }
}

TEST(CudaKernels, ActivationsAndDerivativesMatchCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  const std::pair<ActivationKind, const char*> kinds[] = {{ActivationKind::GeluErf, "gelu_erf"},
                                                          {ActivationKind::GeluTanh, "gelu_tanh"},
                                                          {ActivationKind::Relu, "relu"},
                                                          {ActivationKind::Tanh, "tanh"}};
  for (auto [kind, name] : kinds) {
    for (int64_t n : kSizes) {
      auto x = random_floats(n, 3, -6.0f, 6.0f);
      // The tails, where formulas that cancel lose their precision.
      const float specials[] = {0.0f, -0.0f, 12.0f, -12.0f, 30.0f, -30.0f, 1e-3f};
      for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i) x[i * 131 % x.size()] = specials[i];
      const auto dy = random_floats(n, 4);
      Tensor tx = cpu.f32({n}, x), ty = cpu.f32({n}, std::vector<float>(n));
      Tensor tdy = cpu.f32({n}, dy), tdx = cpu.f32({n}, std::vector<float>(n));
      cpu->activation_forward(kind, tx, ty);
      const Tensor& saved = kind == ActivationKind::Tanh ? ty : tx;  // as the model saves them
      cpu->activation_backward(kind, saved, tdy, tdx);

      DeviceArray<float> dx_in(x), dyv(dy), dsaved(Cpu::values(saved)), dout(n), dgrad(n);
      std::vector<float> fwd[2], bwd[2];
      for (int run = 0; run < 2; ++run) {
        cu::activation_forward(nullptr, kind, dx_in.get(), dout.get(), n);
        cu::activation_backward(nullptr, kind, dsaved.get(), dyv.get(), dgrad.get(), n);
        fwd[run] = dout.download();
        bwd[run] = dgrad.download();
      }
      expect_close(fwd[0], Cpu::values(ty), label(name, n) + " forward");
      expect_close(bwd[0], Cpu::values(tdx), label(name, n) + " backward");
      expect_same_bits(fwd[0], fwd[1], label(name, n) + " forward");
      expect_same_bits(bwd[0], bwd[1], label(name, n) + " backward");
    }
  }
}

TEST(CudaKernels, DropoutMaskIsBitIdenticalToCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (float p : {0.0f, 0.1f, 0.5f}) {
    for (int64_t n : kSizes) {
      const anatomy::DropoutSpec spec{p, 1234, 7};
      const auto x = random_floats(n, 5);
      Tensor tx = cpu.f32({n}, x), ty = cpu.f32({n}, std::vector<float>(n));
      cpu->dropout(tx, ty, spec);
      const auto want = Cpu::values(ty);

      DeviceArray<float> dx(x), dy(n);
      cu::dropout(nullptr, dx.get(), dy.get(), n, spec);
      EXPECT_EQ(dy.download(), want) << "dropout p=" << p << " n=" << n;
      cu::dropout(nullptr, dx.get(), dx.get(), n, spec);  // in place
      EXPECT_EQ(dx.download(), want) << "in-place dropout p=" << p << " n=" << n;

      // index_base shifts the element indices: compare with the CPU's mask of
      // a longer tensor whose last n elements these are.
      const int64_t base = 1001;
      std::vector<float> longer(base, 1.0f);
      longer.insert(longer.end(), x.begin(), x.end());
      Tensor tl = cpu.f32({base + n}, longer), tly = cpu.f32({base + n}, std::vector<float>(base + n));
      cpu->dropout(tl, tly, spec);
      const auto all = Cpu::values(tly);
      dx.upload(x);
      cu::dropout(nullptr, dx.get(), dy.get(), n, spec, base);
      EXPECT_EQ(dy.download(), std::vector<float>(all.begin() + base, all.end()))
          << "dropout with index_base p=" << p << " n=" << n;
    }
  }
}

TEST(CudaKernels, SelectRowAndBackwardMatchCpuExactly) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (int64_t B : {1, 3, 8}) {
    for (int64_t L : {1, 5}) {
      for (int64_t H : {7, 64}) {
        for (int64_t row : {int64_t{0}, L - 1}) {
          const auto x = random_floats(B * L * H, 6), dout = random_floats(B * H, 7);
          Tensor tx = cpu.f32({B, L, H}, x), tout = cpu.f32({B, H}, std::vector<float>(B * H));
          Tensor tdout = cpu.f32({B, H}, dout), tdx = cpu.f32({B, L, H}, x);
          cpu->select_row(tx, row, tout);
          cpu->select_row_backward(tdout, row, tdx);

          DeviceArray<float> dx(x), dout_d(dout), dsel(B * H);
          cu::select_row(nullptr, dx.get(), B, L, H, row, dsel.get());
          EXPECT_EQ(dsel.download(), Cpu::values(tout)) << label("select_row", B, L, H) << " row " << row;
          cu::select_row_backward(nullptr, dout_d.get(), B, L, H, row, dx.get());
          EXPECT_EQ(dx.download(), Cpu::values(tdx)) << label("select_row_backward", B, L, H) << " row " << row;
        }
      }
    }
  }
}

TEST(CudaKernels, ColumnSumsMatchCpuBiasGradient) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (int64_t M : {1, 7, 513, 4097}) {
    for (int64_t N : {1, 7, 768, 1000}) {
      const auto dy = random_floats(M * N, 8), db0 = random_floats(N, 9);
      // The CPU computes the bias gradient inside linear_backward; K = 1 keeps the rest trivial.
      Tensor tdy = cpu.f32({M, N}, dy), tx = cpu.f32({M, 1}, random_floats(M, 10));
      Tensor tw = cpu.f32({N, 1}, random_floats(N, 11)), tdw = cpu.f32({N, 1}, std::vector<float>(N));
      Tensor tdb = cpu.f32({N}, db0);
      cpu->linear_backward(tdy, tx, tw, nullptr, tdw, &tdb);

      DeviceArray<float> ddy(dy), ddb(db0);
      std::vector<float> runs[2];
      for (auto& run : runs) {
        ddb.upload(db0);
        cu::column_sums_accumulate(nullptr, ddy.get(), M, N, ddb.get());
        run = ddb.download();
      }
      expect_close(runs[0], Cpu::values(tdb), label("column_sums", M, N));
      expect_same_bits(runs[0], runs[1], label("column_sums", M, N));
    }
  }
}

// ---- embeddings ----

TEST(CudaKernels, EmbeddingForwardMatchesCpuExactly) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  const int64_t V = 50;
  for (int64_t T : {1, 7, 1000}) {
    for (int64_t H : {7, 64}) {
      for (bool accumulate : {false, true}) {
        std::mt19937 gen(12);
        std::vector<int64_t> ids(T);
        for (auto& id : ids) id = std::uniform_int_distribution<int64_t>(0, V - 1)(gen);
        const auto table = random_floats(V * H, 13), out0 = random_floats(T * H, 14);
        Tensor tids = cpu.i64({T}, ids), ttable = cpu.f32({V, H}, table), tout = cpu.f32({T, H}, out0);
        cpu->embedding_forward(tids, ttable, tout, accumulate);

        DeviceArray<int64_t> dids(ids);
        DeviceArray<float> dtable(table), dout(out0);
        cu::embedding_forward(nullptr, dids.get(), dtable.get(), dout.get(), T, H, accumulate);
        EXPECT_EQ(dout.download(), Cpu::values(tout)) << label("embedding_forward", T, H) << " acc " << accumulate;
      }
    }
  }
}

struct EmbeddingCase {
  int64_t T, H, V, padding_idx;
  double repeat_fraction;  // share of tokens that take the most frequent id
  const char* what;
};

TEST(CudaKernels, EmbeddingBackwardIsDeterministicAndMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  const EmbeddingCase cases[] = {
      {1, 64, 10, -1, 0.0, "one token"},
      {7, 7, 3, 0, 0.3, "tiny, padding id 0 frequent"},
      {1000, 768, 2, -1, 0.0, "token types: two long runs across chunks"},
      {4097, 64, 50, 0, 0.2, "runs of ~80 across 64-token chunks"},
      {4097, 1000, 30522, 0, 0.25, "vocabulary, mostly short runs"},
      {4097, 768, 1, -1, 1.0, "one id for every token"},
      {4097, 768, 5, 3, 1.0, "every token the padding id"},
      {512, 4096, 100, 7, 0.1, "wide rows, one chunk"},
  };
  for (const auto& c : cases) {
    std::mt19937 gen(static_cast<uint32_t>(c.T * 31 + c.H));
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    std::uniform_int_distribution<int64_t> any(0, c.V - 1);
    const int64_t frequent = c.padding_idx >= 0 ? c.padding_idx : 0;
    std::vector<int64_t> ids(c.T);
    for (auto& id : ids) id = coin(gen) < c.repeat_fraction ? frequent : any(gen);
    const auto dout = random_floats(c.T * c.H, 15), table0 = random_floats(c.V * c.H, 16);
    Tensor tids = cpu.i64({c.T}, ids), tdout = cpu.f32({c.T, c.H}, dout), ttable = cpu.f32({c.V, c.H}, table0);
    cpu->embedding_backward(tids, tdout, ttable, c.padding_idx);

    DeviceArray<int64_t> dids(ids);
    DeviceArray<float> ddout(dout), dtable(table0);
    DeviceArray<char> scratch(cu::embedding_backward_scratch_bytes(c.T));
    std::vector<float> runs[2];
    for (auto& run : runs) {
      dtable.upload(table0);
      cu::embedding_backward(nullptr, dids.get(), ddout.get(), dtable.get(), c.T, c.H, c.V, c.padding_idx,
                             scratch.get());
      run = dtable.download();
    }
    const std::string tag = label("embedding_backward", c.T, c.H, c.V) + " (" + c.what + ")";
    expect_close(runs[0], Cpu::values(ttable), tag);
    expect_same_bits(runs[0], runs[1], tag);
    if (c.padding_idx >= 0) {
      // The padding row is untouched.
      const auto pad = std::vector<float>(runs[0].begin() + c.padding_idx * c.H,
                                          runs[0].begin() + (c.padding_idx + 1) * c.H);
      EXPECT_EQ(pad, std::vector<float>(table0.begin() + c.padding_idx * c.H,
                                        table0.begin() + (c.padding_idx + 1) * c.H))
          << tag;
    }
  }
}

// ---- LayerNorm ----

TEST(CudaKernels, LayerNormForwardAndBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (int64_t H : {64, 1000, 1024, 4096}) {
    for (int64_t rows : {1, 7, 513}) {
      // An offset mean tests that the variance does not cancel.
      const auto x = random_floats(rows * H, 17, 2.0f, 5.0f), gamma = random_floats(H, 18, 0.5f, 1.5f);
      const auto beta = random_floats(H, 19), dy = random_floats(rows * H, 20);
      const auto dgamma0 = random_floats(H, 21), dbeta0 = random_floats(H, 22);
      const double eps = 1e-12;
      Tensor tx = cpu.f32({rows, H}, x), tg = cpu.f32({H}, gamma), tb = cpu.f32({H}, beta);
      Tensor ty = cpu.f32({rows, H}, std::vector<float>(rows * H));
      Tensor tmean = cpu.f32({rows}, std::vector<float>(rows)), trstd = cpu.f32({rows}, std::vector<float>(rows));
      cpu->layernorm_forward(tx, tg, tb, eps, ty, tmean, trstd);
      Tensor tdy = cpu.f32({rows, H}, dy), tdx = cpu.f32({rows, H}, std::vector<float>(rows * H));
      Tensor tdg = cpu.f32({H}, dgamma0), tdb = cpu.f32({H}, dbeta0);
      cpu->layernorm_backward(tdy, tx, tmean, trstd, tg, tdx, tdg, tdb);

      DeviceArray<float> dx_in(x), dg(gamma), db(beta), dyv(dy), dout(rows * H), dmean(rows), drstd(rows);
      // Backward takes the CPU's mean and rstd, so that it is compared alone.
      DeviceArray<float> cmean(Cpu::values(tmean)), crstd(Cpu::values(trstd));
      DeviceArray<float> ddx(rows * H), ddg(H), ddb(H);
      DeviceArray<char> scratch(cu::layernorm_backward_scratch_bytes(rows, H));
      std::vector<float> y[2], mean[2], rstd[2], dx[2], dgam[2], dbet[2];
      for (int run = 0; run < 2; ++run) {
        cu::layernorm_forward(nullptr, dx_in.get(), dg.get(), db.get(), eps, dout.get(), dmean.get(), drstd.get(),
                              rows, H);
        ddg.upload(dgamma0);
        ddb.upload(dbeta0);
        cu::layernorm_backward(nullptr, dyv.get(), dx_in.get(), cmean.get(), crstd.get(), dg.get(), ddx.get(),
                               ddg.get(), ddb.get(), rows, H, scratch.get());
        y[run] = dout.download();
        mean[run] = dmean.download();
        rstd[run] = drstd.download();
        dx[run] = ddx.download();
        dgam[run] = ddg.download();
        dbet[run] = ddb.download();
      }
      const std::string tag = label("layernorm", rows, H);
      expect_close(y[0], Cpu::values(ty), tag + " y");
      expect_close(mean[0], Cpu::values(tmean), tag + " mean");
      expect_close(rstd[0], Cpu::values(trstd), tag + " rstd");
      expect_close(dx[0], Cpu::values(tdx), tag + " dx");
      expect_close(dgam[0], Cpu::values(tdg), tag + " dgamma");
      expect_close(dbet[0], Cpu::values(tdb), tag + " dbeta");
      for (auto* pair : {y, mean, rstd, dx, dgam, dbet}) expect_same_bits(pair[0], pair[1], tag);
    }
  }
}

// ---- losses ----

TEST(CudaKernels, CrossEntropyMatchesCpuWithIgnoredLabels) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 2},     {7, 3},    {9, 100},   {5, 300},
                                                 {513, 1000}, {4096, 2}, {64, 1000}, {3, 1500}};
  for (auto [B, C] : shapes) {
    for (bool all_ignored : {false, true}) {
      if (all_ignored && B > 7) continue;
      std::mt19937 gen(static_cast<uint32_t>(B + C));
      std::vector<int64_t> labels(B);
      for (auto& y : labels) y = std::uniform_int_distribution<int64_t>(0, C - 1)(gen);
      for (int64_t b = 1; b < B; b += 3) labels[b] = -100;  // ignored rows
      if (all_ignored) std::fill(labels.begin(), labels.end(), -100);
      const auto logits = random_floats(B * C, 23, -8.0f, 8.0f);
      Tensor tl = cpu.f32({B, C}, logits), ty = cpu.i64({B}, labels);
      Tensor td = cpu.f32({B, C}, std::vector<float>(B * C));
      const double want = cpu->cross_entropy(tl, ty, td);

      DeviceArray<float> dl(logits), dd(B * C);
      DeviceArray<int64_t> dy(labels);
      DeviceArray<double> loss(1);
      double got[2];
      std::vector<float> grads[2];
      for (int run = 0; run < 2; ++run) {
        cu::cross_entropy(nullptr, dl.get(), dy.get(), dd.get(), loss.get(), B, C);
        got[run] = read_double(loss);
        grads[run] = dd.download();
      }
      const std::string tag = label("cross_entropy", B, C) + (all_ignored ? " all ignored" : "");
      if (all_ignored) EXPECT_TRUE(std::isnan(got[0])) << tag;
      expect_close(got[0], want, tag + " loss");
      expect_close(grads[0], Cpu::values(td), tag + " dlogits");
      expect_same_bits(got[0], got[1], tag);
      expect_same_bits(grads[0], grads[1], tag);
    }
  }
}

// --label-smoothing-factor: the target (1 − ε)·one-hot + ε/C; the CPU backend's
// loss and dlogits (themselves checked against PyTorch's LabelSmoother in
// tests/test_label_smoothing.cpp), over every register-tiling of the row (K = 1,
// 4, 16, 32 and the loop), with ignored rows; ε = 0 gives the plain kernel's bits.
TEST(CudaKernels, CrossEntropyWithLabelSmoothingMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 2}, {7, 3}, {9, 100}, {5, 300}, {513, 1000}, {3, 1500}};
  for (auto [B, C] : shapes) {
    std::mt19937 gen(static_cast<uint32_t>(B * 7 + C));
    std::vector<int64_t> labels(B);
    for (auto& y : labels) y = std::uniform_int_distribution<int64_t>(0, C - 1)(gen);
    for (int64_t b = 1; b < B; b += 3) labels[b] = -100;  // ignored rows
    const auto logits = random_floats(B * C, 29, -8.0f, 8.0f);
    DeviceArray<float> dl(logits), dd(B * C);
    DeviceArray<int64_t> dy(labels);
    DeviceArray<double> loss(1);
    cu::cross_entropy(nullptr, dl.get(), dy.get(), dd.get(), loss.get(), B, C);
    const double plain = read_double(loss);
    const std::vector<float> plain_grad = dd.download();
    for (double eps : {0.0, 0.1, 0.3, 1.0}) {
      Tensor tl = cpu.f32({B, C}, logits), ty = cpu.i64({B}, labels);
      Tensor td = cpu.f32({B, C}, std::vector<float>(B * C));
      const double want = cpu->cross_entropy(tl, ty, td, eps);
      cu::cross_entropy(nullptr, dl.get(), dy.get(), dd.get(), loss.get(), B, C, eps);
      const double got = read_double(loss);
      const std::vector<float> grad = dd.download();
      const std::string tag = label("cross_entropy", B, C) + " eps " + std::to_string(eps);
      expect_close(got, want, tag + " loss");
      expect_close(grad, Cpu::values(td), tag + " dlogits");
      if (eps == 0.0) {
        expect_same_bits(got, plain, tag + " (eps 0 is the plain loss)");
        expect_same_bits(grad, plain_grad, tag + " (eps 0 is the plain loss)");
      }
    }
  }
}

TEST(CudaKernels, MseAndBceWithLogitsMatchCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (int64_t n : kSizes) {
    const auto logits = random_floats(n, 24, -20.0f, 20.0f);  // wide, to reach both tails of the BCE
    const auto targets = random_floats(n, 25, 0.0f, 1.0f);
    Tensor tl = cpu.f32({n}, logits), tt = cpu.f32({n}, targets);
    Tensor tdm = cpu.f32({n}, std::vector<float>(n)), tdb = cpu.f32({n}, std::vector<float>(n));
    const double want_mse = cpu->mse(tl, tt, tdm);
    const double want_bce = cpu->bce_with_logits(tl, tt, tdb);

    DeviceArray<float> dl(logits), dt(targets), dd(n);
    DeviceArray<double> loss(1);
    double mse_loss[2], bce_loss[2];
    std::vector<float> mse_grad[2], bce_grad[2];
    for (int run = 0; run < 2; ++run) {
      cu::mse(nullptr, dl.get(), dt.get(), dd.get(), loss.get(), n);
      mse_loss[run] = read_double(loss);
      mse_grad[run] = dd.download();
      cu::bce_with_logits(nullptr, dl.get(), dt.get(), dd.get(), loss.get(), n);
      bce_loss[run] = read_double(loss);
      bce_grad[run] = dd.download();
    }
    expect_close(mse_loss[0], want_mse, label("mse loss", n));
    expect_close(mse_grad[0], Cpu::values(tdm), label("mse dlogits", n));
    expect_close(bce_loss[0], want_bce, label("bce loss", n));
    expect_close(bce_grad[0], Cpu::values(tdb), label("bce dlogits", n));
    expect_same_bits(mse_loss[0], mse_loss[1], label("mse", n));
    expect_same_bits(mse_grad[0], mse_grad[1], label("mse", n));
    expect_same_bits(bce_loss[0], bce_loss[1], label("bce", n));
    expect_same_bits(bce_grad[0], bce_grad[1], label("bce", n));
  }
}

// ---- optimizer ----

TEST(CudaKernels, SumOfSquaresMatchesCpuWhateverTheAlignment) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{4097}, (int64_t{1} << 22) + 5}) {
    const auto x = random_floats(n, 26);
    const double want = n ? cpu->sum_of_squares(cpu.f32({n}, x)) : 0.0;
    std::vector<float> shifted(1, 0.0f);
    shifted.insert(shifted.end(), x.begin(), x.end());
    DeviceArray<float> aligned(x), misaligned(shifted);
    DeviceArray<char> scratch(cu::sum_of_squares_scratch_bytes(n));
    DeviceArray<double> result(1);
    double got[3];
    for (int run = 0; run < 2; ++run) {
      cu::sum_of_squares(nullptr, aligned.get(), n, result.get(), scratch.get());
      got[run] = read_double(result);
    }
    cu::sum_of_squares(nullptr, misaligned.get() + 1, n, result.get(), scratch.get());
    got[2] = read_double(result);
    // Both sides sum in double, in different orders; over 4M terms the CPU's
    // running sum alone drifts by ~1e-12 relative.
    expect_close(got[0], want, label("sum_of_squares", n), 1e-9);
    expect_same_bits(got[0], got[1], label("sum_of_squares", n));
    expect_same_bits(got[0], got[2], label("sum_of_squares misaligned", n));
  }
}

TEST(CudaKernels, AdamWMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (int64_t n : kSizes) {
    auto param = random_floats(n, 27), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
    Tensor tp = cpu.f32({n}, param), tm = cpu.f32({n}, m), tv = cpu.f32({n}, v);
    DeviceArray<float> dp(param), dm(m), dv(v), dg(n);
    anatomy::AdamWHyper hp;
    hp.lr = 1e-3;
    hp.weight_decay = 0.01;
    for (int64_t step = 1; step <= 3; ++step) {
      hp.step = step;
      const auto grad = random_floats(n, static_cast<uint32_t>(100 + step), -0.1f, 0.1f);
      cpu->adamw_step(tp, cpu.f32({n}, grad), tm, tv, hp);
      dg.upload(grad);
      cu::adamw_step(nullptr, dp.get(), dg.get(), dm.get(), dv.get(), n, hp);
    }
    expect_close(dp.download(), Cpu::values(tp), label("adamw param", n));
    expect_close(dm.download(), Cpu::values(tm), label("adamw exp_avg", n));
    expect_close(dv.download(), Cpu::values(tv), label("adamw exp_avg_sq", n));
  }
}

// ---- throughput (run with --gtest_also_run_disabled_tests) ----

// Times a launcher over a few repetitions and prints effective bandwidth.
template <typename F>
void report_bandwidth(const char* what, double bytes, F launch) {
  launch();
  ANATOMY_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  ANATOMY_CUDA_CHECK(cudaEventCreate(&start));
  ANATOMY_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kReps = 20;
  ANATOMY_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < kReps; ++i) launch();
  ANATOMY_CUDA_CHECK(cudaEventRecord(stop));
  ANATOMY_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const double us = 1e3 * ms / kReps;
  std::printf("  %-44s %9.1f us  %7.0f GB/s\n", what, us, bytes / (us * 1e3));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
}

TEST(CudaKernels, DISABLED_Throughput) {
  SKIP_WITHOUT_GPU();
  const int64_t T = 32 * 512, H = 768, F = 3072, n = T * F;
  DeviceArray<float> a(random_floats(n, 1)), b(random_floats(n, 2)), c(n);
  report_bandwidth("add 16k x 3072", 12.0 * n, [&] { cu::add(nullptr, a.get(), b.get(), c.get(), n); });
  report_bandwidth("gelu_erf forward 16k x 3072", 8.0 * n,
                   [&] { cu::activation_forward(nullptr, ActivationKind::GeluErf, a.get(), c.get(), n); });
  report_bandwidth("gelu_erf backward 16k x 3072", 12.0 * n, [&] {
    cu::activation_backward(nullptr, ActivationKind::GeluErf, a.get(), b.get(), c.get(), n);
  });
  report_bandwidth("dropout p=0.1 16k x 3072", 8.0 * n,
                   [&] { cu::dropout(nullptr, a.get(), c.get(), n, {0.1f, 1, 2}); });
  report_bandwidth("column_sums 16k x 3072", 4.0 * n,
                   [&] { cu::column_sums_accumulate(nullptr, a.get(), T, F, c.get()); });
  DeviceArray<float> g(random_floats(H, 3)), mean(T), rstd(T), dg(H), db(H);
  DeviceArray<char> ln_scratch(cu::layernorm_backward_scratch_bytes(T, H));
  report_bandwidth("layernorm forward 16k x 768", 8.0 * T * H, [&] {
    cu::layernorm_forward(nullptr, a.get(), g.get(), g.get(), 1e-12, c.get(), mean.get(), rstd.get(), T, H);
  });
  report_bandwidth("layernorm backward 16k x 768", 12.0 * T * H, [&] {
    cu::layernorm_backward(nullptr, b.get(), a.get(), mean.get(), rstd.get(), g.get(), c.get(), dg.get(), db.get(),
                           T, H, ln_scratch.get());
  });
  std::vector<int64_t> words(T), types(T, 0);
  std::mt19937 gen(5);
  for (auto& id : words) id = std::uniform_int_distribution<int64_t>(0, 30521)(gen);
  DeviceArray<int64_t> dwords(words), dtypes(types);
  DeviceArray<float> table(int64_t{30522} * H);
  DeviceArray<char> emb_scratch(cu::embedding_backward_scratch_bytes(T));
  report_bandwidth("embedding_backward words 16k x 768", 8.0 * T * H, [&] {
    cu::embedding_backward(nullptr, dwords.get(), a.get(), table.get(), T, H, 30522, 0, emb_scratch.get());
  });
  report_bandwidth("embedding_backward one type 16k x 768", 4.0 * T * H, [&] {
    cu::embedding_backward(nullptr, dtypes.get(), a.get(), table.get(), T, H, 2, -1, emb_scratch.get());
  });
  DeviceArray<char> sq_scratch(cu::sum_of_squares_scratch_bytes(n));
  DeviceArray<double> result(1);
  report_bandwidth("sum_of_squares 50M", 4.0 * n,
                   [&] { cu::sum_of_squares(nullptr, a.get(), n, result.get(), sq_scratch.get()); });
  anatomy::AdamWHyper hp;
  DeviceArray<float> m(n), v(n);
  report_bandwidth("adamw 50M", 28.0 * n,
                   [&] { cu::adamw_step(nullptr, c.get(), b.get(), m.get(), v.get(), n, hp); });
  DeviceArray<int64_t> labels(std::vector<int64_t>(4096, 1));
  DeviceArray<double> loss(1);
  report_bandwidth("cross_entropy 4096 x 1000", 8.0 * 4096 * 1000, [&] {
    cu::cross_entropy(nullptr, a.get(), labels.get(), c.get(), loss.get(), 4096, 1000);
  });
}

}  // namespace
