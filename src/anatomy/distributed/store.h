// store.h: the small TCP key-value store through which the ranks of a run find
// each other, and the liveness watch that keeps one dead rank from hanging the
// rest.
//
// Rank 0 runs a StoreServer (a thread) at MASTER_PORT (MASTER_PORT + 1 under
// torchrun's agent, which holds MASTER_PORT: environment.h); every rank, rank 0
// included, holds a StoreClient connected to it, having proven that it knows
// the job secret (below). The store holds byte strings
// under keys (set, get that waits until the key exists, add on a counter, wait
// for keys) and runs barriers. Each client introduces itself with its rank and
// keeps its connection open for the whole run, so the server knows who is
// there: a connection that closes without a goodbye is a dead rank, and a rank
// whose watchdog stops sending heartbeats is a frozen one. From then on every
// wait of every rank fails at once with an Error naming that rank; waits that
// time out name what was awaited (the key, or the ranks missing from a
// barrier). The NCCL layer uses it to pass the unique id from rank 0 (set/get)
// and runs start_watchdog(), which ends the process when a peer died: a
// collective with a dead peer would otherwise wait forever.
//
// Heartbeats come from the watchdog's own thread: they show that a process
// runs, not that it makes progress. A frozen process (stopped, its host down,
// its network cut) falls silent and is declared dead after the timeout. A
// rank whose main thread is stuck (a deadlock) keeps sending them; the others
// notice when it misses a barrier or a key they wait for, but a collective
// waiting on it would wait forever: the NCCL layer must bound its collectives
// itself (ncclCommAbort after a timeout).
//
// Protocol (version 2): every message is a frame, a 4-byte big-endian length
// followed by that many bytes. A request starts with an opcode byte, a reply
// with a status byte (ok, timeout, peer failed, error); integers are 8-byte
// big-endian, strings a 4-byte length and the bytes. One request is in flight
// per connection; a waiting request (get, wait, barrier) carries its timeout and
// the server answers when it is satisfied, when it times out or when a rank
// fails, so the client never abandons a request half-answered.
//
// Joining takes the job secret (job_secret.h), which never crosses the wire:
//   client: hello = op 1, magic "ANAT", version 2, rank, world size, role
//           (control or heartbeat), liveness timeout, 16 random bytes Nc
//   server: ok, value = 16 random bytes Ns + HMAC-SHA-256(secret,
//           "anatomy store v2 server\0" + hello + Ns)
//   client: checks the server's HMAC (a program that squats the port without
//           the secret learns nothing and is refused), then sends op 10 and
//           HMAC-SHA-256(secret, "anatomy store v2 client\0" + hello + Ns)
//   server: checks it (in constant time); only then does the hello count: the
//           rank joins, or is refused as before (a wrong world, a rank that
//           already joined: a second claim displaces nothing).
// Each proof covers the other side's fresh nonce, so none can be replayed.
// Until its proof, a connection may send frames of 256 bytes at most (a
// longer length is refused before anything is allocated) and must finish
// within the handshake window (StoreServerOptions); at most 64 connections
// wait to authenticate at once (past that the oldest is closed). A connection
// that breaks any of this, sends a malformed frame, the wrong proof or
// another version is closed and named in one line on rank 0's stderr
// ("store: refused a connection from 1.2.3.4:5678: wrong job secret"); the
// run goes on undisturbed. The TCP stream itself is not encrypted: the
// secret keeps strangers out, it does not hide the keys from an eavesdropper.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "anatomy/core/error.h"
#include "anatomy/distributed/environment.h"
#include "anatomy/distributed/job_secret.h"

