// test_cuda_kernels_half.cu: the 16-bit (bf16 and fp16) launchers of
// kernels/cuda/kernels.cuh against the float32 CPU backend, the reference.
//
// Inputs are drawn, rounded to the 16-bit format on the host
// (anatomy::float_to_bf16 / float_to_f16), and the same values go to both
// sides: as 16-bit bits to the GPU, widened to float to the CPU. A GPU output
// converted back must equal round(CPU float result), with round the host's
// round-to-nearest-even, within 1 ulp of the 16-bit format. Why 1 ulp: the
// GPU widens exactly, does the float32 kernel's arithmetic and rounds once; a
// float result that differs from the CPU's by a few float ulps (float erfc
// against double erf, double sums in another order) is 2^13 (fp16) to 2^16
// (bf16) times finer than a 16-bit ulp, so it can change the 16-bit rounding
// only when it lies that close to a rounding midpoint, and then only to the
// neighbouring value. Where the float32 kernel is exact (add, dropout, rows,
// ReLU, the tanh derivative, the embedding sum) the bound is 0 ulp. Where the
// float32 kernel is itself held to an absolute tolerance because one side's
// formula cancels, an element of the GELUs may instead be within that same
// absolute tolerance, 1e-5·max(1, max|cpu|): the GPU's float derivative near
// its root at x ≈ −0.75 (a tiny value, a difference of two large terms), and
// the CPU's own 1 + erf(x/√2) in double, which is 0 for x below about −8.3
// (at x = −12 the CPU gives −0 where the GPU's erfc form gives the true
// −2.1e-32, thousands of bf16 ulps apart); every comparison prints how many
// elements took each way. float32 outputs (LayerNorm statistics and parameter
// gradients, embedding gradients, AdamW state) are compared as in
// test_cuda_kernels.cu, and where the 16-bit launcher shares the float32
// kernel's summation order, bit for bit with the float32 launcher run on the
// widened inputs. Every launcher runs twice and must give the same bits; sizes
// are odd, so that blocks and 8-element groups are partly filled, and an
// offset of one element sends the unaligned pointers down the scalar paths.
// Every test skips itself on a machine without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/fused.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace {

using anatomy::ActivationKind;
using anatomy::Backend;
using anatomy::Category;
using anatomy::DType;
using anatomy::Shape;
using anatomy::Tensor;
namespace cu = anatomy::cuda;
using cu::Half;

#define SKIP_WITHOUT_GPU() \
  if (anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

constexpr double kTolerance = 1e-5;  // the float32 kernels' tolerance (test_cuda_kernels.cu)

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
  void upload(const std::vector<T>& host, size_t offset = 0) {
    ASSERT_LE(offset + host.size(), n_);
    ANATOMY_CUDA_CHECK(cudaMemcpy(ptr_ + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
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
  Tensor zeros(Shape shape) {
    Tensor t = Tensor::empty(backend_->ledger(), std::move(shape), DType::F32, Category::Temporary, "t");
    std::memset(t.raw(), 0, t.nbytes());
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

// ---- the two 16-bit formats ----

struct Format {
  Half half;
  const char* name;
  uint16_t (*narrow)(float);  // round to nearest even, on the host
  float (*widen)(uint16_t);
};

const Format kFormats[] = {{Half::BF16, "bf16", anatomy::float_to_bf16, anatomy::bf16_to_float},
                           {Half::F16, "fp16", anatomy::float_to_f16, anatomy::f16_to_float}};

// Values drawn in [lo, hi) and rounded to the format: the bits for the GPU and
// the (exactly) widened floats for the CPU.
struct Drawn {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

Drawn quantize(const Format& f, const std::vector<float>& x) {
  Drawn d;
  d.bits.resize(x.size());
  d.values.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    d.bits[i] = f.narrow(x[i]);
    d.values[i] = f.widen(d.bits[i]);
  }
  return d;
}

Drawn draw(const Format& f, size_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  return quantize(f, random_floats(n, seed, lo, hi));
}

std::vector<uint16_t> narrow_all(const Format& f, const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f.narrow(x[i]);
  return b;
}

bool is_nan_bits(uint16_t b, const Format& f) { return std::isnan(f.widen(b)); }

// Distance in units in the last place between two 16-bit values of one format
// (sign-magnitude bits mapped onto an ordered integer line; +0 and −0 are one
// point). Both NaN counts as equal, one NaN as infinitely far.
int64_t ulp_distance(uint16_t a, uint16_t b, const Format& f) {
  const bool na = is_nan_bits(a, f), nb = is_nan_bits(b, f);
  if (na || nb) return na && nb ? 0 : std::numeric_limits<int64_t>::max();
  auto ordered = [](uint16_t v) -> int64_t { return (v & 0x8000u) ? -static_cast<int64_t>(v & 0x7fffu) : v; };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Each gpu[i] within max_ulp of round(cpu[i]), or (abs_tol > 0) within abs_tol
// of cpu[i] as a float; prints how many elements took each way.
void expect_rounded(const std::vector<uint16_t>& gpu, const std::vector<float>& cpu, const Format& f,
                    const std::string& what, int64_t max_ulp, double abs_tol = 0.0) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t exact = 0, within = 0, by_tolerance = 0, bad = 0;
  int64_t worst = 0;
  size_t worst_index = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const int64_t d = ulp_distance(gpu[i], f.narrow(cpu[i]), f);
    if (d == 0) {
      ++exact;
    } else if (d <= max_ulp) {
      ++within;
    } else if (abs_tol > 0.0 && std::fabs(static_cast<double>(f.widen(gpu[i])) - cpu[i]) <= abs_tol) {
      ++by_tolerance;
    } else {
      ++bad;
      if (d > worst) worst = d, worst_index = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements beyond " << max_ulp << " ulp; worst " << worst
                     << " ulp at " << worst_index << " (gpu " << f.widen(gpu[worst_index]) << ", cpu "
                     << cpu[worst_index] << ")";
  std::printf("  %-60s %zu exact, %zu at 1 ulp, %zu by the float tolerance, of %zu\n", what.c_str(), exact, within,
              by_tolerance, cpu.size());
}

// The float tolerance of test_cuda_kernels.cu for a reference vector.
double float_tolerance(const std::vector<float>& cpu) {
  double max_cpu = 0.0;
  for (float v : cpu)
    if (!std::isnan(v)) max_cpu = std::max(max_cpu, std::fabs(static_cast<double>(v)));
  return kTolerance * std::max(1.0, max_cpu);
}

// float outputs: max|gpu − cpu| ≤ tol·max(1, max|cpu|), NaN where the CPU has NaN.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::string& what,
                  double tol = kTolerance) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double max_cpu = 0.0, max_diff = 0.0;
  size_t nan_mismatch = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isnan(cpu[i]) || std::isnan(gpu[i])) {
      nan_mismatch += std::isnan(cpu[i]) != std::isnan(gpu[i]);
      continue;
    }
    max_cpu = std::max(max_cpu, std::fabs(static_cast<double>(cpu[i])));
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(gpu[i]) - cpu[i]));
  }
  EXPECT_EQ(nan_mismatch, 0u) << what;
  EXPECT_LE(max_diff, tol * std::max(1.0, max_cpu)) << what << ": max |cpu| " << max_cpu;
}

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0)
      << what << ": the vectors differ in their bits";
}

