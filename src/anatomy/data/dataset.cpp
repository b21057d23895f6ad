// dataset.cpp: dummy data, tensor files, validation and batching.
#include "anatomy/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/core/random.h"
#include "anatomy/core/tensor.h"
#include "anatomy/io/safetensors.h"

namespace anatomy {

namespace {
constexpr uint64_t kDummyStream = uint64_t{3} << 60;
constexpr uint64_t kShuffleStream = uint64_t{5} << 60;
constexpr uint64_t kDummyLengthStream = uint64_t{6} << 60;

// Uniform integer in [0, n) from the counter-based RNG (rejection-free, 64-bit
// product; the bias for n < 2^32 is below 2^-32).
uint64_t uniform_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
  Philox4 r = philox4x32(seed, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32));
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}
}  // namespace

Dataset make_dummy_dataset(int64_t size, int64_t seq_len, uint64_t seed) {
  Dataset d;
  d.source = "dummy dataset";
  d.size = size;
  d.seq_len = seq_len;
  d.input_ids.resize(size * seq_len);
  for (int64_t i = 0; i < size * seq_len; ++i)
    d.input_ids[i] = 100 + static_cast<int64_t>(uniform_below(seed, kDummyStream, i, 30000 - 100));
  d.label_dtype = DType::I64;
  d.label_width = 1;
  d.labels_i64.assign(size, 0);  // np.random.randint(0, 1) is always 0
  return d;
}

Dataset make_dummy_varlen_dataset(int64_t size, int64_t min_len, int64_t max_len, uint64_t seed) {
  ANATOMY_CHECK(size > 0 && min_len > 0 && min_len <= max_len, "dummy lengths {}..{} for {} examples", min_len,
                max_len, size);
  Dataset d = make_dummy_dataset(size, max_len, seed);
  d.source = fmt::format("dummy dataset ({}..{} tokens)", min_len, max_len);
  d.attention_mask.assign(size * max_len, 0);
  for (int64_t i = 0; i < size; ++i) {
    const int64_t len =
        min_len + static_cast<int64_t>(uniform_below(seed, kDummyLengthStream, i, static_cast<uint64_t>(max_len - min_len + 1)));
    for (int64_t t = 0; t < max_len; ++t) {
      if (t < len) d.attention_mask[i * max_len + t] = 1;
      else d.input_ids[i * max_len + t] = 0;
    }
  }
  return d;
}

std::vector<int64_t> sequence_lengths(const Dataset& data) {
  std::vector<int64_t> lengths(data.size, data.seq_len);
  if (data.attention_mask.empty()) return lengths;
  for (int64_t i = 0; i < data.size; ++i) {
    const int64_t* mask = data.attention_mask.data() + i * data.seq_len;
    int64_t len = 0;
    while (len < data.seq_len && mask[len] != 0) ++len;
    for (int64_t t = len; t < data.seq_len; ++t)
      if (mask[t] != 0)
        fail("{}: attention_mask of example {} has a 1 at position {} after a 0 at {}: only right padding (ones, "
             "then zeros) can be packed", data.source, i, t, len);
    if (len == 0) fail("{}: example {} has no tokens (its attention_mask is all zeros)", data.source, i);
    lengths[i] = len;
  }
  return lengths;
}

