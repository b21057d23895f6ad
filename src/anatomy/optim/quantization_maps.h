// quantization_maps.h: the 256-entry maps of bitsandbytes' 8-bit optimizers,
// computed as its functional.create_dynamic_map(signed, max_exponent_bits=7,
// total_bits=8): the first moment's (signed, -0.99296875 .. 1, with 0) and the
// second's (unsigned, 0 .. 1). Sorted ascending; a state byte is an index here.
#pragma once

#include <array>

namespace anatomy {

using QuantizationMap = std::array<float, 256>;

// Dettmers' dynamic data type: per decimal exponent 10^-6 .. 10^0, the
// midpoints of an even split of [0.1, 1] (2^i of them for the signed map, and
// their negatives; 2^(i+1) for the unsigned one), plus 0 and 1. Every
// operation rounds to float32 where PyTorch's does, so the entries are
// bitsandbytes' to the bit (tests/fixtures/optim/dynamic_maps.txt).
QuantizationMap dynamic_quantization_map(bool is_signed);

}  // namespace anatomy