std::string label(const Format& f, const char* op, int64_t a, int64_t b = -1, int64_t c = -1) {
  std::string s = std::string(f.name) + " " + op + " " + std::to_string(a);
  if (b >= 0) s += "x" + std::to_string(b);
  if (c >= 0) s += "x" + std::to_string(c);
  return s;
}

// `offset` zero elements, then v: a device copy at +offset is 2-byte (16-bit)
// or 4-byte (float) aligned only, which takes the scalar paths.
template <typename T>
std::vector<T> padded(const std::vector<T>& v, size_t offset) {
  std::vector<T> out(offset, T{});
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

const std::vector<int64_t> kSizes = {1, 7, 9, 1000, 4097, 100003};

// ---- casts ----

TEST(CudaKernelsHalf, CastsRoundToNearestEvenAsTheHostDoes) {
  SKIP_WITHOUT_GPU();
  for (const auto& f : kFormats) {
    // Widening: every one of the 65536 bit patterns, exactly.
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    DeviceArray<uint16_t> dall(all);
    DeviceArray<float> dwide(all.size());
    cu::cast_half_to_f32(nullptr, f.half, dall.get(), dwide.get(), static_cast<int64_t>(all.size()));
    const auto wide = dwide.download();
    size_t wrong = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = f.widen(all[i]);
      if (std::isnan(want) ? !std::isnan(wide[i]) : std::memcmp(&want, &wide[i], 4) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << f.name << " cast_half_to_f32 over all bit patterns";

    // Narrowing: random bit patterns (every exponent: subnormals, overflow,
    // inf, NaN), exact midpoints between neighbours, and the edges of range.
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{9}, (int64_t{1} << 20) + 3}) {
      for (size_t off : {0, 1}) {
        std::mt19937 gen(static_cast<uint32_t>(n + off));
        std::vector<float> x(n);
        for (auto& v : x) {
          const uint32_t bits = gen();
          std::memcpy(&v, &bits, 4);
        }
        const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f,
                                  6.1e-5f, 5.96e-8f, 2.98e-8f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                                  1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 3.0e38f, 1e-40f};
        for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i) x[(i * 7919) % x.size()] = specials[i];
        // Midpoints of random neighbours, where round-to-even decides.
        for (size_t i = 0; i + 17 < x.size(); i += 97) {
          const uint16_t b = static_cast<uint16_t>(gen() & 0x7bffu);
          const double lo = f.widen(b), hi = f.widen(static_cast<uint16_t>(b + 1));
          if (std::isfinite(lo) && std::isfinite(hi)) x[i + 17] = static_cast<float>((lo + hi) / 2);
        }
        DeviceArray<float> dx(padded(x, off));
        DeviceArray<uint16_t> dy(n + off);
        cu::cast_f32_to_half(nullptr, f.half, dx.get() + off, dy.get() + off, n);
        const auto got = dy.download(off);
        size_t mismatches = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const uint16_t want = f.narrow(x[i]);
          if (std::isnan(x[i]) ? !is_nan_bits(got[i], f) : got[i] != want) ++mismatches;
        }
        EXPECT_EQ(mismatches, 0u) << label(f, "cast_f32_to_half", n) << " offset " << off;
      }
    }
  }
}