namespace anatomy::distributed {

using Seconds = std::chrono::duration<double>;
class DistSession;

// Thrown when this rank must stop because another one failed: a rank died,
// stopped responding or failed with an error of its own, or the store (rank 0)
// is gone. `anatomy` exits with kPeerFailureExitCode for it (the watchdog too),
// so that a launcher can tell the rank that failed first from the ranks that
// merely followed it.
class PeerFailure : public Error {
 public:
  using Error::Error;
};
// EX_TEMPFAIL of sysexits.h: the run may well succeed when tried again.
inline constexpr int kPeerFailureExitCode = 75;

// "5 s", "0.5 s": a timeout as the messages print it.
std::string format_seconds(Seconds s);

struct StoreServerOptions {
  // How long a connection may take to prove that it knows the secret.
  Seconds handshake_timeout{10.0};
  // Connections awaiting authentication at once; past it the oldest is closed.
  int max_pending = 64;
  // Where the lines about refused connections go (default: stderr).
  using Log = std::function<void(const std::string& line)>;
  Log log;
};

// The server's side of one connection, without sockets, for the fuzz harness
// (fuzz/fuzz_store.cpp) and the handshake's tests: `bytes` arrive as the
// stream of a connection to a store of `world_size` ranks that know `secret`,
// in pieces of `chunk` bytes (0: at once), then the stream ends. With
// `as_rank` >= 0 the connection starts as that rank's, already authenticated,
// to reach the requests behind the handshake.
struct WireOutcome {
  std::string replies;           // the frames the server sent back
  bool closed = false;           // the server closed or refused it before the stream ended
  bool authenticated = false;    // it proved that it knows the secret
  std::vector<std::string> log;  // the lines the server printed
};
WireOutcome feed_store_connection(const std::string& secret, int world_size, std::string_view bytes,
                                  size_t chunk = 0, int as_rank = -1);

class StoreServer {
 public:
  // Listens at `port` (0: a free port, see port()) on the IPv4 address that
  // `address` resolves to (MASTER_ADDR: 127.0.0.1 or localhost for one node,
  // only that interface; "0.0.0.0" every interface), for a world of
  // `world_size` ranks that know `secret` (not empty). Throws Error when the
  // address or the port cannot be had.
  StoreServer(int port, int world_size, const std::string& address, const std::string& secret,
              StoreServerOptions options = {});
  ~StoreServer();  // stops the thread and closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // The IPv4 address it listens on, dotted ("127.0.0.1").
  const std::string& address() const { return address_; }
  // Waits until every rank has said goodbye or is known dead (true), at most
  // `timeout` (false): rank 0 keeps the store up until the others are done.
  bool wait_until_all_left(Seconds timeout);
  // Connections refused so far (no secret, a wrong one, malformed, too slow).
  int64_t refused_connections() const;

  struct Impl;  // store.cpp

 private:
  friend WireOutcome feed_store_connection(const std::string&, int, std::string_view, size_t, int);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::string address_;
  std::thread thread_;
};

class StoreClient {
 public:
  // Connects to host:port (a name or an IPv4 address) as `rank` of
  // `world_size`, proving that it knows `secret`, retrying until `timeout` has
  // passed (the server may start after the client). Throws Error naming the
  // address when it cannot, or when the store there does not know `secret`.
  // `timeout` also bounds the calls that do not wait (set, add, check_alive).
  // One call at a time goes over the connection: a second thread's call waits
  // for the first (the watchdog has a connection of its own).
  StoreClient(const std::string& host, int port, int rank, int world_size, const std::string& secret,
              Seconds timeout);
  // Stops the watchdog and says goodbye: as a rank that finished when close()
  // was called, as a failed one (the others stop) otherwise.
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // "127.0.0.1:29500"
  const std::string& address() const { return address_; }

  void set(const std::string& key, const std::string& value);
  // The value of `key`, waiting until some rank sets it.
  std::string get(const std::string& key, Seconds timeout);
  // Removes `key` (nothing when it does not exist).
  void erase(const std::string& key);
  // Adds `delta` to the counter `key` (0 when new) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys, Seconds timeout);
  // Waits until every rank has reached barrier `name`; fails naming the ranks
  // missing at the timeout or the rank that died meanwhile. A name can be
  // reused: each completion starts the next round.
  void barrier(const std::string& name, Seconds timeout);
  // Throws Error naming the rank if a rank has died or stopped responding.
  void check_alive();

