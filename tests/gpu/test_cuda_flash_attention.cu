// test_cuda_flash_attention.cu: the fused bf16/fp16 attention kernels
// (kernels/cuda/flash_attention.cu) against the CPU backend, the float32
// reference. Inputs are drawn in float and rounded to the 16-bit type on the
// host; the reference runs on those rounded values (dctx rounded too), so the
// comparison measures only the kernels' own rounding. Cases cover no mask,
// padding of different lengths per batch entry, a batch entry with every key
// masked, dropout on and off, odd and BERT sizes, D of 32, 64 and 128, both
// 16-bit types; and the kernels with a window (ModernBERT's local layers)
// against the CPU backend's windowed attention, padded far enough that some
// queries have no kept key within their window (they attend uniformly). Each case runs twice on outputs poisoned with NaN beforehand
// and checks that the two runs give the same bits. Every test skips itself on
// a machine without a CUDA device.
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
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/core/ledger.h"
#include "anatomy/core/random.h"
#include "anatomy/core/tensor.h"
#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/cuda_device.h"
#include "attention_reference.h"
#include "device_buffer.h"
#include "anatomy/kernels/cuda/flash_attention.cuh"
#include "anatomy/kernels/cuda/hopper_attention.cuh"

namespace {

using anatomy::Category;
using anatomy::DropoutSpec;
using anatomy::DType;
using anatomy::Tensor;
using anatomy::cuda::AttnType;

#define SKIP_WITHOUT_GPU() \
  if (anatomy::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"

using anatomy::test::DeviceBuffer;

enum class MaskKind { None, Padding, PaddingAndEmpty };

struct FlashCase {
  int64_t B, L, heads, D;
  MaskKind mask;
  float p;
  AttnType type;
  bool negative_scale = false;  // scale −1/√D instead of 1/√D
  int64_t window = -1;          // >= 0: attention within the window (flash kernels only, no dropout)
};

std::string case_name(const FlashCase& c) {
  const char* mask = c.mask == MaskKind::None ? "NoMask" : c.mask == MaskKind::Padding ? "Padding" : "PaddingAndEmpty";
  return std::string(c.type == AttnType::BF16 ? "BF16" : "F16") + "_B" + std::to_string(c.B) + "_L" +
         std::to_string(c.L) + "_H" + std::to_string(c.heads) + "_D" + std::to_string(c.D) + "_" + mask +
         (c.p > 0.0f ? "_Dropout" : "_NoDropout") + (c.negative_scale ? "_NegativeScale" : "") +
         (c.window >= 0 ? "_Window" + std::to_string(c.window) : "");
}

void PrintTo(const FlashCase& c, std::ostream* os) { *os << case_name(c); }

// Key mask [B, L]: entry b keeps its first max(1, L - (b+1)·L/(2B)) keys, so
// every entry is padded, each to a different length; with PaddingAndEmpty the
// last entry has none at all (every row of it attends uniformly).
std::vector<int64_t> make_mask(const FlashCase& c) {
  std::vector<int64_t> mask(static_cast<size_t>(c.B * c.L), 1);
  for (int64_t b = 0; b < c.B; ++b) {
    int64_t length = std::max<int64_t>(1, c.L - (b + 1) * c.L / (2 * c.B));
    if (c.mask == MaskKind::PaddingAndEmpty && b == c.B - 1) length = 0;
    for (int64_t j = length; j < c.L; ++j) mask[static_cast<size_t>(b * c.L + j)] = 0;
  }
  return mask;
}

uint16_t to_16(AttnType t, float x) { return t == AttnType::BF16 ? anatomy::float_to_bf16(x) : anatomy::float_to_f16(x); }
float from_16(AttnType t, uint16_t x) { return t == AttnType::BF16 ? anatomy::bf16_to_float(x) : anatomy::f16_to_float(x); }

// A tensor's values as 16-bit (for the GPU) and as the floats those round to
// (for the reference).
struct Rounded {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

Rounded random_rounded(AttnType t, size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  Rounded r;
  r.bits.resize(n);
  r.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.bits[i] = to_16(t, dist(rng));
    r.values[i] = from_16(t, r.bits[i]);
  }
  return r;
}

struct Inputs {
  Rounded q, k, v, dctx;
  std::vector<int64_t> mask;  // empty: no mask
  float scale;
  DropoutSpec dropout;
};

Inputs make_inputs(const FlashCase& c) {
  const size_t n = static_cast<size_t>(c.B * c.L * c.heads * c.D);
  Inputs in;
  // q and k a little wider than unit variance so that softmax rows are peaked
  // as well as flat.
  in.q = random_rounded(c.type, n, 1.5f, 21);
  in.k = random_rounded(c.type, n, 1.5f, 22);
  in.v = random_rounded(c.type, n, 1.0f, 23);
  in.dctx = random_rounded(c.type, n, 1.0f, 24);
  if (c.mask != MaskKind::None) in.mask = make_mask(c);
  in.scale = static_cast<float>((c.negative_scale ? -1.0 : 1.0) / std::sqrt(static_cast<double>(c.D)));
  in.dropout = DropoutSpec{c.p, 0x5eedULL, 7};
  return in;
}

struct Outputs {
  std::vector<float> ctx, dq, dk, dv;
};

Outputs run_cpu(const FlashCase& c, const Inputs& in) {
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
  backend->copy_from_host(q, in.q.values.data());
  backend->copy_from_host(k, in.k.values.data());
  backend->copy_from_host(v, in.v.values.data());
  backend->copy_from_host(dctx, in.dctx.values.data());
  Tensor mask;
  if (!in.mask.empty()) {
    mask = tensor({c.B, c.L}, DType::I64, "mask");
    backend->copy_from_host(mask, in.mask.data());
  }
  if (c.window >= 0) {
    backend->attention_window_forward(q, k, v, mask, c.heads, in.scale, c.window, in.dropout, probs, ctx);
    backend->attention_window_backward(dctx, q, k, v, ctx, probs, mask, c.heads, in.scale, c.window, in.dropout, dq,
                                       dk, dv);
  } else {
    backend->attention_forward(q, k, v, mask, c.heads, in.scale, in.dropout, probs, ctx);
    backend->attention_backward(dctx, q, k, v, ctx, probs, mask, c.heads, in.scale, in.dropout, dq, dk, dv);
  }

  auto host = [&](const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    backend->copy_to_host(t, out.data());
    return out;
  };
  return Outputs{host(ctx), host(dq), host(dk), host(dv)};
}

// The GPU side: inputs uploaded once, then run() as many times as asked, each
// time on outputs, log-sum-exp and scratch poisoned beforehand. The kernels:
// flash_attention.cuh's, or hopper_attention.cuh's forward with the flash
// backward, or hopper_attention.cuh's both ways.
// Hopper: with dropout the forward stores its mask (attention_keep8 of
// core/random.h, not the CPU backend's) as bits, which the backward reads.
enum class Kernels { Flash, Hopper };

class GpuFlash {
 public:
  GpuFlash(const FlashCase& c, const Inputs& in, Kernels kernels = Kernels::Flash)
      : c_(c),
        kernels_(kernels),
        in_(in),
        act_bytes_(static_cast<size_t>(c.B * c.L * c.heads * c.D) * sizeof(uint16_t)),
        q_(act_bytes_),
        k_(act_bytes_),
        v_(act_bytes_),
        dctx_(act_bytes_),
        ctx_(act_bytes_),
        dq_(act_bytes_),
        dk_(act_bytes_),
        dv_(act_bytes_),
        lse_(static_cast<size_t>(c.B * c.heads * c.L) * sizeof(float)),
        mask_(in.mask.size() * sizeof(int64_t)),
        bits_(static_cast<size_t>(c.B * c.heads * c.L * anatomy::cuda::attention_keep_words(c.L)) * sizeof(uint32_t)),
        scratch_(std::max({anatomy::cuda::flash_attention_scratch_bytes(c.B, c.L, c.heads, c.D),
                           anatomy::cuda::flash_window_scratch_bytes(c.B, c.L, c.heads, c.D),
                           anatomy::cuda::hopper_attention_scratch_bytes(c.B, c.L, c.heads)})) {
    ANATOMY_CUDA_CHECK(cudaStreamCreate(&stream_));
    q_.upload(in.q.bits);
    k_.upload(in.k.bits);
    v_.upload(in.v.bits);
    dctx_.upload(in.dctx.bits);
    if (!in.mask.empty()) mask_.upload(in.mask);
  }
  ~GpuFlash() { (void)cudaStreamDestroy(stream_); }
  GpuFlash(const GpuFlash&) = delete;
  GpuFlash& operator=(const GpuFlash&) = delete;

  const int64_t* mask() const { return in_.mask.empty() ? nullptr : mask_.as<int64_t>(); }
  uint32_t* bits() const { return kernels_ == Kernels::Hopper && c_.p > 0.0f ? bits_.as<uint32_t>() : nullptr; }

  void forward() {
    if (kernels_ != Kernels::Flash) {
      anatomy::cuda::hopper_attention_forward(stream_, c_.type, q_.as<void>(), k_.as<void>(), v_.as<void>(), mask(),
                                              c_.B, c_.L, c_.heads, c_.D, in_.scale, in_.dropout, ctx_.as<void>(),
                                              lse_.as<float>(), bits());
      return;
    }
    anatomy::cuda::flash_attention_forward(stream_, c_.type, q_.as<void>(), k_.as<void>(), v_.as<void>(), mask(), c_.B,
                                           c_.L, c_.heads, c_.D, in_.scale, in_.dropout, ctx_.as<void>(),
                                           lse_.as<float>(), c_.window);
  }
  void backward() {
    if (kernels_ == Kernels::Hopper) {
      anatomy::cuda::hopper_attention_backward(stream_, c_.type, dctx_.as<void>(), q_.as<void>(), k_.as<void>(),
                                               v_.as<void>(), ctx_.as<void>(), lse_.as<float>(), mask(), c_.B, c_.L,
                                               c_.heads, c_.D, in_.scale, in_.dropout, dq_.as<void>(), dk_.as<void>(),
                                               dv_.as<void>(), scratch_.as<void>(), c_.heads * c_.D, bits());
      return;
    }
    anatomy::cuda::flash_attention_backward(stream_, c_.type, dctx_.as<void>(), q_.as<void>(), k_.as<void>(),
                                            v_.as<void>(), ctx_.as<void>(), lse_.as<float>(), mask(), c_.B, c_.L,
                                            c_.heads, c_.D, in_.scale, in_.dropout, dq_.as<void>(), dk_.as<void>(),
                                            dv_.as<void>(), scratch_.as<void>(), c_.window);
  }

  // Raw 16-bit outputs (for the bit comparison) and the log-sum-exp.
  struct Raw {
    std::vector<uint16_t> ctx, dq, dk, dv;
    std::vector<float> lse;
    std::vector<uint32_t> bits;  // the Hopper forward's mask bits (with dropout)
  };
  Raw run() {
    for (DeviceBuffer* b : {&ctx_, &dq_, &dk_, &dv_, &lse_, &scratch_, &bits_}) b->poison();
    forward();
    backward();
    ANATOMY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Raw{ctx_.download<uint16_t>(), dq_.download<uint16_t>(), dk_.download<uint16_t>(),
               dv_.download<uint16_t>(), lse_.download<float>(), bits_.download<uint32_t>()};
  }

  cudaStream_t stream() const { return stream_; }

 private:
  FlashCase c_;
  Kernels kernels_;
  const Inputs& in_;
  size_t act_bytes_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer q_, k_, v_, dctx_, ctx_, dq_, dk_, dv_, lse_, mask_, bits_, scratch_;
};

std::vector<float> widen(AttnType t, const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = from_16(t, x[i]);
  return out;
}

// ‖gpu − cpu‖ / ‖cpu‖ and max |gpu − cpu| / max |cpu|, NaN counted as infinite.
struct Errors {
  double rel_norm, rel_max;
};

Errors errors(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double diff2 = 0.0, ref2 = 0.0, worst = 0.0, ref_max = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double d = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    if (std::isnan(d)) return Errors{INFINITY, INFINITY};
    diff2 += d * d;
    ref2 += static_cast<double>(cpu[i]) * cpu[i];
    worst = std::max(worst, d);
    ref_max = std::max(ref_max, std::fabs(static_cast<double>(cpu[i])));
  }
  return Errors{std::sqrt(diff2 / std::max(ref2, 1e-30)), worst / std::max(ref_max, 1e-30)};
}

std::string format_error(double e) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", e);
  return text;
}