// ---- element-wise ----

TEST(CudaKernelsHalf, AddAndAddInplaceRoundTheFloatSum) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (const auto& f : kFormats) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, int64_t{1000}, int64_t{4097},
                      int64_t{100003}}) {
      for (size_t off : {0, 1}) {
        const auto a = draw(f, n, 1), b = draw(f, n, 2);
        DeviceArray<uint16_t> da(padded(a.bits, off)), db(padded(b.bits, off)), dout(n + off);
        std::vector<uint16_t> sum[2];
        for (auto& run : sum) {
          cu::add_half(nullptr, f.half, da.get() + off, db.get() + off, dout.get() + off, n);
          run = dout.download(off);
        }
        cu::add_inplace_half(nullptr, f.half, da.get() + off, db.get() + off, n);
        const auto inplace = da.download(off);
        if (n == 0) continue;  // the launches must simply not fail

        Tensor ta = cpu.f32({n}, a.values), tb = cpu.f32({n}, b.values), tout = cpu.zeros({n});
        cpu->add(ta, tb, tout);
        const std::string tag = label(f, "add", n) + " offset " + std::to_string(off);
        expect_rounded(sum[0], Cpu::values(tout), f, tag, 0);
        expect_rounded(inplace, Cpu::values(tout), f, tag + " in place", 0);
        expect_same_bits(sum[0], sum[1], tag + " two runs");
      }
    }
  }
}

TEST(CudaKernelsHalf, ActivationsMatchCpuWithinOneUlp) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  const std::pair<ActivationKind, const char*> kinds[] = {{ActivationKind::GeluErf, "gelu_erf"},
                                                          {ActivationKind::GeluTanh, "gelu_tanh"},
                                                          {ActivationKind::Relu, "relu"},
                                                          {ActivationKind::Tanh, "tanh"}};
  for (const auto& f : kFormats) {
    for (auto [kind, name] : kinds) {
      for (int64_t n : kSizes) {
        for (size_t off : {0, 1}) {
          if (off && n < 1000) continue;
          auto xs = random_floats(n, 3, -6.0f, 6.0f);
          const float specials[] = {0.0f, -0.0f, 12.0f, -12.0f, 30.0f, -30.0f, 1e-3f, -0.75f};
          for (size_t i = 0; i < std::size(specials) && i < xs.size(); ++i) xs[i * 131 % xs.size()] = specials[i];
          const auto x = quantize(f, xs), dy = draw(f, n, 4);
          Tensor tx = cpu.f32({n}, x.values), ty = cpu.zeros({n});
          cpu->activation_forward(kind, tx, ty);
          // The model saves the 16-bit output for tanh: round it, as the GPU stores it.
          const auto y_cpu = Cpu::values(ty);
          const Drawn saved = kind == ActivationKind::Tanh ? quantize(f, y_cpu) : x;
          Tensor tsaved = cpu.f32({n}, saved.values), tdy = cpu.f32({n}, dy.values), tdx = cpu.zeros({n});
          cpu->activation_backward(kind, tsaved, tdy, tdx);
          const auto dx_cpu = Cpu::values(tdx);

          DeviceArray<uint16_t> dxin(padded(x.bits, off)), dsaved(padded(saved.bits, off)),
              ddy(padded(dy.bits, off)), dout(n + off), dgrad(n + off);
          std::vector<uint16_t> fwd[2], bwd[2];
          for (int run = 0; run < 2; ++run) {
            cu::activation_forward_half(nullptr, f.half, kind, dxin.get() + off, dout.get() + off, n);
            cu::activation_backward_half(nullptr, f.half, kind, dsaved.get() + off, ddy.get() + off,
                                         dgrad.get() + off, n);
            fwd[run] = dout.download(off);
            bwd[run] = dgrad.download(off);
          }
          const std::string tag = label(f, name, n) + (off ? " unaligned" : "");
          const bool exact = kind == ActivationKind::Relu;
          const bool gelu = kind == ActivationKind::GeluErf || kind == ActivationKind::GeluTanh;
          expect_rounded(fwd[0], y_cpu, f, tag + " forward", exact ? 0 : 1, gelu ? float_tolerance(y_cpu) : 0.0);
          const bool exact_bwd = kind == ActivationKind::Relu || kind == ActivationKind::Tanh;
          expect_rounded(bwd[0], dx_cpu, f, tag + " backward", exact_bwd ? 0 : 1,
                         exact_bwd ? 0.0 : float_tolerance(dx_cpu));
          expect_same_bits(fwd[0], fwd[1], tag + " forward two runs");
          expect_same_bits(bwd[0], bwd[1], tag + " backward two runs");
          if (gelu) {  // the backend's GELU forward (fused_activation.cu): the same bits
            cu::gelu_forward_half(nullptr, f.half, kind, dxin.get() + off, dout.get() + off, n);
            expect_same_bits(dout.download(off), fwd[0], tag + " gelu_forward_half");
          }

          // The same element functions as the float32 kernels: the float32
          // launchers on the widened inputs, rounded, give the same bits.
          // Not the erf GELU, whose 16-bit functions take a cheaper erfc
          // (activation_math.cuh); CudaBackendActivation.GeluFor16BitValues-
          // RoundsTheExactGelu checks them on every 16-bit input instead.
          if (kind != ActivationKind::GeluErf) {
            DeviceArray<float> fx(x.values), fsaved(saved.values), fdy(dy.values), fy(n), fdx(n);
            cu::activation_forward(nullptr, kind, fx.get(), fy.get(), n);
            cu::activation_backward(nullptr, kind, fsaved.get(), fdy.get(), fdx.get(), n);
            EXPECT_EQ(fwd[0], narrow_all(f, fy.download())) << tag << " forward against the float32 kernel";
            EXPECT_EQ(bwd[0], narrow_all(f, fdx.download())) << tag << " backward against the float32 kernel";
          }
        }
      }
    }
  }
}

