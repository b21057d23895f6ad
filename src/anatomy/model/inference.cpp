// inference.cpp: packing a host batch for InferenceModel::forward.
#include "anatomy/model/inference.h"

#include "anatomy/core/error.h"

namespace anatomy {

InferenceBatch make_inference_batch(const std::vector<const int64_t*>& ids, const std::vector<const int64_t*>& types,
                                    const std::vector<int64_t>& lengths, int64_t pad_to) {
  ANATOMY_CHECK(ids.size() == lengths.size() && (types.empty() || types.size() == lengths.size()),
                "make_inference_batch: {} id rows, {} type rows, {} lengths", ids.size(), types.size(),
                lengths.size());
  InferenceBatch batch;
  batch.lengths = lengths;
  batch.padded_length = pad_to;
  batch.offsets.push_back(0);
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t len = lengths[b];
    ANATOMY_CHECK(len > 0 && (pad_to == 0 || len <= pad_to), "make_inference_batch: sequence {} has {} tokens", b,
                  len);
    const int64_t width = pad_to > 0 ? pad_to : len;
    for (int64_t t = 0; t < width; ++t) {
      batch.input_ids.push_back(t < len ? ids[b][t] : 0);
      if (!types.empty() && types[b] != nullptr) batch.token_type_ids.push_back(t < len ? types[b][t] : 0);
    }
    batch.offsets.push_back(batch.offsets.back() + width);
  }
  if (batch.token_type_ids.size() != batch.input_ids.size()) batch.token_type_ids.clear();
  return batch;
}

}  // namespace anatomy
