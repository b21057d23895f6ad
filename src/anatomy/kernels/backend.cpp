// backend.cpp: the default implementations of Backend's optional ops.
#include "anatomy/kernels/backend.h"

namespace anatomy {

void Backend::attention_forward_packed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                                       const std::vector<int64_t>& host_offsets, int64_t heads, double scale,
                                       const Tensor& ctx) {
  (void)offsets;
  ANATOMY_CHECK(q.rank() == 2 && k.shape() == q.shape() && v.shape() == q.shape() && ctx.shape() == q.shape(),
                "attention_forward_packed: q, k, v and ctx must be [tokens, heads*d] alike");
  ANATOMY_CHECK(heads > 0 && q.dim(1) % heads == 0, "attention_forward_packed: {} columns do not split into {} heads",
                q.dim(1), heads);
  ANATOMY_CHECK(host_offsets.size() >= 2 && host_offsets.front() == 0 && host_offsets.back() == q.dim(0),
                "attention_forward_packed: the offsets do not cover the {} packed rows", q.dim(0));
  const int64_t width = q.dim(1);
  const bool probabilities = attention_saves_probabilities(q.dtype(), width / heads);
  for (size_t b = 0; b + 1 < host_offsets.size(); ++b) {
    const int64_t start = host_offsets[b], len = host_offsets[b + 1] - start;
    ANATOMY_CHECK(len >= 0, "attention_forward_packed: offsets decrease at sequence {}", b);
    if (len == 0) continue;
    const Shape one = {1, len, width};
    auto rows = [&](const Tensor& t) { return t.slice(start * width, one, t.name()); };
    const Shape saved_shape = probabilities ? Shape{1, heads, len, len} : Shape{1, heads, len};
    Tensor saved = Tensor::empty(ledger(), saved_shape, DType::F32, Category::Temporary, "attention_saved");
    attention_forward(rows(q), rows(k), rows(v), Tensor(), heads, scale, DropoutSpec{}, saved, rows(ctx));
  }
}

void Backend::embeddings_layernorm_forward(const Tensor& ids, const Tensor& positions, const Tensor& token_types,
                                           const Tensor& word, const Tensor& position, const Tensor& token_type,
                                           const Tensor& gamma, const Tensor& beta, double eps,
                                           const DropoutSpec& dropout_spec, const Tensor& sum, const Tensor& mean,
                                           const Tensor& rstd, const Tensor& work, const Tensor& out) {
  ANATOMY_CHECK(work.dtype() == DType::F32 && work.numel() == sum.numel() && out.numel() == sum.numel(),
                "embeddings_layernorm_forward: {} must be float32 like {}, and {} the same size", work.name(),
                sum.name(), out.name());
  embedding_forward(ids, word, sum, false);
  embedding_forward(positions, position, sum, true);
  embedding_forward(token_types, token_type, sum, true);
  layernorm_forward(sum, gamma, beta, eps, work, mean, rstd);
  dropout(work, work, dropout_spec);
  if (work.raw() != out.raw()) cast(work, out);
}

void Backend::embeddings_layernorm_backward(const Tensor& dout, const Tensor& sum, const Tensor& mean,
                                            const Tensor& rstd, const Tensor& gamma, const DropoutSpec& dropout_spec,
                                            const Tensor& work, const Tensor& d_sum, const Tensor& dgamma,
                                            const Tensor& dbeta) {
  ANATOMY_CHECK(work.dtype() == DType::F32 && work.numel() == dout.numel() && d_sum.numel() == dout.numel(),
                "embeddings_layernorm_backward: {} must be float32 the size of {}, and {} too", work.name(),
                dout.name(), d_sum.name());
  if (work.raw() != dout.raw()) cast(dout, work);
  dropout(work, work, dropout_spec);
  layernorm_backward(work, sum, mean, rstd, gamma, d_sum, dgamma, dbeta);
}

}  // namespace anatomy
