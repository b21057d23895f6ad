// activations.cpp: a layer's saved tensors, allocated from its declaration.
#include "anatomy/model/activations.h"

namespace anatomy {

SavedTensors::SavedTensors(Backend& backend, const std::vector<SavedSpec>& specs, Category category,
                           const std::string& prefix, const std::set<std::string>* kept) {
  for (const auto& s : specs) {
    const Category c = kept == nullptr || kept->count(s.name) != 0 ? category : Category::Temporary;
    tensors_.emplace(s.name, Tensor::empty(backend.ledger(), s.shape, s.dtype, c, prefix + s.name));
  }
}

void SavedTensors::keep_only(const std::set<std::string>& names) {
  for (const std::string& name : names) ANATOMY_CHECK(tensors_.count(name) != 0, "no saved tensor named {}", name);
  std::erase_if(tensors_, [&](const auto& entry) { return names.count(entry.first) == 0; });
}

void SavedTensors::absorb(SavedTensors&& other) {
  for (auto& [name, t] : other.tensors_) tensors_.insert_or_assign(name, std::move(t));
  other.tensors_.clear();
}

const Tensor& SavedTensors::operator[](const std::string& name) const {
  auto it = tensors_.find(name);
  ANATOMY_CHECK(it != tensors_.end(), "no saved tensor named {}", name);
  return it->second;
}

int64_t SavedTensors::bytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : tensors_) total += static_cast<int64_t>(t.nbytes());
  return total;
}

}  // namespace anatomy
