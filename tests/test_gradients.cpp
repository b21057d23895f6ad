// test_gradients.cpp: every backward against central finite differences.
//
// Op level: each CPU op's backward against differences of a random projection
// of its output. Layer level: the model's gradient of the loss with respect to
// each layer's parameters (embeddings, each encoder layer, pooler, classifier)
// along random directions, with dropout on (so the replayed masks are checked),
// padding, token types, every activation and every problem type.
//
// The backend computes in float32, so a difference quotient carries rounding
// noise of about (float eps × |output|) / step; the tolerances below are a few
// times that noise level and far below the size of a real mistake (a missing
// term or a wrong sign changes a derivative by O(1) of its size).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "anatomy/kernels/backend.h"
#include "anatomy/model/bert/bert.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "test_util.h"

namespace anatomy {
namespace {

std::vector<float> random_vector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

Tensor host_tensor(Backend& b, Shape shape, const std::vector<float>& values, const std::string& name) {
  Tensor t = Tensor::empty(b.ledger(), std::move(shape), DType::F32, Category::Temporary, name);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

double project(const Tensor& y, const std::vector<float>& r) {
  double s = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(r[i]) * y.data<float>()[i];
  return s;
}

// Checks d(projection)/d(x[i]) for every element of x against `analytic`.
void check_against_differences(const Tensor& x, const std::vector<float>& analytic, const std::function<double()>& f,
                               const std::string& what, double step = 1e-2, double tol = 2e-3) {
  float* data = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float saved = data[i];
    data[i] = saved + static_cast<float>(step);
    const double up = f();
    data[i] = saved - static_cast<float>(step);
    const double down = f();
    data[i] = saved;
    const double numeric = (up - down) / (2 * step);
    EXPECT_NEAR(analytic[i], numeric, tol * std::max(1.0, std::abs(numeric))) << what << "[" << i << "]";
  }
}

class OpGradients : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
};

TEST_F(OpGradients, Linear) {
  Backend& b = *backend;
  const int64_t M = 5, K = 7, N = 3;
  Tensor x = host_tensor(b, {M, K}, random_vector(M * K, 1), "x");
  Tensor w = host_tensor(b, {N, K}, random_vector(N * K, 2), "w");
  Tensor bias = host_tensor(b, {N}, random_vector(N, 3), "b");
  Tensor y = host_tensor(b, {M, N}, std::vector<float>(M * N), "y");
  const auto r = random_vector(M * N, 4);
  Tensor dy = host_tensor(b, {M, N}, r, "dy");
  Tensor dx = host_tensor(b, {M, K}, std::vector<float>(M * K), "dx");
  Tensor dw = host_tensor(b, {N, K}, std::vector<float>(N * K), "dw");
  Tensor db = host_tensor(b, {N}, std::vector<float>(N), "db");
  b.linear_backward(dy, x, w, &dx, dw, &db);
  auto f = [&] {
    b.linear_forward(x, w, &bias, y);
    return project(y, r);
  };
  check_against_differences(x, std::vector<float>(dx.data<float>(), dx.data<float>() + M * K), f, "dx");
  check_against_differences(w, std::vector<float>(dw.data<float>(), dw.data<float>() + N * K), f, "dw");
  check_against_differences(bias, std::vector<float>(db.data<float>(), db.data<float>() + N), f, "db");
}

TEST_F(OpGradients, LayerNorm) {
  Backend& b = *backend;
  const int64_t R = 4, H = 9;
  Tensor x = host_tensor(b, {R, H}, random_vector(R * H, 5, 2.0f), "x");
  Tensor g = host_tensor(b, {H}, random_vector(H, 6), "gamma");
  Tensor beta = host_tensor(b, {H}, random_vector(H, 7), "beta");
  Tensor y = host_tensor(b, {R, H}, std::vector<float>(R * H), "y");
  Tensor mean = host_tensor(b, {R}, std::vector<float>(R), "mean");
  Tensor rstd = host_tensor(b, {R}, std::vector<float>(R), "rstd");
  const auto r = random_vector(R * H, 8);
  Tensor dy = host_tensor(b, {R, H}, r, "dy");
  Tensor dx = host_tensor(b, {R, H}, std::vector<float>(R * H), "dx");
  Tensor dg = host_tensor(b, {H}, std::vector<float>(H), "dgamma");
  Tensor dbeta = host_tensor(b, {H}, std::vector<float>(H), "dbeta");
  b.layernorm_forward(x, g, beta, 1e-12, y, mean, rstd);
  b.layernorm_backward(dy, x, mean, rstd, g, dx, dg, dbeta);
  auto f = [&] {
    b.layernorm_forward(x, g, beta, 1e-12, y, mean, rstd);
    return project(y, r);
  };
  check_against_differences(x, std::vector<float>(dx.data<float>(), dx.data<float>() + R * H), f, "dx");
  check_against_differences(g, std::vector<float>(dg.data<float>(), dg.data<float>() + H), f, "dgamma");
  check_against_differences(beta, std::vector<float>(dbeta.data<float>(), dbeta.data<float>() + H), f, "dbeta");
}

TEST_F(OpGradients, Activations) {
  Backend& b = *backend;
  const int64_t n = 40;
  for (ActivationKind kind : {ActivationKind::GeluErf, ActivationKind::GeluTanh, ActivationKind::Relu, ActivationKind::Tanh}) {
    auto values = random_vector(n, 9, 2.0f);
    for (auto& v : values)
      if (std::abs(v) < 0.05f) v = 0.5f;  // keep ReLU's kink out of the difference step
    Tensor x = host_tensor(b, {n}, values, "x");
    Tensor y = host_tensor(b, {n}, std::vector<float>(n), "y");
    const auto r = random_vector(n, 10);
    Tensor dy = host_tensor(b, {n}, r, "dy");
    Tensor dx = host_tensor(b, {n}, std::vector<float>(n), "dx");
    b.activation_forward(kind, x, y);
    b.activation_backward(kind, kind == ActivationKind::Tanh ? y : x, dy, dx);
    auto f = [&] {
      b.activation_forward(kind, x, y);
      return project(y, r);
    };
    check_against_differences(x, std::vector<float>(dx.data<float>(), dx.data<float>() + n), f,
                              "activation " + std::to_string(static_cast<int>(kind)), 1e-3);
  }
}

TEST_F(OpGradients, AttentionWithPaddingAndDropout) {
  Backend& b = *backend;
  const int64_t B = 2, L = 5, heads = 2, D = 3, H = heads * D;
  Tensor q = host_tensor(b, {B, L, H}, random_vector(B * L * H, 11), "q");
  Tensor k = host_tensor(b, {B, L, H}, random_vector(B * L * H, 12), "k");
  Tensor v = host_tensor(b, {B, L, H}, random_vector(B * L * H, 13), "v");
  Tensor mask = Tensor::empty(b.ledger(), {B, L}, DType::I64, Category::Data, "mask");
  const int64_t mask_values[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  std::copy(std::begin(mask_values), std::end(mask_values), mask.data<int64_t>());
  Tensor probs = host_tensor(b, {B, heads, L, L}, std::vector<float>(B * heads * L * L), "probs");
  Tensor ctx = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "ctx");
  const auto r = random_vector(B * L * H, 14);
  Tensor dctx = host_tensor(b, {B, L, H}, r, "dctx");
  Tensor dq = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "dq");
  Tensor dk = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "dk");
  Tensor dv = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "dv");
  const DropoutSpec dropout{0.3f, 1234, 77};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  b.attention_forward(q, k, v, mask, heads, scale, dropout, probs, ctx);
  b.attention_backward(dctx, q, k, v, ctx, probs, mask, heads, scale, dropout, dq, dk, dv);
  auto f = [&] {
    b.attention_forward(q, k, v, mask, heads, scale, dropout, probs, ctx);
    return project(ctx, r);
  };
  const int64_t n = B * L * H;
  check_against_differences(q, std::vector<float>(dq.data<float>(), dq.data<float>() + n), f, "dq");
  check_against_differences(k, std::vector<float>(dk.data<float>(), dk.data<float>() + n), f, "dk");
  check_against_differences(v, std::vector<float>(dv.data<float>(), dv.data<float>() + n), f, "dv");
  // Padded keys carry no gradient at all.
  for (int64_t j = 3; j < L; ++j)
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(dk.data<float>()[(1 * L + j) * H + h], 0.0f);
}

