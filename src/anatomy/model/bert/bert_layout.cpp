// bert_layout.cpp: BERT's layout and the names a layout derives.
#include "anatomy/model/bert/bert_layout.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "anatomy/core/error.h"

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
  for (const std::string* norm : {&embeddings_norm, &attention_norm, &output_norm, &lm_norm})
    if (!norm->empty() && (ends_with(name, *norm + ".weight") || ends_with(name, *norm + ".bias"))) return true;
  if (relative_attention && (name == prefix + relative_norm + ".weight" || name == prefix + relative_norm + ".bias"))
    return true;
  return false;
}

double BertLayout::head_dense_dropout(const ModelConfig& config) const {
  if (head_dense_dropout_key.empty()) return head_dropout(config);
  const auto it = config.extra.find(head_dense_dropout_key);
  if (it == config.extra.end() || it->is_null()) return 0.0;
  if (!it->is_number() || !(it->get<double>() >= 0.0 && it->get<double>() < 1.0))
    fail("config.json: '{}' must be a probability in [0, 1), got {}", head_dense_dropout_key, it->dump());
  return it->get<double>();
}

bool BertLayout::in_encoder_layer(const std::string& name) const {
  const std::string root = prefix + layer.substr(0, layer.find("{}"));
  return name.rfind(root, 0) == 0;
}

const std::vector<std::string>& bert_tasks() {
  static const std::vector<std::string> tasks = {kSequenceClassification, kTokenClassification, kQuestionAnswering,
                                                   kMaskedLm, kMultipleChoice};
  return tasks;
}

double BertLayout::head_dropout(const ModelConfig& config) const {
  switch (head_dropout_kind) {
    case HeadDropout::Classifier: return config.classifier_dropout_prob();
    case HeadDropout::Hidden: return config.hidden_dropout_prob;
    case HeadDropout::None: return 0.0;
    case HeadDropout::QaDropout: {
      const auto it = config.extra.find("qa_dropout");
      if (it == config.extra.end() || it->is_null()) return 0.1;
      if (!it->is_number() || !(it->get<double>() >= 0.0 && it->get<double>() < 1.0))
        fail("config.json: 'qa_dropout' must be a probability in [0, 1), got {}", it->dump());
      return it->get<double>();
    }
  }
  return 0.0;
}

int64_t BertLayout::head_outputs(const ModelConfig& config) const {
  if (task == kMaskedLm) return config.vocab_size;
  if (task == kMultipleChoice) return 1;
  return task == kQuestionAnswering ? 2 : config.num_labels;
}

const BertLayout& bert_task_layout(const BertLayout& family, const std::string& task) {
  ANATOMY_CHECK(family.task == kSequenceClassification, "bert_task_layout: {} is not a family's layout",
                family.architecture);
  if (task == kSequenceClassification) return family;
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, std::unique_ptr<BertLayout>> layouts;
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<BertLayout>& made = layouts[{family.architecture, task}];
  if (made) return *made;
  const std::string suffix = "ForSequenceClassification";
  ANATOMY_CHECK(ends_with(family.architecture, suffix), "family architecture {}", family.architecture);
  const std::string class_name = family.architecture.substr(0, family.architecture.size() - suffix.size());
  auto l = std::make_unique<BertLayout>(family);
  l->task = task;
  if (task == kTokenClassification) {
    // *ForTokenClassification: dropout(sequence_output) -> classifier, every
    // token; no pooler. DistilBERT's dropout is config.dropout.
    l->architecture = class_name + "ForTokenClassification";
    l->head_dense.clear();
    l->classifier = "classifier";
    l->dropout_before_head_dense = false;
    l->head_dropout_kind = family.model_type == "distilbert" || family.model_type == "deberta-v2"
                               ? BertLayout::HeadDropout::Hidden
                               : BertLayout::HeadDropout::Classifier;
  } else if (task == kQuestionAnswering) {
    // *ForQuestionAnswering: qa_outputs (H -> 2) on every token, split into
    // start and end logits; dropout before it in DistilBERT only.
    l->architecture = class_name + "ForQuestionAnswering";
    l->head_dense.clear();
    l->classifier = "qa_outputs";
    l->dropout_before_head_dense = false;
    l->head_dropout_kind =
        family.model_type == "distilbert" ? BertLayout::HeadDropout::QaDropout : BertLayout::HeadDropout::None;
  } else if (task == kMaskedLm && family.model_type != "deberta-v2") {
    // *ForMaskedLM: no pooler, no classifier, no dropout; the names of each family's LM head.
    l->architecture = class_name + "ForMaskedLM";
    l->classifier.clear();
    l->dropout_before_head_dense = false;
    l->head_dropout_kind = BertLayout::HeadDropout::None;
    if (family.model_type == "distilbert") {
      l->head_dense = "vocab_transform";
      l->lm_norm = "vocab_layer_norm";
      l->lm_bias = "vocab_projector.bias";
    } else if (family.model_type == "electra") {
      l->head_dense = "generator_predictions.dense";
      l->lm_norm = "generator_predictions.LayerNorm";
      l->lm_bias = "generator_lm_head.bias";
      l->lm_gelu = true;
    } else if (family.prefix == "bert.") {
      l->head_dense = "cls.predictions.transform.dense";
      l->lm_norm = "cls.predictions.transform.LayerNorm";
      l->lm_bias = "cls.predictions.bias";
    } else {  // RoBERTa, XLM-RoBERTa, CamemBERT
      l->head_dense = "lm_head.dense";
      l->lm_norm = "lm_head.layer_norm";
      l->lm_bias = "lm_head.bias";
      l->lm_gelu = true;
    }
  } else if (task == kMultipleChoice && family.model_type != "electra" && family.model_type != "deberta-v2") {
    // *ForMultipleChoice: the sequence classifier's head with one output, a logit per choice. BERT's and
    // DistilBERT's are their sequence classifiers'; RoBERTa's is BERT's (the pooler, tanh, dropout), not
    // its two-layer classification head. (ELECTRA's SequenceSummary is not served.)
    l->architecture = class_name + "ForMultipleChoice";
    if (family.model_type != "distilbert" && family.prefix != "bert.") {
      l->head_dense = family.prefix + "pooler.dense";
      l->classifier = "classifier";
      l->head_activation = ActivationKind::Tanh;
      l->dropout_before_head_dense = false;
      l->head_dropout_kind = BertLayout::HeadDropout::Classifier;
    }
  } else {
    fail("the {} family has no {} head", family.model_type, task);
  }
  made = std::move(l);
  return *made;
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
