// hf_cache.cpp: the hub cache's location and a cached model's snapshot.
#include "anatomy/io/hf_cache.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "anatomy/core/error.h"
#include "anatomy/io/files.h"

namespace anatomy::io {

namespace fs = std::filesystem;

namespace {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

// os.path.expanduser of a leading "~" or "~/".
std::string expand_user(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  const std::string home = env("HOME").value_or("/");
  return home + path.substr(1);
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(static_cast<unsigned char>(c)); });
}

bool valid_part(const std::string& part) {
  if (part.empty() || part.size() > 96) return false;
  if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.') return false;
  if (part.find("--") != std::string::npos || part.find("..") != std::string::npos) return false;
  return std::all_of(part.begin(), part.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// A ref's name as a path below refs/: parts of letters, digits, '-', '_' and '.'.
bool valid_ref(const std::string& ref) {
  size_t start = 0;
  for (;;) {
    const size_t slash = ref.find('/', start);
    const std::string part = ref.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part == "." || part == ".." ||
        !std::all_of(part.begin(), part.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        }))
      return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (is_directory(it->path().string())) out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (auto v = env("HF_HUB_CACHE")) return expand_user(*v);
  if (auto v = env("HUGGINGFACE_HUB_CACHE")) return expand_user(*v);
  if (auto v = env("HF_HOME")) return (fs::path(expand_user(*v)) / "hub").string();
  const std::string cache = env("XDG_CACHE_HOME").value_or((fs::path(env("HOME").value_or("/")) / ".cache").string());
  return (fs::path(expand_user(cache)) / "huggingface" / "hub").string();
}

bool is_hub_model_id(const std::string& spec) {
  const size_t slash = spec.find('/');
  if (slash == std::string::npos) return valid_part(spec);
  if (spec.find('/', slash + 1) != std::string::npos) return false;
  return valid_part(spec.substr(0, slash)) && valid_part(spec.substr(slash + 1));
}

std::optional<CachedModel> find_cached_model(const std::string& id, const std::string& revision) {
  if (!is_hub_model_id(id)) return std::nullopt;
  std::string folder = "models--";  // huggingface_hub's repo_folder_name
  for (char c : id) folder += c == '/' ? std::string("--") : std::string(1, c);
  CachedModel model;
  model.repo_dir = (fs::path(hf_hub_cache_dir()) / folder).string();
  if (!is_directory(model.repo_dir)) return std::nullopt;

  if (is_commit_hash(revision)) {
    model.revision = revision;
  } else {
    // Quoted and escaped ({:?}): a revision from the command line may hold anything, a newline included.
    if (!valid_ref(revision)) fail("revision {:?}: not a branch, tag or commit name", revision);
    const std::string ref = (fs::path(model.repo_dir) / "refs" / revision).string();
    if (!path_exists(ref)) {
      const std::vector<std::string> snapshots = subdirectories((fs::path(model.repo_dir) / "snapshots").string());
      fail("{}: no refs/{} in the Hugging Face cache's folder of {} (snapshots: {}); give a snapshot's directory "
           "as --model",
           model.repo_dir, revision, id, snapshots.empty() ? "none" : fmt::format("{}", fmt::join(snapshots, ", ")));
    }
    std::string commit = read_text_file(ref);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
    if (!is_commit_hash(commit)) fail("{}: does not hold a commit hash", ref);
    model.revision = commit;
  }
  model.snapshot = (fs::path(model.repo_dir) / "snapshots" / model.revision).string();
  if (!is_directory(model.snapshot))
    fail("{}: the snapshot of {} at {} is not in the Hugging Face cache (an interrupted download?)", model.snapshot,
         id, revision);
  if (!path_exists((fs::path(model.snapshot) / "config.json").string()))
    fail("{}: no config.json in the Hugging Face cache's snapshot of {} (an incomplete download?)", model.snapshot, id);
  return model;
}

}  // namespace anatomy::io
