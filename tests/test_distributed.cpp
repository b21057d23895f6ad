// test_dist.cpp: the process side of multi-GPU training, without GPUs: the
// environment of torchrun, Slurm and Open MPI; the TCP store (set, get, add,
// wait, barriers, timeouts, dead and frozen ranks, a client that comes before
// the server); and `anatomy launch` / `anatomy dist-check` end to end: a good
// run, a rank that exits, a rank that freezes, a rank that never starts, and a
// two-"node" run on one host. Ports are free ephemeral ones, so parallel runs
// do not collide.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "anatomy/core/error.h"
#include "anatomy/distributed/environment.h"
#include "anatomy/distributed/hmac.h"
#include "anatomy/distributed/job_secret.h"
#include "anatomy/distributed/store.h"
#include "test_process.h"
#include "test_util.h"

extern char** environ;

namespace anatomy {
namespace {

using distributed::DistEnvironment;
using distributed::EnvMap;
using distributed::read_dist_environment;
using distributed::Seconds;
using test::free_port;
using distributed::StoreClient;
using distributed::StoreServer;
using Clock = std::chrono::steady_clock;
using test::Process;

// The job secret of the in-process stores.
const std::string kSecret = "0123456789abcdef0123456789abcdef";

// ---- helpers -------------------------------------------------------------------

// The message of the Error that `f` throws ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }


// The "rank r of w: ok, blob H" lines of an output: rank -> H.
std::map<int, std::string> ok_lines(const std::string& output, int world) {
  std::map<int, std::string> found;
  const std::regex line("rank (\\d+) of " + std::to_string(world) + ": ok, blob ([0-9a-f]{16})");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it)
    found[std::stoi((*it)[1])] = (*it)[2];
  return found;
}

// ---- a stranger at the store's port ------------------------------------------------

std::string be32(uint32_t v) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
  return out;
}
std::string be64(int64_t value) {
  std::string out;
  const auto v = static_cast<uint64_t>(value);
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
  return out;
}
std::string frame(const std::string& body) { return be32(static_cast<uint32_t>(body.size())) + body; }

// A hello as a rank sends it (store.h, protocol 2): rank, world, control role,
// no liveness, a nonce.
std::string hello_body(int64_t rank, int64_t world, uint32_t version = 2) {
  return std::string(1, '\x01') + "ANAT" + be32(version) + be64(rank) + be64(world) + std::string(1, '\0') + be64(0) +
         std::string(16, 'n');
}

