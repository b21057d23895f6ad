// bert_masked_lm_head.h: the masked-language-model head of a BERT-style model
// (BertForMaskedLM, RobertaForMaskedLM and XLM-RoBERTa's, CamemBERT's,
// DistilBertForMaskedLM, ElectraForMaskedLM):
//   logits = decoder(LayerNorm(act(dense(sequence_output))))     [B, L, vocab]
// dense H -> E (E: the embedding width), the decoder's weight the word
// embeddings [vocab, E] (tied: one parameter, whose gradient gets both uses)
// and its own bias; the loss is the cross-entropy over the tokens whose label
// is not -100 (the masked ones).
//
// Its logits are the largest tensor of the model if kept whole ([B, L, vocab]
// float32: 2 GB for bert-large at batch 32 and 512 tokens, and their gradient
// as much again). With labels, the head never makes them: it gathers the rows
// of the masked tokens (about 15%), runs dense, activation and LayerNorm on
// those alone, and the decoder and the loss a chunk of rows at a time into one
// buffer of lm_chunk_rows() x vocab in the compute dtype; backward makes each
// chunk's logits again, turns them into their gradient in place and takes the
// decoder's products from it. Without labels (inference, `anatomy forward`)
// it writes the whole logits, as the output asked for.
//
// Under mixed precision the products run in the compute dtype from the 16-bit
// copy (the word embeddings' copy serves the decoder), the LayerNorm's
// parameters and statistics are float32, the loss reads the 16-bit logits as
// float (as torch's float32 cross-entropy under autocast does). What it saves
// for backward is sized for every token of the batch, whatever the number
// masked, so that the memory plan is the run's to the byte.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "anatomy/model/bert/bert_head.h"

namespace anatomy {

class BertMaskedLmHead : public BertHead {
 public:
  BertMaskedLmHead(Backend& backend, const ModelConfig& config, const BertLayout& layout, DType compute,
                   const BertTensors& w, const BertTensors& wh, const BertTensors& g, BertEncoder& encoder);

  bool first_token_only() const override { return false; }
  void forward(const Tensor& hidden, const Tensor& labels, const SavedTensors& s) override;
  ProblemType problem_type(DType labels_dtype) const override { return ProblemType::SingleLabel; }
  std::optional<double> forward_loss() const override { return loss_; }
  Tensor logits(const SavedTensors& s) const override { return logits_; }
  double loss(const Tensor& logits, const Tensor& labels, ProblemType type, const Tensor& dlogits,
              double label_smoothing) override;
  Gradients backward(const SavedTensors& s, const Tensor& dlogits, double loss_scale) override;

 private:
  // Dense, activation and LayerNorm on the first `rows` rows of x [rows.., H]
  // into s's lm_pre, lm_norm_in, lm_out.
  void transform(const Tensor& x, int64_t rows, const SavedTensors& s);
  // The decoder's logits of lm_out's rows [begin, begin + n) into `out` [n, vocab].
  void decode(const SavedTensors& s, int64_t begin, int64_t n, const Tensor& out);

  Backend& backend_;
  const ModelConfig& config_;
  const BertLayout& layout_;
  DType compute_;
  const BertTensors& w_;
  const BertTensors& wh_;
  const BertTensors& g_;
  BertEncoder& encoder_;
  ActivationKind activation_;
  int64_t masked_ = 0;  // rows the last forward with labels counted
  int64_t padded_ = 0;  // and the rows it computed: masked_ padded to the row granule
  std::optional<double> loss_;
  Tensor logits_;  // the last forward's whole logits (without labels)
};

// The rows of logits each chunk of the masked-LM loss makes at once: about
// 32M elements, at least 1, at most `tokens`.
int64_t lm_chunk_rows(int64_t vocab, int64_t tokens);

// The memory report's line on the masked-LM logits of a batch of B sequences
// of L tokens: what whole float32 logits and their gradient would take, and
// the one chunk buffer the head holds instead.
std::string lm_logits_note(const ModelConfig& config, int64_t B, int64_t L, DType compute);

}  // namespace anatomy