TEST(CudaKernelsHalf, DropoutUsesTheFloatMaskAndRoundsOnce) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (const auto& f : kFormats) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      for (int64_t n : kSizes) {
        const anatomy::DropoutSpec spec{p, 1234, 7};
        const auto x = draw(f, n, 5);
        Tensor tx = cpu.f32({n}, x.values), ty = cpu.zeros({n});
        cpu->dropout(tx, ty, spec);
        const auto want = Cpu::values(ty);
        const std::string tag = label(f, "dropout", n) + " p=" + std::to_string(p);

        DeviceArray<uint16_t> dx(x.bits), dy(n);
        std::vector<uint16_t> runs[2];
        for (auto& run : runs) {
          cu::dropout_half(nullptr, f.half, dx.get(), dy.get(), n, spec);
          run = dy.download();
        }
        expect_rounded(runs[0], want, f, tag, 0);
        expect_same_bits(runs[0], runs[1], tag + " two runs");
        cu::dropout_half(nullptr, f.half, dx.get(), dx.get(), n, spec);  // in place
        expect_rounded(dx.download(), want, f, tag + " in place", 0);

        // index_base: the last n elements of a longer tensor's mask; unaligned.
        const int64_t base = 1001;
        std::vector<float> longer(base, 1.0f);
        longer.insert(longer.end(), x.values.begin(), x.values.end());
        Tensor tl = cpu.f32({base + n}, longer), tly = cpu.zeros({base + n});
        cpu->dropout(tl, tly, spec);
        const auto all = Cpu::values(tly);
        DeviceArray<uint16_t> ux(padded(x.bits, 1)), uy(n + 1);
        cu::dropout_half(nullptr, f.half, ux.get() + 1, uy.get() + 1, n, spec, base);
        expect_rounded(uy.download(1), std::vector<float>(all.begin() + base, all.end()), f,
                       tag + " index_base unaligned", 0);
      }
    }
  }
}

TEST(CudaKernelsHalf, SelectRowAndBackwardMatchCpuExactly) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (const auto& f : kFormats) {
    for (int64_t B : {1, 3, 8}) {
      for (int64_t L : {1, 5}) {
        for (int64_t H : {7, 64}) {
          for (int64_t row : {int64_t{0}, L - 1}) {
            const auto x = draw(f, B * L * H, 6), dout = draw(f, B * H, 7);
            Tensor tx = cpu.f32({B, L, H}, x.values), tout = cpu.zeros({B, H});
            Tensor tdout = cpu.f32({B, H}, dout.values), tdx = cpu.f32({B, L, H}, x.values);
            cpu->select_row(tx, row, tout);
            cpu->select_row_backward(tdout, row, tdx);

            DeviceArray<uint16_t> dx(x.bits), ddout(dout.bits), dsel(B * H);
            cu::select_row_half(nullptr, f.half, dx.get(), B, L, H, row, dsel.get());
            const std::string tag = label(f, "select_row", B, L, H) + " row " + std::to_string(row);
            expect_rounded(dsel.download(), Cpu::values(tout), f, tag, 0);
            cu::select_row_backward_half(nullptr, f.half, ddout.get(), B, L, H, row, dx.get());
            expect_rounded(dx.download(), Cpu::values(tdx), f, tag + " backward", 0);
          }
        }
      }
    }
  }
}

TEST(CudaKernelsHalf, ColumnSumsOfHalfGradientsMatchCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (const auto& f : kFormats) {
    for (int64_t M : {1, 7, 513, 4097}) {
      for (int64_t N : {1, 7, 768}) {
        const auto dy = draw(f, M * N, 8);
        const auto db0 = random_floats(N, 9);
        // The CPU computes the bias gradient inside linear_backward; K = 1 keeps the rest trivial.
        Tensor tdy = cpu.f32({M, N}, dy.values), tx = cpu.f32({M, 1}, random_floats(M, 10));
        Tensor tw = cpu.f32({N, 1}, random_floats(N, 11)), tdw = cpu.zeros({N, 1}), tdb = cpu.f32({N}, db0);
        cpu->linear_backward(tdy, tx, tw, nullptr, tdw, &tdb);

        DeviceArray<uint16_t> ddy(dy.bits);
        DeviceArray<float> ddb(db0), fdy(dy.values), fdb(db0);
        std::vector<float> runs[2];
        for (auto& run : runs) {
          ddb.upload(db0);
          cu::column_sums_accumulate_half(nullptr, f.half, ddy.get(), M, N, ddb.get());
          run = ddb.download();
        }
        cu::column_sums_accumulate(nullptr, fdy.get(), M, N, fdb.get());
        const std::string tag = label(f, "column_sums", M, N);
        expect_close(runs[0], Cpu::values(tdb), tag);
        expect_same_bits(runs[0], runs[1], tag + " two runs");
        expect_same_bits(runs[0], fdb.download(), tag + " against the float32 launcher");
      }
    }
  }
}

