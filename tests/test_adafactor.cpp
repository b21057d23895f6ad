// test_adafactor.cpp: --optim adafactor against transformers' Adafactor itself
// (five steps of three tensors in Trainer's two weight-decay groups, made by
// tests/tools/make_adafactor_fixture.py), through the Optimizer that
// `anatomy train` builds; against steps worked out by hand (a rank-one
// gradient, whose factored statistics are exact, moves every weight by lr
// times its gradient's sign on the first step); its states' size (rows + cols
// floats a matrix) in the ledger of bert-tiny; and end to end through `anatomy train`.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "anatomy/model/bert/bert.h"
#include "anatomy/model/bert/bert_parameters.h"
#include "anatomy/model/config.h"
#include "anatomy/optim/optimizer.h"
#include "optim_fixture.h"
#include "test_util.h"

namespace anatomy {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();  // 2^-23

// tests/fixtures/optim/adafactor_steps.txt (format in make_adafactor_fixture.py).
struct AdafactorFixture : test::OptimizerFixture {
  std::vector<std::vector<float>> steps, states;  // per step, every tensor concatenated
};

AdafactorFixture read_fixture() {
  AdafactorFixture f;
  test::read_optimizer_fixture("optim/adafactor_steps.txt", f, [&f](const std::string& key, std::istringstream& words) {
    if (key == "step") f.steps.push_back(test::hex_floats(words));
    else if (key == "state") f.states.push_back(test::hex_floats(words));
    else return false;
    return true;
  });
  return f;
}

using test::gather;
using test::scatter;

float ulp(float x) {
  const float a = std::fabs(x);
  return std::nextafter(a, std::numeric_limits<float>::infinity()) - a;
}

// The fixture's five steps, tensor by tensor through Backend::adafactor_step
// with states of our own (a matrix's row and column states, a vector's full
// one, zero at the start): the weights and the states after each step, both
// concatenated as the fixture lists them.
struct KernelRun {
  std::vector<std::vector<float>> steps, states;
};
KernelRun run_kernel(const AdafactorFixture& f) {
  auto backend = make_cpu_backend(1);
  Ledger& ledger = backend->ledger();
  std::vector<Tensor> p, g, row, col, v;
  size_t at = 0;
  for (const ParamSpec& spec : f.specs) {
    p.push_back(Tensor::empty(ledger, spec.shape, DType::F32, Category::Weights, spec.name));
    g.push_back(Tensor::empty(ledger, spec.shape, DType::F32, Category::Gradients, spec.name));
    std::copy_n(f.param0.begin() + static_cast<std::ptrdiff_t>(at), p.back().numel(), p.back().data<float>());
    at += static_cast<size_t>(p.back().numel());
    const bool matrix = spec.shape.size() == 2;
    row.push_back(matrix ? Tensor::zeros(ledger, {spec.shape[0]}, DType::F32, Category::OptimizerStates, "row") : Tensor());
    col.push_back(matrix ? Tensor::zeros(ledger, {spec.shape[1]}, DType::F32, Category::OptimizerStates, "col") : Tensor());
    v.push_back(matrix ? Tensor() : Tensor::zeros(ledger, spec.shape, DType::F32, Category::OptimizerStates, "v"));
  }
  KernelRun run;
  for (size_t s = 0; s < f.lrs.size(); ++s) {
    std::vector<float> weights, states;
    size_t g_at = 0;
    for (size_t t = 0; t < f.specs.size(); ++t) {
      std::copy_n(f.grads[s].begin() + static_cast<std::ptrdiff_t>(g_at), g[t].numel(), g[t].data<float>());
      g_at += static_cast<size_t>(g[t].numel());
      AdafactorHyper h;
      h.lr = f.lrs[s];
      h.step = static_cast<int64_t>(s) + 1;
      h.weight_decay = f.specs[t].weight_decay ? f.weight_decay : 0.0;
      backend->adafactor_step(p[t], g[t], row[t], col[t], v[t], h, nullptr);
      weights.insert(weights.end(), p[t].data<float>(), p[t].data<float>() + p[t].numel());
      for (const Tensor* state : {&row[t], &col[t], &v[t]})
        if (state->defined()) states.insert(states.end(), state->data<float>(), state->data<float>() + state->numel());
    }
    run.steps.push_back(weights);
    run.states.push_back(states);
  }
  return run;
}

// Tolerances, from where this and torch can differ at all: the reductions.
// torch sums float32 (a mean of at most 9 positive terms, the RMS of at most
// 45), this sums in double and rounds once, so each mean is within 8ε
// relative of torch's and the RMS within 8ε (its square's sum within 45ε,
// halved by the root, plus roundings). A state adds at most one such
// difference a step: within 16ε·step of torch's. The update goes through
// two reciprocal roots (halving their arguments' differences) and the RMS
// divisor: within 32ε of torch's relative to itself. A weight then differs
// by at most 32ε of that step's change plus one ulp where the rounding of
// p − update flips, summed over the steps so far. Everything else is the
// same float32 operation in the same order.
TEST(Adafactor, FollowsTransformersAdafactorOverFiveSteps) {
  const AdafactorFixture f = read_fixture();
  ASSERT_EQ(f.specs.size(), 3u);
  ASSERT_EQ(f.lrs.size(), 5u);
  ASSERT_EQ(f.grads.size(), f.lrs.size());
  ASSERT_EQ(f.steps.size(), f.lrs.size());
  ASSERT_EQ(f.states.size(), f.lrs.size());
  const KernelRun run = run_kernel(f);
  std::vector<float> before = f.param0;
  std::vector<double> weight_bound(before.size(), 0.0);
  for (size_t s = 0; s < f.lrs.size(); ++s) {
    const std::vector<float>& ours = run.steps[s];
    const std::vector<float>& want = f.steps[s];
    ASSERT_EQ(ours.size(), want.size());
    size_t exact = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      weight_bound[i] += ulp(want[i]) + 32 * kEps * std::fabs(double(want[i]) - before[i]);
      EXPECT_LE(std::fabs(double(ours[i]) - want[i]), weight_bound[i])
          << "step " << s + 1 << ", weight " << i << ": " << ours[i] << " vs transformers' " << want[i];
      exact += ours[i] == want[i];
    }
    // A wrong rule (order of decay, clipping, group, mean axis) moves weights
    // by far more than the bound; most weights agree to the bit.
    EXPECT_GE(exact * 2, want.size()) << "step " << s + 1 << ": only " << exact << " weights equal to the bit";
    const std::vector<float>& states = run.states[s];
    const std::vector<float>& want_states = f.states[s];
    ASSERT_EQ(states.size(), want_states.size());
    for (size_t i = 0; i < want_states.size(); ++i)
      EXPECT_LE(std::fabs(double(states[i]) - want_states[i]), 16 * kEps * double(s + 1) * std::fabs(want_states[i]))
          << "step " << s + 1 << ", state " << i << ": " << states[i] << " vs transformers' " << want_states[i];
    before = want;
  }
}

