// test_adamw_8bit.cpp: --optim adamw_8bit against bitsandbytes: its two
// dynamic maps (bit for bit), its own 8-bit AdamW update over four steps
// (tests/fixtures/optim, made by tests/tools/make_adamw8bit_fixture.py), and
// against our fp32 AdamW; the states' bytes in the ledger; the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/kernels/cpu/optimizer_kernels.h"
#include "anatomy/kernels/quantize_8bit.h"
#include "anatomy/model/config.h"
#include "anatomy/optim/optimizer.h"
#include "anatomy/optim/quantization_maps.h"
#include "test_util.h"

namespace anatomy {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// dynamic_maps.txt: "index signed_hex unsigned_hex ..." per line.
void read_map_fixture(QuantizationMap* signed_map, QuantizationMap* unsigned_map) {
  std::ifstream in(test::fixture("optim/dynamic_maps.txt"));
  ASSERT_TRUE(in) << "missing fixture optim/dynamic_maps.txt";
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    int index;
    std::string a, b;
    s >> index >> a >> b;
    (*signed_map)[index] = from_bits(static_cast<uint32_t>(std::stoul(a, nullptr, 16)));
    (*unsigned_map)[index] = from_bits(static_cast<uint32_t>(std::stoul(b, nullptr, 16)));
    ++rows;
  }
  ASSERT_EQ(rows, 256);
}

TEST(QuantizationMaps, AreBitsandbytesDynamicMapsToTheBit) {
  QuantizationMap want_signed{}, want_unsigned{};
  read_map_fixture(&want_signed, &want_unsigned);
  const QuantizationMap s = dynamic_quantization_map(true), u = dynamic_quantization_map(false);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(std::memcmp(&s[i], &want_signed[i], 4), 0) << "signed entry " << i << ": " << s[i] << " vs "
                                                         << want_signed[i];
    EXPECT_EQ(std::memcmp(&u[i], &want_unsigned[i], 4), 0) << "unsigned entry " << i << ": " << u[i] << " vs "
                                                           << want_unsigned[i];
  }
  for (int i = 1; i < 256; ++i) {
    EXPECT_LT(s[i - 1], s[i]) << i;
    EXPECT_LT(u[i - 1], u[i]) << i;
  }
  // Signed: -0.99296875 (the midpoint of the last tenth's top 64th, negated) .. 1, with 0 at index 127.
  EXPECT_FLOAT_EQ(s[0], -0.99296875f);
  EXPECT_EQ(s[255], 1.0f);
  EXPECT_EQ(s[127], 0.0f);
  // Unsigned: 0 .. 1; the smallest positive entry 1e-6 · 0.325.
  EXPECT_EQ(u[0], 0.0f);
  EXPECT_EQ(u[255], 1.0f);
  EXPECT_FLOAT_EQ(u[1], 3.25e-7f);
}

TEST(Quantization, NearestEntryAndRoundTripBound) {
  const QuantizationMap s = dynamic_quantization_map(true), u = dynamic_quantization_map(false);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-8.0f, 0.0f);
  for (int trial = 0; trial < 20000; ++trial) {
    // Magnitudes over eight decades, as moments scaled by a block's absmax are.
    const float x = unit(rng) * std::pow(10.0f, exponent(rng));
    for (const QuantizationMap* map : {&s, &u}) {
      const float v = map == &u ? std::fabs(x) : x;
      const int k = nearest_map_index(map->data(), v);
      // Brute force: the first index of least distance (torch.argmin in bitsandbytes' reference).
      int best = 0;
      for (int i = 1; i < 256; ++i)
        if (std::fabs(v - (*map)[i]) < std::fabs(v - (*map)[best])) best = i;
      ASSERT_EQ(k, best) << v;
      // Round trip: within half the gap to the neighbour on v's side (the grid's resolution there).
      const float gap = (*map)[k] <= v ? (k < 255 ? (*map)[k + 1] - (*map)[k] : 0.0f)
                                       : (*map)[k] - (*map)[k > 0 ? k - 1 : 0];
      if (v >= (*map)[0]) EXPECT_LE(std::fabs((*map)[k] - v), gap / 2 * (1 + 1e-6f)) << v;
    }
  }
  // Outside the map's range: the ends. A zero block (absmax 0) stays 0.
  EXPECT_EQ(nearest_map_index(s.data(), -1.0f), 0);
  EXPECT_EQ(nearest_map_index(s.data(), 2.0f), 255);
  EXPECT_EQ(scale_to_map(0.0f, 0.0f), 0.0f);
  EXPECT_EQ(nearest_map_index(s.data(), 0.0f), 127);
  EXPECT_EQ(nearest_map_index(u.data(), 0.0f), 0);
}

