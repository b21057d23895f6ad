// ceilings.h: what this device can do at best, measured: a matrix product's
// FLOP rate (in the dtype the run computes in) and a device-to-device copy's
// bandwidth (bytes read + written per second). The profiler reports each
// class of operation as a fraction of these. Measured once per device and
// dtype, through the backend's own ops and markers, and cached in
// $XDG_CACHE_HOME/anatomy/ceilings.json (~/.cache when unset).
#pragma once

#include <optional>
#include <string>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/fp32_products.h"

namespace anatomy {

struct Ceilings {
  std::string device;        // e.g. "NVIDIA H100 80GB HBM3" or "cpu"
  std::string matmul_dtype;  // "float32", "tf32", "split-tf32", "bf16", "fp16"
  double matmul_tflops = 0.0;
  double copy_gbps = 0.0;
  int64_t matmul_size = 0;   // the square product measured (M = N = K)
  int64_t copy_bytes = 0;    // the buffer copied
};

// The cached figures for (device, dtype), or measured now (and cached).
// `fp32_products` says how the backend runs float32 products (it labels a
// float32 ceiling). Buffers come from the ledger (temporary) and are released
// before returning; the backend's scratch is the caller's to release.
Ceilings device_ceilings(Backend& backend, const std::string& device_name, DType matmul_dtype,
                         Fp32Products fp32_products);

// Measures without the cache: the best of `reps` runs of a size x size x size
// product and of a copy of copy_bytes bytes.
Ceilings measure_ceilings(Backend& backend, const std::string& device_name, DType matmul_dtype,
                          Fp32Products fp32_products, int64_t size, int64_t copy_bytes, int reps);

std::string ceilings_cache_path();

}  // namespace anatomy