// ---- embeddings ----

TEST(CudaKernelsHalf, EmbeddingSumForwardRoundsTheFloatSumOnce) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  const int64_t V = 50, P = 40, Y = 2;
  for (const auto& f : kFormats) {
    for (int64_t T : {1, 7, 1000}) {
      for (int64_t H : {7, 64, 768}) {
        for (int variant = 0; variant < 3; ++variant) {  // 0 all three, 1 no token types, 2 unaligned
          std::mt19937 gen(static_cast<uint32_t>(12 + T + H));
          std::vector<int64_t> ids(T), pos(T), types(T);
          for (auto& id : ids) id = std::uniform_int_distribution<int64_t>(0, V - 1)(gen);
          for (int64_t t = 0; t < T; ++t) pos[t] = t % P;
          for (auto& id : types) id = std::uniform_int_distribution<int64_t>(0, Y - 1)(gen);
          // The tables are the float32 masters: not rounded.
          const auto word = random_floats(V * H, 13), ptab = random_floats(P * H, 14), ytab = random_floats(Y * H, 15);
          Tensor tids = cpu.i64({T}, ids), tpos = cpu.i64({T}, pos), ttypes = cpu.i64({T}, types);
          Tensor tout = cpu.zeros({T, H});
          cpu->embedding_forward(tids, cpu.f32({V, H}, word), tout, false);
          cpu->embedding_forward(tpos, cpu.f32({P, H}, ptab), tout, true);
          if (variant != 1) cpu->embedding_forward(ttypes, cpu.f32({Y, H}, ytab), tout, true);

          const size_t off = variant == 2 ? 1 : 0;
          DeviceArray<int64_t> dids(ids), dpos(pos), dtypes(types);
          DeviceArray<float> dword(padded(word, off)), dptab(padded(ptab, off)), dytab(padded(ytab, off));
          DeviceArray<uint16_t> dout(T * H + off);
          std::vector<uint16_t> runs[2];
          for (auto& run : runs) {
            cu::embedding_sum_forward_half(nullptr, f.half, dids.get(), dpos.get(),
                                           variant == 1 ? nullptr : dtypes.get(), dword.get() + off,
                                           dptab.get() + off, variant == 1 ? nullptr : dytab.get() + off,
                                           dout.get() + off, T, H);
            run = dout.download(off);
          }
          const std::string tag = label(f, "embedding_sum_forward", T, H) +
                                  (variant == 1 ? " no types" : variant == 2 ? " unaligned" : "");
          expect_rounded(runs[0], Cpu::values(tout), f, tag, 0);
          expect_same_bits(runs[0], runs[1], tag + " two runs");
        }
      }
    }
  }
}

TEST(CudaKernelsHalf, EmbeddingBackwardOfHalfGradientsIsTheFloat32Result) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  struct Case {
    int64_t T, H, V, padding_idx;
    double repeat_fraction;
  };
  const Case cases[] = {{1, 64, 10, -1, 0.0},       {7, 7, 3, 0, 0.3},         {1000, 768, 2, -1, 0.0},
                        {4097, 64, 50, 0, 0.2},     {4097, 768, 30522, 0, 0.25}, {4097, 768, 5, 3, 1.0}};
  for (const auto& f : kFormats) {
    for (const auto& c : cases) {
      std::mt19937 gen(static_cast<uint32_t>(c.T * 31 + c.H));
      std::uniform_real_distribution<double> coin(0.0, 1.0);
      std::uniform_int_distribution<int64_t> any(0, c.V - 1);
      const int64_t frequent = c.padding_idx >= 0 ? c.padding_idx : 0;
      std::vector<int64_t> ids(c.T);
      for (auto& id : ids) id = coin(gen) < c.repeat_fraction ? frequent : any(gen);
      const auto dout = draw(f, c.T * c.H, 15);
      const auto table0 = random_floats(c.V * c.H, 16);
      Tensor tids = cpu.i64({c.T}, ids), ttable = cpu.f32({c.V, c.H}, table0);
      cpu->embedding_backward(tids, cpu.f32({c.T, c.H}, dout.values), ttable, c.padding_idx);

      DeviceArray<int64_t> dids(ids);
      DeviceArray<uint16_t> ddout(dout.bits);
      DeviceArray<float> dtable(table0), fdout(dout.values), ftable(table0);
      DeviceArray<char> scratch(cu::embedding_backward_scratch_bytes(c.T));
      std::vector<float> runs[2];
      for (auto& run : runs) {
        dtable.upload(table0);
        cu::embedding_backward_half(nullptr, f.half, dids.get(), ddout.get(), dtable.get(), c.T, c.H, c.V,
                                    c.padding_idx, scratch.get());
        run = dtable.download();
      }
      cu::embedding_backward(nullptr, dids.get(), fdout.get(), ftable.get(), c.T, c.H, c.V, c.padding_idx,
                             scratch.get());
      const std::string tag = label(f, "embedding_backward", c.T, c.H, c.V);
      expect_close(runs[0], Cpu::values(ttable), tag);
      expect_same_bits(runs[0], runs[1], tag + " two runs");
      expect_same_bits(runs[0], ftable.download(), tag + " against the float32 launcher");
    }
  }
}

