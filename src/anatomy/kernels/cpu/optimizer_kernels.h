// optimizer_kernels.h: the CPU backend's SGD, Adafactor and 8-bit AdamW, the
// readable references the CUDA kernels are tested against (semantics in
// backend.h). Each lives in its own file: sgd.cpp, adafactor.cpp, adamw_8bit.cpp.
#pragma once

#include <vector>

#include "anatomy/kernels/backend.h"

namespace anatomy::cpu {

void sgd_step_flat(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                   const std::vector<ParamSegment>& segments, const SgdHyper& hyper, const Tensor* half_copy);
void adafactor_step(const Tensor& param, const Tensor& grad, const Tensor& row_state, const Tensor& col_state,
                    const Tensor& v_state, const AdafactorHyper& hyper, const Tensor* half_copy);
void adamw8bit_step(const Tensor& param, const Tensor& grad, const Tensor& state1, const Tensor& state2,
                    const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1, const Tensor& qmap2,
                    const AdamWHyper& hyper, const Tensor* half_copy);

}  // namespace anatomy::cpu
