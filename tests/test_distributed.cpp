// test_dist.cpp: the process side of multi-GPU training, without GPUs: the
// environment of torchrun, Slurm and Open MPI; the TCP store (set, get, add,
// wait, barriers, timeouts, dead and frozen ranks, a client that comes before
// the server); and `anatomy launch` / `anatomy dist-check` end to end: a good
// run, a rank that exits, a rank that freezes, a rank that never starts, and a
// two-"node" run on one host. Ports are free ephemeral ones, so parallel runs
// do not collide.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "anatomy/core/error.h"
#include "anatomy/distributed/environment.h"
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
  const DistEnvironment e = read_dist_environment(EnvMap{{"SLURM_PROCID", "3"},
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
  const DistEnvironment m = read_dist_environment(EnvMap{{"SLURM_PROCID", "0"},
                                                         {"SLURM_NTASKS", "2"},
                                                         {"SLURM_LOCALID", "0"},
                                                         {"SLURM_JOB_NODELIST", "gpu[01-04]"},
                                                         {"MASTER_ADDR", "10.0.0.9"},
                                                         {"MASTER_PORT", "4000"}});
  EXPECT_EQ(m.master(), "10.0.0.9:4000");
  EXPECT_EQ(m.local_world_size, 2);
  const DistEnvironment n = read_dist_environment(
      EnvMap{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NNODES", "2"},
             {"SLURM_NODELIST", "node1,node2"}});
  EXPECT_EQ(n.master_addr, "node1");
  EXPECT_EQ(n.local_world_size, 1);
}

TEST(DistEnvironment, SlurmErrors) {
  auto error = [](EnvMap env) { return error_of([&] { read_dist_environment(env); }); };
  EXPECT_TRUE(contains(error({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}), "SLURM_NTASKS is not set"));
  EXPECT_TRUE(contains(error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), "SLURM_LOCALID is not set"));
  EXPECT_TRUE(contains(error({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                              {"SLURM_JOB_NODELIST", "a"}}),
                       "SLURM_PROCID=2 is not below SLURM_NTASKS=2"));
  EXPECT_TRUE(contains(error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}}),
                       "neither MASTER_ADDR nor SLURM_JOB_NODELIST"));
  EXPECT_TRUE(contains(error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                              {"SLURM_JOB_NODELIST", "gpu[01-"}}),
                       "SLURM_JOB_NODELIST=gpu[01-"));
  EXPECT_TRUE(contains(error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
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
  const std::string missing = error_of([] {
    read_dist_environment(EnvMap{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
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
  env.insert({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(read_dist_environment(env).source, "slurm");
  EXPECT_EQ(read_dist_environment(env).world_size, 3);
  env.insert({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(read_dist_environment(env).source, "torchrun");
  EXPECT_EQ(read_dist_environment(env).rank, 3);
}

// ---- the store --------------------------------------------------------------------

// The store listens on the address the ranks are given (MASTER_ADDR), not on
// every interface: localhost is loopback only; 0.0.0.0 asks for every one.
TEST(DistStore, ListensOnTheMasterAddressOnly) {
  StoreServer local(0, 2, "localhost");
  EXPECT_EQ(local.address(), "127.0.0.1");
  StoreClient a("127.0.0.1", local.port(), 0, 2, Seconds(5));
  StoreServer any(0, 2, "0.0.0.0");
  EXPECT_EQ(any.address(), "0.0.0.0");
  try {
    StoreServer nowhere(0, 2, "no-such-host.invalid");
    FAIL() << "listened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resolve 'no-such-host.invalid'"), std::string::npos) << e.what();
  }
}

TEST(DistStore, SetGetAddWait) {
  StoreServer server(0, 2, "127.0.0.1");
  StoreClient a("127.0.0.1", server.port(), 0, 2, Seconds(5));
  StoreClient b("localhost", server.port(), 1, 2, Seconds(5));
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
  StoreServer server(0, 2, "127.0.0.1");
  StoreClient a("127.0.0.1", server.port(), 0, 2, Seconds(5));
  StoreClient b("127.0.0.1", server.port(), 1, 2, Seconds(5));
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
    auto c = std::make_unique<StoreClient>("127.0.0.1", port, 1, 2, Seconds(10));
    return c->get("k", Seconds(10));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StoreServer server(port, 2);
  StoreClient rank0("127.0.0.1", port, 0, 2, Seconds(5));
  rank0.set("k", "v");
  EXPECT_EQ(client.get(), "v");
}

TEST(DistStore, NoServerIsAClearErrorAfterTheTimeout) {
  const int port = free_port();
  const auto start = Clock::now();
  const std::string e = error_of([&] { StoreClient c("127.0.0.1", port, 1, 2, Seconds(0.5)); });
  EXPECT_TRUE(contains(e, "could not reach the store at 127.0.0.1:" + std::to_string(port) + " within 0.5 s")) << e;
  EXPECT_LT(seconds_since(start), 3.0);
  const std::string resolve = error_of([] { StoreClient c("no-such-host.invalid", 1, 1, 2, Seconds(0.2)); });
  EXPECT_TRUE(contains(resolve, "cannot resolve 'no-such-host.invalid'")) << resolve;
}

TEST(DistStore, WrongWorldAndDuplicateRanksAreRefused) {
  StoreServer server(0, 2, "127.0.0.1");
  StoreClient a("127.0.0.1", server.port(), 0, 2, Seconds(5));
  const std::string twice = error_of([&] { StoreClient again("127.0.0.1", server.port(), 0, 2, Seconds(5)); });
  EXPECT_TRUE(contains(twice, "rank 0 joined twice")) << twice;
  const std::string world = error_of([&] { StoreClient other("127.0.0.1", server.port(), 1, 3, Seconds(5)); });
  EXPECT_TRUE(contains(world, "world of 3 ranks but the store (rank 0) serves 2")) << world;
  a.close();
}

TEST(DistStore, AFailedRankEndsEveryWait) {
  StoreServer server(0, 3, "127.0.0.1");
  StoreClient a("127.0.0.1", server.port(), 0, 3, Seconds(5));
  StoreClient b("127.0.0.1", server.port(), 1, 3, Seconds(5));
  auto c = std::make_unique<StoreClient>("127.0.0.1", server.port(), 2, 3, Seconds(5));
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
  StoreServer server(0, 2, "127.0.0.1");
  StoreClient a("127.0.0.1", server.port(), 0, 2, Seconds(5));
  auto b = std::make_unique<StoreClient>("127.0.0.1", server.port(), 1, 2, Seconds(5));
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
  StoreServer server(0, 2, "127.0.0.1");
  std::promise<std::string> seen;
  StoreClient a("127.0.0.1", server.port(), 0, 2, Seconds(5));
  StoreClient b("127.0.0.1", server.port(), 1, 2, Seconds(5));
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
  auto server = std::make_unique<StoreServer>(0, 2, "127.0.0.1");
  StoreClient b("127.0.0.1", server->port(), 1, 2, Seconds(5));
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
