// test_cuda_flash_attention_f32.cu: the fused float32 attention kernels
// (kernels/cuda/flash_attention_f32.cu) against the CPU backend, the float32
// reference. Cases cover odd and BERT sizes (L = 1, 7, 100, 129, 200, 512, with
// partial tiles and L % 4 != 0, where a dropout run of four elements straddles
// two generator calls), D of 32 and 64, no mask, padding of different lengths
// per batch entry, a batch entry with every key masked, dropout 0 and 0.1,
// tensors that are not 16-byte aligned, and the BERT-large seed shape (B = 4,
// L = 512, 16 heads: several key tiles per backward block). Each case runs
// twice on outputs poisoned with NaN beforehand and checks that the two runs
// give the same bits. Every test skips itself on a machine without a CUDA
// device.
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/core/ledger.h"
#include "anatomy/core/random.h"
#include "anatomy/core/tensor.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "anatomy/kernels/cuda/flash_attention_f32.cuh"
#include "anatomy/kernels/cuda/kernels.cuh"

namespace {

using anatomy::Category;
using anatomy::DropoutSpec;
using anatomy::DType;
using anatomy::Tensor;

#define SKIP_WITHOUT_GPU() \
  if (anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

// A cudaMalloc'd buffer of `count` floats (or int64) freed on scope exit. With
// `offset` the data starts that many elements into the allocation (4 bytes: a
// pointer that is not 16-byte aligned).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count, size_t offset = 0) : count_(count), offset_(offset) {
    ANATOMY_CUDA_CHECK(cudaMalloc(&base_, std::max<size_t>((count + offset) * sizeof(T), 1)));
  }
  ~DeviceArray() { (void)cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return static_cast<T*>(base_) + offset_; }
  void upload(const std::vector<T>& host) {
    ANATOMY_CUDA_CHECK(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    ANATOMY_CUDA_CHECK(cudaMemcpy(host.data(), get(), count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bytes 0xFF: every float a NaN, so an element the kernels fail to write shows.
  void poison() { ANATOMY_CUDA_CHECK(cudaMemset(base_, 0xFF, std::max<size_t>((count_ + offset_) * sizeof(T), 1))); }

 private:
  void* base_ = nullptr;
  size_t count_, offset_;
};

enum class MaskKind { None, Padding, PaddingAndEmpty };

struct F32Case {
  int64_t B, L, heads, D;
  MaskKind mask;
  float p;
  bool unaligned = false;
};

std::string case_name(const F32Case& c) {
  const char* mask = c.mask == MaskKind::None ? "NoMask" : c.mask == MaskKind::Padding ? "Padding" : "PaddingAndEmpty";
  return "B" + std::to_string(c.B) + "_L" + std::to_string(c.L) + "_H" + std::to_string(c.heads) + "_D" +
         std::to_string(c.D) + "_" + mask + (c.p > 0.0f ? "_Dropout" : "_NoDropout") +
         (c.unaligned ? "_Unaligned" : "");
}

void PrintTo(const F32Case& c, std::ostream* os) { *os << case_name(c); }

// Key mask [B, L]: entry b keeps its first max(1, L - (b+1)·L/(2B)) keys, so
// every entry is padded, each to a different length; with PaddingAndEmpty the
// last entry has none at all (every row of it attends uniformly).
std::vector<int64_t> make_mask(const F32Case& c) {
  std::vector<int64_t> mask(static_cast<size_t>(c.B * c.L), 1);
  for (int64_t b = 0; b < c.B; ++b) {
    int64_t length = std::max<int64_t>(1, c.L - (b + 1) * c.L / (2 * c.B));
    if (c.mask == MaskKind::PaddingAndEmpty && b == c.B - 1) length = 0;
    for (int64_t j = length; j < c.L; ++j) mask[static_cast<size_t>(b * c.L + j)] = 0;
  }
  return mask;
}

std::vector<float> random_values(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

struct Inputs {
  std::vector<float> q, k, v, dctx;
  std::vector<int64_t> mask;  // empty: no mask
  float scale;
  DropoutSpec dropout;
};

Inputs make_inputs(const F32Case& c) {
  const size_t n = static_cast<size_t>(c.B * c.L * c.heads * c.D);
  Inputs in;
  // q and k a little wider than unit variance so that softmax rows are peaked
  // as well as flat.
  in.q = random_values(n, 1.5f, 31);
  in.k = random_values(n, 1.5f, 32);
  in.v = random_values(n, 1.0f, 33);
  in.dctx = random_values(n, 1.0f, 34);
  if (c.mask != MaskKind::None) in.mask = make_mask(c);
  in.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D)));
  in.dropout = DropoutSpec{c.p, 0x5eedULL, 11};
  return in;
}

struct Outputs {
  std::vector<float> probs, ctx, dq, dk, dv;
};

Outputs run_cpu(const F32Case& c, const Inputs& in) {
  auto backend = anatomy::make_cpu_backend(1);
  auto& ledger = backend->ledger();
  const int64_t H = c.heads * c.D;
  auto tensor = [&](anatomy::Shape shape, DType dtype, const char* name) {
    return Tensor::empty(ledger, std::move(shape), dtype, Category::Temporary, name);
  };
  Tensor q = tensor({c.B, c.L, H}, DType::F32, "q"), k = tensor({c.B, c.L, H}, DType::F32, "k");
  Tensor v = tensor({c.B, c.L, H}, DType::F32, "v"), dctx = tensor({c.B, c.L, H}, DType::F32, "dctx");
  Tensor ctx = tensor({c.B, c.L, H}, DType::F32, "ctx"), dq = tensor({c.B, c.L, H}, DType::F32, "dq");
  Tensor dk = tensor({c.B, c.L, H}, DType::F32, "dk"), dv = tensor({c.B, c.L, H}, DType::F32, "dv");
  Tensor probs = tensor({c.B, c.heads, c.L, c.L}, DType::F32, "probs");
  backend->copy_from_host(q, in.q.data());
  backend->copy_from_host(k, in.k.data());
  backend->copy_from_host(v, in.v.data());
  backend->copy_from_host(dctx, in.dctx.data());
  Tensor mask;
  if (!in.mask.empty()) {
    mask = tensor({c.B, c.L}, DType::I64, "mask");
    backend->copy_from_host(mask, in.mask.data());
  }
  backend->attention_forward(q, k, v, mask, c.heads, in.scale, in.dropout, probs, ctx);
  backend->attention_backward(dctx, q, k, v, ctx, probs, mask, c.heads, in.scale, in.dropout, dq, dk, dv);

  auto host = [&](const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    backend->copy_to_host(t, out.data());
    return out;
  };
  return Outputs{host(probs), host(ctx), host(dq), host(dk), host(dv)};
}

// The size of what each output element is a float32 sum of: the same products
// as the reference's with every factor replaced by its absolute value (P and
// the dropout mask are non-negative already). Per head, with W = P∘keep/(1-p)
// (the dropped probabilities) and dP' = (dO·Vᵀ)∘keep/(1-p):
//   ctx: W·|V|;  dV: Wᵀ·|dO|;
//   dS = P∘(dP' − Δ) has terms of size A = P∘(|dO|·|V|ᵀ∘keep/(1-p) + Σ_d |dO||O|);
//   dQ: scale·A·|K|;  dK: scale·Aᵀ·|Q|.
// Rounding errors of a float32 evaluation are bounded by (a modest multiple
// of) the unit roundoff times these, whatever the cancellation in the sums.
struct Magnitudes {
  std::vector<float> ctx, dq, dk, dv;
};

Magnitudes magnitudes(const F32Case& c, const Inputs& in, const Outputs& ref) {
  const int64_t L = c.L, D = c.D, H = c.heads * c.D;
  const size_t n = static_cast<size_t>(c.B * L * H);
  auto absolute = [](const std::vector<float>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = std::fabs(x[i]);
    return out;
  };
  const std::vector<float> aq = absolute(in.q), ak = absolute(in.k), av = absolute(in.v), ado = absolute(in.dctx);
  Magnitudes m{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  const float keep_scale = c.p > 0.0f ? 1.0f / (1.0f - c.p) : 1.0f;
  std::vector<float> w(static_cast<size_t>(L * L)), a(static_cast<size_t>(L * L)), g(static_cast<size_t>(L * L));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t off = b * L * H + h * D;
      const float* p = ref.probs.data() + (b * c.heads + h) * L * L;
      const uint64_t base = static_cast<uint64_t>((b * c.heads + h) * L * L);
      // g = |dO|·|V|ᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, D, 1.0f, ado.data() + off, H, av.data() + off, H,
                  0.0f, g.data(), L);
      for (int64_t i = 0; i < L; ++i) {
        double delta = 0.0;
        for (int64_t d = 0; d < D; ++d)
          delta += std::fabs(static_cast<double>(in.dctx[off + i * H + d]) * ref.ctx[off + i * H + d]);
        for (int64_t j = 0; j < L; ++j) {
          const size_t e = static_cast<size_t>(i * L + j);
          const bool kept = c.p <= 0.0f || anatomy::dropout_keep(in.dropout.seed, in.dropout.stream, base + e, c.p);
          const float drop = kept ? keep_scale : 0.0f;
          w[e] = p[e] * drop;
          a[e] = static_cast<float>(p[e] * (g[e] * drop + delta));
        }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, L, 1.0f, w.data(), L, av.data() + off, H, 0.0f,
                  m.ctx.data() + off, H);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, D, L, 1.0f, w.data(), L, ado.data() + off, H, 0.0f,
                  m.dv.data() + off, H);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, L, in.scale, a.data(), L, ak.data() + off, H, 0.0f,
                  m.dq.data() + off, H);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L, D, L, in.scale, a.data(), L, aq.data() + off, H, 0.0f,
                  m.dk.data() + off, H);
    }
  }
  return m;
}

