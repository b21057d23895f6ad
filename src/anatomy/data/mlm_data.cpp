// mlm_data.cpp: see mlm_data.h.
#include "anatomy/data/mlm_data.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/core/random.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/text_table.h"

namespace anatomy {

namespace {

constexpr uint64_t kMaskingStream = uint64_t{7} << 60;
constexpr uint64_t kEvalMaskingStream = uint64_t{8} << 60;
constexpr int64_t kIgnored = -100;
// datasets' map(batched=True) hands group_texts 1000 examples at a time.
constexpr size_t kGroupLines = 1000;

// run_mlm's line.isspace() over ASCII: a text from a table may hold newlines.
bool all_space(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); });
}

}  // namespace

uint64_t masking_stream(int64_t index, int rank) {
  return kMaskingStream + (static_cast<uint64_t>(index) << 12) + static_cast<uint64_t>(rank);
}
uint64_t eval_masking_stream(int64_t index) { return kEvalMaskingStream + (static_cast<uint64_t>(index) << 12); }

void mask_tokens(HostBatch& batch, const MaskingOptions& options, uint64_t seed, uint64_t stream) {
  ANATOMY_CHECK(options.mask_token_id >= 0 && options.random_tokens > 0, "masking without a mask token");
  const std::set<int64_t> special(options.special_ids.begin(), options.special_ids.end());
  const size_t n = batch.input_ids.size();
  batch.token_labels = true;
  batch.labels_i64.assign(n, kIgnored);
  // Four uniforms per token: chosen, replaced by the mask, replaced by a random id, the id.
  const auto draw = [&](size_t i, uint64_t k) { return random_uniform(seed, stream, 4 * i + k); };
  const auto p = static_cast<float>(options.probability);
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = batch.input_ids[i];
    if (!batch.attention_mask.empty() && batch.attention_mask[i] == 0) continue;
    if (!batch.special_tokens_mask.empty() && batch.special_tokens_mask[i] != 0) continue;
    if (special.count(id) != 0) continue;
    if (!(draw(i, 0) < p)) continue;
    batch.labels_i64[i] = id;
    if (draw(i, 1) < 0.8f) {
      batch.input_ids[i] = options.mask_token_id;
    } else if (draw(i, 2) < 0.5f) {  // 0.1 of the chosen: half of what the mask left
      const auto r = static_cast<int64_t>(static_cast<double>(draw(i, 3)) * static_cast<double>(options.random_tokens));
      batch.input_ids[i] = std::min(r, options.random_tokens - 1);
    }
  }
}

std::vector<std::string> read_mlm_texts(const std::string& path, const std::string& text_column) {
  const std::string ext = lower_extension(path);
  std::vector<std::string> texts;
  if (ext == ".jsonl" || ext == ".json" || ext == ".csv" || ext == ".tsv") {
    const TextTable table = read_text_table(path, TextColumns{text_column, "", ""});
    for (const TextExample& row : table.rows) texts.push_back(row.text);
    return texts;
  }
  for_each_line(read_utf8_file(path), [&](int64_t, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    texts.emplace_back(line);
  });
  if (texts.empty()) fail("{}: the file is empty", path);
  return texts;
}