Dataset load_tensor_dataset(const std::string& path) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  Dataset d;
  d.source = path;
  if (!file.has("input_ids")) fail("{}: no tensor 'input_ids' (expected int64 [examples, seq_len])", path);
  const auto& ids = file.info("input_ids");
  if (ids.shape.size() != 2 && ids.shape.size() != 3)
    fail("{}: tensor 'input_ids' must be 2-D [examples, seq_len] (or 3-D [examples, choices, seq_len]: multiple "
         "choice), got {} dims", path, ids.shape.size());
  d.size = ids.shape[0];
  d.seq_len = ids.shape[1];
  if (ids.shape.size() == 3) {  // multiple choice: each example's choices one after another
    if (ids.shape[1] < 1) fail("{}: tensor 'input_ids' has no choices ({})", path, shape_str(ids.shape));
    d.choices = ids.shape[1];
    d.seq_len = ids.shape[1] * ids.shape[2];
  }
  d.input_ids = file.read_i64("input_ids");
  auto read_tokens = [&](const char* name, std::vector<int64_t>* out) {
    if (!file.has(name)) return;
    const auto& info = file.info(name);
    if (info.shape != ids.shape)
      fail("{}: tensor '{}' has shape {}, expected {} like input_ids", path, name, shape_str(info.shape),
           shape_str(ids.shape));
    *out = file.read_i64(name);
  };
  read_tokens("token_type_ids", &d.token_type_ids);
  read_tokens("attention_mask", &d.attention_mask);
  if (file.has("start_positions") || file.has("end_positions")) {
    for (const char* name : {"start_positions", "end_positions"}) {
      if (!file.has(name))
        fail("{}: tensor '{}' is missing: question answering needs start_positions and end_positions", path, name);
      const auto& info = file.info(name);
      if ((info.dtype != io::StDType::I64 && info.dtype != io::StDType::I32) ||
          info.shape != std::vector<int64_t>{d.size})
        fail("{}: tensor '{}' must be integer [{}], got {} {}", path, name, d.size, io::st_dtype_name(info.dtype),
             shape_str(info.shape));
    }
    if (file.has("labels")) fail("{}: both 'labels' and start_positions/end_positions", path);
    const std::vector<int64_t> starts = file.read_i64("start_positions"), ends = file.read_i64("end_positions");
    d.label_dtype = DType::I64;
    d.label_width = 2;
    d.span_labels = true;
    for (int64_t i = 0; i < d.size; ++i) {
      d.labels_i64.push_back(starts[static_cast<size_t>(i)]);
      d.labels_i64.push_back(ends[static_cast<size_t>(i)]);
    }
  }
  if (file.has("labels")) {
    const auto& info = file.info("labels");
    const bool integer = info.dtype == io::StDType::I64 || info.dtype == io::StDType::I32;
    const bool floating = info.dtype == io::StDType::F32 || info.dtype == io::StDType::F64 ||
                          info.dtype == io::StDType::F16 || info.dtype == io::StDType::BF16;
    if (!integer && !floating)
      fail("{}: tensor 'labels' has dtype {}; use int64 (classification) or float32 (regression, multi-label)", path,
           io::st_dtype_name(info.dtype));
    const bool per_token = integer && d.choices == 0 && info.shape == std::vector<int64_t>{d.size, d.seq_len};
    if (info.shape.empty() || info.shape[0] != d.size || info.shape.size() > 2 ||
        (integer && info.shape.size() != 1 && !per_token))
      fail("{}: tensor 'labels' has shape {}, expected [{}]{}", path, shape_str(info.shape), d.size,
           integer ? fmt::format(" or [{}, {}] (a label per token)", d.size, d.seq_len) : " or [examples, num_labels]");
    d.label_width = info.shape.size() == 2 ? info.shape[1] : 1;
    d.token_labels = per_token;
    if (integer) {
      d.label_dtype = DType::I64;
      d.labels_i64 = file.read_i64("labels");
    } else {
      d.label_dtype = DType::F32;
      d.labels_f32 = file.read_f32("labels");
    }
  }
  return d;
}