// The Hopper kernels' reference: their dropout mask is attention_keep8's
// (core/random.h), so the float64 reference of attention_reference.h runs on
// that mask, generated here; it also checks the forward's mask bits against it.
Outputs hopper_reference(const FlashCase& c, const Inputs& in, const std::vector<uint32_t>& bits) {
  std::vector<int64_t> len(static_cast<size_t>(c.B), c.L);
  if (!in.mask.empty())
    for (int64_t b = 0; b < c.B; ++b)
      len[static_cast<size_t>(b)] = std::count(in.mask.begin() + b * c.L, in.mask.begin() + (b + 1) * c.L, int64_t{1});
  std::vector<float> keep;
  if (c.p > 0.0f) {
    const int64_t words = anatomy::cuda::attention_keep_words(c.L);
    keep.resize(static_cast<size_t>(c.B * c.heads * c.L * c.L));
    int64_t wrong = 0;
    for (int64_t r = 0; r < c.B * c.heads * c.L; ++r)
      for (int64_t j = 0; j < c.L; ++j) {
        const int64_t index = r * c.L + j;
        const bool kept = anatomy::attention_keep(in.dropout.seed, in.dropout.stream, static_cast<uint64_t>(index), c.p);
        keep[static_cast<size_t>(index)] = kept ? 1.0f : 0.0f;
        wrong += ((bits[static_cast<size_t>(r * words + j / 32)] >> (j % 32)) & 1u) != (kept ? 1u : 0u);
      }
    EXPECT_EQ(wrong, 0) << "mask bits that differ from attention_keep8's";
  }
  auto doubles = [](const Rounded& x) { return std::vector<double>(x.values.begin(), x.values.end()); };
  const anatomy::test::AttentionReference r = anatomy::test::attention_reference(
      c.B, c.L, c.heads, c.D, c.p, doubles(in.q), doubles(in.k), doubles(in.v), doubles(in.dctx), len, keep, in.scale);
  auto floats = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  return Outputs{floats(r.ctx), floats(r.dq), floats(r.dk), floats(r.dv)};
}