Dataset prepare_mlm_dataset(const std::vector<std::string>& texts, const std::string& source,
                            const data::TextTokenizer& tokenizer, const MlmTextOptions& options,
                            std::vector<std::string>* notes) {
  const int64_t L = options.max_seq_length;
  if (L < 2) fail("--max-seq-length {}: masked-LM blocks need at least 2 tokens", L);
  data::EncodeOptions encode;
  encode.add_prefix_space = options.add_prefix_space;
  std::vector<std::string> kept;
  const std::vector<std::string>* lines = &texts;
  if (options.line_by_line) {
    for (const std::string& t : texts)
      if (!all_space(t)) kept.push_back(t);
    lines = &kept;
    encode.truncate_to = static_cast<size_t>(L);
    if (notes != nullptr && kept.size() < texts.size())
      notes->push_back(fmt::format("{}: {} blank line{} skipped (--line-by-line)", source, texts.size() - kept.size(),
                                   texts.size() - kept.size() == 1 ? "" : "s"));
  }
  std::vector<data::TextInput> inputs;
  inputs.reserve(lines->size());
  for (const std::string& t : *lines) inputs.push_back(data::TextInput{t});
  const std::vector<data::Encoding> encoded = tokenizer.encode_batch(inputs, encode);

  Dataset d;
  d.source = source;
  std::vector<std::vector<int64_t>> rows;
  std::vector<std::vector<uint8_t>> special;
  int64_t dropped = 0, tokens = 0;
  if (options.line_by_line) {
    for (const data::Encoding& e : encoded) {
      rows.emplace_back(e.input_ids.begin(), e.input_ids.end());
      std::vector<uint8_t> s(e.input_ids.size());
      for (size_t t = 0; t < s.size(); ++t) s[t] = t < e.sequence_ids.size() && e.sequence_ids[t] < 0;
      special.push_back(std::move(s));
    }
  } else {
    for (size_t group = 0; group < encoded.size(); group += kGroupLines) {
      std::vector<int64_t> ids;
      std::vector<uint8_t> s;
      for (size_t i = group; i < std::min(encoded.size(), group + kGroupLines); ++i) {
        const data::Encoding& e = encoded[i];
        ids.insert(ids.end(), e.input_ids.begin(), e.input_ids.end());
        for (size_t t = 0; t < e.input_ids.size(); ++t)
          s.push_back(t < e.sequence_ids.size() && e.sequence_ids[t] < 0);
      }
      tokens += static_cast<int64_t>(ids.size());
      const size_t whole = ids.size() / static_cast<size_t>(L) * static_cast<size_t>(L);
      dropped += static_cast<int64_t>(ids.size() - whole);
      for (size_t b = 0; b < whole; b += static_cast<size_t>(L)) {
        rows.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(b),
                          ids.begin() + static_cast<std::ptrdiff_t>(b + static_cast<size_t>(L)));
        special.emplace_back(s.begin() + static_cast<std::ptrdiff_t>(b),
                             s.begin() + static_cast<std::ptrdiff_t>(b + static_cast<size_t>(L)));
      }
    }
    if (rows.empty())
      fail("{}: {} tokens in all make no block of --max-seq-length {} (each group of {} lines is cut into blocks, "
           "its remainder dropped)",
           source, tokens, L, kGroupLines);
    if (notes != nullptr)
      notes->push_back(fmt::format("{}: {} lines, {} tokens in {} blocks of {} ({} tokens of the groups' "
                                   "remainders dropped, as run_mlm's group_texts drops them)",
                                   source, texts.size(), tokens, rows.size(), L, dropped));
  }
  if (rows.empty()) fail("{}: no text (every line is blank)", source);
  int64_t longest = 0;
  for (const auto& r : rows) longest = std::max<int64_t>(longest, static_cast<int64_t>(r.size()));
  const int32_t pad = tokenizer.pad_id();
  if (options.line_by_line && pad < 0)
    fail("{}: --line-by-line pads each batch, and {} has no padding token", source, tokenizer.file());
  d.size = static_cast<int64_t>(rows.size());
  d.seq_len = longest;
  d.input_ids.assign(static_cast<size_t>(d.size * longest), pad < 0 ? 0 : pad);
  d.attention_mask.assign(static_cast<size_t>(d.size * longest), 0);
  d.special_tokens_mask.assign(static_cast<size_t>(d.size * longest), 1);
  for (int64_t i = 0; i < d.size; ++i) {
    const auto& r = rows[static_cast<size_t>(i)];
    std::copy(r.begin(), r.end(), d.input_ids.begin() + i * longest);
    std::fill_n(d.attention_mask.begin() + i * longest, r.size(), 1);
    std::copy(special[static_cast<size_t>(i)].begin(), special[static_cast<size_t>(i)].end(),
              d.special_tokens_mask.begin() + i * longest);
  }
  d.pad_per_batch = options.line_by_line;
  return d;
}

int64_t mask_token_id(const data::TextTokenizer& tokenizer, const nlohmann::json& tokenizer_config) {
  std::vector<std::string> names;
  const auto it = tokenizer_config.find("mask_token");
  if (it != tokenizer_config.end()) {
    if (it->is_string()) names.push_back(it->get<std::string>());
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      names.push_back((*it)["content"].get<std::string>());
  }
  names.push_back("[MASK]");
  names.push_back("<mask>");
  for (const std::string& name : names)
    if (const int32_t id = tokenizer.token_to_id(name); id >= 0) return id;
  return -1;
}

}  // namespace anatomy