// The proof of a client that holds `secret`, for `hello` and the store's nonce.
std::string client_proof(const std::string& secret, const std::string& hello, const std::string& server_nonce) {
  const std::string label("anatomy store v2 client\0", 24);
  const distributed::Digest d = distributed::hmac_sha256(secret, label + hello + server_nonce);
  return std::string(1, '\x0a') + std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// A raw TCP connection to the store, as a stranger makes one.
class RawConnection {
 public:
  explicit RawConnection(int port, double wait_for_server = 0.0) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(Seconds(wait_for_server));
    while (true) {
      fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return;
      ::close(fd_);
      fd_ = -1;
      if (Clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return fd_ >= 0; }
  void send(const std::string& bytes) {
    if (fd_ >= 0) [[maybe_unused]] ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  // What arrives within `timeout`, or until the server closes; closed() says
  // whether it did.
  std::string receive(double timeout) {
    std::string got;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(Seconds(timeout));
    while (fd_ >= 0 && Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      const int left = static_cast<int>(
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
      if (::poll(&p, 1, left) <= 0) break;
      char buffer[4096];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got.append(buffer, static_cast<size_t>(n));
    }
    return got;
  }
  // One whole reply frame (its body), within `timeout`.
  std::string reply(double timeout) {
    while (in_.size() < 4 || in_.size() < 4 + length()) {
      const std::string more = receive_some(timeout);
      if (more.empty()) return "";
      in_ += more;
    }
    const std::string body = in_.substr(4, length());
    in_.erase(0, 4 + body.size());
    return body;
  }
  bool closed() const { return closed_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  size_t length() const {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(in_[static_cast<size_t>(i)]);
    return n;
  }
  std::string receive_some(double timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (fd_ < 0 || ::poll(&p, 1, static_cast<int>(timeout * 1000)) <= 0) return "";
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) {
      closed_ = true;
      return "";
    }
    return std::string(buffer, static_cast<size_t>(n));
  }
  int fd_ = -1;
  bool closed_ = false;
  std::string in_;
};

// The attempts of a stranger at the store of `port`, each on a connection of
// its own; returns the reasons the store should give for refusing them, one
// per attempt. `silence` is how long the store gives a connection to finish
// its handshake. Every attempt must end with the store closing the connection.
std::vector<std::string> stranger_attempts(int port, double silence, double wait_for_server = 0.0) {
  std::vector<std::string> reasons;
  // A half frame, then silence (first: its clock runs while the others go).
  RawConnection half(port, wait_for_server);
  EXPECT_TRUE(half.connected()) << "no store at port " << port;
  half.send(be32(54) + hello_body(1, 2).substr(0, 10));
  reasons.push_back("no hello within");
  {  // No secret at all: connects and goes.
    RawConnection c(port);
    c.close();
    reasons.push_back("closed before its hello");
  }
  {  // A correct-looking hello for rank 1, then a proof of nothing.
    RawConnection c(port);
    c.send(frame(hello_body(1, 2)));
    const std::string challenge = c.reply(10);
    EXPECT_EQ(challenge.size(), 1u + 4 + 48 + 8) << "ok, the store's nonce and proof";
    c.send(frame(std::string(1, '\x0a') + std::string(32, '\0')));
    const std::string refusal = c.reply(10);
    EXPECT_TRUE(contains(refusal, "wrong job secret")) << refusal;
    c.receive(10);
    EXPECT_TRUE(c.closed());
    reasons.push_back("wrong job secret");
  }
  {  // The same with a proof made from a wrong secret.
    RawConnection c(port);
    const std::string hello = hello_body(1, 2);
    c.send(frame(hello));
    const std::string challenge = c.reply(10);
    c.send(frame(client_proof("not-the-job-secret-at-all", hello, challenge.substr(5, 16))));
    c.receive(10);
    EXPECT_TRUE(c.closed());
    reasons.push_back("wrong job secret");
  }
  {  // A hello for rank 1, then away without a proof.
    RawConnection c(port);
    c.send(frame(hello_body(1, 2)));
    c.reply(10);
    c.close();
    reasons.push_back("closed without proving that it knows the job secret");
  }
  {  // Another protocol's bytes.
    RawConnection c(port);
    c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    c.receive(10);
    EXPECT_TRUE(c.closed());
    reasons.push_back("a frame of 1195725856 bytes, over the limit of 256");
  }
  {  // An oversized length, with its bytes coming.
    RawConnection c(port);
    c.send(be32(0xffffffffu) + std::string(1000, 'x'));
    c.receive(10);
    EXPECT_TRUE(c.closed());
    reasons.push_back("a frame of 4294967295 bytes, over the limit of 256");
  }
  {  // A request before any hello.
    RawConnection c(port);
    c.send(frame(std::string(1, '\x07')));
    c.receive(10);
    EXPECT_TRUE(c.closed());
    reasons.push_back("a malformed frame");
  }
  {  // A hello of protocol 1.
    RawConnection c(port);
    c.send(frame(hello_body(1, 2, 1).substr(0, 34)));
    const std::string refusal = c.reply(10);
    EXPECT_TRUE(contains(refusal, "the store speaks protocol 2 of anatomy, the client 1")) << refusal;
    c.receive(10);
    EXPECT_TRUE(c.closed());
    reasons.push_back("protocol version 1, not 2");
  }
  half.receive(silence + 10);
  EXPECT_TRUE(half.closed()) << "the silent connection was closed";
  return reasons;
}

// ---- the environment ------------------------------------------------------------

TEST(DistEnvironment, NoVariablesIsAWorldOfOne) {
  const DistEnvironment e = read_dist_environment(EnvMap{{"HOME", "/root"}});
  EXPECT_EQ(e.source, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_FALSE(e.distributed());
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.timeout_seconds, 60.0);
}

TEST(DistEnvironment, Torchrun) {
  const DistEnvironment e = read_dist_environment(EnvMap{{"RANK", "5"},
                                                         {"WORLD_SIZE", "8"},
                                                         {"LOCAL_RANK", "1"},
                                                         {"LOCAL_WORLD_SIZE", "4"},
                                                         {"MASTER_ADDR", "node0.cluster"},
                                                         {"MASTER_PORT", "12345"}});
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master(), "node0.cluster:12345");
  EXPECT_EQ(e.timeout_seconds, distributed::kDefaultTimeoutSeconds);  // the engine option's (cli/engine_flags.h)
  // Without the local variables the ranks share one node; the port defaults.
  const DistEnvironment d =
      read_dist_environment(EnvMap{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_port, 29500);
  // A world of one needs no master.
  EXPECT_EQ(read_dist_environment(EnvMap{{"RANK", "0"}, {"WORLD_SIZE", "1"}}).master_addr, "127.0.0.1");
}

TEST(DistEnvironment, TorchrunErrorsNameTheVariable) {
  auto error = [](EnvMap env) { return error_of([&] { read_dist_environment(env); }); };
  EXPECT_TRUE(contains(error({{"RANK", "0"}}), "WORLD_SIZE is not")) << error({{"RANK", "0"}});
  EXPECT_TRUE(contains(error({{"WORLD_SIZE", "2"}}), "RANK is not"));
  EXPECT_EQ(error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), "RANK=2 is not below WORLD_SIZE=2");
  EXPECT_TRUE(contains(error({{"RANK", "abc"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), "RANK=abc"));
  EXPECT_TRUE(contains(error({{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), "RANK=-1"));
  EXPECT_TRUE(contains(error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE=0"));
  EXPECT_TRUE(contains(error({{"RANK", "0"}, {"WORLD_SIZE", ""}}), "WORLD_SIZE is set but empty"));
  EXPECT_TRUE(contains(error({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), "MASTER_ADDR is not set"));
  EXPECT_TRUE(contains(error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                       "MASTER_PORT=70000"));
  EXPECT_TRUE(contains(error({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"LOCAL_RANK", "2"},
                              {"LOCAL_WORLD_SIZE", "2"}}),
                       "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
  EXPECT_TRUE(contains(error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"LOCAL_WORLD_SIZE", "3"}}),
                       "LOCAL_WORLD_SIZE=3 exceeds WORLD_SIZE=2"));
}

TEST(DistEnvironment, Slurm) {
  const DistEnvironment e = read_dist_environment(EnvMap{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "3"},
                                                         {"SLURM_NTASKS", "4"},
                                                         {"SLURM_LOCALID", "1"},
                                                         {"SLURM_NODEID", "1"},
                                                         {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                                         {"SLURM_JOB_NODELIST", "gpu[01-04,07]"}});
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "gpu01");
  EXPECT_EQ(e.master_port, 29500);
  // MASTER_ADDR and MASTER_PORT win; SLURM_NODELIST serves when the job's list is absent.
  const DistEnvironment m = read_dist_environment(EnvMap{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"},
                                                         {"SLURM_NTASKS", "2"},
                                                         {"SLURM_LOCALID", "0"},
                                                         {"SLURM_JOB_NODELIST", "gpu[01-04]"},
                                                         {"MASTER_ADDR", "10.0.0.9"},
                                                         {"MASTER_PORT", "4000"}});
  EXPECT_EQ(m.master(), "10.0.0.9:4000");
  EXPECT_EQ(m.local_world_size, 2);
  const DistEnvironment n = read_dist_environment(
      EnvMap{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NNODES", "2"},
             {"SLURM_NODELIST", "node1,node2"}});
  EXPECT_EQ(n.master_addr, "node1");
  EXPECT_EQ(n.local_world_size, 1);
}

TEST(DistEnvironment, SlurmErrors) {
  auto error = [](EnvMap env) { return error_of([&] { read_dist_environment(env); }); };
  EXPECT_TRUE(contains(error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}), "SLURM_NTASKS is not set"));
  EXPECT_TRUE(contains(error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), "SLURM_LOCALID is not set"));
  EXPECT_TRUE(contains(error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                              {"SLURM_JOB_NODELIST", "a"}}),
                       "SLURM_PROCID=2 is not below SLURM_NTASKS=2"));
  EXPECT_TRUE(contains(error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}}),
                       "neither MASTER_ADDR nor SLURM_JOB_NODELIST"));
  EXPECT_TRUE(contains(error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                              {"SLURM_JOB_NODELIST", "gpu[01-"}}),
                       "SLURM_JOB_NODELIST=gpu[01-"));
  EXPECT_TRUE(contains(error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
                              {"SLURM_TASKS_PER_NODE", "2(x"}, {"SLURM_JOB_NODELIST", "a"}}),
                       "SLURM_TASKS_PER_NODE=2(x"));
}

