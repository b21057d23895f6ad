// data_parallel.cpp: bucketed gradient all-reduce during backward.
#include "anatomy/distributed/data_parallel.h"

#include "anatomy/core/error.h"

namespace anatomy::distributed {

GradientReducer::GradientReducer(Communicator& comm, const Tensor& flat_gradients, int64_t bucket_elements)
    : comm_(comm), flat_(flat_gradients), bucket_(bucket_elements), launched_from_(flat_gradients.numel()) {
  ANATOMY_CHECK(flat_.dtype() == DType::F32, "data parallelism reduces float32 gradients, not {}",
                dtype_name(flat_.dtype()));
  ANATOMY_CHECK(bucket_ > 0, "bucket of {} elements", bucket_);
}

void GradientReducer::arm() {
  armed_ = true;
  launched_from_ = flat_.numel();
}

void GradientReducer::ready(int64_t from) {
  if (!armed_) return;
  ANATOMY_CHECK(from >= 0 && from <= launched_from_, "gradients ready from {} after {} was reduced", from,
                launched_from_);
  if (launched_from_ - from >= bucket_ || from == 0) launch(from);
}

void GradientReducer::finish() {
  if (!armed_) return;
  launch(0);
  comm_.wait();
  armed_ = false;
}

void GradientReducer::launch(int64_t from) {
  if (launched_from_ == from) return;
  comm_.all_reduce_sum(flat_.slice(from, {launched_from_ - from}, "gradient_bucket"));
  launched_from_ = from;
  ++buckets_;
}

}  // namespace anatomy::distributed
