// cli_error_util.h: helpers for the bad-input tests (test_errors.cpp,
// test_config.cpp): writable copies of fixtures with one thing broken, small
// safetensors files, and the check that a command failed the way the project
// rule demands: a non-zero exit without a crash, exactly one "error:" line
// that names the file, tensor or flag at fault, and nothing half-written.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/io/safetensors.h"
#include "test_util.h"

namespace anatomy::test {

namespace errfs = std::filesystem;

inline std::string read_all_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_all_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Copies config.json and model.safetensors of fixture `name` into tmp/<as>,
// writable (the fixtures are read-only), and returns the directory.
inline std::string copy_fixture(const TempDir& tmp, const std::string& name, const std::string& as = "model") {
  const errfs::path dir = tmp.path() / as;
  errfs::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors"}) {
    const errfs::path to = dir / file;
    errfs::copy_file(errfs::path(fixture(name)) / file, to, errfs::copy_options::overwrite_existing);
    errfs::permissions(to, errfs::perms::owner_read | errfs::perms::owner_write, errfs::perm_options::add);
  }
  return dir.string();
}

// An int64 tensor to write.
struct I64Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> values;
};

inline void write_i64_tensors(const std::string& path, const std::vector<I64Tensor>& tensors) {
  std::vector<io::StWriteTensor> out;
  for (const I64Tensor& t : tensors)
    out.push_back({t.name, io::StDType::I64, t.shape, t.values.empty() ? nullptr : t.values.data()});
  io::write_safetensors(path, out);
}

// Rewrites the JSON header of a safetensors file through `edit`, keeping its data buffer.
inline void edit_safetensors_header(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = read_all_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t m = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &m, 8);
  write_all_bytes(path, out + text + bytes.substr(8 + n));
}

// Rewrites a safetensors file keeping only the tensors for which `keep` is true
// (raw bytes and dtypes as they were).
inline void filter_safetensors(const std::string& from, const std::string& to,
                               const std::function<bool(const std::string&)>& keep) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(from);
  std::vector<io::StWriteTensor> out;
  for (const std::string& name : file.names()) {
    if (!keep(name)) continue;
    const io::StTensorInfo& info = file.info(name);
    out.push_back({name, info.dtype, info.shape, file.raw(name).data()});
  }
  io::write_safetensors(to, out);
}

inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The line of `output` holding "error:" (empty if none).
inline std::string error_line(const std::string& output) {
  const size_t at = output.find("error:");
  if (at == std::string::npos) return {};
  const size_t begin = output.rfind('\n', at);
  const size_t start = begin == std::string::npos ? 0 : begin + 1;
  const size_t end = output.find('\n', at);
  return output.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// The command failed cleanly: non-zero exit, no signal (run_anatomy gives -1,
// a shell reports 128 + signal), exactly one "error:" in the output, on a line
// of its own that starts with it, is short enough to read, is no internal
// check, and names every one of `names`.
inline ::testing::AssertionResult failed_cleanly(const CommandResult& r, std::initializer_list<std::string> names) {
  auto fail = [&](const std::string& why) {
    return ::testing::AssertionFailure() << why << "\nexit code: " << r.exit_code << "\noutput:\n" << r.output;
  };
  if (r.exit_code == -1 || r.exit_code >= 128) return fail("the command crashed (killed by a signal)");
  if (r.exit_code == 0) return fail("the command succeeded on bad input");
  const size_t errors = count_of(r.output, "error:");
  if (errors != 1) return fail("expected \"error:\" exactly once, found it " + std::to_string(errors) + " times");
  const std::string line = error_line(r.output);
  if (line.rfind("error: ", 0) != 0) return fail("the error line does not start with \"error: \": " + line);
  if (line.find("internal check failed") != std::string::npos) return fail("an internal check, not a clear error");
  if (line.size() > 400) return fail("the error line is " + std::to_string(line.size()) + " characters long");
  for (const std::string& name : names)
    if (line.find(name) == std::string::npos) return fail("the error line does not name '" + name + "'");
  return ::testing::AssertionSuccess();
}

// Nothing was written at `path`: no file or directory, and no temp file of an atomic write beside it.
inline ::testing::AssertionResult nothing_at(const std::string& path) {
  std::error_code ec;
  if (errfs::exists(path, ec)) {
    std::string what = path;
    if (errfs::is_directory(path, ec))
      for (const auto& entry : errfs::directory_iterator(path, ec)) what += "\n  " + entry.path().filename().string();
    return ::testing::AssertionFailure() << "left behind: " << what;
  }
  const errfs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  for (const auto& entry : errfs::directory_iterator(p.parent_path(), ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0)
      return ::testing::AssertionFailure() << "temp file left behind: " << entry.path().string();
  return ::testing::AssertionSuccess();
}

// A valid training file for the bert-tiny fixtures (vocab 1024, 2 labels, 64
// positions): 4 examples of 8 tokens. Tests break one tensor of it.
inline std::vector<I64Tensor> valid_train_tensors(int64_t n = 4, int64_t len = 8) {
  I64Tensor ids{"input_ids", {n, len}, {}}, types{"token_type_ids", {n, len}, {}}, mask{"attention_mask", {n, len}, {}};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < len; ++j) {
      ids.values.push_back(1 + (i * 37 + j * 13) % 1000);
      types.values.push_back(j >= len / 2 ? 1 : 0);
      mask.values.push_back(j < len - i % 2 ? 1 : 0);
    }
  I64Tensor labels{"labels", {n}, {}};
  for (int64_t i = 0; i < n; ++i) labels.values.push_back(i % 2);
  return {ids, types, mask, labels};
}

inline I64Tensor& tensor_named(std::vector<I64Tensor>& tensors, const std::string& name) {
  for (I64Tensor& t : tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

}  // namespace anatomy::test
