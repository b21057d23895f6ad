// tensor.cpp: tensor construction and views.
#include "anatomy/core/tensor.h"

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace anatomy {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Tensor Tensor::empty(Ledger& ledger, Shape shape, DType dtype, Category category, std::string name) {
  for (int64_t d : shape) ANATOMY_CHECK(d >= 0, "negative dimension in {} for {}", shape_str(shape), name);
  Tensor t;
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  t.storage_ = ledger.allocate(bytes, category, name);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.name_ = std::move(name);
  return t;
}

Tensor Tensor::zeros(Ledger& ledger, Shape shape, DType dtype, Category category, std::string name) {
  ANATOMY_CHECK(ledger.device().is_cpu(), "Tensor::zeros on {}", ledger.device().str());
  Tensor t = empty(ledger, std::move(shape), dtype, category, std::move(name));
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Device Tensor::device() const { return storage_->ledger().device(); }
Category Tensor::category() const { return storage_->category(); }

Tensor Tensor::reshape(Shape shape) const {
  ANATOMY_CHECK(shape_numel(shape) == numel(), "reshape of {} {} to {}", name_, shape_str(shape_), shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int64_t offset, Shape shape, std::string name) const {
  ANATOMY_CHECK(offset >= 0 && offset + shape_numel(shape) <= numel(), "slice of {} out of range", name_);
  Tensor t = *this;
  t.offset_bytes_ += static_cast<size_t>(offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  if (!name.empty()) t.name_ = std::move(name);
  return t;
}

Tensor Tensor::adjacent(const std::vector<Tensor>& parts, Shape shape, std::string name) {
  if (parts.empty() || !parts.front().defined()) return Tensor();
  const Tensor& first = parts.front();
  size_t end = first.offset_bytes_;
  int64_t count = 0;
  for (const Tensor& p : parts) {
    if (!p.defined() || p.storage_ != first.storage_ || p.dtype_ != first.dtype_ || p.offset_bytes_ != end)
      return Tensor();
    end += p.nbytes();
    count += p.numel();
  }
  if (count != shape_numel(shape)) return Tensor();
  Tensor t = first;
  t.shape_ = std::move(shape);
  t.name_ = std::move(name);
  return t;
}

void* Tensor::raw() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

}  // namespace anatomy