  // A thread that sends a heartbeat at least every timeout/5 (on a connection
  // of its own) and asks the server whether every rank lives. When one died,
  // stopped responding for `timeout`, or the store itself (rank 0) is gone or
  // silent for `timeout`, it calls `on_failure` with a one-line message, once;
  // the default prints "error: <message>" and ends the process with
  // kPeerFailureExitCode (_exit: the main thread may be stuck in a collective
  // that never returns).
  using FailureHandler = std::function<void(const std::string& message)>;
  void start_watchdog(Seconds timeout, FailureHandler on_failure = {});
  void stop_watchdog();  // says goodbye on the heartbeat connection
  // Tests only: the heartbeats stop as if the process froze, the connection
  // stays open.
  void freeze_heartbeats_for_testing();

  // Says goodbye: `ok` as a rank that finished (the others carry on), or as
  // one that failed (every waiting rank fails at once). Stops the watchdog.
  void close(bool ok = true);

  struct Reply;  // a decoded reply (store.cpp)

 private:
  friend class DistSession;
  friend DistSession rendezvous(const DistEnvironment& env, Seconds timeout);

  void watchdog_loop(Seconds timeout, FailureHandler on_failure);
  Reply call(const std::string& request, Seconds wait, const std::string& awaited);

  std::string host_, address_, secret_;
  int port_ = 0, rank_ = 0, world_size_ = 1;
  Seconds default_timeout_{kDefaultTimeoutSeconds};  // for the calls that do not wait
  int fd_ = -1;
  std::mutex mutex_;  // one request at a time on fd_

  int heartbeat_fd_ = -1;
  std::thread watchdog_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wake_;
  bool watchdog_stop_ = false, watchdog_freeze_ = false;
};

// Prints "error: <message>" (stdout flushed first) and ends the process with
// kPeerFailureExitCode at once: the watchdog's default.
[[noreturn]] void exit_on_failure(const std::string& message);

// A rank's membership of a run: its store client and, on rank 0, the server.
class DistSession {
 public:
  DistSession(DistEnvironment env, std::unique_ptr<StoreServer> server, std::unique_ptr<StoreClient> client,
              std::unique_ptr<PublishedSecret> secret_file = nullptr);
  DistSession(DistSession&&) noexcept = default;
  DistSession& operator=(DistSession&&) noexcept = default;
  ~DistSession();  // without finish(): goodbye as a failed rank

  const DistEnvironment& env() const { return env_; }
  StoreClient& store() { return *client_; }
  // Ends the run in order: this rank says goodbye; rank 0 then keeps the store
  // up until every other rank has (at most env().timeout_seconds).
  void finish();

 private:
  DistEnvironment env_;
  std::unique_ptr<PublishedSecret> secret_file_;  // rank 0 of a run that exchanges its secret by a file
  std::unique_ptr<StoreServer> server_;  // rank 0 only; declared before the client, destroyed after it
  std::unique_ptr<StoreClient> client_;
};

// Every rank checks in: rank 0 starts the store at env.store() (MASTER_PORT,
// or the port next to it under torchrun's agent), every rank connects to it
// with the job secret and waits for all the others. The secret is
// env.job_secret (ANATOMY_JOB_SECRET), or else, when every rank runs on this
// host, one that rank 0 makes and publishes in a file of this user's
// (job_secret.h); with several nodes and none given it fails with one line
// saying to set it. Fails after `timeout` naming the ranks that never joined
// ("rank 1 of 2 never joined within 60 s (MASTER_ADDR=127.0.0.1:29500)"). A
// world of one gets a store of its own on a free loopback port. Strangers get
// a quarter of `timeout` (1 to 10 s) to authenticate.
DistSession rendezvous(const DistEnvironment& env, Seconds timeout);


}  // namespace anatomy::distributed
