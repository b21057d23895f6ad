// job_secret.cpp: making, publishing and reading a run's secret (job_secret.h).
#include "anatomy/distributed/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/distributed/environment.h"
#include "anatomy/distributed/hmac.h"

namespace anatomy::distributed {

namespace {

constexpr size_t kMaxSecretFile = 4096;

std::string error_text(int err) {
  char buffer[256];
  return strerror_r(err, buffer, sizeof buffer);
}

}  // namespace

std::string generate_job_secret() { return to_hex(random_bytes(16)); }

std::string secret_directory(const std::string& runtime_dir) {
  const uid_t uid = ::geteuid();
  const std::string dir = !runtime_dir.empty() && runtime_dir.front() == '/'
                              ? runtime_dir + "/anatomy"
                              : fmt::format("/tmp/anatomy-{}", static_cast<unsigned>(uid));
  if (::mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST)
    fail("cannot make {} for the job secret: {} (or set {})", dir, error_text(errno), kJobSecretVariable);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) < 0) fail("cannot inspect {}: {}", dir, error_text(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != uid)
    fail("{} is not a directory of this user (uid {}): refusing to keep the job secret there (someone else may have "
         "made it; remove it, or set {})",
         dir, static_cast<unsigned>(uid), kJobSecretVariable);
  if ((st.st_mode & 077) != 0 && ::chmod(dir.c_str(), 0700) < 0)
    fail("cannot restrict {} to this user: {}", dir, error_text(errno));
  return dir;
}

std::string secret_file_path(const std::string& directory, int port) {
  return fmt::format("{}/store-{}.secret", directory, port);
}

std::optional<std::string> read_secret_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    fail("cannot read the job secret in {}: {}", path, error_text(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    ::close(fd);
    fail("{} is not this user's file of mode 0600: refusing its job secret", path);
  }
  std::string text(kMaxSecretFile, '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.size() < kMinJobSecretLength) fail("{} holds no job secret", path);
  return text;
}

PublishedSecret::PublishedSecret(std::string path, const std::string& secret) : path_(std::move(path)) {
  const std::string temporary = fmt::format("{}.{}.tmp", path_, static_cast<long>(::getpid()));
  ::unlink(temporary.c_str());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot write the job secret to {}: {}", temporary, error_text(errno));
  const std::string text = secret + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      fail("cannot write the job secret to {}: {}", temporary, error_text(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path_.c_str()) < 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    fail("cannot publish the job secret as {}: {}", path_, error_text(err));
  }
}

PublishedSecret::~PublishedSecret() { ::unlink(path_.c_str()); }

}  // namespace anatomy::distributed