// The first query's attention against row 0 of the whole attention (the same
// probabilities, context and dropout mask; with dctx zero past row 0, the same
// dq of row 0, dk and dv), with a padded entry and one whose keys are all
// masked; then its gradients against finite differences.
TEST_F(OpGradients, FirstQueryAttentionIsRowZeroOfTheWholeAttention) {
  Backend& b = *backend;
  const int64_t B = 3, L = 6, heads = 2, D = 3, H = heads * D;
  Tensor q = host_tensor(b, {B, L, H}, random_vector(B * L * H, 21), "q");
  Tensor k = host_tensor(b, {B, L, H}, random_vector(B * L * H, 22), "k");
  Tensor v = host_tensor(b, {B, L, H}, random_vector(B * L * H, 23), "v");
  Tensor mask = Tensor::empty(b.ledger(), {B, L}, DType::I64, Category::Data, "mask");
  const int64_t mask_values[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  std::copy(std::begin(mask_values), std::end(mask_values), mask.data<int64_t>());
  const DropoutSpec dropout{0.3f, 99, 5};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Tensor probs = host_tensor(b, {B, heads, L, L}, std::vector<float>(B * heads * L * L), "probs");
  Tensor ctx = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "ctx");
  b.attention_forward(q, k, v, mask, heads, scale, dropout, probs, ctx);
  Tensor q0 = host_tensor(b, {B, 1, H}, std::vector<float>(B * H), "q0");
  b.select_row(q, 0, q0);
  Tensor p0 = host_tensor(b, {B, heads, L}, std::vector<float>(B * heads * L), "p0");
  Tensor ctx0 = host_tensor(b, {B, 1, H}, std::vector<float>(B * H), "ctx0");
  b.attention_first_query_forward(q0, k, v, mask, heads, scale, dropout, p0, ctx0);
  for (int64_t bh = 0; bh < B * heads; ++bh)
    for (int64_t j = 0; j < L; ++j)
      EXPECT_NEAR(p0.data<float>()[bh * L + j], probs.data<float>()[bh * L * L + j], 1e-6) << bh << " " << j;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t c = 0; c < H; ++c)
      EXPECT_NEAR(ctx0.data<float>()[i * H + c], ctx.data<float>()[i * L * H + c], 1e-5) << i << " " << c;

  const auto r = random_vector(B * H, 24);
  Tensor dctx0 = host_tensor(b, {B, 1, H}, r, "dctx0");
  std::vector<float> row0(B * L * H, 0.0f);
  for (int64_t i = 0; i < B; ++i) std::copy(r.begin() + i * H, r.begin() + (i + 1) * H, row0.begin() + i * L * H);
  Tensor dctx = host_tensor(b, {B, L, H}, row0, "dctx");
  Tensor dq = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "dq");
  Tensor dk = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "dk");
  Tensor dv = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H), "dv");
  b.attention_backward(dctx, q, k, v, ctx, probs, mask, heads, scale, dropout, dq, dk, dv);
  Tensor dq0 = host_tensor(b, {B, 1, H}, std::vector<float>(B * H), "dq0");
  Tensor dk1 = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H, 7.0f), "dk1");  // written, not added to
  Tensor dv1 = host_tensor(b, {B, L, H}, std::vector<float>(B * L * H, 7.0f), "dv1");
  b.attention_first_query_backward(dctx0, q0, k, v, p0, heads, scale, dropout, dq0, dk1, dv1);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t c = 0; c < H; ++c)
      EXPECT_NEAR(dq0.data<float>()[i * H + c], dq.data<float>()[i * L * H + c], 1e-5) << i << " " << c;
  for (int64_t e = 0; e < B * L * H; ++e) {
    EXPECT_NEAR(dk1.data<float>()[e], dk.data<float>()[e], 1e-5) << e;
    EXPECT_NEAR(dv1.data<float>()[e], dv.data<float>()[e], 1e-5) << e;
  }
  // Finite differences where the scores matter: the all-masked entry's
  // gradients are those of a softmax at constant scores (the reference's
  // convention, checked against the whole attention above), not of its
  // constant output; it gets two keys here.
  mask.data<int64_t>()[2 * L] = mask.data<int64_t>()[2 * L + 3] = 1;
  b.attention_first_query_forward(q0, k, v, mask, heads, scale, dropout, p0, ctx0);
  b.attention_first_query_backward(dctx0, q0, k, v, p0, heads, scale, dropout, dq0, dk1, dv1);
  auto f = [&] {
    b.attention_first_query_forward(q0, k, v, mask, heads, scale, dropout, p0, ctx0);
    return project(ctx0, r);
  };
  check_against_differences(q0, std::vector<float>(dq0.data<float>(), dq0.data<float>() + B * H), f, "dq0");
  check_against_differences(k, std::vector<float>(dk1.data<float>(), dk1.data<float>() + B * L * H), f, "dk");
  check_against_differences(v, std::vector<float>(dv1.data<float>(), dv1.data<float>() + B * L * H), f, "dv");
}