// The kernels' outputs against the CPU backend's (the Hopper kernels: against
// the reference on their own mask), the masked keys' zero gradients, and the
// same bits on a second run.
void check_against_cpu(const FlashCase& c, Kernels kernels) {
  const Inputs in = make_inputs(c);
  GpuFlash gpu(c, in, kernels);
  const GpuFlash::Raw first = gpu.run();
  const Outputs cpu = kernels == Kernels::Hopper ? hopper_reference(c, in, first.bits) : run_cpu(c, in);

  // Tolerances. The reference works in float32 on the same (rounded) inputs,
  // so the difference is the kernels' 16-bit rounding: (1) ctx, dq, dk, dv are
  // returned in 16 bits, a relative error of up to 2^-9 (bf16) or 2^-12 (fp16)
  // per element; (2) the probabilities (times the dropout mask) enter P·V and
  // Pᵀ·dO, and dS enters dS·K and dSᵀ·Q, as tensor-core operands rounded to
  // 16 bits, again 2^-9 or 2^-12 relative per term, partly averaging out
  // over the sums. Sums themselves are float32 (in another order than
  // OpenBLAS's, ~1e-6). Hence a
  // relative norm error of 1e-2 for bf16 (8 significant bits) and 2e-3 for
  // fp16 (11 bits); the largest single error, relative to the largest
  // reference value, may be a few times the norm error (a sum with much
  // cancellation keeps its terms' absolute rounding errors): 2.5e-2 and 3e-3.
  // Observed on an H100: bf16 at most 3.5e-3 (norm) and 7.6e-3 (max), fp16
  // 4.1e-4 and 8.3e-4, over all cases.
  const bool bf16 = c.type == AttnType::BF16;
  const double tol_norm = bf16 ? 1e-2 : 2e-3;
  const double tol_max = bf16 ? 2.5e-2 : 3e-3;
  struct Named {
    const char* name;
    std::vector<float> gpu;
    const std::vector<float>& cpu;
  };
  const Named outputs[] = {{"ctx", widen(c.type, first.ctx), cpu.ctx},
                           {"dq", widen(c.type, first.dq), cpu.dq},
                           {"dk", widen(c.type, first.dk), cpu.dk},
                           {"dv", widen(c.type, first.dv), cpu.dv}};
  std::string observed;
  for (const Named& t : outputs) {
    ASSERT_EQ(t.gpu.size(), t.cpu.size()) << t.name;
    const Errors e = errors(t.gpu, t.cpu);
    EXPECT_LE(e.rel_norm, tol_norm) << t.name << ": ‖gpu − cpu‖/‖cpu‖";
    EXPECT_LE(e.rel_max, tol_max) << t.name << ": max|gpu − cpu| / max|cpu|";
    observed += " " + std::string(t.name) + " " + format_error(e.rel_norm) + "/" + format_error(e.rel_max);
  }
  // The observed errors (norm/max), so that the tolerances can be judged against them.
  std::printf("%s relative error%s\n", case_name(c).c_str(), observed.c_str());

  // Every log-sum-exp written and finite (a row has at least one key); with a
  // window, +inf exactly for the rows without a kept key within it.
  if (c.window < 0) {
    for (float x : first.lse) ASSERT_TRUE(std::isfinite(x)) << "lse";
  } else {
    int64_t uniform = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.L; ++i) {
        bool kept = false;
        for (int64_t j = std::max<int64_t>(0, i - c.window); j <= std::min(c.L - 1, i + c.window); ++j)
          kept |= in.mask.empty() || in.mask[static_cast<size_t>(b * c.L + j)] != 0;
        uniform += kept ? 0 : c.heads;
        for (int64_t h = 0; h < c.heads; ++h) {
          const float x = first.lse[static_cast<size_t>((b * c.heads + h) * c.L + i)];
          if (kept)
            ASSERT_TRUE(std::isfinite(x)) << "lse of row " << i << " of entry " << b;
          else
            ASSERT_EQ(x, INFINITY) << "lse of row " << i << " of entry " << b << " (no kept key in its window)";
        }
      }
    std::printf("%s: %lld (row, head) pairs attend uniformly\n", case_name(c).c_str(), static_cast<long long>(uniform));
  }

  // Masked keys of a batch entry that keeps some keys get probability exactly
  // 0, hence exactly zero dk and dv rows, as in the reference (with a window,
  // the rows that attend uniformly give masked keys probability 1/L).
  if (!in.mask.empty() && c.window < 0) {
    for (int64_t b = 0; b < c.B; ++b) {
      bool any = false;
      for (int64_t j = 0; j < c.L; ++j) any |= in.mask[static_cast<size_t>(b * c.L + j)] != 0;
      if (!any) continue;
      for (int64_t j = 0; j < c.L; ++j) {
        if (in.mask[static_cast<size_t>(b * c.L + j)] != 0) continue;
        for (int64_t e = 0; e < c.heads * c.D; ++e) {
          const size_t i = static_cast<size_t>((b * c.L + j) * c.heads * c.D + e);
          ASSERT_EQ(from_16(c.type, first.dk[i]), 0.0f) << "dk of masked key " << j << " of batch entry " << b;
          ASSERT_EQ(from_16(c.type, first.dv[i]), 0.0f) << "dv of masked key " << j << " of batch entry " << b;
        }
      }
    }
  }

  // Same inputs, same bits: no atomics, no scheduling-dependent order.
  const GpuFlash::Raw second = gpu.run();
  EXPECT_EQ(first.ctx, second.ctx) << "ctx";
  EXPECT_EQ(first.dq, second.dq) << "dq";
  EXPECT_EQ(first.dk, second.dk) << "dk";
  EXPECT_EQ(first.dv, second.dv) << "dv";
  EXPECT_EQ(0, std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * sizeof(float))) << "lse";
}

