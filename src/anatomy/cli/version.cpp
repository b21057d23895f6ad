// version.cpp: `anatomy --version`: the program, its backends and the
// versions of the libraries built in.
#include "anatomy/cli/commands.h"

#include <cblas.h>
#include <pcre2.h>

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#ifdef ANATOMY_HAVE_CUDA
#include "anatomy/kernels/cuda/library_versions.h"
#endif

namespace anatomy::cli {

std::string version_text() {
  std::string out = "anatomy 0.1.0\n";
#ifdef ANATOMY_HAVE_CUDA
  out += "backends: CPU, CUDA\n";
  for (const auto& [name, version] : cuda::library_versions()) out += fmt::format("  {}: {}\n", name, version);
#else
  out += "backends: CPU only (built without CUDA)\n";
#endif
  // openblas_get_config(): "OpenBLAS 0.3.21 NO_AFFINITY ..." (the library linked, not the header's).
  std::string blas = openblas_get_config();
  while (!blas.empty() && blas.back() == ' ') blas.pop_back();
  out += fmt::format("  BLAS: {}\n", blas);
  char pcre[64] = {};
  pcre2_config(PCRE2_CONFIG_VERSION, pcre);
  out += fmt::format("  PCRE2: {}\n", pcre);
  out += fmt::format("  nlohmann-json {}.{}.{}, fmt {}.{}.{}\n", NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR,
                     NLOHMANN_JSON_VERSION_PATCH, FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100);
  if (!out.empty() && out.back() == '\n') out.pop_back();  // CLI11 ends the line
  return out;
}

}  // namespace anatomy::cli
