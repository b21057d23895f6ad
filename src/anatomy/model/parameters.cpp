// parameters.cpp: parameter names, shapes and the flat layout.
#include "anatomy/model/parameters.h"

#include <fmt/format.h>

#include <algorithm>

#include "anatomy/core/hash.h"

namespace anatomy {

namespace {
// Each tensor starts on a 64-element boundary (256 bytes in fp32) so that vector
// loads on any backend stay aligned; the padding is counted by the ledger.
constexpr int64_t kAlignElements = 64;
int64_t align_up(int64_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }
}  // namespace

std::string parameter_layout_id(const ParameterSet& set) {
  std::string text = fmt::format("{}", set.flat_elements());
  for (const ParamSpec& spec : set.specs())
    text += fmt::format(";{}@{}+{}", spec.name, set.offset_of(spec.name), shape_numel(spec.shape));
  return fmt::format("{:016x}", fnv1a64(text));
}

ParameterSet::ParameterSet(Backend& backend, std::vector<ParamSpec> specs, Category category,
                           const std::string& prefix, DType dtype)
    : specs_(std::move(specs)), category_(category), prefix_(prefix), dtype_(dtype) {
  // The layout order: by slot, or by place in the list when no spec has one
  // (a part of a list keeps its slots, so only their order counts).
  const size_t n = specs_.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) {
    order[i] = i;
    ANATOMY_CHECK((specs_[i].slot < 0) == (specs_.front().slot < 0), "parameter layout: {} has {} slot, {} {}",
                  specs_[i].name, specs_[i].slot < 0 ? "no" : "a", specs_.front().name,
                  specs_[i].slot < 0 ? "has one" : "none");
  }
  if (n > 0 && specs_.front().slot >= 0) {
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return specs_[a].slot < specs_[b].slot; });
    for (size_t i = 0; i + 1 < n; ++i)
      ANATOMY_CHECK(specs_[order[i]].slot != specs_[order[i + 1]].slot, "parameter layout: {} and {} share slot {}",
                    specs_[order[i]].name, specs_[order[i + 1]].name, specs_[order[i]].slot);
  }
  offsets_.assign(n, 0);
  int64_t total = 0;
  for (size_t i : order) {
    offsets_[i] = total;
    total += align_up(shape_numel(specs_[i].shape));
  }
  for (size_t i = 0; i < n; ++i) index_[specs_[i].name] = i;
  total_ = total;
  allocate(backend);
}

void ParameterSet::allocate(Backend& backend) {
  flat_ = Tensor::empty(backend.ledger(), {total_}, dtype_, category_, prefix_ + "flat");
  backend.zero(flat_);
  bind_views();
}

void ParameterSet::bind_views() {
  tensors_.clear();
  for (size_t i = 0; i < specs_.size(); ++i) tensors_.push_back(flat_.slice(offsets_[i], specs_[i].shape, prefix_ + specs_[i].name));
}

void ParameterSet::release() {
  flat_ = Tensor();
  tensors_.assign(specs_.size(), Tensor());
}

const ParamSpec& ParameterSet::spec(const std::string& name) const {
  auto it = index_.find(name);
  ANATOMY_CHECK(it != index_.end(), "no parameter named {}", name);
  return specs_[it->second];
}

const Tensor& ParameterSet::get(const std::string& name) const {
  auto it = index_.find(name);
  ANATOMY_CHECK(it != index_.end(), "no parameter named {}", name);
  return tensors_[it->second];
}

int64_t ParameterSet::offset_of(const std::string& name) const {
  auto it = index_.find(name);
  ANATOMY_CHECK(it != index_.end(), "no parameter named {}", name);
  return offsets_[it->second];
}

int64_t ParameterSet::parameter_count() const {
  int64_t n = 0;
  for (const auto& s : specs_) n += shape_numel(s.shape);
  return n;
}

}  // namespace anatomy
