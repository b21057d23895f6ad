// test_sgd.cpp: --optim sgd against torch.optim.SGD itself (its updates over
// five steps of three tensors in Trainer's two weight-decay groups, for every
// momentum setting, made by tests/tools/make_sgd_fixture.py), through the
// Optimizer that `anatomy train` builds; against hand-worked steps for two
// elements; over many elements and steps against a double-precision
// transcription of torch's algorithm (with the bf16 copy); and end to end
// through `anatomy train` and `anatomy estimate`.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <regex>
#include <sstream>

#include "anatomy/optim/optimizer.h"
#include "optim_fixture.h"
#include "test_util.h"

namespace anatomy {
namespace {

struct SgdRun {
  std::vector<float> params;
  std::vector<float> half;  // bf16 copy, as floats
};

// Steps SGD over one flat buffer of two segments: [0, n0) decays, [n0, n) does not.
SgdRun run_sgd(const std::vector<float>& p0, const std::vector<std::vector<float>>& grads, int64_t n0, SgdHyper h,
            bool with_half) {
  auto backend = make_cpu_backend(1);
  Ledger& ledger = backend->ledger();
  const auto n = static_cast<int64_t>(p0.size());
  Tensor p = Tensor::empty(ledger, {n}, DType::F32, Category::Weights, "p");
  Tensor g = Tensor::empty(ledger, {n}, DType::F32, Category::Gradients, "g");
  Tensor buf = Tensor::empty(ledger, {n}, DType::F32, Category::OptimizerStates, "buf");
  Tensor half = Tensor::empty(ledger, {n}, DType::BF16, Category::WeightsHalf, "half");
  backend->copy_from_host(p, p0.data());
  const std::vector<ParamSegment> segments = {{0, n0, true}, {n0, n - n0, false}};
  for (size_t s = 0; s < grads.size(); ++s) {
    backend->copy_from_host(g, grads[s].data());
    h.first_step = s == 0;
    backend->sgd_step_flat(p, g, h.momentum != 0.0 ? buf : Tensor(), segments, h, with_half ? &half : nullptr);
  }
  SgdRun r;
  r.params.resize(n);
  backend->copy_to_host(p, r.params.data());
  if (with_half) {
    std::vector<uint16_t> bits(n);
    backend->copy_to_host(half, bits.data());
    for (uint16_t b : bits) r.half.push_back(bf16_to_float(b));
  }
  return r;
}

// tests/fixtures/optim/sgd_steps.txt (format in make_sgd_fixture.py).
struct TorchSgdFixture : test::OptimizerFixture {
  struct Config {
    double momentum = 0.0, dampening = 0.0;
    bool nesterov = false;
    std::vector<std::vector<float>> steps;  // torch's parameters after each step
  };
  std::vector<Config> configs;
};

TorchSgdFixture read_torch_sgd_fixture() {
  TorchSgdFixture f;
  test::read_optimizer_fixture("optim/sgd_steps.txt", f, [&f](const std::string& key, std::istringstream& words) {
    if (key == "config") {
      TorchSgdFixture::Config c;
      int nesterov = 0;
      words >> c.momentum >> c.dampening >> nesterov;
      c.nesterov = nesterov != 0;
      f.configs.push_back(c);
    } else if (key == "step") {
      EXPECT_FALSE(f.configs.empty()) << "a step before any config";
      if (!f.configs.empty()) f.configs.back().steps.push_back(test::hex_floats(words));
    } else {
      return false;
    }
    return true;
  });
  return f;
}

using test::gather;
using test::scatter;

TEST(Sgd, FollowsTorchOptimSgdOverFiveSteps) {
  const TorchSgdFixture f = read_torch_sgd_fixture();
  ASSERT_EQ(f.specs.size(), 3u);
  ASSERT_EQ(f.lrs.size(), 5u);
  ASSERT_EQ(f.grads.size(), f.lrs.size());
  ASSERT_EQ(f.configs.size(), 4u);
  for (const TorchSgdFixture::Config& config : f.configs) {
    ASSERT_EQ(config.steps.size(), f.lrs.size());
    auto backend = make_cpu_backend(1);
    const ParameterSet params(*backend, f.specs, Category::Weights, "");
    const ParameterSet grads(*backend, f.specs, Category::Gradients, "grad.");
    scatter(params, f.param0);
    OptimizerOptions options;
    options.kind = OptimizerKind::Sgd;
    options.adam.weight_decay = f.weight_decay;
    options.momentum = config.momentum;
    options.dampening = config.dampening;
    options.nesterov = config.nesterov;
    const std::unique_ptr<Optimizer> sgd = make_optimizer(*backend, params, options);
    EXPECT_EQ(sgd->name(), "sgd");
    // The momentum buffer, one float a parameter (padded as the parameters), only with momentum.
    const int64_t states = backend->ledger().snapshot().live[static_cast<size_t>(Category::OptimizerStates)];
    EXPECT_EQ(states, config.momentum != 0.0 ? static_cast<int64_t>(params.flat().numel() * sizeof(float)) : 0);
    const std::string what = "momentum " + std::to_string(config.momentum) + " dampening " +
                             std::to_string(config.dampening) + (config.nesterov ? " nesterov" : "");
    for (size_t s = 0; s < f.lrs.size(); ++s) {
      scatter(grads, f.grads[s]);
      sgd->step(params, grads, f.lrs[s]);
      const std::vector<float> ours = gather(params), want = config.steps[s];
      ASSERT_EQ(ours.size(), want.size());
      // Bit for bit: both round each `x.add(y, alpha=a)` once, as one fused
      // multiply-add (torch's vectorized CPU loop on AVX2/AVX-512, the loop
      // that made the fixture). A wrong group, rule or rounding order moves
      // some of these 330 values by an ulp or more.
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(std::bit_cast<uint32_t>(ours[i]), std::bit_cast<uint32_t>(want[i]))
            << what << ", step " << s + 1 << ", element " << i << ": " << ours[i] << " vs torch's " << want[i];
    }
  }
}

TEST(Sgd, TwoElementsByHand) {
  // p = [1, 2], grads [0.5, -1] then [0.25, 0.5]; lr 0.1, momentum 0.9, dampening 0.1, weight decay 0.01 on p[0].
  SgdHyper h;
  h.lr = 0.1;
  h.momentum = 0.9;
  h.dampening = 0.1;
  h.weight_decay = 0.01;
  const SgdRun r = run_sgd({1.0f, 2.0f}, {{0.5f, -1.0f}, {0.25f, 0.5f}}, 1, h, false);
  // step 1: d0 = 0.5 + 0.01·1 = 0.51, buf0 = 0.51, p0 = 1 − 0.051 = 0.949; p1: buf1 = −1, p1 = 2.1
  // step 2: d0 = 0.25 + 0.01·0.949 = 0.25949; buf0 = 0.9·0.51 + 0.9·0.25949 = 0.692541; p0 = 0.949 − 0.0692541
  //         p1: buf1 = 0.9·(−1) + 0.9·0.5 = −0.45; p1 = 2.1 + 0.045 = 2.145
  EXPECT_NEAR(r.params[0], 0.949 - 0.0692541, 1e-6);
  EXPECT_NEAR(r.params[1], 2.145, 1e-6);
  h.nesterov = true;
  h.dampening = 0.0;
  const SgdRun n = run_sgd({1.0f, 2.0f}, {{0.5f, -1.0f}, {0.25f, 0.5f}}, 1, h, false);
  // Nesterov, p1 only: step 1 buf −1, d = −1 + 0.9·(−1) = −1.9, p1 = 2.19; step 2 buf = −0.9 + 0.5 = −0.4,
  // d = 0.5 + 0.9·(−0.4) = 0.14, p1 = 2.19 − 0.014 = 2.176
  EXPECT_NEAR(n.params[1], 2.176, 1e-6);
}

// torch.optim.SGD's single-tensor algorithm, transcribed in double.
std::vector<double> torch_sgd(std::vector<double> p, const std::vector<std::vector<float>>& grads, int64_t n0,
                              const SgdHyper& h) {
  std::vector<double> buf(p.size());
  for (size_t s = 0; s < grads.size(); ++s)
    for (size_t i = 0; i < p.size(); ++i) {
      double d = grads[s][i];
      if (static_cast<int64_t>(i) < n0) d += h.weight_decay * p[i];
      if (h.momentum != 0.0) {
        buf[i] = s == 0 ? d : h.momentum * buf[i] + (1.0 - h.dampening) * d;
        d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
      }
      p[i] -= h.lr * d;
    }
  return p;
}

TEST(Sgd, ManyElementsTrackTorchsAlgorithmInDouble) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 1000, n0 = 617;
  std::vector<float> p0(n);
  for (float& v : p0) v = normal(rng);
  std::vector<std::vector<float>> grads(6, std::vector<float>(n));
  for (auto& g : grads)
    for (float& v : g) v = normal(rng);
  for (const auto& [momentum, dampening, nesterov] :
       {std::tuple{0.0, 0.0, false}, std::tuple{0.9, 0.0, false}, std::tuple{0.9, 0.1, false},
        std::tuple{0.9, 0.0, true}}) {
    SgdHyper h;
    h.lr = 0.05;
    h.momentum = momentum;
    h.dampening = dampening;
    h.nesterov = nesterov;
    h.weight_decay = 0.02;
    const SgdRun r = run_sgd(p0, grads, n0, h, true);
    const std::vector<double> ref = torch_sgd(std::vector<double>(p0.begin(), p0.end()), grads, n0, h);
    for (int64_t i = 0; i < n; ++i) {
      // float32 rounding of a few operations a step over six steps: a few ulps of values of order 1.
      EXPECT_NEAR(r.params[i], ref[i], 4e-6 * (1.0 + std::abs(ref[i]))) << i << " momentum " << momentum;
      EXPECT_EQ(r.half[i], bf16_to_float(float_to_bf16(r.params[i]))) << "the bf16 copy is the rounded weight";
    }
  }
}

TEST(Sgd, TrainsFromTheCommandLineAndRejectsBadArguments) {
  auto r = test::run_anatomy("train --device cpu --model bert-tiny --optim sgd --optim-args momentum=0.9 "
                             "--learning-rate 0.01 --dummy-size 16 --dummy-seq-len 16 --max-steps 3 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Optimizer states"), std::string::npos);
  r = test::run_anatomy("train --device cpu --model bert-tiny --optim sgd --optim-args momentum=fast --max-steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("momentum=fast"), std::string::npos) << r.output;
  r = test::run_anatomy("train --device cpu --model bert-tiny --optim adamw --optim-args momentum=0.9 --max-steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("only --optim sgd"), std::string::npos) << r.output;
}

TEST(Sgd, MomentumIsTheOnlyStateFourBytesAParameter) {
  const auto plan = [](const std::string& optim_args) {
    auto r = test::run_anatomy("estimate --device cpu --model bert-tiny --optim sgd --dummy-seq-len 16 " +
                               (optim_args.empty() ? std::string() : "--optim-args " + optim_args));
    return r;
  };
  const auto with = plan("momentum=0.9"), without = plan("");
  ASSERT_EQ(with.exit_code, 0) << with.output;
  EXPECT_TRUE(std::regex_search(with.output, std::regex(R"(optimizer \(SGD, momentum\)\s+4\s+4\.00)")))
      << with.output;
  EXPECT_TRUE(std::regex_search(without.output, std::regex(R"(optimizer \(SGD\)\s+0\s+0\.00)"))) << without.output;
}

}  // namespace
}  // namespace anatomy