TEST_F(OpGradients, Losses) {
  Backend& b = *backend;
  const int64_t B = 4, C = 3;
  Tensor logits = host_tensor(b, {B, C}, random_vector(B * C, 15, 2.0f), "logits");
  Tensor d = host_tensor(b, {B, C}, std::vector<float>(B * C), "dlogits");
  Tensor labels = Tensor::empty(b.ledger(), {B}, DType::I64, Category::Data, "labels");
  const int64_t label_values[] = {2, 0, -100, 1};  // -100 is ignored, as torch does
  std::copy(std::begin(label_values), std::end(label_values), labels.data<int64_t>());
  Tensor targets = host_tensor(b, {B, C}, random_vector(B * C, 16), "targets");
  Tensor probabilities = host_tensor(b, {B, C}, {1, 0, 1, 0, 0, 1, 1, 1, 0, 0.5f, 0, 1}, "multi");
  using Loss = std::function<double(Tensor&)>;
  const std::vector<std::pair<std::string, Loss>> losses = {
      {"cross_entropy", [&](Tensor& g) { return b.cross_entropy(logits, labels, g); }},
      {"mse", [&](Tensor& g) { return b.mse(logits, targets, g); }},
      {"bce_with_logits", [&](Tensor& g) { return b.bce_with_logits(logits, probabilities, g); }},
  };
  Tensor scratch = host_tensor(b, {B, C}, std::vector<float>(B * C), "scratch");
  for (const auto& [name, loss] : losses) {
    loss(d);
    check_against_differences(logits, std::vector<float>(d.data<float>(), d.data<float>() + B * C),
                              [&] { return loss(scratch); }, name, 1e-3);
  }
  // The cross-entropy of a known case: logits (0, 0, 0) and any label give log 3.
  Tensor flat = host_tensor(b, {1, C}, {0, 0, 0}, "flat");
  Tensor one = Tensor::empty(b.ledger(), {1}, DType::I64, Category::Data, "one");
  one.data<int64_t>()[0] = 1;
  Tensor g1 = host_tensor(b, {1, C}, std::vector<float>(C), "g1");
  EXPECT_NEAR(b.cross_entropy(flat, one, g1), std::log(3.0), 1e-12);
}

