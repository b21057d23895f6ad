// test_optimizers_learn.cpp: every optimizer of --optim learns a task that can
// be learned. The task: a sequence of random token ids is labelled 1 when a
// marker token occurs anywhere in it, 0 when it does not. Each optimizer trains
// the same small BERT from the same initialisation on the same batches (and
// the same dropout masks) through Trainer, and must reach 95% accuracy on a
// held-out set; 8-bit AdamW's final loss must be within 5% of AdamW's, with
// its states really held in 8 bits (the ledger's optimizer_states).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "anatomy/model/bert/bert.h"
#include "anatomy/core/random.h"
#include "anatomy/data/dataset.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"

namespace anatomy {
namespace {

// The vocabulary: 0 padding, 1 a [CLS]-like first token, 2..299 ordinary ids,
// one of which is the marker.
constexpr int64_t kVocab = 300;
constexpr int64_t kPad = 0;
constexpr int64_t kCls = 1;
constexpr int64_t kMarker = 123;
constexpr int64_t kMinLength = 16, kMaxLength = 32;  // [CLS] included

// Uniform integer in [0, n) from Philox: a pure function of the seed and a
// counter (std::uniform_int_distribution's output differs between libraries).
struct Draw {
  uint64_t seed, counter = 0;
  int64_t operator()(int64_t n) {
    return static_cast<int64_t>(random_uniform(seed, /*stream=*/7, counter++) * static_cast<float>(n)) % n;
  }
};

// `size` sequences: [CLS], then ordinary ids other than the marker, lengths
// uniform in [kMinLength, kMaxLength], right-padded to kMaxLength (attention
// mask 0 over the padding). Exactly half, at seeded places in the set, get the
// marker once at a random position after [CLS] and label 1; the others never
// hold it and are labelled 0.
Dataset marker_dataset(int64_t size, uint64_t seed) {
  Draw draw{seed};
  Dataset d;
  d.source = "marker task (seed " + std::to_string(seed) + ")";
  d.size = size;
  d.seq_len = kMaxLength;
  d.input_ids.assign(size * kMaxLength, kPad);
  d.attention_mask.assign(size * kMaxLength, 0);
  d.label_dtype = DType::I64;
  d.label_width = 1;
  d.labels_i64.resize(size);
  for (int64_t i = 0; i < size; ++i) d.labels_i64[i] = i < size / 2 ? 1 : 0;
  for (int64_t i = size - 1; i > 0; --i) std::swap(d.labels_i64[i], d.labels_i64[draw(i + 1)]);  // Fisher-Yates
  for (int64_t i = 0; i < size; ++i) {
    int64_t* ids = d.input_ids.data() + i * kMaxLength;
    int64_t* mask = d.attention_mask.data() + i * kMaxLength;
    const int64_t length = kMinLength + draw(kMaxLength - kMinLength + 1);
    ids[0] = kCls;
    for (int64_t t = 1; t < length; ++t) {
      int64_t id;
      do id = 2 + draw(kVocab - 2);
      while (id == kMarker);
      ids[t] = id;
    }
    if (d.labels_i64[i] == 1) ids[1 + draw(length - 1)] = kMarker;
    std::fill(mask, mask + length, 1);
  }
  return d;
}

// A small BERT (one encoder layer, hidden 64, two heads, intermediate 256,
// 75 778 parameters) whose matrices (word embeddings 300×64 = 19 200,
// attention 64×64 = 4 096, feed-forward 64×256 = 16 384, pooler 4 096) hold at
// least bitsandbytes' min_8bit_size of 4 096 elements, so 8-bit AdamW keeps
// their states in 8 bits; only the vectors and the 32×64 position embeddings
// keep float32 states. Dropout 0.1 as bert-tiny's config says.
//
// initializer_range 0.1 rather than BERT's 0.02, for SGD. At 0.02, SGD with
// momentum 0.9 stays at chance (accuracy 0.5, loss 0.693): here at lr 0.1 to 1
// over 200-300 steps with one or two layers, and so does torch.optim.SGD on
// transformers' BertForSequenceClassification (two layers, the same schedule
// and clipping) over 600 steps at lr 0.05 and 0.2 and 2000 steps at lr 0.1.
// So it is not a defect of this SGD but the known gap between SGD and Adam on
// transformers (most likely: at that scale the gradient reaching the attention
// and embedding weights is a product of small weights, which lr · gradient
// steps barely move, while Adam-type per-coordinate steps leave the plateau
// within ~60 steps). At 0.1 SGD leaves it between steps 50 and 75 of this run; the
// Adam-type optimizers learn the task from either initialisation. One layer
// instead of two: half the time a step, so that the step count leaves SGD
// that margin within the time a CI test may take.
ModelConfig small_config() {
  ModelConfig c = *model_preset("bert-tiny");
  c.vocab_size = kVocab;
  c.hidden_size = 64;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 256;
  c.max_position_embeddings = kMaxLength;
  c.initializer_range = 0.1;
  return c;
}

constexpr int64_t kTrainSize = 2048, kEvalSize = 512;
constexpr uint64_t kTrainSeed = 1, kEvalSeed = 2, kInitSeed = 3, kTrainerSeed = 4;
// 300 updates of 32 (4.7 epochs), the first 10% warm-up (the usual
// warmup_ratio 0.1), then Hugging Face's default linear decay to 0; clipping to
// 1.0 and no weight decay, Hugging Face's defaults. Every optimizer the same.
constexpr int64_t kBatch = 32, kSteps = 300, kWarmup = 30;

struct OptimizerCase {
  std::string optim, optim_args;
  double learning_rate;
};

// One learning rate per optimizer, the usual one of its kind:
//  - adamw, adamw_8bit: 1e-3, the usual rate for training a BERT this small
//    from scratch. 8-bit AdamW takes AdamW's hyper-parameters unchanged, so
//    the two runs differ only in how the moments are stored.
//  - adafactor: 1e-3, the external rate transformers' documentation gives for
//    Adafactor(scale_parameter=False, relative_step=False, warmup_init=False)
//    (Trainer's optim="adafactor"), whose update is normalised by the second
//    moment like Adam's.
//  - sgd with momentum 0.9: 0.1, the classic rate of SGD with momentum. Its
//    steps are lr · gradient, not normalised (and the gradient norm is at most
//    1 after clipping), so it needs a rate some hundred times Adam's. (0.05
//    and 0.2 learn the task too; 0.5 stays at chance.)
const std::vector<OptimizerCase> kCases = {
    {"adamw", "", 1e-3},
    {"adamw_8bit", "", 1e-3},
    {"sgd", "momentum=0.9", 0.1},
    {"adafactor", "", 1e-3},
};

const OptimizerCase& find_case(const std::string& optim) {
  for (const auto& c : kCases)
    if (c.optim == optim) return c;
  throw std::invalid_argument("no case for --optim " + optim);
}

struct Outcome {
  double accuracy = 0.0;  // on the held-out set, dropout off
  double loss = 0.0;      // mean cross-entropy on the held-out set, dropout off
  double first_train_loss = 0.0, last_train_loss = 0.0;
  int64_t optimizer_state_bytes = 0;  // the ledger's optimizer_states peak
  double seconds = 0.0;
};

Outcome train_and_evaluate(const OptimizerCase& c) {
  const auto start = std::chrono::steady_clock::now();
  const Dataset train = marker_dataset(kTrainSize, kTrainSeed);
  const Dataset held_out = marker_dataset(kEvalSize, kEvalSeed);
  auto backend = make_cpu_backend(1);
  const ModelConfig config = small_config();
  validate_dataset(train, config);
  validate_dataset(held_out, config);
  BertStyleModel model(*backend, config);
  init_weights(model, kInitSeed);

  TrainingArguments args;
  args.optim = c.optim;
  args.optim_args = c.optim_args;
  args.learning_rate = c.learning_rate;
  args.per_device_train_batch_size = kBatch;
  args.max_steps = kSteps;
  args.warmup_steps = kWarmup;
  args.seed = kTrainerSeed;
  args.logging_steps = kSteps;
  args.progress = false;
  Trainer trainer(*backend, model, train, args);
  const TrainResult r = trainer.train();

  Outcome o;
  o.first_train_loss = r.losses.front();
  o.last_train_loss = r.losses.back();
  o.optimizer_state_bytes = r.memory.peak[static_cast<size_t>(Category::OptimizerStates)];

  // Held-out evaluation: one forward over the whole set, dropout off.
  const ModelInputs inputs = upload_dataset(*backend, held_out);
  ForwardOptions options;
  options.training = false;
  const ForwardOutput out = model.forward(inputs, options);
  std::vector<float> logits(out.logits.numel());
  backend->copy_to_host(out.logits, logits.data());
  int64_t correct = 0;
  double cross_entropy = 0.0;
  for (int64_t i = 0; i < kEvalSize; ++i) {
    const double l0 = logits[2 * i], l1 = logits[2 * i + 1];
    const int64_t label = held_out.labels_i64[i];
    correct += (l1 > l0 ? 1 : 0) == label;
    const double top = std::max(l0, l1);
    cross_entropy += top + std::log(std::exp(l0 - top) + std::exp(l1 - top)) - (label == 1 ? l1 : l0);
  }
  o.accuracy = static_cast<double>(correct) / kEvalSize;
  o.loss = cross_entropy / kEvalSize;
  EXPECT_NEAR(*out.loss, o.loss, 1e-4 * o.loss + 1e-6) << c.optim << ": the model's loss is the mean cross-entropy";
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-10s lr %-6g held-out accuracy %.4f, loss %.6g (training loss %.4g -> %.4g), "
              "optimizer states %lld bytes, %.1f s\n",
              c.optim.c_str(), c.learning_rate, o.accuracy, o.loss, o.first_train_loss, o.last_train_loss,
              static_cast<long long>(o.optimizer_state_bytes), o.seconds);
  return o;
}

constexpr double kAccuracy = 0.95;  // the threshold

TEST(OptimizersLearn, MarkerTaskIsBalancedAndTheMarkerDecidesTheLabel) {
  for (const auto& [size, seed] : {std::pair<int64_t, uint64_t>{kTrainSize, kTrainSeed}, {kEvalSize, kEvalSeed}}) {
    const Dataset d = marker_dataset(size, seed);
    int64_t positives = 0;
    for (int64_t i = 0; i < size; ++i) {
      int64_t markers = 0, length = 0;
      for (int64_t t = 0; t < kMaxLength; ++t) {
        markers += d.input_ids[i * kMaxLength + t] == kMarker;
        length += d.attention_mask[i * kMaxLength + t];
      }
      ASSERT_EQ(markers, d.labels_i64[i]) << "example " << i;
      ASSERT_EQ(d.input_ids[i * kMaxLength], kCls);
      ASSERT_GE(length, kMinLength);
      ASSERT_LE(length, kMaxLength);
      positives += d.labels_i64[i];
    }
    EXPECT_EQ(positives * 2, size);
  }
  // The held-out set is other sequences than the training set's.
  const Dataset train = marker_dataset(kTrainSize, kTrainSeed), held_out = marker_dataset(kEvalSize, kEvalSeed);
  int64_t shared = 0;
  for (int64_t i = 0; i < kEvalSize; ++i)
    for (int64_t j = 0; j < kTrainSize; ++j)
      shared += std::equal(held_out.input_ids.begin() + i * kMaxLength, held_out.input_ids.begin() + (i + 1) * kMaxLength,
                           train.input_ids.begin() + j * kMaxLength);
  EXPECT_EQ(shared, 0);
}

class HeldOutAccuracy : public ::testing::TestWithParam<std::string> {};

TEST_P(HeldOutAccuracy, AtLeastNinetyFivePercent) {
  const Outcome o = train_and_evaluate(find_case(GetParam()));
  EXPECT_GE(o.accuracy, kAccuracy) << GetParam() << ", held-out loss " << o.loss;
}

INSTANTIATE_TEST_SUITE_P(OptimizersLearn, HeldOutAccuracy, ::testing::Values("sgd", "adafactor"),
                         [](const auto& info) { return info.param; });

// AdamW and 8-bit AdamW in one test: both must learn, and the 8-bit run must end
// where AdamW's does. "Final loss" is the held-out mean cross-entropy after
// training, dropout off: a deterministic measure of the trained weights over
// 512 examples, whereas the last training step's loss is one batch of 32
// under dropout, noise of its own that says little about the optimizer. Both
// runs see the same initialisation, batches and dropout masks, so the
// difference is the optimizer's alone. (Near zero a relative tolerance is
// tight: for a loss of 4e-4, 5% is about 0.05 nats of logit margin.)
TEST(OptimizersLearn, AdamW8bitEndsWithinFivePercentOfAdamWWithStatesInEightBits) {
  const Outcome full = train_and_evaluate(find_case("adamw"));
  const Outcome eight = train_and_evaluate(find_case("adamw_8bit"));
  EXPECT_GE(full.accuracy, kAccuracy) << "adamw, held-out loss " << full.loss;
  EXPECT_GE(eight.accuracy, kAccuracy) << "adamw_8bit, held-out loss " << eight.loss;
  EXPECT_LE(std::abs(eight.loss - full.loss), 0.05 * full.loss)
      << "final (held-out) loss: adamw_8bit " << eight.loss << ", adamw " << full.loss;
  // AdamW keeps 8 bytes a parameter. 8-bit AdamW keeps 2 bytes an element of the
  // matrices (95.6% of the parameters) plus a float32 absmax per 256 elements
  // per moment, 8 bytes an element of the rest, and two 256-entry maps: 29% of
  // AdamW's. Were every state float32 it would be over 100%; were only the five
  // 4 096-element matrices (at bitsandbytes' threshold exactly) left in float32,
  // 49%.
  ASSERT_GT(full.optimizer_state_bytes, 0);
  EXPECT_LT(eight.optimizer_state_bytes, 0.35 * full.optimizer_state_bytes)
      << "adamw_8bit " << eight.optimizer_state_bytes << " bytes, adamw " << full.optimizer_state_bytes;
}

}  // namespace
}  // namespace anatomy
