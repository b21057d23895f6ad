// files.h: small file helpers shared by the readers and writers: reading a
// whole file with an error that names it, and writing a file atomically
// (temp file + rename) so that a failure never leaves a half-written file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace anatomy::io {

// What is at `path`, following symbolic links: nothing, a directory, or
// something else (a file). What the system cannot tell, a loop of symbolic
// links or a directory without permission, is an error "<path>: <reason>",
// not "missing".
enum class PathKind { Missing, Directory, Other };
PathKind path_kind(const std::string& path);
inline bool path_exists(const std::string& path) { return path_kind(path) != PathKind::Missing; }
inline bool is_directory(const std::string& path) { return path_kind(path) == PathKind::Directory; }

// Makes `dir`'s entries durable (fsync of the directory): after a rename into
// it, a crash cannot bring the old entry back. Error "<dir>: ..." on failure;
// a file system that cannot sync directories (EINVAL) is left as it is.
void sync_directory(const std::string& dir);

// The size and a 64-bit hash of a file's bytes (FNV-1a over 8-byte words,
// then the tail: fast, stable, not cryptographic), for the manifest that
// lets a resume tell a damaged checkpoint file from a whole one.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t hash = 0;
};
FileDigest digest_file(const std::string& path);

// The whole file as bytes. Error "<path>: ..." when it is missing or unreadable.
std::vector<uint8_t> read_file_bytes(const std::string& path);
// The whole file as text (same errors).
std::string read_text_file(const std::string& path);

// Writes to "<path>.tmp.<pid>" and renames it onto `path` on commit(). Destroyed
// without commit() (an exception, an early return), it removes the temp file, so
// `path` keeps its old content or stays absent.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // Error naming the temp file if it cannot be created
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes, syncs, renames onto path() and syncs its directory; the object is then spent.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

// Writes `text` to `path` through an AtomicFile.
void write_text_file_atomic(const std::string& path, std::string_view text);

// The path of this program's cache file `name`: $XDG_CACHE_HOME/anatomy/name,
// ~/.cache/anatomy/name when XDG_CACHE_HOME is unset or empty (/tmp/.cache/...
// without HOME either). Nothing is created.
std::string user_cache_file(const std::string& name);

}  // namespace anatomy::io