class CudaFlashAttention : public ::testing::TestWithParam<FlashCase> {};

TEST_P(CudaFlashAttention, MatchesCpuBackendAndIsDeterministic) {
  SKIP_WITHOUT_GPU();
  check_against_cpu(GetParam(), Kernels::Flash);
}

// The Hopper kernels (D = 64 only), forward and backward, the mask passed as
// bits from one to the other.
class CudaHopperAttention : public ::testing::TestWithParam<FlashCase> {};

TEST_P(CudaHopperAttention, MatchesTheReferenceOnItsMaskAndIsDeterministic) {
  SKIP_WITHOUT_GPU();
  if (!anatomy::cuda::hopper_attention_available(64)) GTEST_SKIP() << "no sm_90a device";
  check_against_cpu(GetParam(), Kernels::Hopper);
}

std::vector<FlashCase> all_cases() {
  // (B, L, heads, D): odd L with a partial tile; BERT-base-like; BERT-large at
  // L = 512; D = 32 with an odd L; D = 128; and with B·heads = 128, where the
  // backward keeps dq in shared memory (one block per batch entry and head),
  // at D = 64 and at D = 32 with L % 4 != 0.
  const int64_t sizes[][4] = {{2, 33, 2, 64},   {3, 128, 4, 64},  {2, 512, 16, 64}, {1, 77, 3, 32},
                              {1, 64, 2, 128},  {8, 128, 16, 64}, {2, 301, 64, 32}};
  std::vector<FlashCase> cases;
  for (AttnType t : {AttnType::BF16, AttnType::F16}) {
    for (const auto& s : sizes) {
      cases.push_back({s[0], s[1], s[2], s[3], MaskKind::None, 0.0f, t});
      cases.push_back({s[0], s[1], s[2], s[3], MaskKind::None, 0.1f, t});
      cases.push_back({s[0], s[1], s[2], s[3], MaskKind::Padding, 0.0f, t});
      cases.push_back({s[0], s[1], s[2], s[3], MaskKind::Padding, 0.1f, t});
      cases.push_back({s[0], s[1], s[2], s[3], MaskKind::PaddingAndEmpty, 0.1f, t});
    }
    // A negative scale (the kernels flip q's signs rather than the scale's).
    cases.push_back({2, 33, 2, 64, MaskKind::Padding, 0.1f, t, true});
    cases.push_back({8, 128, 16, 64, MaskKind::None, 0.0f, t, true});
    // Windows (no dropout): ModernBERT's 64 each side at L 1024 and an odd L,
    // padded so that rows far past an entry's end have no key in their window;
    // a window of 1 (three keys a row: with 0, a row's only key gives dS = 0
    // exactly, dq and dk are rounding noise, and relative errors mean
    // nothing); one wider than L (every key); D = 32 and 128; B·heads = 128
    // (dq in shared memory); a negative scale.
    const int64_t windows[][5] = {{2, 1024, 2, 64, 64}, {3, 301, 2, 64, 64}, {2, 257, 3, 64, 1},
                                  {2, 200, 2, 64, 500}, {1, 333, 2, 32, 17}, {2, 190, 2, 128, 40},
                                  {8, 512, 16, 64, 64}, {2, 700, 2, 32, 130}};
    for (const auto& w : windows)
      for (MaskKind m : {MaskKind::None, MaskKind::Padding, MaskKind::PaddingAndEmpty})
        cases.push_back({w[0], w[1], w[2], w[3], m, 0.0f, t, false, w[4]});
    cases.push_back({3, 301, 2, 64, MaskKind::Padding, 0.0f, t, true, 64});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFlashAttention, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<FlashCase>& info) { return case_name(info.param); });