// The GPU side: inputs uploaded once, then run() as many times as asked, each
// time on outputs, log-sum-exp and scratch poisoned beforehand.
class GpuF32Flash {
 public:
  GpuF32Flash(const F32Case& c, const Inputs& in)
      : c_(c),
        in_(in),
        n_(static_cast<size_t>(c.B * c.L * c.heads * c.D)),
        shift_(c.unaligned ? 1 : 0),
        q_(n_, shift_),
        k_(n_, shift_),
        v_(n_, shift_),
        dctx_(n_, shift_),
        ctx_(n_, shift_),
        dq_(n_, shift_),
        dk_(n_, shift_),
        dv_(n_, shift_),
        lse_(static_cast<size_t>(c.B * c.heads * c.L)),
        mask_(in.mask.size()),
        scratch_(anatomy::cuda::flash_attention_f32_scratch_bytes(c.B, c.L, c.heads, c.D)) {
    ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream_));
    q_.upload(in.q);
    k_.upload(in.k);
    v_.upload(in.v);
    dctx_.upload(in.dctx);
    if (!in.mask.empty()) mask_.upload(in.mask);
  }
  ~GpuF32Flash() { (void)cudaStreamDestroy(stream_); }
  GpuF32Flash(const GpuF32Flash&) = delete;
  GpuF32Flash& operator=(const GpuF32Flash&) = delete;

  const int64_t* mask() const { return in_.mask.empty() ? nullptr : mask_.get(); }

  void forward() {
    anatomy::cuda::flash_attention_f32_forward(stream_, q_.get(), k_.get(), v_.get(), mask(), c_.B, c_.L, c_.heads,
                                               c_.D, in_.scale, in_.dropout, ctx_.get(), lse_.get());
  }
  void backward() {
    anatomy::cuda::flash_attention_f32_backward(stream_, dctx_.get(), q_.get(), k_.get(), v_.get(), ctx_.get(),
                                                lse_.get(), mask(), c_.B, c_.L, c_.heads, c_.D, in_.scale, in_.dropout,
                                                dq_.get(), dk_.get(), dv_.get(), scratch_.get());
  }

  struct Result {
    std::vector<float> ctx, lse, dq, dk, dv;
  };
  Result run() {
    ctx_.poison();
    dq_.poison();
    dk_.poison();
    dv_.poison();
    lse_.poison();
    scratch_.poison();
    forward();
    backward();
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Result{ctx_.download(), lse_.download(), dq_.download(), dk_.download(), dv_.download()};
  }

  cudaStream_t stream() const { return stream_; }

 private:
  F32Case c_;
  const Inputs& in_;
  size_t n_, shift_;
  cudaStream_t stream_ = nullptr;
  DeviceArray<float> q_, k_, v_, dctx_, ctx_, dq_, dk_, dv_, lse_;
  DeviceArray<int64_t> mask_;
  DeviceArray<unsigned char> scratch_;
};

