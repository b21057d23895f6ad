// launch_command.cpp: `anatomy launch`, which starts one process of this same
// program per GPU of this node, as torchrun does: each gets RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and
// ANATOMY_DIST_TIMEOUT), finds the others through the store of rank 0
// (dist/store.h) and picks its GPU by LOCAL_RANK. The children of one launch
// share ANATOMY_JOB_SECRET, 128 random bits made here (or the launcher's own
// value, which several nodes must share), without which the store refuses a
// process. The launcher prefixes each
// line of a child's output with "[rank k] ", forwards SIGINT, SIGTERM and
// SIGHUP, and when a child fails (non-zero exit or a signal) says which, stops
// the others (those still running 2 s later get SIGTERM, then SIGKILL after a
// grace period of 10 s) and exits with the failing child's code. One event loop (poll) reads every pipe and the signals, so the
// launcher has no threads and its output lines never interleave mid-line.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "anatomy/cli/commands.h"
#include "anatomy/core/error.h"
#include "anatomy/distributed/environment.h"
#include "anatomy/distributed/job_secret.h"
#include "anatomy/distributed/store.h"

extern char** environ;

namespace anatomy::cli {

namespace {

using Clock = std::chrono::steady_clock;

// After a child fails, how long the others have to end on their own before
// SIGTERM. They usually do, at once, with an error naming the lost rank; and
// the rank whose error set things off may be the last to print it (it tells
// the others before it unwinds to main), so it must not be cut short.
constexpr auto kStopDelay = std::chrono::seconds(2);
// How long the children have between SIGTERM and SIGKILL.
constexpr auto kGracePeriod = std::chrono::seconds(10);
// How long the launcher keeps reading pipes after the last child ended
// (a grandchild may hold them open).
constexpr auto kDrainTime = std::chrono::seconds(2);
// A line longer than this is passed on in pieces.
constexpr size_t kMaxLine = 1 << 16;
// Set in every child: main() line-buffers stdout when it sees it.
constexpr const char* kLaunchedVariable = "ANATOMY_LAUNCHED";

struct LaunchFlags {
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = distributed::kDefaultMasterPort;
  double rendezvous_timeout = distributed::kDefaultTimeoutSeconds;
  bool no_prefix = false;
  std::vector<std::string> command;
};

// One end of a child's stdout or stderr, with the part of a line read so far.
struct Stream {
  int fd = -1;
  int to = 1;  // where its lines go: 1 or 2
  std::string partial;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  bool stopped_by_launcher = false;  // sent SIGTERM or a forwarded signal
  Stream out, err;
};

// The self-pipe through which the signal handlers wake the event loop.
int signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to write: drop it rather than fail the run
    done += static_cast<size_t>(n);
  }
}

// The launcher's own lines, on stderr.
template <typename... Args>
void report(fmt::format_string<Args...> format, Args&&... args) {
  write_all(2, fmt::format(format, std::forward<Args>(args)...) + "\n");
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  const char* name = strsignal(sig);
  return fmt::format("was killed by signal {} ({})", sig, name ? name : "unknown");
}

// The exit code that stands for a child's status: its code, or 128 + signal.
int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

class Launcher {
 public:
  Launcher(const LaunchFlags& flags) : flags_(flags) {
    // One node: a fresh secret for this launch alone. Several: each node's
    // launch would make its own, so the user gives one (validate() checks).
    const char* given = std::getenv(distributed::kJobSecretVariable);
    if (given == nullptr && flags_.nnodes == 1) job_secret_ = distributed::generate_job_secret();
  }

  int run() {
    install_signal_handlers();
    try {
      start_children();
    } catch (const Error&) {
      restore_signal_handlers();
      throw;
    }
    loop();
    restore_signal_handlers();
    if (first_failure_) return *first_failure_;
    if (forwarded_signal_) return 128 + forwarded_signal_;
    return 0;
  }