// One tensor's 8-bit state on the CPU backend, with the maps.
struct State8bit {
  Tensor param, grad, state1, state2, absmax1, absmax2, qmap1, qmap2;
  State8bit(Backend& backend, int64_t n) {
    Ledger& l = backend.ledger();
    const int64_t blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
    param = Tensor::zeros(l, {n}, DType::F32, Category::Weights, "p");
    grad = Tensor::zeros(l, {n}, DType::F32, Category::Gradients, "g");
    state1 = Tensor::zeros(l, {n}, DType::U8, Category::OptimizerStates, "s1");
    state2 = Tensor::zeros(l, {n}, DType::U8, Category::OptimizerStates, "s2");
    absmax1 = Tensor::zeros(l, {blocks}, DType::F32, Category::OptimizerStates, "a1");
    absmax2 = Tensor::zeros(l, {blocks}, DType::F32, Category::OptimizerStates, "a2");
    qmap1 = Tensor::zeros(l, {256}, DType::F32, Category::OptimizerStates, "q1");
    qmap2 = Tensor::zeros(l, {256}, DType::F32, Category::OptimizerStates, "q2");
    const QuantizationMap s = dynamic_quantization_map(true), u = dynamic_quantization_map(false);
    std::copy(s.begin(), s.end(), qmap1.data<float>());
    std::copy(u.begin(), u.end(), qmap2.data<float>());
  }
  void step(Backend& backend, const AdamWHyper& h) {
    backend.adamw8bit_step(param, grad, state1, state2, absmax1, absmax2, qmap1, qmap2, h, nullptr);
  }
};

std::vector<std::string> split(const std::string& line) {
  std::istringstream s(line);
  std::vector<std::string> out;
  for (std::string w; s >> w;) out.push_back(w);
  return out;
}

TEST(AdamW8bit, FollowsBitsandbytesOverFourSteps) {
  std::ifstream in(test::fixture("optim/adamw8bit_steps.txt"));
  ASSERT_TRUE(in) << "missing fixture optim/adamw8bit_steps.txt";
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') rows.push_back(split(line));
  ASSERT_EQ(rows.size(), 1u + 4u * 6u);
  auto floats = [](const std::vector<std::string>& row) {
    std::vector<float> v;
    for (size_t i = 1; i < row.size(); ++i) v.push_back(from_bits(static_cast<uint32_t>(std::stoul(row[i], nullptr, 16))));
    return v;
  };
  const std::vector<float> param0 = floats(rows[0]);
  const int64_t n = static_cast<int64_t>(param0.size());
  auto backend = make_cpu_backend(1);
  State8bit st(*backend, n);
  std::copy(param0.begin(), param0.end(), st.param.data<float>());
  AdamWHyper h;
  h.lr = 1e-3, h.beta1 = 0.9, h.beta2 = 0.999, h.eps = 1e-8, h.weight_decay = 0.01;
  for (int k = 0; k < 4; ++k) {
    const auto& grad = rows[1 + 6 * k];
    const std::vector<float> g = floats(grad), want_p = floats(rows[2 + 6 * k]);
    const std::vector<float> want_a1 = floats(rows[5 + 6 * k]), want_a2 = floats(rows[6 + 6 * k]);
    std::copy(g.begin(), g.end(), st.grad.data<float>());
    h.step = k + 1;
    st.step(*backend, h);
    // Bytes: bitsandbytes computes the moments in float32, we in double
    // rounded once (as torch.optim.AdamW on the CPU backend), so a moment may
    // differ by an ulp and land on the other side of a midpoint between two
    // map entries: a byte may then differ by one index, never more.
    int differing = 0;
    for (int which = 0; which < 2; ++which) {
      const uint8_t* ours = (which == 0 ? st.state1 : st.state2).data<uint8_t>();
      const auto& row = rows[(which == 0 ? 3 : 4) + 6 * k];
      for (int64_t i = 0; i < n; ++i) {
        const int want = std::stoi(row[1 + i]);
        ASSERT_LE(std::abs(want - ours[i]), 1) << "step " << k + 1 << " state" << which + 1 << "[" << i << "]";
        differing += want != ours[i];
      }
    }
    // One ulp lands on a midpoint rarely: a few in 1200 bytes, not a pattern.
    EXPECT_LE(differing, 12) << "step " << k + 1;
    // absmax: the largest |moment| of each block, equal to float32 rounding (relative 1e-6).
    for (size_t b = 0; b < want_a1.size(); ++b) {
      EXPECT_NEAR(st.absmax1.data<float>()[b], want_a1[b], 1e-6 * want_a1[b]) << b;
      EXPECT_NEAR(st.absmax2.data<float>()[b], want_a2[b], 1e-6 * want_a2[b]) << b;
    }
    // Parameters: the update lr·m̂/(√v̂+eps) differs between float and double
    // by a few float ulps of the update (≤ 1e-3 here), plus what a byte off
    // by one moves: at most one map gap (≤ 1.5% of absmax) of m, i.e. ≤ 2% of
    // one update. So within 3e-5 absolute (lr 1e-3 × 4 steps × 1% with margin for v).
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(st.param.data<float>()[i], want_p[i], 3e-5) << "step " << k + 1 << " param " << i;
  }
}