// Over the output rows (b, t, h) of D elements: the largest max_d |gpu − cpu|
// / max_d magnitude (0/0 counted as 0, x/0 as infinite), and the plain
// ‖gpu − cpu‖/‖cpu‖ for information. NaN counts as infinite.
struct Errors {
  double row_rel, rel_norm;
};

Errors errors(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::vector<float>& mag, int64_t D) {
  double worst = 0.0, diff2 = 0.0, ref2 = 0.0;
  for (size_t r = 0; r * D < cpu.size(); ++r) {
    double err = 0.0, scale = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = r * D + static_cast<size_t>(d);
      const double e = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
      if (std::isnan(e)) return Errors{INFINITY, INFINITY};
      err = std::max(err, e);
      scale = std::max(scale, static_cast<double>(mag[i]));
      diff2 += e * e;
      ref2 += static_cast<double>(cpu[i]) * cpu[i];
    }
    if (err > 0.0) worst = std::max(worst, scale > 0.0 ? err / scale : INFINITY);
  }
  return Errors{worst, std::sqrt(diff2 / std::max(ref2, 1e-300))};
}

std::string format_error(double e) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", e);
  return text;
}

class CudaFlashAttentionF32 : public ::testing::TestWithParam<F32Case> {};

TEST_P(CudaFlashAttentionF32, MatchesCpuBackendAndIsDeterministic) {
  SKIP_WITHOUT_GPU();
  const F32Case c = GetParam();
  ASSERT_TRUE(anatomy::cuda::flash_attention_f32_supported(c.D));
  const Inputs in = make_inputs(c);
  const Outputs cpu = run_cpu(c, in);
  const Magnitudes mag = magnitudes(c, in, cpu);
  GpuF32Flash gpu(c, in);
  const GpuF32Flash::Result first = gpu.run();

  // Tolerance. Both sides are float32 throughout (no tensor cores, no TF32):
  // the kernels sum the same products as the reference in another order
  // (score dot products over D, probability-weighted sums over up to L keys or
  // queries, in tiles), recompute the probabilities as exp2 of a base-2 score
  // minus the saved log-sum-exp (a relative error of a few units of 2^-24 times
  // the score's size, ~1e-6 at the largest scores here, up to ~20), and form
  // Δ = Σ_d dO·O rather than the reference's Σ_j P·dP. Each output element is
  // then off by a few times u·sqrt(n) ≈ 6e-8·sqrt(L) ≈ 1.4e-6 (L = 512)
  // relative to the size of what it sums (the magnitudes above), on both
  // sides, with a worst case of u·n. We require 1e-5 of the row's magnitude
  // for every row: several times the expected error, far below what a wrong
  // tile, mask or dropout element gives (of the order of the magnitude
  // itself). Rows whose magnitude is 0 (dk, dv of masked keys) must be exactly 0.
  constexpr double kTolerance = 1e-5;
  struct Named {
    const char* name;
    const std::vector<float>& gpu;
    const std::vector<float>& cpu;
    const std::vector<float>& mag;
  };
  const Named outputs[] = {{"ctx", first.ctx, cpu.ctx, mag.ctx},
                           {"dq", first.dq, cpu.dq, mag.dq},
                           {"dk", first.dk, cpu.dk, mag.dk},
                           {"dv", first.dv, cpu.dv, mag.dv}};
  std::string observed;
  for (const Named& t : outputs) {
    ASSERT_EQ(t.gpu.size(), t.cpu.size()) << t.name;
    const Errors e = errors(t.gpu, t.cpu, t.mag, c.D);
    EXPECT_LE(e.row_rel, kTolerance) << t.name << ": max over rows of max|gpu − cpu| / row magnitude";
    observed += " " + std::string(t.name) + " " + format_error(e.row_rel) + " (" + format_error(e.rel_norm) + ")";
  }
  // The observed errors, so that the tolerance can be judged against them.
  std::printf("%s error/magnitude (‖err‖/‖ref‖):%s\n", case_name(c).c_str(), observed.c_str());

  // The log-sum-exp: ln L in an entry with every key masked; otherwise, at the
  // row's most probable key j, scale·q·k_j − ln P_j (P from the reference).
  {
    const int64_t L = c.L, D = c.D, H = c.heads * c.D;
    double worst = 0.0;
    for (int64_t b = 0; b < c.B; ++b) {
      bool any = in.mask.empty();
      for (int64_t j = 0; j < L && !any; ++j) any = in.mask[static_cast<size_t>(b * L + j)] != 0;
      for (int64_t h = 0; h < c.heads; ++h) {
        for (int64_t i = 0; i < L; ++i) {
          const float* prow = cpu.probs.data() + ((b * c.heads + h) * L + i) * L;
          double expect = std::log(static_cast<double>(L));
          if (any) {
            const int64_t j = std::max_element(prow, prow + L) - prow;
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d)
              dot += static_cast<double>(in.q[(b * L + i) * H + h * D + d]) * in.k[(b * L + j) * H + h * D + d];
            expect = in.scale * dot - std::log(static_cast<double>(prow[j]));
          }
          const double got = first.lse[static_cast<size_t>((b * c.heads + h) * L + i)];
          const double e = std::fabs(got - expect) / (1.0 + std::fabs(expect));
          worst = std::isnan(e) ? INFINITY : std::max(worst, e);
        }
      }
    }
    // The scores are float32 dot products (relative 1e-6 of up to ~20) and
    // P_j >= 1/L is rounded to float (relative 6e-8 of its log).
    EXPECT_LE(worst, 1e-5) << "lse: max |gpu − expected| / (1 + |expected|)";
  }

  // Same inputs, same bits: no atomics, no scheduling-dependent order.
  const GpuF32Flash::Result second = gpu.run();
  auto same_bits = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_bits(first.ctx, second.ctx)) << "ctx";
  EXPECT_TRUE(same_bits(first.lse, second.lse)) << "lse";
  EXPECT_TRUE(same_bits(first.dq, second.dq)) << "dq";
  EXPECT_TRUE(same_bits(first.dk, second.dk)) << "dk";
  EXPECT_TRUE(same_bits(first.dv, second.dv)) << "dv";
}

