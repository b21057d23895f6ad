// bert_layout.cpp: BERT's layout and the names a layout derives.
#include "anatomy/model/bert/bert_layout.h"

#include <fmt/format.h>

namespace anatomy {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string BertLayout::layer_name(int64_t l, const std::string& part) const {
  return prefix + fmt::format(fmt::runtime(layer), l) + part;
}

bool BertLayout::is_layer_norm(const std::string& name) const {
  for (const std::string* norm : {&embeddings_norm, &attention_norm, &output_norm})
    if (ends_with(name, *norm + ".weight") || ends_with(name, *norm + ".bias")) return true;
  return false;
}

bool BertLayout::in_encoder_layer(const std::string& name) const {
  const std::string root = prefix + layer.substr(0, layer.find("{}"));
  return name.rfind(root, 0) == 0;
}

const BertLayout& bert_layout() {
  static const BertLayout layout = [] {
    BertLayout l;
    l.model_type = "bert";
    l.architecture = "BertForSequenceClassification";
    l.prefix = "bert.";
    return l;
  }();
  return layout;
}

}  // namespace anatomy
