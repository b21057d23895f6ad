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

}  // namespace anatomy