// ---- LayerNorm ----

TEST(CudaKernelsHalf, LayerNormForwardAndBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (const auto& f : kFormats) {
    for (int64_t H : {37, 64, 768, 1000, 4096}) {
      for (int64_t rows : {1, 7, 513}) {
        for (size_t off : {0, 1}) {
          if (off && H != 768) continue;  // one unaligned case takes the scalar path
          // An offset mean tests that the variance does not cancel.
          const auto x = draw(f, rows * H, 17, 2.0f, 5.0f), dy = draw(f, rows * H, 20);
          const auto gamma = random_floats(H, 18, 0.5f, 1.5f), beta = random_floats(H, 19);
          const auto dgamma0 = random_floats(H, 21), dbeta0 = random_floats(H, 22);
          const double eps = 1e-12;
          Tensor tx = cpu.f32({rows, H}, x.values), tg = cpu.f32({H}, gamma), tb = cpu.f32({H}, beta);
          Tensor ty = cpu.zeros({rows, H}), tmean = cpu.zeros({rows}), trstd = cpu.zeros({rows});
          cpu->layernorm_forward(tx, tg, tb, eps, ty, tmean, trstd);
          Tensor tdy = cpu.f32({rows, H}, dy.values), tdx = cpu.zeros({rows, H});
          Tensor tdg = cpu.f32({H}, dgamma0), tdb = cpu.f32({H}, dbeta0);
          cpu->layernorm_backward(tdy, tx, tmean, trstd, tg, tdx, tdg, tdb);

          DeviceArray<uint16_t> dxin(padded(x.bits, off)), ddy(padded(dy.bits, off)), dyout(rows * H + off),
              ddx(rows * H + off);
          DeviceArray<float> dg(gamma), db(beta), dmean(rows), drstd(rows), ddg(H), ddb(H);
          // Backward takes the CPU's mean and rstd, so that it is compared alone.
          DeviceArray<float> cmean(Cpu::values(tmean)), crstd(Cpu::values(trstd));
          DeviceArray<char> scratch(cu::layernorm_backward_scratch_bytes(rows, H));
          std::vector<uint16_t> y[2], dx[2];
          std::vector<float> mean[2], rstd[2], dgam[2], dbet[2];
          for (int run = 0; run < 2; ++run) {
            cu::layernorm_forward_half(nullptr, f.half, dxin.get() + off, dg.get(), db.get(), eps,
                                       dyout.get() + off, dmean.get(), drstd.get(), rows, H);
            ddg.upload(dgamma0);
            ddb.upload(dbeta0);
            cu::layernorm_backward_half(nullptr, f.half, ddy.get() + off, dxin.get() + off, cmean.get(),
                                        crstd.get(), dg.get(), ddx.get() + off, ddg.get(), ddb.get(), rows, H,
                                        scratch.get());
            y[run] = dyout.download(off);
            dx[run] = ddx.download(off);
            mean[run] = dmean.download();
            rstd[run] = drstd.download();
            dgam[run] = ddg.download();
            dbet[run] = ddb.download();
          }
          const std::string tag = label(f, "layernorm", rows, H) + (off ? " unaligned" : "");
          const auto dx_cpu = Cpu::values(tdx);
          expect_rounded(y[0], Cpu::values(ty), f, tag + " y", 1);
          expect_rounded(dx[0], dx_cpu, f, tag + " dx", 1, float_tolerance(dx_cpu));
          expect_close(mean[0], Cpu::values(tmean), tag + " mean");
          expect_close(rstd[0], Cpu::values(trstd), tag + " rstd");
          expect_close(dgam[0], Cpu::values(tdg), tag + " dgamma");
          expect_close(dbet[0], Cpu::values(tdb), tag + " dbeta");
          expect_same_bits(y[0], y[1], tag + " y two runs");
          expect_same_bits(dx[0], dx[1], tag + " dx two runs");
          for (auto* pair : {mean, rstd, dgam, dbet}) expect_same_bits(pair[0], pair[1], tag + " two runs");

          // dgamma and dbeta come from the float32 launcher's reduction: its bits on the widened inputs.
          DeviceArray<float> fx(x.values), fdy(dy.values), fdx(rows * H), fdg(dgamma0), fdb(dbeta0);
          cu::layernorm_backward(nullptr, fdy.get(), fx.get(), cmean.get(), crstd.get(), dg.get(), fdx.get(),
                                 fdg.get(), fdb.get(), rows, H, scratch.get());
          expect_same_bits(dgam[0], fdg.download(), tag + " dgamma against the float32 launcher");
          expect_same_bits(dbet[0], fdb.download(), tag + " dbeta against the float32 launcher");
        }
      }
    }
  }
}

