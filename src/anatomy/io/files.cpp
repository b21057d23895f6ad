// files.cpp: whole-file reads and atomic (temp + rename) writes.
#include "anatomy/io/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "anatomy/core/error.h"

namespace anatomy::io {

namespace {

// Reads all of `path` into a container of bytes (std::string or std::vector<uint8_t>).
template <typename Buffer>
Buffer read_all(const std::string& path) {
  // fopen succeeds on a directory on Linux; say what is wrong instead of a read error.
  if (is_directory(path)) fail("{}: is a directory, expected a file", path);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  Buffer out;
  char chunk[1 << 16];
  // Reserve from the size when it is known; read until EOF anyway, so a file that
  // changes size while being read is still read consistently.
  if (std::fseek(f, 0, SEEK_END) == 0) {
    long size = std::ftell(f);
    if (size > 0) out.reserve(static_cast<size_t>(size));
    std::rewind(f);
  }
  while (true) {
    size_t n = std::fread(chunk, 1, sizeof chunk, f);
    out.insert(out.end(), chunk, chunk + n);
    if (n < sizeof chunk) break;
  }
  bool failed = std::ferror(f) != 0;
  int saved_errno = errno;
  std::fclose(f);
  if (failed) fail("{}: read error: {}", path, std::strerror(saved_errno));
  return out;
}

}  // namespace

PathKind path_kind(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    fail("{}: {}", path, ec.message());
  if (ec || st.type() == std::filesystem::file_type::not_found) return PathKind::Missing;
  return st.type() == std::filesystem::file_type::directory ? PathKind::Directory : PathKind::Other;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("{}: cannot open the directory to sync it: {}", dir, std::strerror(errno));
  const int result = ::fsync(fd);
  const int saved_errno = errno;
  ::close(fd);
  if (result != 0 && saved_errno != EINVAL) fail("{}: cannot sync the directory: {}", dir, std::strerror(saved_errno));
}

FileDigest digest_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  FileDigest d;
  d.hash = 0xcbf29ce484222325ull;
  std::vector<unsigned char> chunk(size_t{1} << 20);
  while (true) {
    const size_t n = std::fread(chunk.data(), 1, chunk.size(), f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t word;
      std::memcpy(&word, chunk.data() + i, 8);
      d.hash = (d.hash ^ word) * 0x100000001b3ull;
    }
    for (; i < n; ++i) d.hash = (d.hash ^ chunk[i]) * 0x100000001b3ull;
    d.bytes += n;
    if (n < chunk.size()) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int saved_errno = errno;
  std::fclose(f);
  if (failed) fail("{}: read error: {}", path, std::strerror(saved_errno));
  return d;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) { return read_all<std::vector<uint8_t>>(path); }

std::string read_text_file(const std::string& path) { return read_all<std::string>(path); }

std::string user_cache_file(const std::string& name) {
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = xdg && *xdg ? fs::path(xdg) : fs::path(home && *home ? home : "/tmp") / ".cache";
  return (base / "anatomy" / name).string();
}

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp." + std::to_string(::getpid())) {
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) fail("{}: cannot create temp file {}: {}", path_, temp_path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  std::remove(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (!file_) fail("{}: write after commit or failure", path_);
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    int saved_errno = errno;
    discard();
    fail("{}: write error on {}: {}", path_, temp_path_, std::strerror(saved_errno));
  }
}

void AtomicFile::commit() {
  if (!file_) fail("{}: commit after commit or failure", path_);
  // Flush and sync before the rename, so that after a crash `path` holds either
  // the old file or the complete new one.
  int error = 0;
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) error = errno;
  if (std::fclose(file_) != 0 && error == 0) error = errno;
  file_ = nullptr;
  if (error != 0) {
    discard();
    fail("{}: write error on {}: {}", path_, temp_path_, std::strerror(error));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int saved_errno = errno;
    discard();
    fail("{}: cannot rename {} onto it: {}", path_, temp_path_, std::strerror(saved_errno));
  }
  committed_ = true;
  // The rename itself made durable.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  sync_directory(parent.empty() ? "." : parent.string());
}

void write_text_file_atomic(const std::string& path, std::string_view text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

}  // namespace anatomy::io