std::vector<FlashCase> head64_cases() {
  std::vector<FlashCase> cases;
  for (const FlashCase& c : all_cases())
    if (c.D == 64 && c.window < 0) cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaHopperAttention, ::testing::ValuesIn(head64_cases()),
                         [](const ::testing::TestParamInfo<FlashCase>& info) { return case_name(info.param); });

// Timing only, not run by default (--gtest_also_run_disabled_tests): forward
// and backward separately at B = 32, L = 512, 16 heads, D = 64 (BERT-large
// shape), both types, dropout 0.1 and, to show what the dropout mask costs, 0.
// Each is 20 launches back to back between two events, so that host-side
// launch costs overlap the GPU's work rather than add to it.
TEST(CudaFlashAttentionTiming, DISABLED_ForwardBackward) {
  SKIP_WITHOUT_GPU();
  for (AttnType t : {AttnType::BF16, AttnType::F16}) {
    for (float p : {0.1f, 0.0f}) {
      const FlashCase c{32, 512, 16, 64, MaskKind::None, p, t};
      const Inputs in = make_inputs(c);
      GpuFlash gpu(c, in);
      gpu.forward();  // warm-up
      gpu.backward();
      cudaEvent_t e0, e1, e2;
      ANATOMY_CUDA_CHECK(cudaEventCreate(&e0));
      ANATOMY_CUDA_CHECK(cudaEventCreate(&e1));
      ANATOMY_CUDA_CHECK(cudaEventCreate(&e2));
      constexpr int kRuns = 20;
      ANATOMY_CUDA_CHECK(cudaEventRecord(e0, gpu.stream()));
      for (int i = 0; i < kRuns; ++i) gpu.forward();
      ANATOMY_CUDA_CHECK(cudaEventRecord(e1, gpu.stream()));
      for (int i = 0; i < kRuns; ++i) gpu.backward();
      ANATOMY_CUDA_CHECK(cudaEventRecord(e2, gpu.stream()));
      ANATOMY_CUDA_CHECK(cudaEventSynchronize(e2));
      float fwd = 0.0f, bwd = 0.0f;
      ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&fwd, e0, e1));
      ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&bwd, e1, e2));
      fwd /= kRuns;
      bwd /= kRuns;
      // 4·B·heads·L²·D flops forward (two products), 2.5 times that backward (five).
      const double flops = 4.0 * c.B * c.heads * c.L * c.L * c.D;
      std::printf("flash attention %s: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms (%.0f TFLOP/s), total %.3f ms\n",
                  case_name(c).c_str(), fwd, flops / (fwd * 1e9), bwd, 2.5 * flops / (bwd * 1e9), fwd + bwd);
      if (anatomy::cuda::hopper_attention_available(c.D)) {
        GpuFlash hopper(c, in, Kernels::Hopper);
        hopper.forward();  // warm-up
        hopper.backward();
        ANATOMY_CUDA_CHECK(cudaEventRecord(e0, hopper.stream()));
        for (int i = 0; i < kRuns; ++i) hopper.forward();
        ANATOMY_CUDA_CHECK(cudaEventRecord(e1, hopper.stream()));
        for (int i = 0; i < kRuns; ++i) hopper.backward();
        ANATOMY_CUDA_CHECK(cudaEventRecord(e2, hopper.stream()));
        ANATOMY_CUDA_CHECK(cudaEventSynchronize(e2));
        float hfwd = 0.0f, hbwd = 0.0f;
        ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&hfwd, e0, e1));
        ANATOMY_CUDA_CHECK(cudaEventElapsedTime(&hbwd, e1, e2));
        hfwd /= kRuns;
        hbwd /= kRuns;
        std::printf("hopper attention (mask as bits) %s: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms (%.0f TFLOP/s), total %.3f ms\n",
                    case_name(c).c_str(), hfwd, flops / (hfwd * 1e9), hbwd, 2.5 * flops / (hbwd * 1e9), hfwd + hbwd);
      }
      (void)cudaEventDestroy(e0);
      (void)cudaEventDestroy(e1);
      (void)cudaEventDestroy(e2);
    }
  }
}

}  // namespace