std::vector<F32Case> all_cases() {
  // (B, L, heads, D): a single key; odd L with partial tiles, L % 4 != 0 (1, 7,
  // 129) and L % 4 == 0 (100, 200, 512); D = 32 and 64.
  const int64_t sizes[][4] = {{2, 1, 2, 64},   {2, 7, 3, 32},   {2, 100, 2, 64}, {2, 129, 2, 32},
                              {2, 129, 2, 64}, {3, 200, 2, 32}, {2, 512, 2, 64}};
  std::vector<F32Case> cases;
  for (const auto& s : sizes) {
    for (MaskKind m : {MaskKind::None, MaskKind::Padding, MaskKind::PaddingAndEmpty})
      for (float p : {0.0f, 0.1f}) cases.push_back({s[0], s[1], s[2], s[3], m, p});
  }
  // The BERT-large seed shape: 4 splits of 8 key tiles, two per backward block.
  cases.push_back({4, 512, 16, 64, MaskKind::Padding, 0.1f});
  cases.push_back({4, 512, 16, 64, MaskKind::PaddingAndEmpty, 0.0f});
  // Many heads at a short L: two key tiles per backward block, L % 4 != 0.
  cases.push_back({4, 129, 50, 32, MaskKind::PaddingAndEmpty, 0.1f});
  // Tensors 4 bytes off 16-byte alignment: the element-by-element paths.
  cases.push_back({2, 129, 2, 64, MaskKind::PaddingAndEmpty, 0.1f, true});
  cases.push_back({2, 100, 3, 32, MaskKind::Padding, 0.1f, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFlashAttentionF32, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<F32Case>& info) { return case_name(info.param); });

TEST(CudaFlashAttentionF32Api, SupportedHeadSizes) {
  EXPECT_TRUE(anatomy::cuda::flash_attention_f32_supported(32));
  EXPECT_TRUE(anatomy::cuda::flash_attention_f32_supported(64));
  EXPECT_FALSE(anatomy::cuda::flash_attention_f32_supported(48));
  EXPECT_GT(anatomy::cuda::flash_attention_f32_scratch_bytes(4, 512, 16, 64), size_t{0});
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) anatomy::fail("{} failed: {}", what, cublasGetStatusString(status));
}

