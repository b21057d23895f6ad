// tasks.h: the tasks a model's head serves, named as the command line and
// the registry name them (Hugging Face's pipeline task names where it has one; run_mlm's task
// as masked-lm).
#pragma once

namespace anatomy {

// One label (or values) per sequence: *ForSequenceClassification.
inline constexpr const char* kSequenceClassification = "sequence-classification";
// One label per token: *ForTokenClassification (named-entity recognition).
inline constexpr const char* kTokenClassification = "token-classification";
// The start and end of an answer span in the context: *ForQuestionAnswering (extractive QA).
inline constexpr const char* kQuestionAnswering = "question-answering";

// Masked-language-model pretraining or domain adaptation: *ForMaskedLM, the
// word embeddings tied to the output layer (Hugging Face's run_mlm).
inline constexpr const char* kMaskedLm = "masked-lm";

// One of several candidate continuations per example: *ForMultipleChoice
// (SWAG-style data: each example C sequences, one label in [0, C)).
inline constexpr const char* kMultipleChoice = "multiple-choice";

}  // namespace anatomy
