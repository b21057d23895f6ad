// gemm_tuning_cache.cpp: reading and writing gemm_algos.json.
#include "anatomy/kernels/gemm_tuning_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy::cuda {

namespace {

constexpr int kFormat = 1;
// No heuristic list is this long; a larger index is damage, not a choice.
constexpr int64_t kMaxIndex = 1 << 16;

}  // namespace

std::string gemm_tuning_cache_path() { return io::user_cache_file("gemm_algos.json"); }

std::optional<GemmChoices> parse_gemm_choices(std::string_view text, std::string* why) {
  const auto refuse = [&](std::string reason) -> std::optional<GemmChoices> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  nlohmann::json j;
  try {
    j = io::parse_json(text, "cache");
  } catch (const Error& e) {
    return refuse(e.what());
  }
  if (!j.is_object()) return refuse("not a JSON object");
  if (!j.contains("format") || !j["format"].is_number_integer() || j["format"].get<int64_t>() != kFormat)
    return refuse(fmt::format("no \"format\": {}", kFormat));
  if (!j.contains("choices") || !j["choices"].is_object()) return refuse("no \"choices\" object");
  GemmChoices out;
  for (const auto& [key, index] : j["choices"].items()) {
    if (!index.is_number_integer() || index.get<int64_t>() < 0 || index.get<int64_t>() > kMaxIndex)
      return refuse(fmt::format("choice \"{}\" is not an algorithm index", key));
    out[key] = static_cast<int>(index.get<int64_t>());
  }
  return out;
}

std::string serialise_gemm_choices(const GemmChoices& choices) {
  nlohmann::json j = {{"format", kFormat}, {"choices", nlohmann::json::object()}};
  for (const auto& [key, index] : choices) j["choices"][key] = index;
  return j.dump(1) + "\n";
}

GemmChoices load_gemm_choices(const std::string& path, bool warn) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  std::string problem;  // names the file
  try {
    std::string why;
    if (auto choices = parse_gemm_choices(io::read_text_file(path), &why)) return *std::move(choices);
    problem = path + ": " + why;
  } catch (const Error& e) {
    problem = e.what();
  }
  std::replace(problem.begin(), problem.end(), '\n', ' ');  // JSON's message may quote the damaged text
  if (warn)
    std::fprintf(stderr, "warning: %s; ignoring it (the matrix products are timed again and the file rewritten)\n",
                 problem.c_str());
  return {};
}

int record_gemm_choice(const std::string& path, const std::string& key, int index, int candidates, bool* stored) {
  *stored = false;
  // flock locks an open file description, so it orders the backends of one
  // process (tests make several) as well as other processes; the mutex is for
  // when the lock file cannot be made, as io::AtomicFile's temp name is per
  // process, not per thread.
  static std::mutex writing;
  const std::lock_guard<std::mutex> lock(writing);
  try {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::string lock_path = path + ".lock";
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::flock(fd, LOCK_EX);
    struct Unlock {
      int fd;
      ~Unlock() {
        if (fd >= 0) ::close(fd);  // releases the lock
      }
    } unlock{fd};
    GemmChoices choices = load_gemm_choices(path, /*warn=*/false);
    if (const auto found = choices.find(key); found != choices.end() && found->second < candidates) {
      *stored = true;
      return found->second;
    }
    choices[key] = index;
    io::write_text_file_atomic(path, serialise_gemm_choices(choices));
    *stored = true;
  } catch (const std::exception&) {
    // Unwritable: the choice holds for this run only.
  }
  return index;
}

}  // namespace anatomy::cuda