 private:
  void install_signal_handlers() {
    if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0) fail("launch: cannot create a pipe: {}", strerror(errno));
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(sig, &action, &saved_actions_[slot(sig)]);
  }

  void restore_signal_handlers() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(sig, &saved_actions_[slot(sig)], nullptr);
    ::close(signal_pipe[0]);
    ::close(signal_pipe[1]);
  }

  static int slot(int sig) { return sig == SIGINT ? 0 : sig == SIGTERM ? 1 : sig == SIGHUP ? 2 : 3; }

  // The environment of the child of local rank `local`: this one's, with the
  // launcher's variables in place of any it had.
  std::vector<std::string> child_environment(int local) const {
    const int world = flags_.nproc_per_node * flags_.nnodes;
    const std::vector<std::pair<std::string, std::string>> set = {
        {"RANK", std::to_string(flags_.node_rank * flags_.nproc_per_node + local)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(flags_.nproc_per_node)},
        {"GROUP_RANK", std::to_string(flags_.node_rank)},
        {"MASTER_ADDR", flags_.master_addr},
        {"MASTER_PORT", std::to_string(flags_.master_port)},
        {"ANATOMY_DIST_TIMEOUT", fmt::format("{:g}", flags_.rendezvous_timeout)},
        {kLaunchedVariable, "1"},
    };
    std::vector<std::pair<std::string, std::string>> secret;
    if (!job_secret_.empty()) secret.emplace_back(distributed::kJobSecretVariable, job_secret_);
    std::vector<std::string> env;
    for (char** entry = environ; entry && *entry; ++entry) {
      const std::string text = *entry;
      const std::string name = text.substr(0, text.find('='));
      bool replaced = false;
      for (const auto& [key, value] : set) replaced = replaced || key == name;
      for (const auto& [key, value] : secret) replaced = replaced || key == name;
      if (!replaced) env.push_back(text);
    }
    for (const auto& [key, value] : set) env.push_back(key + "=" + value);
    for (const auto& [key, value] : secret) env.push_back(key + "=" + value);
    return env;
  }

  void start_children() {
    std::vector<std::string> args = {"anatomy"};
    args.insert(args.end(), flags_.command.begin(), flags_.command.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t launcher = ::getpid();
    const std::string exec_failed = "error: launch: cannot run this program again (/proc/self/exe)\n";

    children_.resize(static_cast<size_t>(flags_.nproc_per_node));
    for (int local = 0; local < flags_.nproc_per_node; ++local) {
      Child& child = children_[static_cast<size_t>(local)];
      child.rank = flags_.node_rank * flags_.nproc_per_node + local;
      std::vector<std::string> env = child_environment(local);
      std::vector<char*> envp;
      for (std::string& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      int out[2] = {-1, -1}, err[2] = {-1, -1};
      if (!flags_.no_prefix && (::pipe2(out, O_CLOEXEC) < 0 || ::pipe2(err, O_CLOEXEC) < 0)) {
        stop_all();
        fail("launch: cannot create a pipe for rank {}: {}", child.rank, strerror(errno));
      }
      // Signals stay blocked across fork so that none reaches the launcher's
      // handler in the child before exec.
      sigset_t all, old;
      sigfillset(&all);
      sigprocmask(SIG_BLOCK, &all, &old);
      const pid_t pid = ::fork();
      if (pid == 0) {
        for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::signal(sig, SIG_DFL);
        // A child outlives no launcher, even one killed by SIGKILL.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != launcher) ::_exit(127);
        sigprocmask(SIG_SETMASK, &old, nullptr);
        if (!flags_.no_prefix) {
          ::dup2(out[1], 1);
          ::dup2(err[1], 2);
        }
        ::execve("/proc/self/exe", argv.data(), envp.data());
        // Only async-signal-safe calls here: other threads (OpenBLAS's) may
        // have held locks at the fork.
        [[maybe_unused]] const ssize_t n = ::write(2, exec_failed.data(), exec_failed.size());
        ::_exit(127);
      }
      const int fork_errno = errno;
      sigprocmask(SIG_SETMASK, &old, nullptr);
      if (pid < 0) {
        stop_all();
        fail("launch: cannot start rank {}: {}", child.rank, strerror(fork_errno));
      }
      child.pid = pid;
      child.running = true;
      if (!flags_.no_prefix) {
        ::close(out[1]);
        ::close(err[1]);
        child.out = {out[0], 1, {}};
        child.err = {err[0], 2, {}};
        ::fcntl(out[0], F_SETFL, O_NONBLOCK);
        ::fcntl(err[0], F_SETFL, O_NONBLOCK);
      }
    }
  }

  // Kills the children started so far (when starting fails half-way).
  void stop_all() {
    for (Child& c : children_)
      if (c.running) ::kill(c.pid, SIGKILL);
    for (Child& c : children_)
      if (c.running) ::waitpid(c.pid, nullptr, 0);
  }

  // Passes on what `s` holds: every whole line, prefixed; at the end the rest.
  void emit(const Child& child, Stream& s, bool at_end) {
    std::string text;
    size_t start = 0;
    while (true) {
      const size_t newline = s.partial.find('\n', start);
      if (newline == std::string::npos) break;
      text += fmt::format("[rank {}] ", child.rank);
      text.append(s.partial, start, newline + 1 - start);
      start = newline + 1;
    }
    s.partial.erase(0, start);
    if (!s.partial.empty() && (at_end || s.partial.size() > kMaxLine)) {
      text += fmt::format("[rank {}] {}\n", child.rank, s.partial);
      s.partial.clear();
    }
    if (!text.empty()) write_all(s.to, text);
  }

  // Reads what `s` has now; closes it at its end.
  void read_stream(const Child& child, Stream& s) {
    if (s.fd < 0) return;
    char buffer[65536];
    while (true) {
      const ssize_t n = ::read(s.fd, buffer, sizeof buffer);
      if (n > 0) {
        s.partial.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        emit(child, s, false);
        return;
      }
      ::close(s.fd);  // end of the stream, or an error
      s.fd = -1;
      emit(child, s, true);
      return;
    }
  }

  void begin_stopping() {
    if (stopping_) return;
    stopping_ = true;
    kill_deadline_ = Clock::now() + kGracePeriod;
    for (Child& c : children_)
      if (c.running) {
        c.stopped_by_launcher = true;
        ::kill(c.pid, SIGTERM);
        ::kill(c.pid, SIGCONT);  // a stopped child would not see the SIGTERM
      }
  }

  // Collects the children that ended and reports the failures. A child that
  // exits with kPeerFailureExitCode stopped because another rank failed (its
  // own line names that rank), so the launcher names the rank that failed
  // first instead, even when its exit is collected later (a process tears
  // down its connections before it becomes a zombie). If only followers
  // fail — the first failure is alive but frozen — the first of them is named
  // once the others have had kStopDelay to fail on their own.
  void reap() {
    std::vector<std::pair<Child*, int>> ended;
    for (Child& c : children_) {
      if (!c.running) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.running = false;
      last_exit_ = Clock::now();
      // Its last words first: they usually say why.
      read_stream(c, c.out);
      read_stream(c, c.err);
      ended.emplace_back(&c, status);
    }
    for (const auto& [c, status] : ended) {
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!failed || c->stopped_by_launcher) continue;  // a child told to stop is no news
      if (!failure_seen_) {
        failure_seen_ = true;
        stop_at_ = Clock::now() + kStopDelay;
      }
      if (WIFEXITED(status) && WEXITSTATUS(status) == distributed::kPeerFailureExitCode) {
        if (!follower_) follower_.emplace(c->rank, status);
        continue;
      }
      if (first_failure_) report("launch: rank {} {} as well", c->rank, describe_exit(status));
      else headline(c->rank, status, "");
    }
    if (failure_seen_ && !first_failure_ && follower_ && (Clock::now() >= stop_at_ || !any_running()))
      headline(follower_->first, follower_->second, " (it stopped because another rank failed)");
  }

  void headline(int rank, int status, const char* note) {
    report("error: rank {} {}{}{}", rank, describe_exit(status), note,
           any_running() ? "; stopping the other ranks" : "");
    first_failure_ = exit_code_of(status);
  }

  bool any_running() const {
    for (const Child& c : children_)
      if (c.running) return true;
    return false;
  }

  void forward(int sig) {
    if (forwarded_signal_ != sig) {
      const char* name = strsignal(sig);
      report("launch: passing signal {} ({}) to the ranks", sig, name ? name : "unknown");
    }
    forwarded_signal_ = sig;
    for (Child& c : children_)
      if (c.running) {
        c.stopped_by_launcher = true;
        ::kill(c.pid, sig);
      }
    // The children end on their own; SIGKILL after the grace period if not.
    if (!stopping_) {
      stopping_ = true;
      kill_deadline_ = Clock::now() + kGracePeriod;
    }
  }

  void loop() {
    std::vector<pollfd> polls;
    std::vector<std::pair<Child*, Stream*>> owners;
    while (true) {
      const bool running = any_running();
      polls.clear();
      owners.clear();
      polls.push_back({signal_pipe[0], POLLIN, 0});
      for (Child& c : children_)
        for (Stream* s : {&c.out, &c.err})
          if (s->fd >= 0) {
            polls.push_back({s->fd, POLLIN, 0});
            owners.emplace_back(&c, s);
          }
      if (!running && (owners.empty() || Clock::now() >= last_exit_ + kDrainTime)) break;
      auto deadline = Clock::now() + std::chrono::seconds(1);  // a missed SIGCHLD costs at most this
      if (stopping_ && !killed_ && running) deadline = std::min(deadline, kill_deadline_);
      if (failure_seen_ && !stopping_ && running) deadline = std::min(deadline, stop_at_);
      if (!running) deadline = std::min(deadline, last_exit_ + kDrainTime);
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      ::poll(polls.data(), polls.size(), static_cast<int>(std::max<int64_t>(0, wait)));

      if (polls[0].revents & POLLIN) {
        unsigned char signals[64];
        ssize_t n;
        while ((n = ::read(signal_pipe[0], signals, sizeof signals)) > 0)
          for (ssize_t i = 0; i < n; ++i)
            if (signals[i] != SIGCHLD) forward(signals[i]);
      }
      for (size_t i = 0; i < owners.size(); ++i)
        if (polls[i + 1].revents) read_stream(*owners[i].first, *owners[i].second);
      reap();
      if (failure_seen_ && !stopping_ && any_running() && Clock::now() >= stop_at_) begin_stopping();
      if (stopping_ && !killed_ && any_running() && Clock::now() >= kill_deadline_) {
        killed_ = true;
        for (Child& c : children_)
          if (c.running) {
            report("error: rank {} did not stop within {} s of being told to: sending SIGKILL", c.rank,
                   std::chrono::duration_cast<std::chrono::seconds>(kGracePeriod).count());
            ::kill(c.pid, SIGKILL);
          }
      }
    }
    for (Child& c : children_)
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) {
          emit(c, *s, true);
          ::close(s->fd);
          s->fd = -1;
        }
  }

  const LaunchFlags& flags_;
  std::string job_secret_;  // set in the children when made here
  std::vector<Child> children_;
  struct sigaction saved_actions_[4] {};
  bool stopping_ = false, killed_ = false;
  Clock::time_point stop_at_, kill_deadline_, last_exit_;
  bool failure_seen_ = false;
  std::optional<int> first_failure_;                 // the exit code of the rank named as failing first
  std::optional<std::pair<int, int>> follower_;      // the first rank that failed because another did: rank, status
  int forwarded_signal_ = 0;
};