// The current float32 path (attention.cu: batched SGEMMs and softmax kernels,
// [B, heads, L, L] probabilities saved), on the backend's settings (cuBLAS
// default math, no TF32), for the timing comparison.
class GpuF32Unfused {
 public:
  GpuF32Unfused(const F32Case& c, const Inputs& in)
      : c_(c),
        in_(in),
        n_(static_cast<size_t>(c.B * c.L * c.heads * c.D)),
        q_(n_),
        k_(n_),
        v_(n_),
        dctx_(n_),
        ctx_(n_),
        dq_(n_),
        dk_(n_),
        dv_(n_),
        probs_(static_cast<size_t>(c.B * c.heads * c.L * c.L)),
        mask_(in.mask.size()),
        scratch_(anatomy::cuda::attention_scratch_bytes(c.B, c.heads, c.L)) {
    ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream_));
    check_cublas(cublasCreate(&handle_), "cublasCreate");
    check_cublas(cublasSetStream(handle_, stream_), "cublasSetStream");
    check_cublas(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    q_.upload(in.q);
    k_.upload(in.k);
    v_.upload(in.v);
    dctx_.upload(in.dctx);
    if (!in.mask.empty()) mask_.upload(in.mask);
  }
  ~GpuF32Unfused() {
    (void)cublasDestroy(handle_);
    (void)cudaStreamDestroy(stream_);
  }
  GpuF32Unfused(const GpuF32Unfused&) = delete;
  GpuF32Unfused& operator=(const GpuF32Unfused&) = delete;

  void forward() {
    anatomy::cuda::attention_forward(stream_, handle_, q_.get(), k_.get(), v_.get(),
                                     in_.mask.empty() ? nullptr : mask_.get(), c_.B, c_.L, c_.heads, c_.D, in_.scale,
                                     in_.dropout, probs_.get(), ctx_.get(), scratch_.get());
  }
  void backward() {
    anatomy::cuda::attention_backward(stream_, handle_, dctx_.get(), q_.get(), k_.get(), v_.get(), probs_.get(), c_.B,
                                      c_.L, c_.heads, c_.D, in_.scale, in_.dropout, dq_.get(), dk_.get(), dv_.get(),
                                      scratch_.get());
  }
  cudaStream_t stream() const { return stream_; }

 private:
  F32Case c_;
  const Inputs& in_;
  size_t n_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  DeviceArray<float> q_, k_, v_, dctx_, ctx_, dq_, dk_, dv_, probs_;
  DeviceArray<int64_t> mask_;
  DeviceArray<unsigned char> scratch_;
};

