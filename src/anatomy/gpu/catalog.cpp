// catalog.cpp: the table behind catalog.h, and the byte-size parser.
//
// Where the figures come from:
// - total_bytes: nvidia-smi's "Total" (= NVML's total) with ECC on; the
//   marketed "80GB" is never all there. The H100's (81559 MiB) is read on the
//   H100 this project measures on; the others are the totals in nvidia-smi
//   printouts users of those GPUs publish, which agree across drivers to the
//   MiB (V100 16GB: 16160, V100 32GB: 32510, T4: 15360, A10G: 23028, L4: 23034,
//   A100: 40960 and 81920, H200: 143771, RTX 3090: 24576, RTX 4090: 24564).
// - reserved_bytes: NVML `used` with no process on the device. Measured on the
//   H100 and the H200 (driver 580.159.04, 2026-11-22: 480 and 615 MiB, what
//   nvidia-smi shows as "reserved"); for the others estimated as the H100's
//   share of the total (0.59%; the H200's is 0.43%, so expect +-30%).
// - context_bytes: measured on the H100 with training runs (see below) and
//   assumed equal on the H200; estimated for the other architectures, as
//   context_source says.
#include "anatomy/gpu/catalog.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

#include "anatomy/core/error.h"

namespace anatomy::gpu {

namespace {

constexpr int64_t MiB(int64_t n) { return n * 1024 * 1024; }

// NVML `used` with no process on the device (driver 580.159.04).
constexpr int64_t kMeasuredH100ReservedBytes = 503'316'480;  // 480 MiB
constexpr int64_t kMeasuredH200ReservedBytes = 644'939'776;  // 615 MiB
constexpr int64_t kH100TotalBytes = MiB(81559);  // 85520809984, as NVML reports it
// What NVML `used` grows by, beyond the pool's segments, once a process of
// this engine has made its CUDA context, cuBLAS handles and run its first
// training step (so every kernel it uses is loaded: kernels load lazily).
// Measured on an H100 80GB HBM3 (driver 580.159.04, 2026-11-22) with
// `anatomy train` for bert-base and bert-large in fp32, bf16 and fp16: NVML's
// per-process figure minus the pool was 590 MiB in every run, and the device's
// `used` grows 9 MiB more than the per-process figure (measured by
// tests/gpu/test_nvml_processes.cpp, which also found a bare context, before
// cuBLAS and kernels, at 526.8 MiB on both the H100 and the H200). The
// device's growth is what must fit, so 599 MiB is kept; the H200 is assumed
// equal, its bare context being equal.
constexpr int64_t kMeasuredH100ContextBytes = MiB(599);
constexpr int64_t kMeasuredH200ContextBytes = MiB(599);
// Estimates for the other architectures (unmeasured here: set below the
// Hopper figure, as smaller chips' contexts are smaller): to be replaced as
// each is measured.
constexpr int64_t kEstimatedA100ContextBytes = MiB(430);
constexpr int64_t kEstimatedAmpereConsumerContextBytes = MiB(350);  // GA102: A10G, RTX 3090
constexpr int64_t kEstimatedAdaContextBytes = MiB(370);             // AD10x: L4, RTX 4090
constexpr int64_t kEstimatedVoltaContextBytes = MiB(310);
constexpr int64_t kEstimatedTuringContextBytes = MiB(290);
// For a GPU the catalog does not know: about a Hopper context, so that an
// estimate errs towards not fitting.
constexpr int64_t kDefaultContextBytes = kMeasuredH100ContextBytes;

// The H100's measured reservation, as the same share of another GPU's total.
int64_t estimated_reserved(int64_t total) {
  return static_cast<int64_t>(static_cast<__int128>(total) * kMeasuredH100ReservedBytes / kH100TotalBytes);
}

struct Entry {
  GpuSpec spec;
  // NVML names that mean this GPU: any one list whose words all appear as
  // whole words of the name ("NVIDIA A100-SXM4-80GB" has a100, sxm4, 80gb).
  std::vector<std::vector<std::string>> name_words;
};

Entry entry(std::string key, std::string name, std::vector<std::string> aliases, int64_t total,
            int cc_major, int cc_minor, int64_t context, std::vector<std::vector<std::string>> words) {
  GpuSpec s;
  s.key = std::move(key);
  s.name = std::move(name);
  s.aliases = std::move(aliases);
  s.total_bytes = total;
  s.reserved_bytes = estimated_reserved(total);
  s.compute_capability_major = cc_major;
  s.compute_capability_minor = cc_minor;
  s.context_bytes = context;
  s.context_source = "estimated for this architecture; give --context-memory to change it";
  return {std::move(s), std::move(words)};
}

const std::vector<Entry>& catalog() {
  static const std::vector<Entry> table = [] {
    std::vector<Entry> t;
    t.push_back(entry("v100-16gb", "Tesla V100-SXM2-16GB", {}, MiB(16160), 7, 0, kEstimatedVoltaContextBytes,
                      {{"v100", "16gb"}}));
    t.push_back(entry("v100-32gb", "Tesla V100-SXM2-32GB", {}, MiB(32510), 7, 0, kEstimatedVoltaContextBytes,
                      {{"v100", "32gb"}, {"v100s", "32gb"}}));
    t.push_back(entry("t4", "Tesla T4", {}, MiB(15360), 7, 5, kEstimatedTuringContextBytes, {{"t4"}}));
    t.push_back(entry("rtx-3090", "NVIDIA GeForce RTX 3090", {"3090"}, MiB(24576), 8, 6,
                      kEstimatedAmpereConsumerContextBytes, {{"rtx", "3090"}}));
    t.push_back(entry("a10g", "NVIDIA A10G", {}, MiB(23028), 8, 6, kEstimatedAmpereConsumerContextBytes,
                      {{"a10g"}}));
    t.push_back(entry("a100-40gb", "NVIDIA A100-SXM4-40GB", {}, MiB(40960), 8, 0, kEstimatedA100ContextBytes,
                      {{"a100", "40gb"}}));
    t.push_back(entry("a100-80gb", "NVIDIA A100-SXM4-80GB", {}, MiB(81920), 8, 0, kEstimatedA100ContextBytes,
                      {{"a100", "80gb"}}));
    t.push_back(entry("l4", "NVIDIA L4", {}, MiB(23034), 8, 9, kEstimatedAdaContextBytes, {{"l4"}}));
    t.push_back(entry("rtx-4090", "NVIDIA GeForce RTX 4090", {"4090"}, MiB(24564), 8, 9,
                      kEstimatedAdaContextBytes, {{"rtx", "4090"}}));
    Entry h100 = entry("h100-80gb", "NVIDIA H100 80GB HBM3", {"h100", "h100-sxm"}, kH100TotalBytes, 9, 0,
                       kMeasuredH100ContextBytes, {{"h100", "80gb"}, {"h100", "hbm3"}});
    h100.spec.reserved_bytes = kMeasuredH100ReservedBytes;
    h100.spec.context_source = "measured on an NVIDIA H100 80GB HBM3 after a first training step";
    t.push_back(std::move(h100));
    Entry h100_pcie = entry("h100-pcie", "NVIDIA H100 PCIe", {}, MiB(81559), 9, 0, kMeasuredH100ContextBytes,
                            {{"h100", "pcie"}});
    h100_pcie.spec.context_source = "measured on an H100 SXM, assumed the same on the PCIe card";
    t.push_back(std::move(h100_pcie));
    Entry h200 = entry("h200", "NVIDIA H200", {"h200-141gb", "h200-sxm"}, MiB(143771), 9, 0,
                       kMeasuredH200ContextBytes, {{"h200"}});
    h200.spec.reserved_bytes = kMeasuredH200ReservedBytes;
    h200.spec.context_source = "the H100's figure; their bare contexts measured equal";
    t.push_back(std::move(h200));
    return t;
  }();
  return table;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "H100_80GB" -> "h10080gb": keys compared without case or separators.
std::string squeezed(std::string_view text) {
  std::string out;
  for (char c : text)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "NVIDIA A100-SXM4-80GB" -> {nvidia, a100, sxm4, 80gb}.
std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out(1);
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out.back() += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.back().empty())
      out.emplace_back();
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

}  // namespace

std::vector<GpuSpec> known_gpus() {
  std::vector<GpuSpec> specs;
  for (const Entry& e : catalog()) specs.push_back(e.spec);
  return specs;
}

const GpuSpec* find_gpu(std::string_view key_or_name) {
  const std::string key = squeezed(key_or_name);
  if (key.empty()) return nullptr;
  for (const Entry& e : catalog()) {
    if (squeezed(e.spec.key) == key) return &e.spec;
    for (const std::string& alias : e.spec.aliases)
      if (squeezed(alias) == key) return &e.spec;
  }
  const std::vector<std::string> given = words(key_or_name);
  auto has = [&](const std::string& w) { return std::find(given.begin(), given.end(), w) != given.end(); };
  for (const Entry& e : catalog())
    for (const auto& required : e.name_words)
      if (std::all_of(required.begin(), required.end(), has)) return &e.spec;
  return nullptr;
}

int64_t default_context_bytes() { return kDefaultContextBytes; }

int64_t default_nccl_bytes() { return int64_t{584} << 20; }

int64_t parse_byte_size(std::string_view text, std::string_view flag) {
  const std::string shown = flag.empty() ? "byte size '" + std::string(text) + "'"
                                         : std::string(flag) + " " + std::string(text);
  auto trimmed = text;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front()))) trimmed.remove_prefix(1);
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.remove_suffix(1);
  if (trimmed.empty()) fail("{}: empty; give a size such as 16GiB, 24GB or 80000MiB", shown);
  if (trimmed.front() == '-') fail("{}: a size cannot be negative", shown);

  // The number, kept exact as digits / 10^fraction_digits (no floating point:
  // "0.1GB" is exactly 100000000 bytes).
  constexpr int kMaxDigits = 24;  // keeps every product below 2^127
  unsigned __int128 digits = 0;
  int digit_count = 0, fraction_digits = 0;
  bool seen_point = false;
  size_t i = 0;
  for (; i < trimmed.size(); ++i) {
    const char c = trimmed[i];
    if (c == '.' && !seen_point) {
      seen_point = true;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      if (digit_count == 0 && c == '0' && !seen_point) continue;  // leading zeros add nothing
      if (++digit_count > kMaxDigits) fail("{}: too many digits", shown);
      digits = digits * 10 + static_cast<unsigned>(c - '0');
      fraction_digits += seen_point;
    } else {
      break;
    }
  }
  const std::string_view number = trimmed.substr(0, i);
  if (number.find_first_of("0123456789") == std::string_view::npos)
    fail("{}: not a number of bytes; give a size such as 16GiB, 24GB or 80000MiB", shown);

  std::string_view unit_text = trimmed.substr(i);
  while (!unit_text.empty() && std::isspace(static_cast<unsigned char>(unit_text.front()))) unit_text.remove_prefix(1);
  const std::string unit = lowercase(unit_text);
  struct Unit {
    const char* name;
    unsigned __int128 bytes;
  };
  constexpr unsigned __int128 K = 1000, Ki = 1024;
  static const Unit kUnits[] = {
      {"", 1},          {"b", 1},
      {"kb", K},        {"mb", K * K},          {"gb", K * K * K},          {"tb", K * K * K * K},
      {"kib", Ki},      {"mib", Ki * Ki},       {"gib", Ki * Ki * Ki},      {"tib", Ki * Ki * Ki * Ki},
      {"k", Ki},        {"m", Ki * Ki},         {"g", Ki * Ki * Ki},        {"t", Ki * Ki * Ki * Ki},
  };
  const Unit* found = nullptr;
  for (const Unit& u : kUnits)
    if (unit == u.name) found = &u;
  if (found == nullptr)
    fail("{}: unknown unit '{}' (use B; KB, MB, GB, TB for powers of 1000; KiB, MiB, GiB, TiB or K, M, G, T "
         "for powers of 1024)",
         shown, unit_text);

  unsigned __int128 scale = 1;
  for (int d = 0; d < fraction_digits; ++d) scale *= 10;
  // digits < 10^24 and bytes <= 2^40, so the product stays below 2^120.
  const unsigned __int128 bytes = (digits * found->bytes + scale / 2) / scale;
  if (bytes > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max()))
    fail("{}: too large (more than 2^63 - 1 bytes)", shown);
  return static_cast<int64_t>(bytes);
}

}  // namespace anatomy::gpu