void validate(const LaunchFlags& f) {
  if (f.node_rank >= f.nnodes) fail("--node-rank {} is not below --nnodes {}", f.node_rank, f.nnodes);
  if (static_cast<long long>(f.nproc_per_node) * f.nnodes > 1 << 20)
    fail("--nproc-per-node {} times --nnodes {} is too many ranks", f.nproc_per_node, f.nnodes);
  if (f.master_port < 1 || f.master_port > 65535)
    fail("--master-port: expected a port in [1, 65535], got {}", f.master_port);
  if (f.master_addr.empty()) fail("--master-addr is empty");
  if (f.command.empty())
    fail("launch: no command to run: put it after --, as in anatomy launch --nproc-per-node 2 -- train");
  if (f.command.front() == "launch") fail("launch: the command to run is launch itself");
  // Ranks on several hosts cannot share a secret that one launch makes; on
  // one host (a loopback master) rank 0 hands its own to the others.
  const bool loopback = f.master_addr.rfind("127.", 0) == 0 || f.master_addr == "localhost";
  if (f.nnodes > 1 && !loopback && std::getenv(distributed::kJobSecretVariable) == nullptr)
    fail("launch: --nnodes {} on several hosts needs {}: set it to the same random value on every node, such as "
         "export {}=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n'), then run anatomy launch there",
         f.nnodes, distributed::kJobSecretVariable, distributed::kJobSecretVariable);
}

}  // namespace