// Forward and backward milliseconds, each the mean of 20 launches back to back
// between two events (host launch costs overlap the GPU's work).
template <typename Runner>
std::pair<float, float> time_forward_backward(Runner& r) {
  r.forward();  // warm-up
  r.backward();
  cudaEvent_t e0, e1, e2;
  ANATOMY_CUDA_CHECK(cudaEventCreate(&e0));
  ANATOMY_CUDA_CHECK(cudaEventCreate(&e1));
  ANATOMY_CUDA_CHECK(cudaEventCreate(&e2));
  constexpr int kRuns = 20;
  ANATOMY_CUDA_CHECK(cudaEventRecord(e0, r.stream()));
  for (int i = 0; i < kRuns; ++i) r.forward();
  ANATOMY_CUDA_CHECK(cudaEventRecord(e1, r.stream()));
  for (int i = 0; i < kRuns; ++i) r.backward();
  ANATOMY_CUDA_CHECK(cudaEventRecord(e2, r.stream()));
  ANATOMY_CUDA_CHECK(cudaEventSynchronize(e2));
  float fwd = 0.0f, bwd = 0.0f;
  ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&fwd, e0, e1));
  ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&bwd, e1, e2));
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  (void)cudaEventDestroy(e2);
  return {fwd / kRuns, bwd / kRuns};
}

