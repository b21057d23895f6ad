// tensor.h: a typed, shaped view of ledger-owned memory. Tensors share their
// Storage; a view (slice or reshape) costs nothing and keeps the storage alive.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/core/error.h"
#include "anatomy/core/ledger.h"

namespace anatomy {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised memory of the given shape, allocated through `ledger`.
  static Tensor empty(Ledger& ledger, Shape shape, DType dtype, Category category, std::string name);
  // Zero-filled (host memory only; device backends zero through their ops).
  static Tensor zeros(Ledger& ledger, Shape shape, DType dtype, Category category, std::string name);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const;
  Category category() const;
  const std::string& name() const { return name_; }

  // The same memory with another shape of equal element count.
  Tensor reshape(Shape shape) const;
  // `count`... elements starting at element `offset` of this (contiguous) tensor, with `shape`.
  Tensor slice(int64_t offset, Shape shape, std::string name = {}) const;

  // One view of `shape` over `parts` when they lie one right after another in
  // one storage, in this order, with one dtype and as many elements as `shape`
  // in all (query, key and value weights laid out together); an undefined
  // tensor otherwise.
  static Tensor adjacent(const std::vector<Tensor>& parts, Shape shape, std::string name);

  void* raw() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
  std::string name_;
};

}  // namespace anatomy