// ---- optimizer and loss scaling ----

TEST(CudaKernelsHalf, AdamWWithCopyIsAdamWAndItsRoundedCopy) {
  SKIP_WITHOUT_GPU();
  Cpu cpu;
  for (const auto& f : kFormats) {
    for (int64_t n : kSizes) {
      const auto param = random_floats(n, 27);
      const std::vector<float> zeros(n, 0.0f);
      Tensor tp = cpu.f32({n}, param), tm = cpu.f32({n}, zeros), tv = cpu.f32({n}, zeros);
      DeviceArray<float> dp(param), dm(zeros), dv(zeros), dg(n);        // with the copy
      DeviceArray<float> rp(param), rm(zeros), rv(zeros);               // plain adamw_step
      DeviceArray<uint16_t> copy(n);
      anatomy::AdamWHyper hp;
      hp.lr = 1e-3;
      hp.weight_decay = 0.01;
      for (int64_t step = 1; step <= 3; ++step) {
        hp.step = step;
        const auto grad = random_floats(n, static_cast<uint32_t>(100 + step), -0.1f, 0.1f);
        cpu->adamw_step(tp, cpu.f32({n}, grad), tm, tv, hp);
        dg.upload(grad);
        cu::adamw_step_with_copy(nullptr, f.half, dp.get(), dg.get(), dm.get(), dv.get(), n, hp, copy.get());
        cu::adamw_step(nullptr, rp.get(), dg.get(), rm.get(), rv.get(), n, hp);
      }
      const std::string tag = label(f, "adamw_with_copy", n);
      const auto p = dp.download();
      expect_same_bits(p, rp.download(), tag + " param against adamw_step");
      expect_same_bits(dm.download(), rm.download(), tag + " exp_avg against adamw_step");
      expect_same_bits(dv.download(), rv.download(), tag + " exp_avg_sq against adamw_step");
      EXPECT_EQ(copy.download(), narrow_all(f, p)) << tag << ": the copy is not the rounded parameter";
      expect_close(p, Cpu::values(tp), tag + " param");
    }
  }
}

TEST(CudaKernelsHalf, AllFiniteAndUnscaleFlagEveryNonFiniteValue) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4097}, (int64_t{1} << 22) + 5}) {
    for (size_t off : {0, 1}) {
      const auto clean = random_floats(n, 30, -1e4f, 1e4f);
      DeviceArray<float> dx(n + off);
      DeviceArray<char> scratch(cu::all_finite_scratch_bytes(n));
      DeviceArray<int> flag(1);
      auto check = [&](const std::vector<float>& x, int preset, bool and_into) {
        dx.upload(x, off);
        flag.upload({preset});
        cu::all_finite(nullptr, dx.get() + off, n, flag.get(), scratch.get(), and_into);
        return flag.download()[0];
      };
      const std::string tag = "all_finite n=" + std::to_string(n) + " offset " + std::to_string(off);
      EXPECT_EQ(check(clean, 12345, false), 1) << tag << " clean";
      EXPECT_EQ(check(clean, 1, true), 1) << tag << " clean, and-ed into 1";
      EXPECT_EQ(check(clean, 0, true), 0) << tag << " clean, and-ed into 0";
      if (n == 0) continue;
      for (float bad : {INFINITY, -INFINITY, NAN}) {
        for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
          auto x = clean;
          x[at] = bad;
          EXPECT_EQ(check(x, 1, false), 0) << tag << " " << bad << " at " << at;
          EXPECT_EQ(check(x, 0, false), 0) << tag << " " << bad << " at " << at << " (second run)";
          EXPECT_EQ(check(x, 1, true), 0) << tag << " " << bad << " at " << at << ", and-ed";
        }
      }

      // unscale_and_check: x·inv_scale in float, as the host multiplies.
      const float inv_scale = 1.0f / 65536.0f;
      std::vector<float> want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = clean[i] * inv_scale;
      dx.upload(clean, off);
      flag.upload({0});
      cu::unscale_and_check(nullptr, dx.get() + off, n, inv_scale, flag.get(), scratch.get());
      EXPECT_EQ(flag.download()[0], 1) << "unscale_and_check n=" << n << " clean";
      expect_same_bits(dx.download(off), want, "unscale_and_check n=" + std::to_string(n));
      auto x = clean;
      x[n - 1] = NAN;
      dx.upload(x, off);
      cu::unscale_and_check(nullptr, dx.get() + off, n, inv_scale, flag.get(), scratch.get());
      EXPECT_EQ(flag.download()[0], 0) << "unscale_and_check n=" << n << " with a NaN";
      // A finite value the multiplication overflows is flagged too.
      x = clean;
      x[0] = 3e38f;
      dx.upload(x, off);
      cu::unscale_and_check(nullptr, dx.get() + off, n, 4.0f, flag.get(), scratch.get());
      EXPECT_EQ(flag.download()[0], 0) << "unscale_and_check n=" << n << " overflowing";
    }
  }
}