// Timing only, not run by default (--gtest_also_run_disabled_tests): forward
// and backward separately at the seed run's attention shape, B = 4, L = 512,
// 16 heads, D = 64, dropout 0.1 (and, to show what the dropout mask costs, 0;
// and D = 32), next to the current float32 path on the same inputs.
TEST(CudaFlashAttentionF32Timing, DISABLED_ForwardBackward) {
  SKIP_WITHOUT_GPU();
  const F32Case shapes[] = {{4, 512, 16, 64, MaskKind::None, 0.1f},
                            {4, 512, 16, 64, MaskKind::None, 0.0f},
                            {4, 512, 16, 64, MaskKind::Padding, 0.1f},
                            {4, 512, 32, 32, MaskKind::None, 0.1f}};
  for (const F32Case& c : shapes) {
    const Inputs in = make_inputs(c);
    float fused_fwd = 0.0f, fused_bwd = 0.0f, old_fwd = 0.0f, old_bwd = 0.0f;
    {
      GpuF32Flash gpu(c, in);
      std::tie(fused_fwd, fused_bwd) = time_forward_backward(gpu);
    }
    {
      GpuF32Unfused gpu(c, in);
      std::tie(old_fwd, old_bwd) = time_forward_backward(gpu);
    }
    // 4·B·heads·L²·D flops forward (two products), 2.5 times that backward (five).
    const double flops = 4.0 * c.B * c.heads * c.L * c.L * c.D;
    std::printf(
        "f32 attention %s: fused forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s), total %.3f ms | "
        "current path forward %.3f ms, backward %.3f ms, total %.3f ms | speed-up %.2fx\n",
        case_name(c).c_str(), fused_fwd, flops / (fused_fwd * 1e9), fused_bwd, 2.5 * flops / (fused_bwd * 1e9),
        fused_fwd + fused_bwd, old_fwd, old_bwd, old_fwd + old_bwd, (old_fwd + old_bwd) / (fused_fwd + fused_bwd));
  }
}

}  // namespace