TEST(DistEnvironment, SlurmNodelists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(distributed::expand_slurm_nodelist("gpu[01-04,07]"), (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  EXPECT_EQ(distributed::expand_slurm_nodelist("node1,node2"), (V{"node1", "node2"}));
  EXPECT_EQ(distributed::expand_slurm_nodelist("single"), (V{"single"}));
  EXPECT_EQ(distributed::expand_slurm_nodelist("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(distributed::expand_slurm_nodelist("a[1-2]-ib,b7"), (V{"a1-ib", "a2-ib", "b7"}));
  EXPECT_EQ(distributed::expand_slurm_nodelist("r[1-2]-n[1,3]"), (V{"r1-n1", "r1-n3", "r2-n1", "r2-n3"}));
  EXPECT_EQ(distributed::expand_slurm_nodelist("gpu[001-002],cpu[9]"), (V{"gpu001", "gpu002", "cpu9"}));
  for (const std::string bad : {"", "gpu[01-", "gpu01]", "gpu[04-01]", "gpu[a-b]", "gpu[]", "a,,b", "g[[1]]", "a b"})
    EXPECT_TRUE(contains(error_of([&] { distributed::expand_slurm_nodelist(bad, "SLURM_NODELIST"); }),
                         "SLURM_NODELIST=" + bad + " is not a Slurm node list"))
        << bad;
}

TEST(DistEnvironment, OpenMpi) {
  const DistEnvironment e = read_dist_environment(EnvMap{{"OMPI_COMM_WORLD_RANK", "2"},
                                                         {"OMPI_COMM_WORLD_SIZE", "4"},
                                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                         {"MASTER_ADDR", "head"}});
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master(), "head:29500");
  // Several nodes need the master's host.
  const std::string missing = error_of([] {
    read_dist_environment(
        EnvMap{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  });
  EXPECT_TRUE(contains(missing, "MASTER_ADDR is not set")) << missing;
  EXPECT_TRUE(contains(missing, "mpirun -x MASTER_ADDR")) << missing;
  EXPECT_TRUE(contains(error_of([] {
                         read_dist_environment(EnvMap{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "x"}});
                       }),
                       "OMPI_COMM_WORLD_SIZE=x"));
}

TEST(DistEnvironment, Precedence) {
  EnvMap env = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  EXPECT_EQ(read_dist_environment(env).source, "openmpi");
  env.insert({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(read_dist_environment(env).source, "slurm");
  EXPECT_EQ(read_dist_environment(env).world_size, 3);
  env.insert({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(read_dist_environment(env).source, "torchrun");
  EXPECT_EQ(read_dist_environment(env).rank, 3);
}

// torchrun's agent serves its own store at MASTER_PORT: ours takes the next port.
TEST(DistEnvironment, TorchrunAgentStoreMovesOursNextDoor) {
  EnvMap env = {{"RANK", "1"},
                {"WORLD_SIZE", "2"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", "29500"},
                {"TORCHELASTIC_RUN_ID", "none"},
                {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  DistEnvironment e = read_dist_environment(env);
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.store(), 29501);
  EXPECT_EQ(e.master(), "127.0.0.1:29501");
  env["MASTER_PORT"] = "65535";
  EXPECT_EQ(read_dist_environment(env).store(), 65534);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // the agent's port is free for us
  EXPECT_EQ(read_dist_environment(env).store(), 65535);
  env["ANATOMY_STORE_PORT"] = "4100";  // any launcher: the user's choice wins
  EXPECT_EQ(read_dist_environment(env).store(), 4100);
  env["ANATOMY_STORE_PORT"] = "0";
  EXPECT_TRUE(contains(error_of([&] { read_dist_environment(env); }), "ANATOMY_STORE_PORT=0")) << "a port";
}

TEST(DistEnvironment, JobSecretFromTheEnvironment) {
  EnvMap env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}};
  EXPECT_EQ(read_dist_environment(env).job_secret, "");
  env["ANATOMY_JOB_SECRET"] = kSecret;
  EXPECT_EQ(read_dist_environment(env).job_secret, kSecret);
  env["ANATOMY_JOB_SECRET"] = "short";
  const std::string e = error_of([&] { read_dist_environment(env); });
  EXPECT_TRUE(contains(e, "ANATOMY_JOB_SECRET is 5 characters long: give at least 16")) << e;
  env["ANATOMY_JOB_SECRET"] = "";
  EXPECT_TRUE(contains(error_of([&] { read_dist_environment(env); }), "ANATOMY_JOB_SECRET is set but empty"));
}

// An sbatch script's own process (the batch step: no SLURM_STEP_ID) is one
// process where SLURM_NTASKS are expected: it stops at once.
TEST(DistEnvironment, SlurmBatchStepStopsAtOnce) {
  EnvMap batch = {{"SLURM_JOB_ID", "4242"},  {"SLURM_PROCID", "0"},        {"SLURM_LOCALID", "0"},
                  {"SLURM_NTASKS", "8"},     {"SLURM_NODEID", "0"},        {"SLURM_TASKS_PER_NODE", "4(x2)"},
                  {"ENVIRONMENT", "BATCH"},  {"SLURM_JOB_NODELIST", "gpu[1-2]"}};
  const std::string e = error_of([&] { read_dist_environment(batch); });
  EXPECT_EQ(e,
            "this process is the batch script of Slurm job 4242 (SLURM_NTASKS=8 but no SLURM_STEP_ID of an srun step): "
            "one process where 8 ranks are expected, so the others would never come: start them with srun, as in "
            "`srun anatomy train ...`, or run `anatomy launch` in the script");
  // A sentinel step id (a site that exports the batch step's, or the
  // interactive step's) is no srun step either.
  for (const std::string sentinel : {"4294967291", "4294967294", "4294967290", "-5", "batch"}) {
    EnvMap env = batch;
    env["SLURM_STEP_ID"] = sentinel;
    EXPECT_TRUE(contains(error_of([&] { read_dist_environment(env); }), "batch script of Slurm job 4242")) << sentinel;
  }
  // A task of srun: a real step id.
  EnvMap step = batch;
  step["SLURM_STEP_ID"] = "0";
  step["SLURM_STEPID"] = "0";
  EXPECT_EQ(read_dist_environment(step).world_size, 8);
  EnvMap old = batch;
  old["SLURM_STEPID"] = "3";  // only the older name
  EXPECT_EQ(read_dist_environment(old).world_size, 8);
  // A batch script of one task is a world of one, not an error.
  EnvMap one = batch;
  one["SLURM_NTASKS"] = "1";
  one["SLURM_TASKS_PER_NODE"] = "1";
  EXPECT_EQ(read_dist_environment(one).world_size, 1);
}

// The variables Debian 12's Open MPI 4.1 sets (mpirun -np 2 on one host):
// OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK. One node
// needs no MASTER_ADDR.
TEST(DistEnvironment, OpenMpiOnOneNodeNeedsNoMaster) {
  const DistEnvironment e = read_dist_environment(EnvMap{{"OMPI_COMM_WORLD_RANK", "1"},
                                                         {"OMPI_COMM_WORLD_SIZE", "2"},
                                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                         {"OMPI_COMM_WORLD_NODE_RANK", "1"},
                                                         {"OMPI_UNIVERSE_SIZE", "2"},
                                                         {"PMIX_RANK", "1"}});
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master(), "127.0.0.1:29500");
}

// ---- the job secret ---------------------------------------------------------------

TEST(DistSecret, Sha256AndHmacMatchTheStandardVectors) {
  using distributed::hmac_sha256;
  using distributed::sha256;
  auto hex = [](const distributed::Digest& d) {
    return distributed::to_hex(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
  };
  // FIPS 180-4 examples, and the lengths around a block's padding.
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256(std::string(1000000, 'a'))), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // RFC 4231 cases 1, 2 and 6 (a key longer than a block).
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_TRUE(distributed::constant_time_equal("abc", "abc"));
  EXPECT_FALSE(distributed::constant_time_equal("abc", "abd"));
  EXPECT_FALSE(distributed::constant_time_equal("abc", "ab"));
  // A secret: 32 hexadecimal digits, a fresh one each time.
  const std::string a = distributed::generate_job_secret(), b = distributed::generate_job_secret();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(DistSecret, TheFileIsThisUsersAlone) {
  test::TempDir tmp;
  const std::string runtime = tmp.file("run");
  std::filesystem::create_directories(runtime);
  const std::string dir = distributed::secret_directory(runtime);
  EXPECT_EQ(dir, runtime + "/anatomy");
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const std::string path = distributed::secret_file_path(dir, 4321);
  EXPECT_EQ(path, dir + "/store-4321.secret");
  EXPECT_FALSE(distributed::read_secret_file(path).has_value()) << "nothing published yet";
  {
    distributed::PublishedSecret published(path, kSecret);
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(distributed::read_secret_file(path), kSecret);
    // Readable by others: refused.
    ::chmod(path.c_str(), 0644);
    EXPECT_TRUE(contains(error_of([&] { distributed::read_secret_file(path); }), "is not this user's file of mode 0600"));
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "removed with the run";
  // A link in its place is not followed.
  std::filesystem::create_symlink("/etc/hostname", path);
  EXPECT_TRUE(contains(error_of([&] { distributed::read_secret_file(path); }), "cannot read the job secret")) << path;
  std::filesystem::remove(path);
  // A directory of someone else's (here: made by root for uid 65534) is refused.
  if (::geteuid() == 0) {
    const std::string other = tmp.file("other");
    std::filesystem::create_directories(other + "/anatomy");
    ASSERT_EQ(::chown((other + "/anatomy").c_str(), 65534, 65534), 0);
    EXPECT_TRUE(contains(error_of([&] { distributed::secret_directory(other); }), "is not a directory of this user"));
  }
  // A directory of ours that others may enter is closed to them.
  ::chmod(dir.c_str(), 0755);
  EXPECT_EQ(distributed::secret_directory(runtime), dir);
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// ---- the store --------------------------------------------------------------------

// The store listens on the address the ranks are given (MASTER_ADDR), not on
// every interface: localhost is loopback only; 0.0.0.0 asks for every one.
TEST(DistStore, ListensOnTheMasterAddressOnly) {
  StoreServer local(0, 2, "localhost", kSecret);
  EXPECT_EQ(local.address(), "127.0.0.1");
  StoreClient a("127.0.0.1", local.port(), 0, 2, kSecret, Seconds(5));
  StoreServer any(0, 2, "0.0.0.0", kSecret);
  EXPECT_EQ(any.address(), "0.0.0.0");
  try {
    StoreServer nowhere(0, 2, "no-such-host.invalid", kSecret);
    FAIL() << "listened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resolve 'no-such-host.invalid'"), std::string::npos) << e.what();
  }
}

// Lines that a store logs, kept for a test.
struct LogLines {
  std::mutex mutex;
  std::vector<std::string> lines;
  distributed::StoreServerOptions::Log sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mutex);
      lines.push_back(line);
    };
  }
  std::vector<std::string> get() {
    std::lock_guard lock(mutex);
    return lines;
  }
};

// How many of `lines` refuse a connection from loopback for `reason`.
size_t refusals(const std::vector<std::string>& lines, const std::string& reason) {
  size_t n = 0;
  for (const std::string& l : lines)
    n += contains(l, "store: refused a connection from 127.0.0.1:") && contains(l, ": " + reason);
  return n;
}

// No secret, a wrong one, garbage, an oversized length, a half frame, a
// hello for a rank without its proof: each is refused with one line, and
// the ranks carry on.
TEST(DistStore, StrangersAreRefusedAndLogged) {
  LogLines log;
  distributed::StoreServerOptions options;
  options.handshake_timeout = Seconds(1);
  options.log = log.sink();
  StoreServer server(0, 2, "127.0.0.1", kSecret, options);
  StoreClient a("127.0.0.1", server.port(), 0, 2, kSecret, Seconds(5));
  const std::vector<std::string> reasons = stranger_attempts(server.port(), 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::vector<std::string> lines = log.get();
  EXPECT_EQ(lines.size(), reasons.size()) << testing::PrintToString(lines);
  EXPECT_EQ(server.refused_connections(), static_cast<int64_t>(reasons.size()));
  std::map<std::string, size_t> expected;
  for (const std::string& r : reasons) ++expected[r];
  for (const auto& [reason, n] : expected) EXPECT_EQ(refusals(lines, reason), n) << reason;
  // The stranger's hellos for rank 1 did not take its place: rank 1 joins.
  StoreClient b("127.0.0.1", server.port(), 1, 2, kSecret, Seconds(5));
  a.set("k", "v");
  EXPECT_EQ(b.get("k", Seconds(1)), "v");
  auto other = std::async(std::launch::async, [&] { b.barrier("after", Seconds(5)); });
  EXPECT_NO_THROW(a.barrier("after", Seconds(5)));
  EXPECT_NO_THROW(other.get());
  // A client with another secret hears that the store does not know its own
  // (the store proves itself first), and sends no proof.
  const std::string wrong = error_of(
      [&] { StoreClient c("127.0.0.1", server.port(), 1, 2, "another-secret-0123456789", Seconds(5)); });
  EXPECT_TRUE(contains(wrong, "does not know rank 1's job secret: the ranks hold different ANATOMY_JOB_SECRET values"))
      << wrong;
  // One of the job's own processes claiming rank 1 again is refused and
  // displaces nothing.
  const std::string twice = error_of([&] { StoreClient c("127.0.0.1", server.port(), 1, 2, kSecret, Seconds(5)); });
  EXPECT_TRUE(contains(twice, "rank 1 joined twice")) << twice;
  EXPECT_NO_THROW(b.check_alive());
  EXPECT_EQ(b.add("n", 1), 1);
  a.close();
  b.close();
  EXPECT_TRUE(server.wait_until_all_left(Seconds(5)));
}

// Connections that never authenticate cannot crowd a rank out: past
// max_pending the oldest is closed.
TEST(DistStore, IdleStrangersCannotCrowdOutARank) {
  LogLines log;
  distributed::StoreServerOptions options;
  options.handshake_timeout = Seconds(30);
  options.max_pending = 4;
  options.log = log.sink();
  StoreServer server(0, 1, "127.0.0.1", kSecret, options);
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 10; ++i) idle.push_back(std::make_unique<RawConnection>(server.port()));
  const auto start = Clock::now();
  StoreClient a("127.0.0.1", server.port(), 0, 1, kSecret, Seconds(5));
  EXPECT_LT(seconds_since(start), 2.0);
  a.set("k", "v");
  // The oldest went first.
  idle.front()->receive(5);
  EXPECT_TRUE(idle.front()->closed());
  EXPECT_GE(refusals(log.get(), "4 connections awaiting authentication: the oldest is closed"), 6u);
  a.close();
}

// The parser without sockets (what fuzz/fuzz_store.cpp drives).
TEST(DistStore, TheWireParserAloneRefusesWhatIsNoHandshake) {
  using distributed::feed_store_connection;
  const auto http = feed_store_connection(kSecret, 2, "GET / HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(http.closed);
  EXPECT_FALSE(http.authenticated);
  ASSERT_EQ(http.log.size(), 1u);
  EXPECT_EQ(http.log[0], "store: refused a connection from 192.0.2.1:4321: a frame of 1195725856 bytes, over the "
                         "limit of 256");
  // A hello in pieces of three bytes is answered with the store's nonce and
  // proof; a stream that ends there never authenticated.
  const auto hello = feed_store_connection(kSecret, 2, frame(hello_body(1, 2)), 3);
  EXPECT_EQ(hello.replies.size(), 4u + 61u);
  EXPECT_FALSE(hello.closed);
  EXPECT_FALSE(hello.authenticated);
  ASSERT_EQ(hello.log.size(), 1u);
  EXPECT_TRUE(contains(hello.log[0], "closed without proving that it knows the job secret")) << hello.log[0];
  // A proof of nothing.
  const auto zeros = feed_store_connection(
      kSecret, 2, frame(hello_body(1, 2)) + frame(std::string(1, '\x0a') + std::string(32, '\0')));
  EXPECT_TRUE(zeros.closed);
  EXPECT_TRUE(contains(zeros.replies, "wrong job secret"));
  ASSERT_EQ(zeros.log.size(), 1u);
  EXPECT_TRUE(contains(zeros.log[0], ": wrong job secret")) << zeros.log[0];
  // Trailing bytes in a hello, a truncated one, an empty frame.
  for (const std::string& bad : {frame(hello_body(1, 2) + "x"), frame(hello_body(1, 2).substr(0, 20)), frame("")}) {
    const auto r = feed_store_connection(kSecret, 2, bad);
    EXPECT_TRUE(r.closed);
    ASSERT_EQ(r.log.size(), 1u);
    EXPECT_TRUE(contains(r.log[0], ": a malformed frame")) << r.log[0];
  }
  // Behind the handshake (a connection of rank 0): requests are answered; a
  // malformed one closes the connection without a refusal.
  const std::string set = frame(std::string(1, '\x02') + be32(1) + "k" + be32(1) + "v");
  const auto ok = feed_store_connection(kSecret, 2, set, 0, 0);
  EXPECT_TRUE(ok.authenticated);
  EXPECT_FALSE(ok.closed);
  EXPECT_EQ(ok.replies, frame(std::string(1, '\0') + be32(0) + be64(0)));
  const auto bad = feed_store_connection(kSecret, 2, frame(std::string(1, '\x02') + be32(100)), 0, 0);
  EXPECT_TRUE(bad.closed);
  EXPECT_TRUE(bad.log.empty());
}

TEST(DistStore, SetGetAddWait) {
  StoreServer server(0, 2, "127.0.0.1", kSecret);
  StoreClient a("127.0.0.1", server.port(), 0, 2, kSecret, Seconds(5));
  StoreClient b("localhost", server.port(), 1, 2, kSecret, Seconds(5));
  a.set("x", "hello");
  EXPECT_EQ(b.get("x", Seconds(1)), "hello");
  // Binary values, such as an NCCL id: every byte value, zeros included.
  std::string blob(128, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 2);
  a.set("blob", blob);
  EXPECT_EQ(b.get("blob", Seconds(1)), blob);
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 7);
  EXPECT_EQ(a.add("n", -1), 6);
  EXPECT_EQ(b.get("n", Seconds(1)), "6");
  EXPECT_TRUE(contains(error_of([&] { a.add("x", 1); }), "key 'x' holds no counter"));
  // A counter past 2^63 is refused, not wrapped (found by fuzz_store: a signed overflow); the store goes on.
  EXPECT_EQ(a.add("big", std::numeric_limits<int64_t>::max()), std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(contains(error_of([&] { b.add("big", 1); }), "counter 'big' would overflow"));
  EXPECT_EQ(b.add("big", -1), std::numeric_limits<int64_t>::max() - 1);
  // get waits for a set that comes later.
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a.set("late", "v");
  });
  EXPECT_EQ(b.get("late", Seconds(5)), "v");
  later.get();
  EXPECT_NO_THROW(b.wait({"x", "late", "n"}, Seconds(1)));
  a.close();
  b.close();
}

TEST(DistStore, TimeoutsNameWhatWasAwaited) {
  StoreServer server(0, 2, "127.0.0.1", kSecret);
  StoreClient a("127.0.0.1", server.port(), 0, 2, kSecret, Seconds(5));
  StoreClient b("127.0.0.1", server.port(), 1, 2, kSecret, Seconds(5));
  const auto start = Clock::now();
  const std::string get = error_of([&] { a.get("nccl-id", Seconds(0.2)); });
  EXPECT_TRUE(contains(get, "key 'nccl-id' was not set within 0.2 s")) << get;
  EXPECT_LT(seconds_since(start), 2.0);
  a.set("present", "1");
  const std::string wait = error_of([&] { a.wait({"present", "p", "q"}, Seconds(0.2)); });
  EXPECT_TRUE(contains(wait, "keys 'p', 'q' were not set within 0.2 s")) << wait;
  const std::string barrier = error_of([&] { a.barrier("step", Seconds(0.2)); });
  EXPECT_TRUE(contains(barrier, "rank 1 of 2 did not reach barrier 'step' within 0.2 s")) << barrier;
  // The store still works after timeouts, and a reused barrier name is a new round.
  for (int round = 0; round < 3; ++round) {
    auto other = std::async(std::launch::async, [&] { b.barrier("step", Seconds(5)); });
    EXPECT_NO_THROW(a.barrier("step", Seconds(5)));
    EXPECT_NO_THROW(other.get());
  }
  a.close();
  b.close();
}

TEST(DistStore, ClientConnectsBeforeTheServerExists) {
  const int port = free_port();
  auto client = std::async(std::launch::async, [&] {
    auto c = std::make_unique<StoreClient>("127.0.0.1", port, 1, 2, kSecret, Seconds(10));
    return c->get("k", Seconds(10));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StoreServer server(port, 2, "127.0.0.1", kSecret);
  StoreClient rank0("127.0.0.1", port, 0, 2, kSecret, Seconds(5));
  rank0.set("k", "v");
  EXPECT_EQ(client.get(), "v");
}

TEST(DistStore, NoServerIsAClearErrorAfterTheTimeout) {
  const int port = free_port();
  const auto start = Clock::now();
  const std::string e = error_of([&] { StoreClient c("127.0.0.1", port, 1, 2, kSecret, Seconds(0.5)); });
  EXPECT_TRUE(contains(e, "could not reach the store at 127.0.0.1:" + std::to_string(port) + " within 0.5 s")) << e;
  EXPECT_LT(seconds_since(start), 3.0);
  const std::string resolve = error_of([] { StoreClient c("no-such-host.invalid", 1, 1, 2, kSecret, Seconds(0.2)); });
  EXPECT_TRUE(contains(resolve, "cannot resolve 'no-such-host.invalid'")) << resolve;
}

TEST(DistStore, WrongWorldAndDuplicateRanksAreRefused) {
  StoreServer server(0, 2, "127.0.0.1", kSecret);
  StoreClient a("127.0.0.1", server.port(), 0, 2, kSecret, Seconds(5));
  const std::string twice = error_of([&] { StoreClient again("127.0.0.1", server.port(), 0, 2, kSecret, Seconds(5)); });
  EXPECT_TRUE(contains(twice, "rank 0 joined twice")) << twice;
  const std::string world = error_of([&] { StoreClient other("127.0.0.1", server.port(), 1, 3, kSecret, Seconds(5)); });
  EXPECT_TRUE(contains(world, "world of 3 ranks but the store (rank 0) serves 2")) << world;
  a.close();
}

TEST(DistStore, AFailedRankEndsEveryWait) {
  StoreServer server(0, 3, "127.0.0.1", kSecret);
  StoreClient a("127.0.0.1", server.port(), 0, 3, kSecret, Seconds(5));
  StoreClient b("127.0.0.1", server.port(), 1, 3, kSecret, Seconds(5));
  auto c = std::make_unique<StoreClient>("127.0.0.1", server.port(), 2, 3, kSecret, Seconds(5));
  EXPECT_NO_THROW(a.check_alive());
  auto waiting = std::async(std::launch::async, [&] { return error_of([&] { b.barrier("b", Seconds(30)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  c.reset();  // rank 2 goes without finishing: it failed
  const std::string barrier = waiting.get();
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_TRUE(contains(barrier, "rank 2 stopped with an error while rank 1 was waiting at barrier 'b'")) << barrier;
  EXPECT_TRUE(contains(error_of([&] { a.get("never", Seconds(30)); }), "rank 2")) << "waits fail at once from now on";
  EXPECT_TRUE(contains(error_of([&] { a.check_alive(); }), "rank 2 stopped with an error"));
}

TEST(DistStore, AFinishedRankIsNoFailure) {
  StoreServer server(0, 2, "127.0.0.1", kSecret);
  StoreClient a("127.0.0.1", server.port(), 0, 2, kSecret, Seconds(5));
  auto b = std::make_unique<StoreClient>("127.0.0.1", server.port(), 1, 2, kSecret, Seconds(5));
  b->set("result", "42");
  b->close(true);
  EXPECT_NO_THROW(a.check_alive());
  EXPECT_EQ(a.get("result", Seconds(1)), "42");
  // ... but a barrier that waits for it can never complete.
  EXPECT_TRUE(contains(error_of([&] { a.barrier("end", Seconds(30)); }), "rank 1 finished without reaching barrier"));
  a.close();
  EXPECT_TRUE(server.wait_until_all_left(Seconds(5)));
}

TEST(DistStore, WatchdogSeesAFrozenRank) {
  StoreServer server(0, 2, "127.0.0.1", kSecret);
  std::promise<std::string> seen;
  StoreClient a("127.0.0.1", server.port(), 0, 2, kSecret, Seconds(5));
  StoreClient b("127.0.0.1", server.port(), 1, 2, kSecret, Seconds(5));
  a.start_watchdog(Seconds(0.5), [&](const std::string& message) { seen.set_value(message); });
  b.start_watchdog(Seconds(0.5), [](const std::string&) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // a healthy while: no alarm
  const auto start = Clock::now();
  b.freeze_heartbeats_for_testing();
  auto message = seen.get_future();
  ASSERT_EQ(message.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(seconds_since(start), 2.0);
  const std::string text = message.get();
  EXPECT_TRUE(contains(text, "rank 1 stopped responding (no heartbeat for 0.5 s); rank 0 stops")) << text;
}

TEST(DistStore, WatchdogSeesTheStoreGo) {
  std::promise<std::string> seen;
  auto server = std::make_unique<StoreServer>(0, 2, "127.0.0.1", kSecret);
  StoreClient b("127.0.0.1", server->port(), 1, 2, kSecret, Seconds(5));
  b.start_watchdog(Seconds(5), [&](const std::string& message) { seen.set_value(message); });
  server.reset();  // rank 0's process is gone
  auto message = seen.get_future();
  ASSERT_EQ(message.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(contains(message.get(), "rank 0, which hosts it, died or is unreachable"));
}

TEST(DistStore, RendezvousInProcess) {
  const int port = free_port();
  auto rank = [&](int r) {
    DistEnvironment env;
    env.rank = r;
    env.world_size = 2;
    env.local_rank = r;
    env.local_world_size = 2;
    env.master_port = port;
    env.timeout_seconds = 10;
    distributed::DistSession session = distributed::rendezvous(env, Seconds(10));
    session.store().barrier("after", Seconds(10));
    session.finish();
  };
  auto one = std::async(std::launch::async, rank, 1);
  rank(0);
  EXPECT_NO_THROW(one.get());
  // A world of one needs nobody and no port.
  DistEnvironment single;
  distributed::DistSession session = distributed::rendezvous(single, Seconds(1));
  session.store().set("k", "v");
  EXPECT_EQ(session.store().get("k", Seconds(1)), "v");
  session.finish();
}

TEST(DistStore, RendezvousNamesTheRanksThatNeverJoined) {
  DistEnvironment env;
  env.world_size = 3;
  env.local_world_size = 3;
  env.master_port = free_port();
  const auto start = Clock::now();
  const std::string e = error_of([&] { distributed::rendezvous(env, Seconds(0.5)); });
  EXPECT_EQ(e, "ranks 1, 2 of 3 never joined within 0.5 s (MASTER_ADDR=127.0.0.1:" +
                   std::to_string(env.master_port) + ")");
  EXPECT_LT(seconds_since(start), 3.0);
}

// ---- anatomy launch and dist-check --------------------------------------------------

TEST(DistLaunch, ThreeRanksShareTheBlob) {
  Process p({"launch", "--nproc-per-node", "3", "--master-port", std::to_string(free_port()), "--", "dist-check"},
            {});
  ASSERT_EQ(p.wait(30), 0) << p.output();
  const auto lines = ok_lines(p.output(), 3);
  ASSERT_EQ(lines.size(), 3u) << p.output();
  EXPECT_EQ(lines.at(0), lines.at(1));
  EXPECT_EQ(lines.at(0), lines.at(2));
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(contains(p.output(), "[rank " + std::to_string(r) + "] rank " + std::to_string(r) + " of 3: ok"))
        << p.output();
}

TEST(DistLaunch, NoPrefixPassesTheOutputAsItIs) {
  Process p({"launch", "--nproc-per-node", "2", "--no-prefix", "--master-port", std::to_string(free_port()), "--",
             "dist-check"},
            {});
  ASSERT_EQ(p.wait(30), 0) << p.output();
  EXPECT_EQ(ok_lines(p.output(), 2).size(), 2u) << p.output();
  EXPECT_FALSE(contains(p.output(), "[rank")) << p.output();
}

TEST(DistLaunch, AFailingRankEndsTheRun) {
  const auto start = Clock::now();
  Process p({"launch", "--nproc-per-node", "3", "--rendezvous-timeout", "20", "--master-port",
             std::to_string(free_port()), "--", "dist-check", "--fail-rank", "1"},
            {});
  // The failing rank's code, even when the others' reactions are collected first.
  EXPECT_EQ(p.wait(60), 7) << p.output();
  EXPECT_FALSE(p.timed_out());
  EXPECT_LT(seconds_since(start), 20.0) << "within the timeout";
  EXPECT_TRUE(contains(p.output(), "error: rank 1 exited with code 7")) << p.output();
  EXPECT_EQ(ok_lines(p.output(), 3).size(), 0u) << p.output();
}

TEST(DistLaunch, AFrozenRankEndsTheRunWithinTheTimeout) {
  const auto start = Clock::now();
  Process p({"launch", "--nproc-per-node", "2", "--rendezvous-timeout", "2", "--master-port",
             std::to_string(free_port()), "--", "dist-check", "--hang-rank", "1"},
            {});
  const int code = p.wait(60);
  EXPECT_NE(code, 0) << p.output();
  EXPECT_FALSE(p.timed_out());
  EXPECT_LT(seconds_since(start), 12.0) << p.output();
  // Rank 0 saw rank 1 fall silent (or miss the barrier) and said so.
  const std::regex named(R"(\[rank 0\] error: rank 1 (stopped responding|of 2 did not reach barrier))");
  EXPECT_TRUE(std::regex_search(p.output(), named)) << p.output();
  // Rank 1 never exits (it is frozen): the launcher names rank 0 and stops
  // rank 1. Rank 0 either learnt from the store that rank 1 fell silent (it
  // followed a failure: 75) or timed out at the barrier first (1): both
  // clocks run out at about the same time.
  if (contains(p.output(), "stopped responding")) {
    EXPECT_EQ(code, distributed::kPeerFailureExitCode) << p.output();
    EXPECT_TRUE(contains(p.output(), "error: rank 0 exited with code 75 (it stopped because another rank failed)"))
        << p.output();
  } else {
    EXPECT_EQ(code, 1) << p.output();
    EXPECT_TRUE(contains(p.output(), "error: rank 0 exited with code 1")) << p.output();
  }
}

TEST(DistLaunch, AStalledRankIsNamedAtTheBarrier) {
  // Alive (its watchdog sends heartbeats) but stuck: the barrier names it.
  const auto start = Clock::now();
  Process p({"launch", "--nproc-per-node", "2", "--rendezvous-timeout", "1", "--master-port",
             std::to_string(free_port()), "--", "dist-check", "--stall-rank", "1"},
            {});
  EXPECT_EQ(p.wait(60), 1) << p.output();
  EXPECT_LT(seconds_since(start), 10.0) << p.output();
  EXPECT_TRUE(contains(p.output(), "[rank 0] error: rank 1 of 2 did not reach barrier 'dist-check' within 1 s"))
      << p.output();
  // Rank 0 failed first; rank 1 followed (75) and is not the one named.
  EXPECT_TRUE(contains(p.output(), "error: rank 0 exited with code 1")) << p.output();
}

TEST(DistLaunch, ARankThatNeverStartsIsNamed) {
  const int port = free_port();
  const auto start = Clock::now();
  Process p({"dist-check", "--timeout", "1"},
            {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}});
  EXPECT_EQ(p.wait(30), 1) << p.output();
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_TRUE(contains(p.output(), "error: rank 1 of 2 never joined within 1 s (MASTER_ADDR=127.0.0.1:" +
                                       std::to_string(port) + ")"))
      << p.output();
  // And seen from rank 1: no rank 0 at the address.
  Process q({"dist-check", "--timeout", "0.5"},
            {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}});
  EXPECT_EQ(q.wait(30), 1) << q.output();
  EXPECT_TRUE(contains(q.output(), "error: rank 0 of 2 never joined within 0.5 s")) << q.output();
}

TEST(DistLaunch, ADeadRankIsNamedByTheOthers) {
  // Without the launcher (which would stop the others first), the survivor
  // must see the death through the store.
  const std::string port = std::to_string(free_port());
  const auto start = Clock::now();
  Process zero({"dist-check", "--fail-rank", "1", "--timeout", "30"},
               {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  Process one({"dist-check", "--fail-rank", "1", "--timeout", "30"},
              {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
  EXPECT_EQ(one.wait(60), 7) << one.output();
  EXPECT_EQ(zero.wait(60), distributed::kPeerFailureExitCode) << zero.output();
  EXPECT_LT(seconds_since(start), 15.0) << "long before the 30 s timeout";
  EXPECT_TRUE(contains(zero.output(), "error: rank 1 died (its connection to the store closed)")) << zero.output();
}

TEST(DistLaunch, TwoNodesOnOneHost) {
  const std::string port = std::to_string(free_port());
  auto node = [&](const std::string& rank) {
    return std::vector<std::string>{"launch",        "--nproc-per-node", "1",         "--nnodes", "2",
                                    "--node-rank",   rank,               "--master-addr", "127.0.0.1",
                                    "--master-port", port,               "--rendezvous-timeout", "20",
                                    "--",            "dist-check"};
  };
  Process one(node("1"), {});  // the second node first: it waits for the master
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Process zero(node("0"), {});
  ASSERT_EQ(zero.wait(60), 0) << zero.output();
  ASSERT_EQ(one.wait(60), 0) << one.output();
  const auto a = ok_lines(zero.output(), 2), b = ok_lines(one.output(), 2);
  ASSERT_EQ(a.size(), 1u) << zero.output();
  ASSERT_EQ(b.size(), 1u) << one.output();
  EXPECT_EQ(a.count(0), 1u);
  EXPECT_EQ(b.count(1), 1u);
  EXPECT_EQ(a.at(0), b.at(1));
}

// ---- strangers and other launchers, end to end ----------------------------------------

// The flags of a short CPU training run of two ranks (bert-tiny, dropout on:
// each rank draws its masks from the seed, so two runs give the same bits).
std::vector<std::string> tiny_training(const std::string& output_dir) {
  return {"train", "--device", "cpu", "--model", "bert-tiny", "--dummy-size", "64", "--dummy-seq-len", "16",
          "--max-steps", "24", "--logging-steps", "1", "--per-device-train-batch-size", "4", "--learning-rate", "1e-3",
          "--seed", "5", "--no-progress", "--output-dir", output_dir};
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// The same steps with the same losses and gradient norms, bit for bit (as
// log.jsonl prints them).
void expect_same_losses(const std::string& dir_a, const std::string& dir_b) {
  const auto a = test::log_records(dir_a), b = test::log_records(dir_b);
  ASSERT_EQ(a.size(), 24u) << dir_a;
  ASSERT_EQ(b.size(), a.size()) << dir_b;
  for (const auto& [step, x] : a) {
    ASSERT_TRUE(b.count(step)) << "step " << step;
    EXPECT_EQ(x["loss"].dump(), b.at(step)["loss"].dump()) << "step " << step;
    if (x.contains("grad_norm")) EXPECT_EQ(x["grad_norm"].dump(), b.at(step)["grad_norm"].dump()) << "step " << step;
  }
}

// The issue's stranger test: while rank 0 waits for rank 1, a stranger tries
// every way in (no secret, a wrong one, garbage, an oversized length, a half
// frame then silence, a hello for rank 1 without the secret), and keeps
// knocking while the two ranks train. Every attempt is refused with a line on
// rank 0's stderr; the run ends well, with the losses of the same run
// without the stranger (started by anatomy launch), bit for bit.
TEST(DistLaunch, StrangerAttemptsLeaveTheTrainingUndisturbed) {
  test::TempDir tmp;
  const std::string quiet = tmp.file("quiet"), visited = tmp.file("visited");
  {
    std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(free_port()),
                                     "--"};
    for (const std::string& a : tiny_training(quiet)) args.push_back(a);
    Process p(args, {});
    ASSERT_EQ(p.wait(600), 0) << p.output();
  }
  const int port = free_port();
  auto rank = [&](int r) {
    std::vector<std::string> args = tiny_training(visited);
    return std::make_unique<Process>(args, std::map<std::string, std::string>{{"RANK", std::to_string(r)},
                                                                              {"WORLD_SIZE", "2"},
                                                                              {"MASTER_ADDR", "127.0.0.1"},
                                                                              {"MASTER_PORT", std::to_string(port)},
                                                                              {"ANATOMY_JOB_SECRET", kSecret},
                                                                              {"ANATOMY_DIST_TIMEOUT", "20"}});
  };
  auto zero = rank(0);
  // The store gives a stranger a quarter of the timeout (5 s) to authenticate.
  const std::vector<std::string> reasons = stranger_attempts(port, 5.0, 60.0);
  auto one = rank(1);
  // More knocking while they train: garbage and hellos without a proof.
  std::atomic<bool> done{false};
  std::atomic<int> knocks{0};
  std::thread knocker([&] {
    while (!done) {
      RawConnection c(port);
      if (!c.connected()) break;
      c.send(knocks % 2 ? frame(hello_body(1, 2)) + frame(std::string(33, '\x0a')) : std::string("\xff\xff\xff\xff"));
      c.receive(2);
      ++knocks;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const int code1 = one->wait(600), code0 = zero->wait(600);
  done = true;
  knocker.join();
  ASSERT_EQ(code0, 0) << zero->output();
  ASSERT_EQ(code1, 0) << one->output();
  const std::string& out = zero->output();
  std::map<std::string, size_t> expected;
  for (const std::string& r : reasons) ++expected[r];
  for (const auto& [reason, n] : expected) {
    std::vector<std::string> lines;
    for (size_t at = 0, end; (end = out.find('\n', at)) != std::string::npos; at = end + 1)
      lines.push_back(out.substr(at, end - at));
    EXPECT_GE(refusals(lines, reason), n) << reason << "\n" << out;
  }
  EXPECT_FALSE(contains(one->output(), "refused")) << "rank 1 hosts no store";
  EXPECT_GT(knocks.load(), 0) << "the stranger knocked while they trained";
  expect_same_losses(quiet, visited);
}

// torchrun's workers: its agent holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE),
// and no secret comes with them. Rank 0's store takes the next port and
// hands a secret to the other ranks of this host in a file of this user's;
// the run trains as anatomy launch does.
TEST(DistLaunch, TorchrunStyleRanksBesideTheAgentsStore) {
  test::TempDir tmp;
  // The agent's store: a listening socket at MASTER_PORT.
  const int agent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(agent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(agent, 16), 0);
  ::getsockname(agent, reinterpret_cast<sockaddr*>(&addr), &len);
  const int master_port = ntohs(addr.sin_port);
  const std::string runtime = tmp.file("runtime");
  std::filesystem::create_directories(runtime);
  auto worker = [&](int r, const std::vector<std::string>& args) {
    return std::make_unique<Process>(args, std::map<std::string, std::string>{
                                               {"RANK", std::to_string(r)},
                                               {"LOCAL_RANK", std::to_string(r)},
                                               {"GROUP_RANK", "0"},
                                               {"WORLD_SIZE", "2"},
                                               {"LOCAL_WORLD_SIZE", "2"},
                                               {"MASTER_ADDR", "127.0.0.1"},
                                               {"MASTER_PORT", std::to_string(master_port)},
                                               {"TORCHELASTIC_RUN_ID", "none"},
                                               {"TORCHELASTIC_RESTART_COUNT", "0"},
                                               {"TORCHELASTIC_MAX_RESTARTS", "0"},
                                               {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                               {"XDG_RUNTIME_DIR", runtime},
                                               {"ANATOMY_DIST_TIMEOUT", "60"}});
  };
  const std::string secret_file = runtime + "/anatomy/store-" + std::to_string(master_port + 1) + ".secret";
  {
    // Rank 1 first: it waits for rank 0's secret.
    auto one = worker(1, {"dist-check"});
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto zero = worker(0, {"dist-check"});
    ASSERT_EQ(zero->wait(60), 0) << zero->output();
    ASSERT_EQ(one->wait(60), 0) << one->output();
    EXPECT_EQ(ok_lines(zero->output(), 2).size(), 1u) << zero->output();
    EXPECT_EQ(ok_lines(one->output(), 2).size(), 1u) << one->output();
    EXPECT_FALSE(std::filesystem::exists(secret_file)) << "rank 0 removes its secret when the run ends";
  }
  // A secret file left by an earlier run on that port (killed before it
  // could remove it) is replaced, and rank 1 reads again.
  {
    const std::string stale = "stale-secret-0123456789abcdef\n";
    std::ofstream(secret_file) << stale;
    ::chmod(secret_file.c_str(), 0600);
    auto one = worker(1, {"dist-check"});
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto zero = worker(0, {"dist-check"});
    ASSERT_EQ(zero->wait(60), 0) << zero->output();
    ASSERT_EQ(one->wait(60), 0) << one->output();
  }
  // Training: the losses of anatomy launch's run.
  const std::string launched = tmp.file("launched"), torchrun = tmp.file("torchrun");
  {
    std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(free_port()),
                                     "--"};
    for (const std::string& a : tiny_training(launched)) args.push_back(a);
    Process p(args, {});
    ASSERT_EQ(p.wait(600), 0) << p.output();
  }
  auto zero = worker(0, tiny_training(torchrun));
  auto one = worker(1, tiny_training(torchrun));
  ASSERT_EQ(zero->wait(600), 0) << zero->output();
  ASSERT_EQ(one->wait(600), 0) << one->output();
  expect_same_losses(launched, torchrun);
  ::close(agent);
}

// Several nodes and no secret: one line saying to set it, at once.
TEST(DistLaunch, SeveralNodesWithoutASecretStopAtOnce) {
  const auto start = Clock::now();
  Process p({"dist-check"}, {{"RANK", "1"},
                             {"WORLD_SIZE", "4"},
                             {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "192.0.2.7"},
                             {"MASTER_PORT", std::to_string(free_port())}});
  EXPECT_EQ(p.wait(30), 1) << p.output();
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_TRUE(contains(p.output(), "error: ANATOMY_JOB_SECRET is not set, and the 4 ranks run on several nodes (2 on "
                                   "this one, MASTER_ADDR=192.0.2.7): set it to the same random value for every rank"))
      << p.output();
  // anatomy launch says so before it starts anything.
  Process l({"launch", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1", "--master-addr", "192.0.2.7",
             "--", "dist-check"},
            {});
  EXPECT_EQ(l.wait(30), 1) << l.output();
  EXPECT_TRUE(contains(l.output(), "error: launch: --nnodes 2 on several hosts needs ANATOMY_JOB_SECRET")) << l.output();
}

// An sbatch script that runs anatomy itself, not through srun: it stops at
// once with one line instead of waiting for ranks that never come.
TEST(DistLaunch, SlurmBatchScriptStopsAtOnce) {
  const auto start = Clock::now();
  Process p({"train", "--device", "cpu", "--model", "bert-tiny", "--max-steps", "1", "--no-progress"},
            {{"SLURM_JOB_ID", "77"},
             {"SLURM_PROCID", "0"},
             {"SLURM_LOCALID", "0"},
             {"SLURM_NODEID", "0"},
             {"SLURM_NTASKS", "2"},
             {"SLURM_TASKS_PER_NODE", "2"},
             {"SLURM_JOB_NODELIST", "localhost"},
             {"ENVIRONMENT", "BATCH"}});
  EXPECT_EQ(p.wait(60), 1) << p.output();
  EXPECT_LT(seconds_since(start), 10.0) << "no wait for the missing rank";
  EXPECT_TRUE(contains(p.output(), "error: this process is the batch script of Slurm job 77")) << p.output();
  EXPECT_TRUE(contains(p.output(), "start them with srun")) << p.output();
}

// Open MPI's mpirun (Debian's openmpi-bin, which scripts/install-deps.sh
// installs) starts two CPU ranks that train as anatomy launch's do.
TEST(DistLaunch, MpirunTrainsAsLaunchDoes) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun is not installed (scripts/install-deps.sh installs Debian's openmpi-bin)";
  test::TempDir tmp;
  const std::string launched = tmp.file("launched"), mpi = tmp.file("mpi"), runtime = tmp.file("runtime");
  std::filesystem::create_directories(runtime);
  {
    std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--master-port", std::to_string(free_port()),
                                     "--"};
    for (const std::string& a : tiny_training(launched)) args.push_back(a);
    Process p(args, {});
    ASSERT_EQ(p.wait(600), 0) << p.output();
  }
  // No MASTER_ADDR (one node: loopback) and no secret (rank 0 hands one over
  // in a file); a free port, passed as mpirun passes variables.
  const std::string mpirun = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u "
                             "ANATOMY_JOB_SECRET -u ANATOMY_LAUNCHED mpirun -np 2 --oversubscribe" +
                             std::string(::geteuid() == 0 ? " --allow-run-as-root" : "") +
                             " -x MASTER_PORT=" + std::to_string(free_port()) + " -x XDG_RUNTIME_DIR=" + runtime;
  const auto r = test::run_anatomy(joined(tiny_training(mpi)), mpirun);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_losses(launched, mpi);
}

TEST(DistLaunch, BadFlagsAreOneLineErrors) {
  auto run = [](const std::vector<std::string>& args) {
    Process p(args, {});
    const int code = p.wait(30);
    return std::make_pair(code, p.output());
  };
  const auto [rank_code, rank_out] =
      run({"launch", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2", "--", "dist-check"});
  EXPECT_EQ(rank_code, 1);
  EXPECT_TRUE(contains(rank_out, "error: --node-rank 2 is not below --nnodes 2")) << rank_out;
  const auto [none_code, none_out] = run({"launch", "--nproc-per-node", "2"});
  EXPECT_EQ(none_code, 1);
  EXPECT_TRUE(contains(none_out, "error: launch: no command to run")) << none_out;
  const auto [port_code, port_out] = run({"launch", "--nproc-per-node", "2", "--master-port", "0", "--", "train"});
  EXPECT_EQ(port_code, 1);
  EXPECT_TRUE(contains(port_out, "--master-port: expected a port in [1, 65535], got 0")) << port_out;
  const auto [zero_code, zero_out] = run({"launch", "--nproc-per-node", "0", "--", "train"});
  EXPECT_EQ(zero_code, 2);
  EXPECT_TRUE(contains(zero_out, "--nproc-per-node")) << zero_out;
  const auto [env_code, env_out] = [&] {
    Process p({"dist-check"}, {{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
    const int code = p.wait(30);
    return std::make_pair(code, p.output());
  }();
  EXPECT_EQ(env_code, 1);
  EXPECT_TRUE(contains(env_out, "error: RANK=3 is not below WORLD_SIZE=2")) << env_out;
}

}  // namespace
}  // namespace anatomy