void validate_dataset(const Dataset& d, const ModelConfig& c, const std::string& task) {
  if (d.size <= 0 || d.seq_len <= 0) fail("{}: the dataset is empty ({} examples of {} tokens)", d.source, d.size, d.seq_len);
  if (task == kMultipleChoice && d.choices == 0)
    fail("{}: multiple choice needs input_ids [examples, choices, seq_len] (each example's candidates)", d.source);
  if (task != kMultipleChoice && d.choices > 0)
    fail("{}: input_ids [examples, choices, seq_len] are multiple choice's; a {} model takes [examples, seq_len]",
         d.source, task);
  const int64_t tokens = d.choices > 0 ? d.seq_len / d.choices : d.seq_len;
  if (tokens > c.max_sequence_length())
    fail("{}: input_ids has sequences of {} tokens, longer than the model's {}", d.source, tokens,
         max_sequence_length_text(c));
  if (d.choices > 0 && (d.pad_per_batch || d.token_labels || d.span_labels || (d.has_labels() && d.label_width != 1)))
    fail("{}: multiple choice takes one int64 label per example", d.source);
  auto check_range = [&](const std::vector<int64_t>& v, const char* name, int64_t hi) {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] < 0 || v[i] >= hi)
        fail("{}: {} of example {} (position {}) is {}, outside [0, {})", d.source, name, i / d.seq_len,
             i % d.seq_len, v[i], hi);
  };
  check_range(d.input_ids, "input_ids", c.vocab_size);
  // A model without token types (DistilBERT) does not read them, as its Hugging Face tokenizer does not make them.
  if (c.type_vocab_size > 0) check_range(d.token_type_ids, "token_type_ids", c.type_vocab_size);
  check_range(d.attention_mask, "attention_mask", 2);
  if (!d.has_labels()) return;
  if (task == kTokenClassification || task == kMaskedLm) {
    const bool lm = task == kMaskedLm;
    if (!d.token_labels || d.label_dtype != DType::I64)
      fail("{}: {} needs int64 labels [{}, {}], {} per token (-100: none)", d.source,
           lm ? "masked-LM" : "token classification", d.size, d.seq_len, lm ? "the original token id" : "a label");
    const int64_t hi = lm ? c.vocab_size : c.num_labels;
    for (size_t i = 0; i < d.labels_i64.size(); ++i)
      if (d.labels_i64[i] != -100 && (d.labels_i64[i] < 0 || d.labels_i64[i] >= hi))
        fail("{}: labels of example {} (position {}) is {}, outside [0, {}) ({} {}; -100: no label)", d.source,
             i / d.seq_len, i % d.seq_len, d.labels_i64[i], hi, lm ? "vocab_size" : "num_labels", hi);
    return;
  }
  if (task == kQuestionAnswering) {
    if (!d.span_labels)
      fail("{}: question answering needs start_positions and end_positions (int64 [{}]), not 'labels'", d.source,
           d.size);
    // Positions within each example's tokens (Hugging Face clamps positions past the sequence and ignores
    // them; data that points past its tokens is refused here instead).
    const std::vector<int64_t> lengths = sequence_lengths(d);
    for (int64_t i = 0; i < d.size; ++i)
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t p = d.labels_i64[static_cast<size_t>(2 * i + k)];
        if (p < 0 || p >= lengths[static_cast<size_t>(i)])
          fail("{}: {} of example {} is {}, outside its {} tokens", d.source,
               k == 0 ? "start_positions" : "end_positions", i, p, lengths[static_cast<size_t>(i)]);
      }
    return;
  }
  if (d.span_labels)
    fail("{}: start_positions and end_positions are question answering's labels; a {} model takes 'labels'",
         d.source, task);
  if (task == kMultipleChoice) {
    if (d.label_dtype != DType::I64) fail("{}: multiple choice takes int64 labels [{}]", d.source, d.size);
    for (size_t i = 0; i < d.labels_i64.size(); ++i)
      if (d.labels_i64[i] < 0 || d.labels_i64[i] >= d.choices)
        fail("{}: labels of example {} is {}, outside its {} choices", d.source, i, d.labels_i64[i], d.choices);
    return;
  }
  if (d.token_labels)
    fail("{}: labels [{}, {}] are a label per token; a {} model takes one per example", d.source, d.size, d.seq_len,
         task);
  const ProblemType type = c.problem_type != ProblemType::Unset ? c.problem_type
                           : c.num_labels == 1                  ? ProblemType::Regression
                           : d.label_dtype == DType::I64        ? ProblemType::SingleLabel
                                                                : ProblemType::MultiLabel;
  switch (type) {
    case ProblemType::SingleLabel:
      if (d.label_dtype != DType::I64 || d.label_width != 1)
        fail("{}: single-label classification needs int64 labels [{}]", d.source, d.size);
      for (int64_t i = 0; i < d.size; ++i)
        if (d.labels_i64[i] != -100 && (d.labels_i64[i] < 0 || d.labels_i64[i] >= c.num_labels))
          fail("{}: labels of example {} is {}, outside [0, {}) (num_labels {})", d.source, i, d.labels_i64[i],
               c.num_labels, c.num_labels);
      break;
    case ProblemType::Regression:
    case ProblemType::MultiLabel: {
      const char* what = type == ProblemType::Regression ? "regression" : "multi-label classification";
      if (d.label_dtype != DType::F32)
        fail("{}: {} needs float labels, got int64 labels", d.source, what);
      if (d.label_width != c.num_labels)
        fail("{}: {} needs {} label value(s) per example, got {}", d.source, what, c.num_labels, d.label_width);
      for (size_t i = 0; i < d.labels_f32.size(); ++i)
        if (!std::isfinite(d.labels_f32[i])) fail("{}: label of example {} is not finite", d.source, i / d.label_width);
      break;
    }
    case ProblemType::Unset: break;
  }
}