TEST_F(OpGradients, EmbeddingSkipsThePaddingRow) {
  Backend& b = *backend;
  const int64_t V = 6, H = 4, T = 5;
  Tensor table = host_tensor(b, {V, H}, random_vector(V * H, 17), "table");
  Tensor ids = Tensor::empty(b.ledger(), {T}, DType::I64, Category::Data, "ids");
  const int64_t id_values[] = {3, 0, 3, 5, 1};
  std::copy(std::begin(id_values), std::end(id_values), ids.data<int64_t>());
  Tensor out = host_tensor(b, {T, H}, std::vector<float>(T * H), "out");
  const auto r = random_vector(T * H, 18);
  Tensor dout = host_tensor(b, {T, H}, r, "dout");
  Tensor dtable = host_tensor(b, {V, H}, std::vector<float>(V * H), "dtable");
  b.embedding_backward(ids, dout, dtable, 0);
  auto f = [&] {
    b.embedding_forward(ids, table, out, false);
    return project(out, r);
  };
  std::vector<float> analytic(dtable.data<float>(), dtable.data<float>() + V * H);
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_EQ(analytic[h], 0.0f);  // row 0 is the padding index: torch gives it no gradient
    analytic[h] = r[1 * H + h];    // what the plain derivative would be, for the difference check below
  }
  check_against_differences(table, analytic, f, "dtable");
}

// ---- layer level ----

struct LayerCase {
  std::string name;
  Activation activation;
  int64_t num_labels;
  ProblemType problem;
};

void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

class LayerGradients : public ::testing::TestWithParam<LayerCase> {};

