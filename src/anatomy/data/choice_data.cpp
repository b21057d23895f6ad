// choice_data.cpp: see choice_data.h.
#include "anatomy/data/choice_data.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/text_table.h"
#include "anatomy/io/json.h"

namespace anatomy {

Dataset read_choice_data(const std::string& path, const data::TextTokenizer& tokenizer,
                         const ChoiceDataOptions& options, bool require_labels) {
  const std::string ext = lower_extension(path);
  if (ext != ".jsonl" && ext != ".json")
    fail("{}: multiple-choice data is SWAG-style JSON lines (.jsonl or .json: sent1, sent2, ending0.., label)", path);
  std::vector<std::string> firsts, seconds;
  std::vector<int64_t> labels;
  int64_t choices = 0;
  for_each_line(read_utf8_file(path), [&](int64_t line_number, std::string_view line) {
    if (blank_line(line)) return;
    const nlohmann::json j = io::parse_json(line, fmt::format("{}:{}", path, line_number));
    if (!j.is_object()) fail("{}:{}: not a JSON object", path, line_number);
    auto field = [&](const std::string& name) -> std::string {
      const auto it = j.find(name);
      if (it == j.end() || !it->is_string())
        fail("{}:{}: '{}' is {}", path, line_number, name, it == j.end() ? "missing" : "not a string");
      return it->get<std::string>();
    };
    int64_t n = 0;
    while (j.contains("ending" + std::to_string(n))) ++n;
    if (choices == 0) {
      if (n < 2) fail("{}:{}: {} ending field(s) (ending0, ending1, ...): multiple choice needs at least 2", path,
                      line_number, n);
      choices = n;
    } else if (n != choices) {
      fail("{}:{}: {} endings, where the first example has {}", path, line_number, n, choices);
    }
    const std::string context = field("sent1"), start = field("sent2");
    for (int64_t c = 0; c < choices; ++c) {
      firsts.push_back(context);
      seconds.push_back(start + " " + field("ending" + std::to_string(c)));
    }
    const auto label = j.find("label");
    if (label == j.end() || label->is_null()) {
      if (require_labels) fail("{}:{}: 'label' is missing", path, line_number);
      labels.push_back(0);
      return;
    }
    int64_t value = -1;
    if (label->is_number_integer()) value = label->get<int64_t>();
    else if (label->is_string() && !parse_integer(label->get<std::string>(), &value)) value = -1;
    if (value < 0 || value >= choices)
      fail("{}:{}: 'label' is {}, not an integer in [0, {})", path, line_number, io::short_dump(*label), choices);
    labels.push_back(value);
  });
  if (labels.empty()) fail("{}: no examples", path);
  std::vector<data::TextInput> inputs;
  inputs.reserve(firsts.size());
  for (size_t i = 0; i < firsts.size(); ++i) inputs.push_back(data::TextInput{firsts[i], seconds[i]});
  data::EncodeOptions encode;
  encode.truncate_to = static_cast<size_t>(options.max_seq_length);
  encode.add_prefix_space = options.add_prefix_space;
  const std::vector<data::Encoding> encoded = tokenizer.encode_batch(inputs, encode);
  const int32_t pad = tokenizer.pad_id();
  Dataset d = padded_examples(path, encoded, pad < 0 ? 0 : pad, 0);
  // Rows of the same length: each example's choices one after another.
  d.choices = choices;
  d.size = static_cast<int64_t>(labels.size());
  d.seq_len *= choices;
  d.pad_per_batch = false;
  d.label_dtype = DType::I64;
  d.label_width = 1;
  d.labels_i64 = std::move(labels);
  return d;
}

}  // namespace anatomy
