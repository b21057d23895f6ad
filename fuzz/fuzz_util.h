// fuzz_util.h: what every harness of fuzz/ shares.
//
// A harness feeds the fuzzer's bytes to one reader of outside bytes. The
// engine's answer to bad input is anatomy::Error with a one-line message, so
// that is the expected outcome; anything else fails the run: another exception
// (libFuzzer reports it as an uncaught exception), an Error from an internal
// check (bad input must be caught where it is read, not by an invariant deep
// inside), an empty or multi-line message, a crash, a sanitizer report, a
// leak, a hang (-timeout) or memory past -rss_limit_mb.
//
// ANATOMY_FUZZ_SHOW_ERRORS=1 in the environment prints every expected error,
// to see how far a seed gets.
//
// Readers that take a path get the bytes through a file in a directory of
// this process (/tmp/anatomy-fuzz-<pid>/, or $TMPDIR's), removed at exit.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "anatomy/core/error.h"

namespace anatomy::fuzz {

// The fuzzer's bytes as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// This process's scratch directory, made on first use and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                              ("anatomy-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    static const std::filesystem::path removed_at_exit = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed_at_exit, ec);
    });
    return d;
  }();
  return dir;
}

// A fresh subdirectory `name` of the scratch directory (emptied if it was there).
inline std::string fresh_dir(const std::string& name) {
  const std::filesystem::path d = scratch_dir() / name;
  std::error_code ec;
  std::filesystem::remove_all(d, ec);
  std::filesystem::create_directories(d);
  return d.string();
}

// Writes `bytes` to `path` (replacing it); aborts if it cannot.
inline void write_file(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// Writes `bytes` to the scratch directory's file `name` and returns its path.
inline std::string scratch_file(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  write_file(path, bytes);
  return path;
}

// The input cut at its first NUL byte: (before, after). A harness whose
// reader takes text reads `before` and, where the reader's result tokenizes
// text, tokenizes `after` too (JSON and vocab.txt never hold a raw NUL).
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view bytes) {
  const size_t nul = bytes.find('\0');
  if (nul == std::string_view::npos) return {bytes, {}};
  return {bytes.substr(0, nul), bytes.substr(nul + 1)};
}

// Runs `read`; an anatomy::Error with a one-line message that is not an
// internal check's is the expected answer to bad bytes and returns false
// (true when `read` returned). Anything else aborts: libFuzzer records the
// input as a crash.
template <typename F>
bool expect_error(F&& read) {
  try {
    read();
    return true;
  } catch (const anatomy::Error& e) {
    const std::string_view message = e.what();
    // ANATOMY_FUZZ_SHOW_ERRORS=1: every error, to see what a seed or a crash input reaches.
    static const bool show = std::getenv("ANATOMY_FUZZ_SHOW_ERRORS") != nullptr;
    if (show) std::fprintf(stderr, "anatomy fuzz: error: %s\n", e.what());
    // ANATOMY_CHECK's messages start so (the input's bytes may hold the words anywhere else).
    const bool internal = message.starts_with("internal check failed (");
    if (message.empty() || message.find('\n') != std::string_view::npos || internal) {
      std::fprintf(stderr, "anatomy fuzz: %s error message: %s\n",
                   internal ? "an internal check caught bad input;" : "not one line:", e.what());
      std::abort();
    }
    return false;
  }
}

}  // namespace anatomy::fuzz