// The Optimizer `anatomy train` builds (Trainer's groups, a state per tensor
// in one flat set) gives the same bits as the kernel run above.
TEST(Adafactor, OptimizerStepsEveryTensorInItsGroup) {
  const AdafactorFixture f = read_fixture();
  ASSERT_EQ(f.lrs.size(), 5u);
  const KernelRun run = run_kernel(f);
  auto backend = make_cpu_backend(1);
  const ParameterSet params(*backend, f.specs, Category::Weights, "");
  const ParameterSet grads(*backend, f.specs, Category::Gradients, "grad.");
  const ParameterSet half(*backend, f.specs, Category::WeightsHalf, "half.", DType::BF16);
  scatter(params, f.param0);
  OptimizerOptions options;
  options.kind = OptimizerKind::Adafactor;
  options.adam.weight_decay = f.weight_decay;
  const std::unique_ptr<Optimizer> adafactor = make_optimizer(*backend, params, options);
  EXPECT_EQ(adafactor->name(), "adafactor");
  for (size_t s = 0; s < f.lrs.size(); ++s) {
    scatter(grads, f.grads[s]);
    adafactor->step(params, grads, f.lrs[s], &half);
    const std::vector<float> ours = gather(params);
    ASSERT_EQ(ours.size(), run.steps[s].size());
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(ours[i]), std::bit_cast<uint32_t>(run.steps[s][i]))
          << "step " << s + 1 << ", weight " << i;
  }
  size_t at = 0;
  for (const Tensor& t : half.tensors())
    for (int64_t i = 0; i < t.numel(); ++i, ++at)
      EXPECT_EQ(t.data<uint16_t>()[i], float_to_bf16(run.steps.back()[at])) << "the bf16 copy of weight " << at;
  EXPECT_EQ(adafactor->steps_taken(), 5);
}

