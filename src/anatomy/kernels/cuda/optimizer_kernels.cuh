// optimizer_kernels.cuh: the CUDA backend's SGD, Adafactor and 8-bit AdamW
// (semantics in backend.h; each tested against kernels/cpu/optimizer_kernels.h).
// Implemented in sgd.cu, adafactor.cu and adamw_8bit.cu. Work is queued on
// `stream`; `scratch` holds cuda::adafactor_scratch_bytes(param.numel()) bytes.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "anatomy/kernels/backend.h"

namespace anatomy::cuda {

void sgd_step_flat(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                   const std::vector<ParamSegment>& segments, const SgdHyper& hyper, const Tensor* half_copy);
void adafactor_step(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& row_state,
                    const Tensor& col_state, const Tensor& v_state, const AdafactorHyper& hyper,
                    const Tensor* half_copy, void* scratch);
void adamw8bit_step(cudaStream_t stream, const Tensor& param, const Tensor& grad, const Tensor& state1,
                    const Tensor& state2, const Tensor& absmax1, const Tensor& absmax2, const Tensor& qmap1,
                    const Tensor& qmap2, const AdamWHyper& hyper, const Tensor* half_copy);

}  // namespace anatomy::cuda
