// child_process.cpp: posix_spawn with the output to files, and a polling wait.
#include "anatomy/cli/child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "anatomy/core/error.h"

extern char** environ;

namespace anatomy::cli {

namespace {

// Closes the file actions whatever happens.
struct FileActions {
  posix_spawn_file_actions_t actions;
  FileActions() { posix_spawn_file_actions_init(&actions); }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions); }
};

}  // namespace

ChildOutcome run_child(const std::vector<std::string>& argv, const std::string& stdout_path,
                       const std::string& stderr_path, const std::function<void(double)>& tick, double tick_seconds,
                       const std::string& program) {
  ANATOMY_CHECK(!argv.empty(), "run_child needs a program");
  FileActions files;
  posix_spawn_file_actions_addopen(&files.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files.actions, STDOUT_FILENO, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&files.actions, STDERR_FILENO, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  pid_t pid = 0;
  const std::string& path = program.empty() ? argv[0] : program;
  const int err = path.find('/') == std::string::npos
                      ? posix_spawnp(&pid, path.c_str(), &files.actions, nullptr, args.data(), environ)
                      : posix_spawn(&pid, path.c_str(), &files.actions, nullptr, args.data(), environ);
  if (err != 0) fail("{}: cannot run it ({})", path, std::strerror(err));

  ChildOutcome outcome;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) {
        outcome.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        outcome.signal = WTERMSIG(status);
        outcome.exit_code = 128 + outcome.signal;
      }
      break;
    }
    if (done < 0 && errno != EINTR) fail("{}: lost track of process {} ({})", path, pid, std::strerror(errno));
    if (tick) tick(elapsed());
    std::this_thread::sleep_for(std::chrono::duration<double>(tick_seconds));
  }
  outcome.seconds = elapsed();
  return outcome;
}

}  // namespace anatomy::cli
