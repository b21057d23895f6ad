// job_secret.h: the secret that a process must prove it knows to join a run's
// store (store.h). Where it comes from:
//
//   - ANATOMY_JOB_SECRET, set by `anatomy launch` (128 random bits for each
//     launch of one node) or by the user for any launcher (torchrun and srun
//     pass the environment on; mpirun with -x ANATOMY_JOB_SECRET). Several
//     nodes need it: every rank must hold the same value.
//   - Otherwise, when every rank runs on this host (one node, or a loopback
//     MASTER_ADDR), rank 0 makes one and writes it to a file that only this
//     user can read, named by the store's port, in a directory of this user's
//     with mode 0700: $XDG_RUNTIME_DIR/anatomy, or /tmp/anatomy-<uid>. The
//     other ranks read it there. A process of another user cannot; one of the
//     same user could read the ranks' memory anyway.
//   - Otherwise (several nodes, no variable) the ranks stop with one line
//     saying to set ANATOMY_JOB_SECRET.
#pragma once

#include <optional>
#include <string>

namespace anatomy::distributed {

// 32 hexadecimal digits: 128 bits from the kernel's generator.
std::string generate_job_secret();

// This user's directory for secret files ($XDG_RUNTIME_DIR/anatomy when
// `runtime_dir` is an absolute path, else /tmp/anatomy-<uid>), made with mode
// 0700 if missing. Throws Error when it exists but is not a directory of this
// user (a link, another owner), or cannot be made.
std::string secret_directory(const std::string& runtime_dir);
// The file that carries the secret of the store at `port`.
std::string secret_file_path(const std::string& directory, int port);

// The secret in `path`, or nothing while the file does not exist. Throws
// Error when the file is not this user's regular file with mode 0600 (or
// stricter), or holds no secret.
std::optional<std::string> read_secret_file(const std::string& path);

// Writes `secret` to `path` (mode 0600, through a temporary file and a
// rename, so a reader never sees half of it); removes the file when
// destroyed.
class PublishedSecret {
 public:
  PublishedSecret(std::string path, const std::string& secret);
  ~PublishedSecret();
  PublishedSecret(const PublishedSecret&) = delete;
  PublishedSecret& operator=(const PublishedSecret&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace anatomy::distributed