// ---- throughput (run with --gtest_also_run_disabled_tests) ----

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
  std::printf("  %-48s %9.1f us  %7.0f GB/s\n", what, us, bytes / (us * 1e3));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
}

TEST(CudaKernelsHalf, DISABLED_Throughput) {
  SKIP_WITHOUT_GPU();
  const Half h = Half::BF16;
  const int64_t T = 32 * 512, H = 768, F = 3072, n = T * F;
  DeviceArray<uint16_t> a(n), b(n), c(n);
  DeviceArray<float> af(random_floats(n, 1)), cf(n);
  cu::cast_f32_to_half(nullptr, h, af.get(), a.get(), n);
  cu::cast_f32_to_half(nullptr, h, af.get(), b.get(), n);
  report_bandwidth("bf16 cast_f32_to_half 16k x 3072", 6.0 * n,
                   [&] { cu::cast_f32_to_half(nullptr, h, af.get(), c.get(), n); });
  report_bandwidth("bf16 add 16k x 3072", 6.0 * n, [&] { cu::add_half(nullptr, h, a.get(), b.get(), c.get(), n); });
  report_bandwidth("bf16 gelu_erf forward 16k x 3072", 4.0 * n, [&] {
    cu::activation_forward_half(nullptr, h, ActivationKind::GeluErf, a.get(), c.get(), n);
  });
  report_bandwidth("bf16 gelu_erf backward 16k x 3072", 6.0 * n, [&] {
    cu::activation_backward_half(nullptr, h, ActivationKind::GeluErf, a.get(), b.get(), c.get(), n);
  });
  report_bandwidth("bf16 dropout p=0.1 16k x 3072", 4.0 * n,
                   [&] { cu::dropout_half(nullptr, h, a.get(), c.get(), n, {0.1f, 1, 2}); });
  DeviceArray<float> g(random_floats(H, 3)), mean(T), rstd(T), dg(H), db(H);
  DeviceArray<char> ln_scratch(cu::layernorm_backward_scratch_bytes(T, H));
  report_bandwidth("bf16 layernorm forward 16k x 768", 4.0 * T * H, [&] {
    cu::layernorm_forward_half(nullptr, h, a.get(), g.get(), g.get(), 1e-12, c.get(), mean.get(), rstd.get(), T, H);
  });
  report_bandwidth("bf16 layernorm backward 16k x 768", 6.0 * T * H, [&] {
    cu::layernorm_backward_half(nullptr, h, b.get(), a.get(), mean.get(), rstd.get(), g.get(), c.get(), dg.get(),
                                db.get(), T, H, ln_scratch.get());
  });
  std::vector<int64_t> words(T), positions(T), types(T, 0);
  std::mt19937 gen(5);
  for (auto& id : words) id = std::uniform_int_distribution<int64_t>(0, 30521)(gen);
  for (int64_t t = 0; t < T; ++t) positions[t] = t % 512;
  DeviceArray<int64_t> dwords(words), dpos(positions), dtypes(types);
  DeviceArray<float> table(int64_t{30522} * H);
  ANATOMY_CUDA_CHECK(cudaMemset(table.get(), 0, int64_t{30522} * H * sizeof(float)));
  report_bandwidth("bf16 embedding_sum_forward 16k x 768", 14.0 * T * H, [&] {
    cu::embedding_sum_forward_half(nullptr, h, dwords.get(), dpos.get(), dtypes.get(), table.get(), table.get(),
                                   table.get(), c.get(), T, H);
  });
  const int64_t params = int64_t{110} << 20;
  DeviceArray<float> p(params), gr(params), m(params), v(params);
  ANATOMY_CUDA_CHECK(cudaMemset(p.get(), 0, params * sizeof(float)));
  ANATOMY_CUDA_CHECK(cudaMemset(gr.get(), 0, params * sizeof(float)));
  ANATOMY_CUDA_CHECK(cudaMemset(m.get(), 0, params * sizeof(float)));
  ANATOMY_CUDA_CHECK(cudaMemset(v.get(), 0, params * sizeof(float)));
  DeviceArray<uint16_t> pcopy(params);
  anatomy::AdamWHyper hp;
  report_bandwidth("adamw 110M", 28.0 * params,
                   [&] { cu::adamw_step(nullptr, p.get(), gr.get(), m.get(), v.get(), params, hp); });
  report_bandwidth("bf16 adamw_step_with_copy 110M", 30.0 * params, [&] {
    cu::adamw_step_with_copy(nullptr, h, p.get(), gr.get(), m.get(), v.get(), params, hp, pcopy.get());
  });
  DeviceArray<char> fscratch(cu::all_finite_scratch_bytes(params));
  DeviceArray<int> flag(1);
  report_bandwidth("all_finite 110M", 4.0 * params,
                   [&] { cu::all_finite(nullptr, gr.get(), params, flag.get(), fscratch.get()); });
  report_bandwidth("unscale_and_check 110M", 8.0 * params, [&] {
    cu::unscale_and_check(nullptr, gr.get(), params, 1.0f, flag.get(), fscratch.get());
  });
}

}  // namespace
