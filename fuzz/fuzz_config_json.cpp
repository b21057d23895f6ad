// fuzz_config_json: a model's config.json through parse_model_config (its
// model_type picks the family's parser: bert, roberta, xlm-roberta,
// camembert, electra, distilbert, modernbert), then what a run does with a
// config it accepted: ModernBERT's options, and the config written back
// (model_config_to_json), which must read again to the same config.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "anatomy/model/config.h"
#include "anatomy/model/modernbert/modernbert_config.h"
#include "fuzz_util.h"

using namespace anatomy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  std::optional<ModelConfig> config;
  fuzz::expect_error([&] {
    config = parse_model_config(text, "config.json");
    if (config->model_type == "modernbert") (void)modernbert_options(*config, "config.json");
  });
  if (!config) return 0;
  (void)max_sequence_length_text(*config);
  (void)training_flops_per_sequence(*config, 128);
  // What the engine writes (a checkpoint's config.json), it reads back: an Error here is a crash.
  // The written config names every label (id2label and label2id, as Hugging Face's), so its size
  // and the round trip's time grow with num_labels, up to the 2^24 the reader allows: a 58-byte
  // input declaring 321,530 labels took 14 s here under the sanitizers. Past 4096 labels the
  // round trip is left out; the parse above still runs.
  if (config->num_labels > 4096) return 0;
  const std::string saved = model_config_to_json(*config).dump();
  const ModelConfig again = parse_model_config(saved, "saved config.json");
  if (model_config_to_json(again).dump() != saved) {
    std::fprintf(stderr, "config.json does not round-trip:\n%s\n%s\n", saved.c_str(),
                 model_config_to_json(again).dump().c_str());
    std::abort();
  }
  return 0;
}