void line_buffer_if_launched() {
  if (std::getenv(kLaunchedVariable)) std::setvbuf(stdout, nullptr, _IOLBF, 0);
}

Command add_launch_command(CLI::App& app) {
  auto f = std::make_shared<LaunchFlags>();
  app.add_option("--nproc-per-node", f->nproc_per_node, "Processes to start on this node (one per GPU)")
      ->required()
      ->check(positive_number());
  app.add_option("--nnodes", f->nnodes, "Nodes in the run (each runs anatomy launch)")
      ->capture_default_str()
      ->check(positive_number());
  app.add_option("--node-rank", f->node_rank, "This node's index, 0 to --nnodes - 1")
      ->capture_default_str()
      ->check(non_negative_number());
  app.add_option("--master-addr", f->master_addr, "Host of rank 0 (node 0), reachable from every node")
      ->capture_default_str();
  app.add_option("--master-port", f->master_port, "Port of rank 0's store")->capture_default_str();
  app.add_option("--rendezvous-timeout", f->rendezvous_timeout,
                 "Seconds a rank waits for the others (joining, barriers, a silent peer) before it fails")
      ->capture_default_str()
      ->check(positive_number());
  app.add_flag("--no-prefix", f->no_prefix, "Pass the children's output on as it is, without \"[rank k] \"");
  app.add_option("command", f->command, "The anatomy subcommand and its flags, after --");

  return [f]() -> int {
    validate(*f);
    Launcher launcher(*f);
    return launcher.run();
  };
}

}  // namespace anatomy::cli
