// facts.cpp: the table behind facts.h. Names are matched by substring, the
// most specific first (an "H100 PCIe" is not an H100 SXM).
#include "anatomy/gpu/facts.h"

#include <utility>

namespace anatomy::gpu {

std::optional<double> dense_bf16_peak_tflops(const std::string& name) {
  static const std::pair<const char*, double> kPeaks[] = {
      {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.4}, {"H200", 989.4}, {"H20", 148.0},
      {"GH200", 989.4},     {"B200", 2250.0},     {"A100", 312.0}, {"A800", 312.0}, {"A30", 165.0},
      {"A10G", 70.0},       {"A10", 125.0},       {"L40S", 362.0}, {"L40", 181.0},  {"L4", 121.0},
      {"V100", 125.0},      {"T4", 65.0},
  };
  for (const auto& [key, tflops] : kPeaks)
    if (name.find(key) != std::string::npos) return tflops;
  return std::nullopt;
}

}  // namespace anatomy::gpu