TEST(AdamW8bit, FirstStepIsExactlyFp32AdamWAndLaterStepsTrackIt) {
  // The first step starts from zero moments, which 8-bit holds exactly, and
  // the parameter update uses the moments before re-quantization: the same bits as fp32 AdamW.
  const int64_t n = 1000;  // three full blocks and a tail of 232
  auto backend = make_cpu_backend(1);
  State8bit st(*backend, n);
  Ledger& l = backend->ledger();
  Tensor p32 = Tensor::zeros(l, {n}, DType::F32, Category::Weights, "p32");
  Tensor m32 = Tensor::zeros(l, {n}, DType::F32, Category::OptimizerStates, "m32");
  Tensor v32 = Tensor::zeros(l, {n}, DType::F32, Category::OptimizerStates, "v32");
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) st.param.data<float>()[i] = p32.data<float>()[i] = 0.1f * normal(rng);
  AdamWHyper h;
  h.lr = 1e-3, h.weight_decay = 0.01;
  double worst = 0.0;
  for (int k = 1; k <= 10; ++k) {
    // Gradients pulling toward 0 plus noise, of magnitudes that differ per block.
    for (int64_t i = 0; i < n; ++i)
      st.grad.data<float>()[i] = (st.param.data<float>()[i] + 0.1f * normal(rng)) * (1.0f + float(i / 256));
    h.step = k;
    backend->adamw_step(p32, st.grad, m32, v32, h);
    st.step(*backend, h);
    if (k == 1) {
      ASSERT_EQ(std::memcmp(st.param.data<float>(), p32.data<float>(), n * 4), 0);
      std::copy(st.param.data<float>(), st.param.data<float>() + n, p32.data<float>());
    }
    for (int64_t i = 0; i < n; ++i)
      worst = std::max(worst, std::fabs(double(st.param.data<float>()[i]) - p32.data<float>()[i]));
  }
  // Each step moves a parameter by at most ~lr; the 8-bit moments differ from
  // fp32 by at most half a map gap (≤ 1% of the block's absmax for m, and v's
  // relative error enters under a square root), so per step the updates
  // differ by well under 10% of lr: over 9 steps < 9 × 1e-4.
  EXPECT_LT(worst, 9e-4);
  EXPECT_GT(worst, 0.0);  // and they are not the same optimizer
}

TEST(AdamW8bit, LedgerHoldsTwoBytesPerParameterPlusAbsmaxAndSmallTensors) {
  const ModelConfig config = *model_preset("bert-tiny");
  auto backend = make_cpu_backend(1);
  const std::vector<ParamSpec> specs = bert_parameter_specs(config);
  ParameterSet params(*backend, specs, Category::Weights, "");
  const int64_t before = backend->ledger().snapshot().live[static_cast<size_t>(Category::OptimizerStates)];
  OptimizerOptions options;
  options.kind = OptimizerKind::AdamW8bit;
  auto optimizer = make_optimizer(*backend, params, options);
  EXPECT_EQ(optimizer->name(), "adamw_8bit");
  int64_t expected = 2 * 256 * 4;  // the two maps
  int64_t params_8bit = 0;
  for (const ParamSpec& spec : specs) {
    const int64_t n = shape_numel(spec.shape);
    if (n >= 4096) {
      expected += 2 * n + 2 * 4 * ((n + 255) / 256);
      params_8bit += n;
    } else {
      expected += 2 * 4 * n;
    }
  }
  const int64_t after = backend->ledger().snapshot().live[static_cast<size_t>(Category::OptimizerStates)];
  EXPECT_EQ(after - before, expected);
  // Most of bert-tiny is in 8-bit tensors, so about 2 bytes per parameter.
  const double per_param = double(after - before) / double(params.parameter_count());
  EXPECT_GT(params_8bit, params.parameter_count() * 9 / 10);
  EXPECT_GT(per_param, 2.0);
  EXPECT_LT(per_param, 2.5);
}

TEST(AdamW8bit, TrainsFromTheCommandLine) {
  test::TempDir dir;
  const auto r = test::run_anatomy("train --device cpu --model bert-tiny --optim adamw_8bit --dummy-size 16 "
                                   "--dummy-seq-len 16 --max-steps 3 --no-progress --output-dir " +
                                   dir.path().string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace anatomy