// One step of a fresh Adafactor on a single tensor through the CPU backend.
std::vector<float> first_step(const std::vector<float>& p0, const std::vector<float>& g, Shape shape, double lr,
                              double weight_decay, std::vector<uint16_t>* bf16_copy = nullptr) {
  auto backend = make_cpu_backend(1);
  Ledger& ledger = backend->ledger();
  const auto n = static_cast<int64_t>(p0.size());
  Tensor p = Tensor::empty(ledger, shape, DType::F32, Category::Weights, "p");
  Tensor grad = Tensor::empty(ledger, shape, DType::F32, Category::Gradients, "g");
  Tensor half = Tensor::empty(ledger, shape, DType::BF16, Category::WeightsHalf, "half");
  backend->copy_from_host(p, p0.data());
  backend->copy_from_host(grad, g.data());
  Tensor row, col, v;
  if (shape.size() == 2) {
    row = Tensor::zeros(ledger, {shape[0]}, DType::F32, Category::OptimizerStates, "row");
    col = Tensor::zeros(ledger, {shape[1]}, DType::F32, Category::OptimizerStates, "col");
  } else {
    v = Tensor::zeros(ledger, {n}, DType::F32, Category::OptimizerStates, "v");
  }
  AdafactorHyper h;
  h.lr = lr;
  h.weight_decay = weight_decay;
  h.step = 1;
  backend->adafactor_step(p, grad, row, col, v, h, bf16_copy ? &half : nullptr);
  std::vector<float> out(static_cast<size_t>(n));
  backend->copy_to_host(p, out.data());
  if (bf16_copy) {
    bf16_copy->resize(static_cast<size_t>(n));
    backend->copy_to_host(half, bf16_copy->data());
  }
  return out;
}

// On the first step beta2t = 1 − 1^−0.8 = 0, so the second moments are grad²
// itself. For a vector the update is grad / |grad| = ±1; for a rank-one
// matrix g = a·bᵀ the factored estimate row_i·col_j / mean(row) = a_i²·b_j² is
// exact, so again ±1. Its RMS is 1: no clipping. So every weight moves by
// −lr·sign(g) after decaying by (1 − wd·lr): worked out by hand, independent
// of torch, and wrong if an axis, a root or the clipping were wrong.
TEST(Adafactor, FirstStepMovesEveryWeightByTheLearningRate) {
  const std::vector<float> a = {0.5f, -2.0f, 3.0f}, b = {1.0f, -0.25f, 4.0f, 0.125f, -8.0f};
  std::vector<float> g, p0;
  for (float ai : a)
    for (float bj : b) {
      g.push_back(ai * bj);
      p0.push_back(0.1f * static_cast<float>(p0.size()) - 0.7f);
    }
  const double lr = 0.01, wd = 0.1;
  std::vector<uint16_t> half;
  const std::vector<float> matrix = first_step(p0, g, {3, 5}, lr, wd, &half);
  const std::vector<float> vector = first_step(p0, g, {15}, lr, 0.0);
  for (size_t i = 0; i < g.size(); ++i) {
    const double sign = g[i] > 0 ? 1.0 : -1.0;
    const double want_matrix = p0[i] * (1 - wd * lr) - lr * sign, want_vector = p0[i] - lr * sign;
    // float32 roundings of a few operations on values of size about 1 (and
    // the ±1 within a few ε): a few ulps.
    EXPECT_NEAR(matrix[i], want_matrix, 4 * kEps) << "matrix element " << i;
    EXPECT_NEAR(vector[i], want_vector, 4 * kEps) << "vector element " << i;
    EXPECT_EQ(half[i], float_to_bf16(matrix[i])) << "the bf16 copy of element " << i;
  }
}

// The states are rows + cols floats for each matrix and n for each vector:
// for bert-tiny about 0.2% of AdamW's 8 bytes a parameter. Counted from the
// specs and compared with the ledger.
TEST(Adafactor, StatesAreRowsPlusColumnsInTheLedger) {
  const std::optional<ModelConfig> config = model_preset("bert-tiny");
  ASSERT_TRUE(config.has_value());
  auto backend = make_cpu_backend(1);
  const ParameterSet params(*backend, bert_parameter_specs(*config), Category::Weights, "");
  int64_t floats = 0, matrices = 0;
  for (const ParamSpec& spec : params.specs()) {
    if (spec.shape.size() == 2) floats += spec.shape[0] + spec.shape[1], ++matrices;
    else floats += shape_numel(spec.shape);
  }
  OptimizerOptions options;
  options.kind = OptimizerKind::Adafactor;
  const std::unique_ptr<Optimizer> adafactor = make_optimizer(*backend, params, options);
  const int64_t states = backend->ledger().snapshot().live[static_cast<size_t>(Category::OptimizerStates)];
  EXPECT_EQ(states, floats * 4);
  EXPECT_GT(matrices, 10);  // every weight matrix, the embeddings too
  EXPECT_LT(static_cast<double>(states), 0.05 * 8.0 * static_cast<double>(params.parameter_count()))
      << "Adafactor's states should be a small fraction of AdamW's";
}

TEST(Adafactor, TrainsFromTheCommandLine) {
  const test::TempDir dir;
  auto r = test::run_anatomy("train --device cpu --model bert-tiny --optim adafactor --learning-rate 0.001 "
                             "--weight-decay 0.01 --dummy-size 16 --dummy-seq-len 16 --max-steps 3 --no-progress "
                             "--output-dir " + dir.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Optimizer states"), std::string::npos) << r.output;
  std::ifstream log(dir.file("out/log.jsonl"));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("loss"), std::string::npos) << text;
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
}

}  // namespace
}  // namespace anatomy