HostBatch gather_batch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t end) {
  HostBatch b;
  b.batch = end - begin;
  b.seq_len = d.seq_len;
  b.token_labels = d.token_labels;
  b.span_labels = d.span_labels;
  b.choices = d.choices;
  const int64_t L = d.seq_len;
  if (d.pad_per_batch && !d.attention_mask.empty()) {
    // The batch's longest row: the last 1 of any mask (right padding).
    int64_t longest = 1;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t* mask = d.attention_mask.data() + order[i] * L;
      for (int64_t t = L; t > longest; --t)
        if (mask[t - 1] != 0) {
          longest = t;
          break;
        }
    }
    b.seq_len = longest;
  }
  // Each row's first `width` values of `stride` (the tokens: the batch's length of the set's).
  auto gather_rows = [&](const auto& src, auto* dst, int64_t width, int64_t stride) {
    if (src.empty()) return;
    dst->resize(b.batch * width);
    for (int64_t i = begin; i < end; ++i)
      std::copy_n(src.begin() + order[i] * stride, width, dst->begin() + (i - begin) * width);
  };
  gather_rows(d.input_ids, &b.input_ids, b.seq_len, L);
  gather_rows(d.token_type_ids, &b.token_type_ids, b.seq_len, L);
  gather_rows(d.attention_mask, &b.attention_mask, b.seq_len, L);
  gather_rows(d.special_tokens_mask, &b.special_tokens_mask, b.seq_len, L);
  if (d.token_labels) {
    gather_rows(d.labels_i64, &b.labels_i64, b.seq_len, L);
  } else if (d.span_labels) {  // [2, batch]: the starts, then the ends
    b.labels_i64.resize(static_cast<size_t>(2 * b.batch));
    for (int64_t i = begin; i < end; ++i)
      for (int64_t k = 0; k < 2; ++k)
        b.labels_i64[static_cast<size_t>(k * b.batch + (i - begin))] =
            d.labels_i64[static_cast<size_t>(2 * order[i] + k)];
  } else {
    gather_rows(d.labels_i64, &b.labels_i64, d.label_width, d.label_width);
  }
  gather_rows(d.labels_f32, &b.labels_f32, d.label_width, d.label_width);
  return b;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  // Fisher-Yates with the counter-based RNG: the same seed gives the same order everywhere.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(seed, kShuffleStream + epoch, i, i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) fail("shard_order: rank {} of a world of {}", rank, world);
  if (world == 1) return order;
  const auto n = static_cast<int64_t>(order.size());
  if (n == 0) return {};
  const int64_t per_rank = shard_size(n, world);
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = 0; i < per_rank; ++i) shard.push_back(order[static_cast<size_t>((rank + i * world) % n)]);
  return shard;
}

std::vector<int64_t> length_grouped_order(const std::vector<int64_t>& order, const std::vector<int64_t>& lengths,
                                          int64_t batch_size) {
  ANATOMY_CHECK(batch_size > 0 && order.size() == lengths.size(), "length_grouped_order: {} indices, {} lengths",
                order.size(), lengths.size());
  const auto n = static_cast<int64_t>(order.size());
  const int64_t mult = std::max<int64_t>(1, std::min<int64_t>(n / (batch_size * 4), 50));
  const int64_t megabatch = mult * batch_size;
  std::vector<int64_t> out(order);
  auto longer = [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; };
  int64_t longest_begin = 0;  // the megabatch whose first (longest) example is the longest of all; the first such
  for (int64_t begin = 0; begin < n; begin += megabatch) {
    const int64_t end = std::min(n, begin + megabatch);
    std::stable_sort(out.begin() + begin, out.begin() + end, longer);
    if (lengths[out[begin]] > lengths[out[longest_begin]]) longest_begin = begin;
  }
  if (n > 0) std::swap(out[0], out[longest_begin]);
  return out;
}

}  // namespace anatomy