// Two layers, small enough for finite differences; weights larger than
// BERT's initialisation so that every layer matters to the loss.
ModelConfig two_layer_config() {
  ModelConfig config;
  config.vocab_size = 40;
  config.hidden_size = 16;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 2;
  config.intermediate_size = 24;
  config.max_position_embeddings = 12;
  config.hidden_dropout_prob = 0.1;
  config.attention_probs_dropout_prob = 0.1;
  config.initializer_range = 0.2;
  return config;
}

// B sequences of L random tokens and token types; sequence b has b padded positions.
HostBatch random_batch(const ModelConfig& config, int64_t B, int64_t L, uint32_t seed) {
  HostBatch batch;
  batch.batch = B;
  batch.seq_len = L;
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < B * L; ++i) {
    batch.input_ids.push_back(1 + gen() % (config.vocab_size - 1));
    batch.token_type_ids.push_back(gen() % 2);
    batch.attention_mask.push_back(i % L < L - (i / L) ? 1 : 0);
  }
  return batch;
}

TEST_P(LayerGradients, EachLayerAgreesWithFiniteDifferences) {
  const LayerCase& c = GetParam();
  auto backend = make_cpu_backend(1);
  ModelConfig config = two_layer_config();
  config.hidden_act = c.activation;
  config.num_labels = c.num_labels;
  config.problem_type = c.problem;
  BertStyleModel model(*backend, config);
  init_weights(model, 7);

  const int64_t B = 3, L = 6;
  HostBatch batch = random_batch(config, B, L, 3);
  DType label_dtype = DType::I64;
  int64_t label_width = 1;
  if (c.problem == ProblemType::SingleLabel) {
    batch.labels_i64 = {0, 2, 1};
  } else {
    label_dtype = DType::F32;
    label_width = c.num_labels;
    batch.labels_f32 = random_vector(B * c.num_labels, 19);
    if (c.problem == ProblemType::MultiLabel)
      for (auto& v : batch.labels_f32) v = v > 0 ? 1.0f : 0.0f;
  }
  const ModelInputs inputs = upload_batch(*backend, batch, label_dtype, label_width);
  ForwardOptions options;
  options.training = true;  // dropout on: backward must replay forward's masks
  options.seed = 99;
  options.step = 5;
  auto loss_at = [&] {
    ForwardOptions eval = options;
    eval.save_for_backward = false;
    return *model.forward(inputs, eval).loss;
  };
  options.save_for_backward = true;
  model.forward(inputs, options);
  model.zero_gradients();
  model.backward();

  const ParameterSet& w = model.weights();
  const ParameterSet& g = model.gradients();
  std::vector<std::string> groups = {"bert.embeddings.", "bert.encoder.layer.0.", "bert.encoder.layer.1.",
                                     "bert.pooler.", "classifier."};
  for (const auto& group : groups) {
    for (uint32_t trial = 0; trial < 2; ++trial) {
      // A random unit direction over the group's parameters.
      std::vector<std::pair<size_t, std::vector<float>>> direction;
      double norm2 = 0.0, analytic = 0.0, gnorm2 = 0.0;
      for (size_t i = 0; i < w.specs().size(); ++i) {
        if (w.specs()[i].name.rfind(group, 0) != 0) continue;
        auto d = random_vector(w.tensors()[i].numel(), 100 + trial * 31 + static_cast<uint32_t>(i));
        for (float x : d) norm2 += static_cast<double>(x) * x;
        direction.emplace_back(i, std::move(d));
      }
      ASSERT_FALSE(direction.empty()) << group;
      const double inv = 1.0 / std::sqrt(norm2);
      for (auto& [i, d] : direction) {
        const float* gi = g.tensors()[i].data<float>();
        for (size_t j = 0; j < d.size(); ++j) {
          d[j] = static_cast<float>(d[j] * inv);
          analytic += static_cast<double>(gi[j]) * d[j];
          gnorm2 += static_cast<double>(gi[j]) * gi[j];
        }
      }
      const double step = 1e-2;
      auto shift = [&](double amount) {
        for (auto& [i, d] : direction) {
          float* p = w.tensors()[i].data<float>();
          for (size_t j = 0; j < d.size(); ++j) p[j] += static_cast<float>(amount * d[j]);
        }
      };
      std::vector<std::vector<float>> original;
      for (auto& [i, d] : direction)
        original.emplace_back(w.tensors()[i].data<float>(), w.tensors()[i].data<float>() + d.size());
      shift(step);
      const double up = loss_at();
      for (size_t k = 0; k < direction.size(); ++k)
        std::copy(original[k].begin(), original[k].end(), w.tensors()[direction[k].first].data<float>());
      shift(-step);
      const double down = loss_at();
      for (size_t k = 0; k < direction.size(); ++k)
        std::copy(original[k].begin(), original[k].end(), w.tensors()[direction[k].first].data<float>());
      const double numeric = (up - down) / (2 * step);
      EXPECT_GT(std::sqrt(gnorm2), 1e-4) << group << ": the loss should depend on this layer";
      EXPECT_NEAR(analytic, numeric, 1e-2 * std::sqrt(gnorm2) + 1e-5) << c.name << " " << group << " trial " << trial;
    }
  }
}

