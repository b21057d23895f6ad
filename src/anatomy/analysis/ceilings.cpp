// ceilings.cpp: the matrix-product and copy microbenchmarks, and their cache.
#include "anatomy/analysis/ceilings.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy {

namespace {

std::string dtype_label(DType t, Fp32Products products) {
  if (t == DType::F32) return std::string(fp32_products_label(products));
  return t == DType::BF16 ? "bf16" : "fp16";
}

std::string cache_key(const std::string& device, const std::string& dtype) { return device + " / " + dtype; }

}  // namespace

std::string ceilings_cache_path() { return io::user_cache_file("ceilings.json"); }

Ceilings measure_ceilings(Backend& backend, const std::string& device_name, DType dtype, Fp32Products products,
                          int64_t size, int64_t copy_bytes, int reps) {
  Ledger& ledger = backend.ledger();
  Ceilings c;
  c.device = device_name;
  c.matmul_dtype = dtype_label(dtype, products);
  c.matmul_size = size;
  c.copy_bytes = copy_bytes;
  {
    // Products of zeros: the time does not depend on the values.
    Tensor a = Tensor::empty(ledger, {size, size}, dtype, Category::Temporary, "ceiling_a");
    Tensor b = Tensor::empty(ledger, {size, size}, dtype, Category::Temporary, "ceiling_b");
    Tensor y = Tensor::empty(ledger, {size, size}, dtype, Category::Temporary, "ceiling_y");
    backend.zero(a);
    backend.zero(b);
    backend.linear_forward(a, b, nullptr, y);  // warm-up (and the library's plan)
    backend.clear_markers();
    double best = 1e300;
    for (int r = 0; r < reps; ++r) {
      const int64_t m0 = backend.record_marker();
      backend.linear_forward(a, b, nullptr, y);
      const int64_t m1 = backend.record_marker();
      best = std::min(best, backend.marker_elapsed_ms(m0, m1));
    }
    const double s = static_cast<double>(size);
    c.matmul_tflops = 2.0 * s * s * s / (std::max(best, 1e-6) * 1e9);
  }
  {
    const int64_t n = copy_bytes / 4;
    Tensor src = Tensor::empty(ledger, {n}, DType::F32, Category::Temporary, "ceiling_src");
    Tensor dst = Tensor::empty(ledger, {n}, DType::F32, Category::Temporary, "ceiling_dst");
    backend.zero(src);
    backend.copy(dst, src);
    backend.clear_markers();
    double best = 1e300;
    for (int r = 0; r < reps; ++r) {
      const int64_t m0 = backend.record_marker();
      backend.copy(dst, src);
      const int64_t m1 = backend.record_marker();
      best = std::min(best, backend.marker_elapsed_ms(m0, m1));
    }
    c.copy_gbps = 2.0 * static_cast<double>(n * 4) / (std::max(best, 1e-6) * 1e6);  // read + write
  }
  backend.clear_markers();
  return c;
}

Ceilings device_ceilings(Backend& backend, const std::string& device_name, DType dtype, Fp32Products products) {
  const std::string path = ceilings_cache_path();
  const std::string key = cache_key(device_name, dtype_label(dtype, products));
  nlohmann::json cache = nlohmann::json::object();
  {
    std::ifstream in(path);
    if (in) {
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      try {
        cache = io::parse_json(text, path);
      } catch (const Error&) {
        cache = nlohmann::json::object();  // a damaged cache is measured again and rewritten
      }
    }
  }
  if (cache.is_object() && cache.contains(key)) {
    const auto& e = cache[key];
    if (e.contains("matmul_tflops") && e.contains("copy_gbps") && e["matmul_tflops"].is_number() &&
        e["copy_gbps"].is_number()) {
      Ceilings c;
      c.device = device_name;
      c.matmul_dtype = dtype_label(dtype, products);
      c.matmul_tflops = e["matmul_tflops"];
      c.copy_gbps = e["copy_gbps"];
      c.matmul_size = e.value("matmul_size", int64_t{0});
      c.copy_bytes = e.value("copy_bytes", int64_t{0});
      return c;
    }
  }
  // A GPU gets a 4096-cube product (8192 in 16 bits) and a 256 MiB copy; a CPU small ones.
  const bool gpu = !backend.device().is_cpu();
  const int64_t size = gpu ? (dtype == DType::F32 ? 4096 : 8192) : 512;
  const int64_t bytes = gpu ? (int64_t{256} << 20) : (int64_t{64} << 20);
  const Ceilings c = measure_ceilings(backend, device_name, dtype, products, size, bytes, gpu ? 10 : 3);
  if (!cache.is_object()) cache = nlohmann::json::object();
  cache[key] = {{"matmul_tflops", c.matmul_tflops},
                {"copy_gbps", c.copy_gbps},
                {"matmul_size", c.matmul_size},
                {"copy_bytes", c.copy_bytes}};
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  try {
    io::write_text_file_atomic(path, cache.dump(1) + "\n");
  } catch (const Error&) {
    // An unwritable cache only means measuring again next time.
  }
  return c;
}

}  // namespace anatomy
