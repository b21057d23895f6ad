// bert_head.cpp: the head of a layout's task.
#include "anatomy/model/bert/bert_head.h"

#include "anatomy/core/error.h"
#include "anatomy/model/bert/bert_classification_head.h"
#include "anatomy/model/bert/bert_masked_lm_head.h"
#include "anatomy/model/bert/bert_question_answering_head.h"
#include "anatomy/model/bert/bert_token_classification_head.h"

namespace anatomy {

std::unique_ptr<BertHead> make_bert_head(Backend& backend, const ModelConfig& config, const BertLayout& layout,
                                         DType compute, const BertTensors& w, const BertTensors& wh,
                                         const BertTensors& g, BertEncoder& encoder) {
  if (layout.task == kSequenceClassification || layout.task == kMultipleChoice)
    return std::make_unique<BertClassificationHead>(backend, config, layout, compute, w, g, encoder);
  if (layout.task == kTokenClassification)
    return std::make_unique<BertTokenClassificationHead>(backend, config, layout, compute, wh, g, encoder);
  if (layout.task == kQuestionAnswering)
    return std::make_unique<BertQuestionAnsweringHead>(backend, config, layout, compute, wh, g, encoder);
  if (layout.task == kMaskedLm)
    return std::make_unique<BertMaskedLmHead>(backend, config, layout, compute, w, wh, g, encoder);
  fail("{}: no {} head", layout.architecture, layout.task);
}

}  // namespace anatomy