// The last encoder layer computes its query, attention and everything past
// them for the first token only (bert.cpp), since only out[:, 0] reaches the
// pooler. Against the whole layer
// (EngineOptions::last_layer all), with and without gradient checkpointing: the
// same loss and gradients up to float32 rounding (products whose sums skip
// exact zeros may add in another order). Hidden dropout is off, as the pruned
// tensors draw their masks over their own elements; attention dropout is on
// (the first query's mask is row 0 of the whole attention's).
TEST(LastLayer, FirstTokenOnlyGivesTheWholeLayersLossAndGradients) {
  ModelConfig config = two_layer_config();
  config.hidden_dropout_prob = 0.0;
  config.num_labels = 3;
  HostBatch batch = random_batch(config, 3, 7, 5);
  batch.labels_i64 = {2, 0, 1};
  struct Result {
    double loss;
    std::vector<std::vector<float>> grads;
  };
  auto run = [&](LastLayer last_layer, bool checkpointing, bool selective) {
    auto backend = make_cpu_backend(1);
    EngineOptions engine;
    engine.last_layer = last_layer;
    backend->set_options(engine);
    BertStyleModel model(*backend, config);
    init_weights(model, 11);
    const ModelInputs inputs = upload_batch(*backend, batch, DType::I64, 1);
    ForwardOptions options;
    options.training = true;
    options.save_for_backward = true;
    options.gradient_checkpointing = checkpointing;
    options.selective_checkpointing = selective;
    options.seed = 3;
    options.step = 2;
    Result r;
    r.loss = *model.forward(inputs, options).loss;
    model.zero_gradients();
    model.backward();
    for (const Tensor& t : model.gradients().tensors())
      r.grads.emplace_back(t.data<float>(), t.data<float>() + t.numel());
    return r;
  };
  const Result whole = run(LastLayer::All, false, false);
  const std::vector<ParamSpec> specs = bert_parameter_specs(config);
  for (auto [checkpointing, selective] : {std::pair{false, false}, {true, false}, {true, true}}) {
    const Result first = run(LastLayer::FirstToken, checkpointing, selective);
    const std::string mode = !checkpointing ? "no checkpointing" : selective ? "selective" : "full checkpointing";
    EXPECT_NEAR(first.loss, whole.loss, 1e-6 * std::abs(whole.loss)) << mode;
    ASSERT_EQ(first.grads.size(), whole.grads.size());
    // Rounding is relative to the terms a gradient sums, not to its value:
    // the key biases' gradients are 0 in exact arithmetic (a softmax does
    // not see a score added to a whole row) and only rounding noise here. So
    // the tolerance is relative to the largest gradient of the model.
    float scale = 0.0f;
    for (const auto& g : whole.grads)
      for (float v : g) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < whole.grads.size(); ++i) {
      float largest = 0.0f;
      for (float v : whole.grads[i]) largest = std::max(largest, std::abs(v));
      if (specs[i].name.find("key.bias") == std::string::npos)
        ASSERT_GT(largest, 1e-4f * scale) << specs[i].name << ": every parameter should have a gradient here";
      for (size_t j = 0; j < whole.grads[i].size(); ++j)
        ASSERT_NEAR(first.grads[i][j], whole.grads[i][j], 1e-5f * scale) << mode << " " << specs[i].name << "[" << j << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Bert, LayerGradients,
    ::testing::Values(LayerCase{"gelu_single_label", Activation::Gelu, 3, ProblemType::SingleLabel},
                      LayerCase{"gelu_new_regression", Activation::GeluNew, 1, ProblemType::Regression},
                      LayerCase{"relu_multi_label", Activation::Relu, 4, ProblemType::MultiLabel}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace anatomy
