// test_process.h: an `anatomy` process started by a test with a controlled
// environment (none of the launcher variables the test itself might run
// under, plus the ones given), its stdout and stderr captured together; for
// the tests of multi-process runs (test_dist.cpp, test_data_parallel_resume.cpp).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

extern char** environ;

namespace anatomy::test {

// A loopback port that was free a moment ago: bind port 0, read it, close.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// An `anatomy` process with its own environment (no variables of a launcher
// this test itself might run under), stdout and stderr captured together.
class Process {
 public:
  using Clock = std::chrono::steady_clock;
  Process(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars) {
    std::vector<std::string> argv_text = {test::anatomy_binary()};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** entry = environ; *entry; ++entry) {
      const std::string text = *entry;
      const std::string name = text.substr(0, text.find('='));
      static const std::set<std::string> dropped = {
          "RANK",        "WORLD_SIZE",           "LOCAL_RANK",       "LOCAL_WORLD_SIZE",   "GROUP_RANK",
          "MASTER_ADDR", "MASTER_PORT",          "ANATOMY_DIST_TIMEOUT", "ANATOMY_LAUNCHED", "ANATOMY_JOB_SECRET",
          "ANATOMY_STORE_PORT"};
      if (dropped.count(name) || name.rfind("SLURM_", 0) == 0 || name.rfind("OMPI_", 0) == 0 ||
          name.rfind("TORCHELASTIC_", 0) == 0)
        continue;
      env_text.push_back(text);
    }
    for (const auto& [k, v] : vars) env_text.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (std::string& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    ::fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~Process() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Waits at most `timeout` for the process to end (then kills it) and for
  // its output to end; returns the exit code, or -1 when a signal ended it.
  int wait(double timeout) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
    int status = 0;
    while (!done_) {
      drain(20);
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
      } else if (Clock::now() >= deadline) {
        timed_out_ = true;
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        done_ = true;
      }
    }
    const auto drain_deadline = Clock::now() + std::chrono::seconds(5);
    while (fd_ >= 0 && Clock::now() < drain_deadline) drain(50);
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return code_;
  }

  void signal(int sig) { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }
  bool timed_out() const { return timed_out_; }

 private:
  void drain(int wait_ms) {
    if (fd_ < 0) return;
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, 1, wait_ms);
    char buffer[4096];
    while (true) {
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n > 0) {
        output_.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(fd_);
        fd_ = -1;
      }
      return;
    }
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool done_ = false, timed_out_ = false;
  int code_ = -1;
  std::string output_;
};

}  // namespace anatomy::test
