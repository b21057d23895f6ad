// quantize_8bit.h: the rounding step of bitsandbytes' block-wise 8-bit
// optimizer states, one definition for the CPU reference and the CUDA kernel
// (host and device), so both backends pick the same byte for the same float.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define ANATOMY_QUANTIZE_FN __host__ __device__ __forceinline__
#else
#define ANATOMY_QUANTIZE_FN inline
#endif

namespace anatomy {

constexpr int kQuantizationMapSize = 256;

// The index of the entry of the ascending `map` nearest to x, the lower of two
// as near (the first minimum, as torch.argmin over |x - map| in bitsandbytes'
// reference; x outside the map takes its end). Distances are float
// differences, the same operations on either backend.
ANATOMY_QUANTIZE_FN uint8_t nearest_map_index(const float* map, float x) {
  int lo = 0, hi = kQuantizationMapSize;  // the first entry >= x is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (map[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return 0;
  if (lo == kQuantizationMapSize) return kQuantizationMapSize - 1;
  return static_cast<uint8_t>((x - map[lo - 1]) <= (map[lo] - x) ? lo - 1 : lo);
}

// A state's value scaled into the map's range by its block's absmax; a block
// of zeros has absmax 0 and every value 0, which stays 0 (not 0/0).
ANATOMY_QUANTIZE_FN float scale_to_map(float value, float absmax) { return absmax > 0.0f ? value / absmax : 0.0f; }

}  // namespace anatomy
