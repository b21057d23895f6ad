// store.cpp: the TCP store (a poll loop on one thread of rank 0), its client,
// the watchdog and the rendezvous. See store.h for the protocol.
#include "anatomy/distributed/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/distributed/hmac.h"
#include "anatomy/distributed/job_secret.h"

namespace anatomy::distributed {

namespace {

using Clock = std::chrono::steady_clock;

enum class Op : uint8_t { Hello = 1, Set, Get, Add, Wait, Barrier, Health, Goodbye, Erase, Proof };
enum class Status : uint8_t { Ok = 0, Timeout = 1, PeerFailed = 2, Failed = 3 };
enum class Role : uint8_t { Control = 0, Heartbeat = 1 };
enum class Missing : uint8_t { Ranks = 0, Keys = 1 };

constexpr uint32_t kMagic = 0x414e4154;  // "ANAT"
constexpr uint32_t kVersion = 2;
constexpr uint32_t kMaxFrame = 64u << 20;
// Before a connection has proven that it knows the job secret, its frames are
// a hello (54 bytes) and a proof (33): anything longer is refused unread.
constexpr uint32_t kMaxHandshakeFrame = 256;
constexpr size_t kNonceBytes = 16;
constexpr size_t kProofBytes = 32;
// What each side's HMAC covers besides the hello and the server's nonce: the
// labels keep a proof of one side from passing for the other's.
constexpr std::string_view kServerLabel{"anatomy store v2 server", 24};  // with its NUL
constexpr std::string_view kClientLabel{"anatomy store v2 client", 24};
// Lines about refused connections that rank 0 prints before it only counts them.
constexpr int64_t kMaxLoggedRefusals = 100;
constexpr int64_t kMaxWaitMs = int64_t{1} << 40;  // 35 years: no overflow of a deadline
constexpr const char* kRendezvousBarrier = "anatomy/rendezvous";
// Added to a waiting call's timeout before the client gives up on the server
// itself: the server answers a timed-out wait on its own.
constexpr Seconds kReplyGrace{5.0};
// How long a goodbye waits for its acknowledgement.
constexpr Seconds kGoodbyeWait{2.0};

std::string error_text(int err) {
  char buffer[256];
  return strerror_r(err, buffer, sizeof buffer);  // the GNU strerror_r returns the text
}

int64_t to_ms(Seconds s) { return std::max<int64_t>(0, static_cast<int64_t>(s.count() * 1000.0 + 0.5)); }

Clock::time_point after(Seconds s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::max(s, Seconds(0)));
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// "rank 1", "ranks 1, 3", "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 9 more".
std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) text += fmt::format(" and {} more", ranks.size() - 8);
  return text;
}

// ---- encoding --------------------------------------------------------------

struct Writer {
  std::string body;
  Writer& u8(uint8_t v) {
    body.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) body.push_back(static_cast<char>((v >> shift) & 0xff));
    return *this;
  }
  Writer& i64(int64_t value) {
    const uint64_t v = static_cast<uint64_t>(value);
    for (int shift = 56; shift >= 0; shift -= 8) body.push_back(static_cast<char>((v >> shift) & 0xff));
    return *this;
  }
  Writer& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    body += s;
    return *this;
  }
  Writer& bytes(std::string_view s) {
    body.append(s.data(), s.size());
    return *this;
  }
  // The body behind its length.
  std::string frame() const {
    Writer f;
    f.u32(static_cast<uint32_t>(body.size()));
    return f.body + body;
  }
};

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Reader {
  const std::string& in;
  size_t at = 0;
  void need(size_t n) {
    if (in.size() - at < n) throw ProtocolError("a truncated message");
  }
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(in[at++]);
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[at++]);
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in[at++]);
    return static_cast<int64_t>(v);
  }
  std::string str() {
    const uint32_t n = u32();
    need(n);
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
  std::string bytes(size_t n) {
    need(n);
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
  void end() {
    if (at != in.size()) throw ProtocolError("trailing bytes");
  }
};

// ---- sockets -----------------------------------------------------------------

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

enum class Io { Ok, Closed, Timeout };

// Writes all of `data` to the non-blocking socket by `deadline`.
Io send_all(int fd, const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int left = ms_until(deadline);
      if (left == 0) return Io::Timeout;
      if (::poll(&p, 1, left) < 0 && errno != EINTR) return Io::Closed;
      continue;
    }
    return Io::Closed;
  }
  return Io::Ok;
}

// Reads exactly n bytes from the non-blocking socket by `deadline`.
Io recv_exact(int fd, char* out, size_t n, Clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::recv(fd, out + done, n - done, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return Io::Closed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::Closed;
    pollfd p{fd, POLLIN, 0};
    const int left = ms_until(deadline);
    if (left == 0) return Io::Timeout;
    if (::poll(&p, 1, left) < 0 && errno != EINTR) return Io::Closed;
  }
  return Io::Ok;
}

Io recv_frame(int fd, std::string& body, Clock::time_point deadline) {
  char header[4];
  if (const Io r = recv_exact(fd, header, 4, deadline); r != Io::Ok) return r;
  uint32_t n = 0;
  for (char c : header) n = (n << 8) | static_cast<uint8_t>(c);
  if (n > kMaxFrame) return Io::Closed;
  body.resize(n);
  return recv_exact(fd, body.data(), n, deadline);
}

// Thrown by connect_to when the deadline passes: `reason` is the last failure.
struct Unreachable : Error {
  std::string reason;
  Unreachable(const std::string& message, std::string why) : Error(message), reason(std::move(why)) {}
};

// Thrown by a client whose store could not prove that it knows the client's
// secret: the ranks hold different secrets, or another program answers there.
struct SecretMismatch : Error {
  using Error::Error;
};

std::string proof(std::string_view label, const std::string& secret, const std::string& hello,
                  const std::string& server_nonce) {
  std::string message(label);
  message += hello;
  message += server_nonce;
  const Digest d = hmac_sha256(secret, message);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// "1.2.3.4:5678"
std::string peer_name(const sockaddr_in& addr) {
  char dotted[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, dotted, sizeof dotted);
  return fmt::format("{}:{}", dotted, ntohs(addr.sin_port));
}

// A connected non-blocking socket to host:port, retrying until `deadline`.
int connect_to(const std::string& host, int port, Clock::time_point deadline, Seconds timeout) {
  std::string reason = "no attempt";
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (gai != 0) {
      reason = fmt::format("cannot resolve '{}': {}", host, gai_strerror(gai));
    } else {
      for (addrinfo* a = found; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
          reason = error_text(errno);
          continue;
        }
        set_nonblocking(fd);
        int err = 0;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
          err = errno;
          if (err == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            // At most a few seconds per attempt: a host that drops the packets
            // would otherwise hold the attempt for minutes.
            const int wait = std::min(ms_until(deadline), 5000);
            const int ready = ::poll(&p, 1, wait);
            socklen_t len = sizeof err;
            if (ready <= 0) err = ETIMEDOUT;
            else getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          }
        }
        if (err == 0) {
          ::freeaddrinfo(found);
          set_nodelay(fd);
          return fd;
        }
        reason = error_text(err);
        ::close(fd);
      }
      ::freeaddrinfo(found);
    }
    const auto now = Clock::now();
    if (now >= deadline)
      throw Unreachable(fmt::format("could not reach the store at {}:{} within {}: {}", host, port,
                                    format_seconds(timeout), reason),
                        reason);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace

std::string format_seconds(Seconds s) { return fmt::format("{:g} s", s.count()); }

// ---- server ------------------------------------------------------------------

struct StoreServer::Impl {
  // Where a connection stands in the handshake: it sends a hello, the server
  // answers with its nonce and its proof, the client sends its proof.
  enum class Phase : uint8_t { Hello, Proof, Ready };
  struct Connection {
    int fd = -1;
    std::string peer;  // "1.2.3.4:5678", for the log
    std::string in, out;
    Phase phase = Phase::Hello;
    Clock::time_point handshake_deadline;
    std::string hello, server_nonce;  // what the proofs cover
    int rank = -1;  // after a hello
    Role role = Role::Control;
    int64_t liveness_ms = 0;  // heartbeat connections: silence longer than this is death
    Clock::time_point last_seen;
    bool goodbye = false;
    bool closing = false;  // closes once `out` is sent; reads nothing more
    bool closed = false;
  };
  // A request that waits: for keys (get, wait) or for the other ranks (barrier).
  struct Waiter {
    int connection = 0;
    Op op = Op::Get;
    std::vector<std::string> keys;
    std::string barrier;
    Clock::time_point deadline;
  };
  struct RankState {
    bool joined = false, left = false, dead = false;
  };

  int listen_fd = -1;
  int wake[2] = {-1, -1};  // a byte on wake[1] stops the loop
  int world_size = 1;
  std::string secret;
  Seconds handshake_timeout{10.0};
  int max_pending = 64;
  StoreServerOptions::Log log;
  std::atomic<int64_t> refused{0};
  std::map<int, Connection> connections;
  int next_connection = 0;
  std::vector<Waiter> waiters;
  std::map<std::string, std::string> values;
  std::map<std::string, std::set<int>> barriers;  // arrived ranks, per open barrier
  std::vector<RankState> ranks;
  std::optional<std::pair<int, std::string>> failure;  // the first dead rank and why

  // Shared with the thread of wait_until_all_left().
  std::mutex mutex;
  std::condition_variable changed;
  bool all_done = false;

  void run();
  void accept_all();
  void read_from(int id, Connection& c);
  // Parses the whole frames in c.in and answers them (no socket: the fuzz
  // harness calls it too).
  void consume(int id, Connection& c);
  void handle(int id, Connection& c, const std::string& body);
  void handshake(Connection& c, Reader& r, Op op, const std::string& body);
  void join(Connection& c, int64_t rank, int64_t size, Role role, int64_t liveness_ms);
  // Ends an unauthenticated connection with a line on rank 0's stderr; the
  // job goes on.
  void refuse(Connection& c, const std::string& why) {
    const int64_t n = ++refused;
    if (n <= kMaxLoggedRefusals) log(fmt::format("store: refused a connection from {}: {}", c.peer, why));
    if (n == kMaxLoggedRefusals)
      log(fmt::format("store: {} connections refused: from now on they are refused without a line", n));
    c.closing = true;
  }
  // Why a connection that closed before it authenticated is refused.
  static std::string closed_early(const Connection& c) {
    if (!c.in.empty()) return "closed within a frame";
    return c.phase == Phase::Hello ? "closed before its hello" : "closed without proving that it knows the job secret";
  }
  size_t pending() const {
    size_t n = 0;
    for (const auto& [id, c] : connections) n += c.phase != Phase::Ready && !c.closing && !c.closed;
    return n;
  }
  void flush(Connection& c);
  void drop(int id, Connection& c);
  void expire(Clock::time_point now);
  Clock::time_point next_deadline(Clock::time_point now) const;

  void reply(Connection& c, const Writer& w) { c.out += w.frame(); }
  void reply_ok(Connection& c, const std::string& value = {}, int64_t number = 0) {
    reply(c, Writer().u8(static_cast<uint8_t>(Status::Ok)).str(value).i64(number));
  }
  void reply_failed(Connection& c, const std::string& message) {
    reply(c, Writer().u8(static_cast<uint8_t>(Status::Failed)).str(message));
  }
  void reply_peer_failed(Connection& c, int rank, const std::string& reason) {
    reply(c, Writer().u8(static_cast<uint8_t>(Status::PeerFailed)).i64(rank).str(reason));
  }
  void reply_missing_ranks(Connection& c, const std::vector<int64_t>& missing) {
    Writer w;
    w.u8(static_cast<uint8_t>(Status::Timeout)).u8(static_cast<uint8_t>(Missing::Ranks)).i64(
        static_cast<int64_t>(missing.size()));
    for (int64_t r : missing) w.i64(r);
    reply(c, w);
  }
  void reply_missing_keys(Connection& c, const std::vector<std::string>& missing) {
    Writer w;
    w.u8(static_cast<uint8_t>(Status::Timeout)).u8(static_cast<uint8_t>(Missing::Keys)).i64(
        static_cast<int64_t>(missing.size()));
    for (const std::string& k : missing) w.str(k);
    reply(c, w);
  }

  std::vector<std::string> missing_keys(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const std::string& k : keys)
      if (!values.count(k)) missing.push_back(k);
    return missing;
  }
  std::vector<int64_t> missing_ranks(const std::string& barrier) const {
    std::vector<int64_t> missing;
    const auto it = barriers.find(barrier);
    for (int r = 0; r < world_size; ++r)
      if (it == barriers.end() || !it->second.count(r)) missing.push_back(r);
    return missing;
  }

  // A rank died or stopped responding: every waiting request fails with why.
  void mark_dead(int rank, const std::string& reason) {
    RankState& s = ranks[static_cast<size_t>(rank)];
    if (s.dead || s.left) return;
    s.dead = true;
    if (!failure) failure.emplace(rank, reason);
    for (const Waiter& w : waiters) reply_peer_failed(connections.at(w.connection), failure->first, failure->second);
    waiters.clear();
    barriers.clear();
    update_done();
  }

  // A rank finished: the barriers that wait for it can never complete.
  void mark_left(int rank) {
    RankState& s = ranks[static_cast<size_t>(rank)];
    if (s.dead || s.left) return;
    s.left = true;
    for (auto w = waiters.begin(); w != waiters.end();) {
      if (w->op == Op::Barrier && !barriers[w->barrier].count(rank)) {
        reply_peer_failed(connections.at(w->connection), rank,
                          fmt::format("rank {} finished without reaching barrier '{}'", rank, w->barrier));
        w = waiters.erase(w);
      } else {
        ++w;
      }
    }
    update_done();
  }

  void update_done() {
    bool done = true;
    for (const RankState& s : ranks) done = done && (s.left || s.dead);
    std::lock_guard lock(mutex);
    all_done = done;
    changed.notify_all();
  }

  // After a set: the waits that it satisfies answer.
  void wake_key_waiters() {
    for (auto w = waiters.begin(); w != waiters.end();) {
      if (w->op != Op::Barrier && missing_keys(w->keys).empty()) {
        Connection& c = connections.at(w->connection);
        if (w->op == Op::Get) reply_ok(c, values.at(w->keys.front()));
        else reply_ok(c);
        w = waiters.erase(w);
      } else {
        ++w;
      }
    }
  }
};

namespace {
void log_to_stderr(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}
}  // namespace

StoreServer::StoreServer(int port, int world_size, const std::string& address, const std::string& secret,
                         StoreServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (secret.empty()) fail("the store needs a job secret");
  s.world_size = world_size;
  s.ranks.resize(static_cast<size_t>(world_size));
  s.secret = secret;
  s.handshake_timeout = options.handshake_timeout;
  s.max_pending = std::max(1, options.max_pending);
  s.log = options.log ? std::move(options.log) : StoreServerOptions::Log(log_to_stderr);
  // The one interface the ranks are told to reach (MASTER_ADDR), not every one.
  sockaddr_in addr{};
  {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(address.c_str(), nullptr, &hints, &found);
    if (gai != 0 || found == nullptr)
      fail("cannot resolve '{}' to an IPv4 address to listen on: {}", address,
           gai != 0 ? gai_strerror(gai) : "no address");
    std::memcpy(&addr, found->ai_addr, sizeof addr);
    ::freeaddrinfo(found);
  }
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  char dotted[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, dotted, sizeof dotted);
  address_ = dotted;
  s.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) fail("cannot open a socket for the store: {}", error_text(errno));
  int one = 1;
  setsockopt(s.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a port in TIME_WAIT can be reused
  if (::bind(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || ::listen(s.listen_fd, 1024) < 0) {
    const int err = errno;
    ::close(s.listen_fd);
    fail("cannot listen on {}:{}: {}", address_, port, error_text(err));
  }
  socklen_t len = sizeof addr;
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  set_nonblocking(s.listen_fd);
  if (::pipe2(s.wake, O_CLOEXEC | O_NONBLOCK) < 0) {
    ::close(s.listen_fd);
    fail("cannot create the store's wake pipe: {}", error_text(errno));
  }
  thread_ = std::thread([&s] { s.run(); });
}

StoreServer::~StoreServer() {
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake[1], &byte, 1);
  thread_.join();
  for (auto& [id, c] : impl_->connections) ::close(c.fd);
  ::close(impl_->listen_fd);
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

int64_t StoreServer::refused_connections() const { return impl_->refused.load(); }

bool StoreServer::wait_until_all_left(Seconds timeout) {
  std::unique_lock lock(impl_->mutex);
  return impl_->changed.wait_for(lock, timeout, [&] { return impl_->all_done; });
}

void StoreServer::Impl::run() {
  std::vector<pollfd> polls;
  std::vector<int> ids;
  while (true) {
    polls.clear();
    ids.clear();
    polls.push_back({wake[0], POLLIN, 0});
    polls.push_back({listen_fd, POLLIN, 0});
    for (auto& [id, c] : connections) {
      polls.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(id);
    }
    const auto now = Clock::now();
    const int wait = std::min(ms_until(next_deadline(now)), 1000);
    if (::poll(polls.data(), polls.size(), wait) < 0 && errno != EINTR) break;
    if (polls[0].revents) break;  // stop
    if (polls[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!polls[i + 2].revents) continue;
      Connection& c = connections.at(ids[i]);
      if (polls[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) read_from(ids[i], c);
    }
    expire(Clock::now());
    for (auto it = connections.begin(); it != connections.end();) {
      if (!it->second.closed) flush(it->second);
      if (it->second.closing && it->second.out.empty()) it->second.closed = true;
      if (it->second.closed) {
        drop(it->first, it->second);
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void StoreServer::Impl::accept_all() {
  while (true) {
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient failure of one connection
    set_nodelay(fd);
    // A bounded number may wait to authenticate: past it, the oldest goes, so
    // a flood of idle connections delays a rank by one round trip at most.
    if (pending() >= static_cast<size_t>(max_pending))
      for (auto& [id, old] : connections)
        if (old.phase != Phase::Ready && !old.closing && !old.closed) {
          refuse(old, fmt::format("{} connections awaiting authentication: the oldest is closed", max_pending));
          old.out.clear();
          old.closed = true;
          break;
        }
    Connection c;
    c.fd = fd;
    c.peer = peer_name(addr);
    c.last_seen = Clock::now();
    c.handshake_deadline = c.last_seen + std::chrono::duration_cast<Clock::duration>(handshake_timeout);
    connections.emplace(next_connection++, std::move(c));
  }
}

void StoreServer::Impl::read_from(int id, Connection& c) {
  char buffer[65536];
  bool eof = false;
  // Frames are parsed after every read: a connection that has not
  // authenticated never buffers more than one read and one small frame.
  while (!c.closing && !c.closed) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      c.in.append(buffer, static_cast<size_t>(n));
      consume(id, c);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
    break;
  }
  if (eof && !c.closing && !c.closed) {
    if (c.phase != Phase::Ready) refuse(c, closed_early(c));
    c.closed = true;
  }
}

void StoreServer::Impl::consume(int id, Connection& c) {
  // Whole frames first: a goodbye followed at once by the close is a goodbye.
  size_t at = 0;
  while (!c.closed && !c.closing && c.in.size() - at >= 4) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(c.in[at + i]);
    const bool ready = c.phase == Phase::Ready;
    const uint32_t limit = ready ? kMaxFrame : kMaxHandshakeFrame;
    if (n > limit) {
      if (ready) {
        log(fmt::format("store: closed rank {}'s connection from {}: a frame of {} bytes, over the limit of {}",
                        c.rank, c.peer, n, limit));
        c.closed = true;
      } else {
        refuse(c, fmt::format("a frame of {} bytes, over the limit of {}", n, limit));
      }
      break;
    }
    if (c.in.size() - at - 4 < n) break;
    c.last_seen = Clock::now();
    try {
      handle(id, c, c.in.substr(at + 4, n));
    } catch (const ProtocolError&) {
      if (c.phase != Phase::Ready) refuse(c, "a malformed frame");
      else c.closed = true;  // a rank out of step: it is taken for dead
    }
    at += 4 + n;
  }
  c.in.erase(0, at);
  if (c.closing || c.closed) c.in.clear();
}

// The hello and the proof, before anything else.
void StoreServer::Impl::handshake(Connection& c, Reader& r, Op op, const std::string& body) {
  if (c.phase == Phase::Hello) {
    if (op != Op::Hello) throw ProtocolError("no hello");
    const uint32_t magic = r.u32(), version = r.u32();
    if (magic != kMagic) throw ProtocolError("not the store's protocol");
    if (version != kVersion) {
      reply_failed(c, fmt::format("the store speaks protocol {} of anatomy, the client {}", kVersion, version));
      refuse(c, fmt::format("protocol version {}, not {}", version, kVersion));
      return;
    }
    r.i64();  // rank, world size, role, liveness: read again once the
    r.i64();  // proof shows that they come from a rank of this job
    r.u8();
    r.i64();
    r.bytes(kNonceBytes);
    r.end();
    c.hello = body;
    c.server_nonce = random_bytes(kNonceBytes);
    reply_ok(c, c.server_nonce + proof(kServerLabel, secret, c.hello, c.server_nonce));
    c.phase = Phase::Proof;
    return;
  }
  if (op != Op::Proof) throw ProtocolError("no proof");
  const std::string got = r.bytes(kProofBytes);
  r.end();
  if (!constant_time_equal(got, proof(kClientLabel, secret, c.hello, c.server_nonce))) {
    reply_failed(c, "wrong job secret");
    refuse(c, "wrong job secret");
    return;
  }
  c.phase = Phase::Ready;
  Reader hello{c.hello};
  hello.u8();
  hello.u32();
  hello.u32();
  const int64_t rank = hello.i64(), size = hello.i64();
  const Role role = static_cast<Role>(hello.u8());
  const int64_t liveness_ms = hello.i64();
  join(c, rank, size, role, liveness_ms);
}

void StoreServer::Impl::join(Connection& c, int64_t rank, int64_t size, Role role, int64_t liveness_ms) {
  if (size != world_size) {
    reply_failed(c, fmt::format("rank {} expects a world of {} ranks but the store (rank 0) serves {}: the ranks "
                                "disagree on WORLD_SIZE",
                                rank, size, world_size));
    return;
  }
  if (rank < 0 || rank >= world_size) {
    reply_failed(c, fmt::format("rank {} is not in a world of {}", rank, world_size));
    return;
  }
  if (role != Role::Control && role != Role::Heartbeat) {
    reply_failed(c, fmt::format("rank {} said hello in an unknown role", rank));
    return;
  }
  RankState& s = ranks[static_cast<size_t>(rank)];
  if (role == Role::Control) {
    // The first connection of a rank is the rank: a second is refused and
    // displaces nothing.
    if (s.joined) {
      reply_failed(c, fmt::format("rank {} joined twice: two processes have RANK={} (check --node-rank and the "
                                  "launcher's variables)",
                                  rank, rank));
      return;
    }
    s.joined = true;
  }
  c.rank = static_cast<int>(rank);
  c.role = role;
  c.liveness_ms = role == Role::Heartbeat ? std::clamp<int64_t>(liveness_ms, 0, kMaxWaitMs) : 0;
  reply_ok(c);
}

void StoreServer::Impl::handle(int id, Connection& c, const std::string& body) {
  Reader r{body};
  const Op op = static_cast<Op>(r.u8());
  if (c.phase != Phase::Ready) {
    handshake(c, r, op, body);
    return;
  }
  if (c.rank < 0) {
    reply_failed(c, "the store expects a hello first");
    c.goodbye = true;
    return;
  }
  switch (op) {
    case Op::Hello:
    case Op::Proof:
      throw ProtocolError("a second hello");
    case Op::Set: {
      std::string key = r.str();
      values[key] = r.str();
      reply_ok(c);
      wake_key_waiters();
      return;
    }
    case Op::Erase: {
      values.erase(r.str());
      reply_ok(c);
      return;
    }
    case Op::Add: {
      const std::string key = r.str();
      const int64_t delta = r.i64();
      int64_t sum = delta;
      if (const auto it = values.find(key); it != values.end()) {
        char* end = nullptr;
        errno = 0;
        const long long old = std::strtoll(it->second.c_str(), &end, 10);
        if (it->second.empty() || end != it->second.c_str() + it->second.size() || errno == ERANGE) {
          reply_failed(c, fmt::format("key '{}' holds no counter", key));
          return;
        }
        if (__builtin_add_overflow(sum, static_cast<int64_t>(old), &sum)) {
          reply_failed(c, fmt::format("counter '{}' would overflow", key));
          return;
        }
      }
      values[key] = std::to_string(sum);
      reply_ok(c, {}, sum);
      wake_key_waiters();
      return;
    }
    case Op::Get:
    case Op::Wait: {
      Waiter w;
      w.connection = id;
      w.op = op;
      if (op == Op::Get) {
        w.keys.push_back(r.str());
      } else {
        const int64_t n = r.i64();
        for (int64_t i = 0; i < n; ++i) w.keys.push_back(r.str());
      }
      const int64_t timeout_ms = std::clamp<int64_t>(r.i64(), 0, kMaxWaitMs);
      if (missing_keys(w.keys).empty()) {
        if (op == Op::Get) reply_ok(c, values.at(w.keys.front()));
        else reply_ok(c);
      } else if (failure) {
        reply_peer_failed(c, failure->first, failure->second);
      } else {
        w.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
        waiters.push_back(std::move(w));
      }
      return;
    }
    case Op::Barrier: {
      const std::string name = r.str();
      const int64_t timeout_ms = std::clamp<int64_t>(r.i64(), 0, kMaxWaitMs);
      if (failure) {
        reply_peer_failed(c, failure->first, failure->second);
        return;
      }
      std::set<int>& arrived = barriers[name];
      arrived.insert(c.rank);
      if (static_cast<int>(arrived.size()) == world_size) {
        for (auto w = waiters.begin(); w != waiters.end();) {
          if (w->op == Op::Barrier && w->barrier == name) {
            reply_ok(connections.at(w->connection));
            w = waiters.erase(w);
          } else {
            ++w;
          }
        }
        barriers.erase(name);  // the next barrier of this name is a new round
        reply_ok(c);
        return;
      }
      for (int r2 = 0; r2 < world_size; ++r2)
        if (!arrived.count(r2) && ranks[static_cast<size_t>(r2)].left) {
          arrived.erase(c.rank);
          reply_peer_failed(c, r2, fmt::format("rank {} finished without reaching barrier '{}'", r2, name));
          return;
        }
      Waiter w;
      w.connection = id;
      w.op = op;
      w.barrier = name;
      w.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
      waiters.push_back(std::move(w));
      return;
    }
    case Op::Health:
      if (failure) reply_peer_failed(c, failure->first, failure->second);
      else reply_ok(c);
      return;
    case Op::Goodbye: {
      const bool ok = r.u8() != 0;
      c.goodbye = true;
      if (c.role == Role::Control) {
        if (ok) mark_left(c.rank);
        else mark_dead(c.rank, fmt::format("rank {} stopped with an error", c.rank));
      }
      reply_ok(c);
      return;
    }
  }
  throw ProtocolError("an unknown request");
}

void StoreServer::Impl::flush(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.closed = true;
    return;
  }
}

// A closed connection: without a goodbye, its rank is dead.
void StoreServer::Impl::drop(int id, Connection& c) {
  waiters.erase(std::remove_if(waiters.begin(), waiters.end(), [&](const Waiter& w) { return w.connection == id; }),
                waiters.end());
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
  if (c.rank >= 0 && !c.goodbye)
    mark_dead(c.rank, fmt::format("rank {} died (its connection to the store closed)", c.rank));
}

Clock::time_point StoreServer::Impl::next_deadline(Clock::time_point now) const {
  Clock::time_point next = now + std::chrono::seconds(1);
  for (const Waiter& w : waiters) next = std::min(next, w.deadline);
  for (const auto& [id, c] : connections) {
    if (c.liveness_ms > 0 && !c.goodbye) next = std::min(next, c.last_seen + std::chrono::milliseconds(c.liveness_ms));
    if (c.phase != Phase::Ready && !c.closing) next = std::min(next, c.handshake_deadline);
  }
  return next;
}

void StoreServer::Impl::expire(Clock::time_point now) {
  for (auto& [id, c] : connections)
    if (c.phase != Phase::Ready && !c.closing && !c.closed && now >= c.handshake_deadline)
      refuse(c, fmt::format("{} within {}", c.phase == Phase::Hello ? "no hello" : "no proof of the job secret",
                            format_seconds(handshake_timeout)));
  for (auto& [id, c] : connections) {
    if (c.liveness_ms <= 0 || c.goodbye || c.closed || now < c.last_seen + std::chrono::milliseconds(c.liveness_ms))
      continue;
    const int64_t ms = c.liveness_ms;
    c.liveness_ms = 0;  // reported once
    mark_dead(c.rank, fmt::format("rank {} stopped responding (no heartbeat for {})", c.rank,
                                  format_seconds(Seconds(static_cast<double>(ms) / 1000.0))));
  }
  for (auto w = waiters.begin(); w != waiters.end();) {
    if (now < w->deadline) {
      ++w;
      continue;
    }
    Connection& c = connections.at(w->connection);
    if (w->op == Op::Barrier) {
      reply_missing_ranks(c, missing_ranks(w->barrier));
      barriers[w->barrier].erase(c.rank);  // this rank gives up on the round
    } else {
      reply_missing_keys(c, missing_keys(w->keys));
    }
    w = waiters.erase(w);
  }
}

// ---- client ------------------------------------------------------------------

struct StoreClient::Reply {
  Status status = Status::Ok;
  std::string value;              // ok: a get's value
  int64_t number = 0;             // ok: an add's sum
  std::vector<int64_t> ranks;     // timeout of a barrier: the ranks missing
  std::vector<std::string> keys;  // timeout of a get or wait: the keys missing
  int64_t failed_rank = -1;       // peer failed
  std::string message;            // peer failed: why; failed: the error
};

namespace {

StoreClient::Reply decode(const std::string& body) {
  Reader r{body};
  StoreClient::Reply reply;
  reply.status = static_cast<Status>(r.u8());
  switch (reply.status) {
    case Status::Ok:
      reply.value = r.str();
      reply.number = r.i64();
      break;
    case Status::Timeout: {
      const Missing kind = static_cast<Missing>(r.u8());
      const int64_t n = r.i64();
      for (int64_t i = 0; i < n; ++i) {
        if (kind == Missing::Ranks) reply.ranks.push_back(r.i64());
        else reply.keys.push_back(r.str());
      }
      break;
    }
    case Status::PeerFailed:
      reply.failed_rank = r.i64();
      reply.message = r.str();
      break;
    case Status::Failed:
      reply.message = r.str();
      break;
    default:
      throw ProtocolError("an unknown reply");
  }
  return reply;
}

// The hello's body: who the client is, and its nonce.
std::string hello(int rank, int world_size, Role role, Seconds liveness) {
  return Writer()
      .u8(static_cast<uint8_t>(Op::Hello))
      .u32(kMagic)
      .u32(kVersion)
      .i64(rank)
      .i64(world_size)
      .u8(static_cast<uint8_t>(role))
      .i64(to_ms(liveness))
      .bytes(random_bytes(kNonceBytes))
      .body;
}

std::string as_frame(const std::string& body) { return Writer().bytes(body).frame(); }

std::string goodbye(bool ok) { return Writer().u8(static_cast<uint8_t>(Op::Goodbye)).u8(ok ? 1 : 0).frame(); }

// Sends a goodbye on `fd` and waits briefly for its acknowledgement, so that the
// close that follows cannot overtake it.
void say_goodbye(int fd, bool ok) {
  const auto deadline = after(kGoodbyeWait);
  std::string body;
  if (send_all(fd, goodbye(ok), deadline) == Io::Ok) recv_frame(fd, body, deadline);
}

// Connects, says hello and proves that it knows `secret` once the store has
// proven it too; throws Error on refusal, SecretMismatch when the store does
// not know the secret (the client then sends nothing that depends on it).
int open_connection(const std::string& host, int port, int rank, int world_size, Role role, Seconds timeout,
                    Seconds liveness, const std::string& secret) {
  const auto deadline = after(timeout);
  const int fd = connect_to(host, port, deadline, timeout);
  const auto answer_by = after(std::max(timeout, kReplyGrace));
  // One exchange: send `frame`, decode the reply.
  auto exchange = [&](const std::string& frame, const char* what) {
    std::string body;
    Io io = send_all(fd, frame, answer_by);
    if (io == Io::Ok) io = recv_frame(fd, body, answer_by);
    if (io != Io::Ok) {
      ::close(fd);
      throw Unreachable(fmt::format("the store at {}:{} did not answer rank {}'s {}", host, port, rank, what),
                        fmt::format("no answer to the {}", what));
    }
    try {
      return decode(body);
    } catch (const ProtocolError&) {
      ::close(fd);
      fail("{}:{} does not speak the anatomy store's protocol", host, port);
    }
  };
  const std::string hello_body = hello(rank, world_size, role, liveness);
  StoreClient::Reply reply = exchange(as_frame(hello_body), "hello");
  if (reply.status != Status::Ok) {
    ::close(fd);
    fail("{}", reply.message);
  }
  if (reply.value.size() != kNonceBytes + kProofBytes) {
    ::close(fd);
    fail("{}:{} does not speak the anatomy store's protocol {}", host, port, kVersion);
  }
  const std::string server_nonce = reply.value.substr(0, kNonceBytes);
  if (!constant_time_equal(reply.value.substr(kNonceBytes), proof(kServerLabel, secret, hello_body, server_nonce))) {
    ::close(fd);
    throw SecretMismatch(fmt::format(
        "the store at {}:{} does not know rank {}'s job secret: the ranks hold different {} values, or another "
        "program answers at that port",
        host, port, rank, kJobSecretVariable));
  }
  reply = exchange(Writer()
                       .u8(static_cast<uint8_t>(Op::Proof))
                       .bytes(proof(kClientLabel, secret, hello_body, server_nonce))
                       .frame(),
                   "proof of the job secret");
  if (reply.status != Status::Ok) {
    ::close(fd);
    fail("{}", reply.message);
  }
  return fd;
}

}  // namespace

StoreClient::StoreClient(const std::string& host, int port, int rank, int world_size, const std::string& secret,
                         Seconds timeout)
    : host_(host), address_(fmt::format("{}:{}", host, port)), secret_(secret), port_(port), rank_(rank),
      world_size_(world_size), default_timeout_(timeout) {
  fd_ = open_connection(host, port, rank, world_size, Role::Control, timeout, Seconds(0), secret_);
}

StoreClient::~StoreClient() {
  close(false);  // a no-op after close()
  if (heartbeat_fd_ >= 0) ::close(heartbeat_fd_);  // frozen: no goodbye
}

StoreClient::Reply StoreClient::call(const std::string& request, Seconds wait, const std::string& awaited) {
  std::lock_guard lock(mutex_);
  if (fd_ < 0) fail("rank {} used its store connection after it closed, while {}", rank_, awaited);
  const auto deadline = after(wait + kReplyGrace);
  std::string body;
  Io io = send_all(fd_, request, deadline);
  if (io == Io::Ok) io = recv_frame(fd_, body, deadline);
  if (io != Io::Ok) {
    ::close(fd_);  // the conversation is out of step now
    fd_ = -1;
    if (io == Io::Timeout)
      throw PeerFailure(fmt::format("the store at {} (rank 0) did not answer within {} while rank {} was {}",
                                    address_, format_seconds(wait + kReplyGrace), rank_, awaited));
    throw PeerFailure(fmt::format("lost the connection to the store at {} while rank {} was {}: rank 0, which "
                                  "hosts it, died or is unreachable",
                                  address_, rank_, awaited));
  }
  try {
    return decode(body);
  } catch (const ProtocolError&) {
    ::close(fd_);
    fd_ = -1;
    fail("the store at {} sent a malformed reply while rank {} was {}", address_, rank_, awaited);
  }
}

namespace {
// The Error of a reply that is no success, or nothing.
void throw_unless_ok(const StoreClient::Reply& reply, int rank, const std::string& awaited) {
  if (reply.status == Status::Failed) fail("{}", reply.message);
  if (reply.status == Status::PeerFailed)
    throw PeerFailure(fmt::format("{} while rank {} was {}", reply.message, rank, awaited));
}
}  // namespace

void StoreClient::set(const std::string& key, const std::string& value) {
  const std::string what = fmt::format("setting key '{}'", key);
  const Reply reply = call(Writer().u8(static_cast<uint8_t>(Op::Set)).str(key).str(value).frame(), default_timeout_,
                           what);
  throw_unless_ok(reply, rank_, what);
}

std::string StoreClient::get(const std::string& key, Seconds timeout) {
  const std::string what = fmt::format("waiting for key '{}'", key);
  const Reply reply =
      call(Writer().u8(static_cast<uint8_t>(Op::Get)).str(key).i64(to_ms(timeout)).frame(), timeout, what);
  throw_unless_ok(reply, rank_, what);
  if (reply.status == Status::Timeout)
    fail("key '{}' was not set within {} (rank {} waited for it in the store at {})", key, format_seconds(timeout),
         rank_, address_);
  return reply.value;
}

void StoreClient::erase(const std::string& key) {
  const std::string what = fmt::format("erasing key '{}'", key);
  const Reply reply = call(Writer().u8(static_cast<uint8_t>(Op::Erase)).str(key).frame(), default_timeout_, what);
  throw_unless_ok(reply, rank_, what);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  const std::string what = fmt::format("adding to key '{}'", key);
  const Reply reply = call(Writer().u8(static_cast<uint8_t>(Op::Add)).str(key).i64(delta).frame(), default_timeout_,
                           what);
  throw_unless_ok(reply, rank_, what);
  return reply.number;
}

void StoreClient::wait(const std::vector<std::string>& keys, Seconds timeout) {
  Writer w;
  w.u8(static_cast<uint8_t>(Op::Wait)).i64(static_cast<int64_t>(keys.size()));
  for (const std::string& k : keys) w.str(k);
  w.i64(to_ms(timeout));
  const std::string what = fmt::format("waiting for {} keys", keys.size());
  const Reply reply = call(w.frame(), timeout, what);
  throw_unless_ok(reply, rank_, what);
  if (reply.status == Status::Timeout) {
    std::string names;
    for (const std::string& k : reply.keys) names += (names.empty() ? "'" : ", '") + k + "'";
    const bool one = reply.keys.size() == 1;
    fail("{} {} {} not set within {} (rank {} waited in the store at {})", one ? "key" : "keys", names,
         one ? "was" : "were", format_seconds(timeout), rank_, address_);
  }
}

void StoreClient::barrier(const std::string& name, Seconds timeout) {
  const std::string what = fmt::format("waiting at barrier '{}'", name);
  const Reply reply =
      call(Writer().u8(static_cast<uint8_t>(Op::Barrier)).str(name).i64(to_ms(timeout)).frame(), timeout, what);
  throw_unless_ok(reply, rank_, what);
  if (reply.status == Status::Timeout)
    fail("{} of {} did not reach barrier '{}' within {} (rank {} waited there)", rank_list(reply.ranks), world_size_,
         name, format_seconds(timeout), rank_);
}

void StoreClient::check_alive() {
  const Reply reply = call(Writer().u8(static_cast<uint8_t>(Op::Health)).frame(), default_timeout_,
                           "checking that every rank lives");
  if (reply.status == Status::PeerFailed) throw PeerFailure(reply.message);
  throw_unless_ok(reply, rank_, "checking that every rank lives");
}

void StoreClient::start_watchdog(Seconds timeout, FailureHandler on_failure) {
  if (watchdog_.joinable()) fail("rank {} started its watchdog twice", rank_);
  heartbeat_fd_ = open_connection(host_, port_, rank_, world_size_, Role::Heartbeat, timeout, timeout, secret_);
  if (!on_failure) on_failure = exit_on_failure;
  watchdog_stop_ = watchdog_freeze_ = false;
  watchdog_ = std::thread([this, timeout, on_failure = std::move(on_failure)] { watchdog_loop(timeout, on_failure); });
}

void StoreClient::watchdog_loop(Seconds timeout, FailureHandler on_failure) {
  // Several heartbeats per timeout, so one late one is no death.
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::clamp(timeout / 5.0, Seconds(0.01), Seconds(1.0)));
  const std::string health = Writer().u8(static_cast<uint8_t>(Op::Health)).frame();
  std::string failure;
  while (true) {
    {
      std::unique_lock lock(watchdog_mutex_);
      if (watchdog_wake_.wait_for(lock, interval, [&] { return watchdog_stop_ || watchdog_freeze_; })) break;
    }
    const auto deadline = after(timeout);
    std::string body;
    Io io = send_all(heartbeat_fd_, health, deadline);
    if (io == Io::Ok) io = recv_frame(heartbeat_fd_, body, deadline);
    if (io == Io::Closed) {
      failure = fmt::format("lost the connection to the store at {}: rank 0, which hosts it, died or is unreachable",
                            address_);
      break;
    }
    if (io == Io::Timeout) {
      failure = fmt::format("the store at {} (rank 0) did not answer a heartbeat for {}", address_,
                            format_seconds(timeout));
      break;
    }
    Reply reply;
    try {
      reply = decode(body);
    } catch (const ProtocolError&) {
      failure = fmt::format("the store at {} sent a malformed reply to a heartbeat", address_);
      break;
    }
    if (reply.status != Status::Ok) {
      failure = reply.message;
      break;
    }
  }
  bool report = false;
  {
    std::lock_guard lock(watchdog_mutex_);
    if (watchdog_freeze_) return;  // the connection stays open, silent
    report = !failure.empty() && !watchdog_stop_;
  }
  if (report) {
    // Not under the lock: the handler may end the process, or take its time.
    on_failure(fmt::format("{}; rank {} stops", failure, rank_));
    return;
  }
  say_goodbye(heartbeat_fd_, true);
  ::close(heartbeat_fd_);
  heartbeat_fd_ = -1;
}

void StoreClient::stop_watchdog() {
  {
    std::lock_guard lock(watchdog_mutex_);
    watchdog_stop_ = true;
  }
  watchdog_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void StoreClient::freeze_heartbeats_for_testing() {
  {
    std::lock_guard lock(watchdog_mutex_);
    watchdog_freeze_ = true;
  }
  watchdog_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void StoreClient::close(bool ok) {
  stop_watchdog();
  std::lock_guard lock(mutex_);
  if (fd_ < 0) return;
  say_goodbye(fd_, ok);
  ::close(fd_);
  fd_ = -1;
}

void exit_on_failure(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  ::_exit(kPeerFailureExitCode);
}

// ---- session and rendezvous -------------------------------------------------------

DistSession::DistSession(DistEnvironment env, std::unique_ptr<StoreServer> server,
                         std::unique_ptr<StoreClient> client, std::unique_ptr<PublishedSecret> secret_file)
    : env_(std::move(env)), secret_file_(std::move(secret_file)), server_(std::move(server)),
      client_(std::move(client)) {}

DistSession::~DistSession() {
  if (!client_) return;  // moved from, or finished
  client_->close(false);
  // Rank 0 failed: keep the store up a moment so that the others hear why
  // instead of only that the store vanished.
  if (server_) server_->wait_until_all_left(std::min(Seconds(env_.timeout_seconds), Seconds(5.0)));
}

void DistSession::finish() {
  if (!client_) return;
  client_->close(true);
  if (server_) server_->wait_until_all_left(Seconds(env_.timeout_seconds));
  client_.reset();
  server_.reset();
  secret_file_.reset();
}

namespace {

// Whether `host` is this host's loopback: a run whose ranks all reach rank 0
// there runs on one host, whatever its launcher says of nodes.
bool is_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool loopback = true;
  for (addrinfo* a = found; a; a = a->ai_next) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    loopback = loopback && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  ::freeaddrinfo(found);
  return loopback;
}

// How long a connection may take to prove that it knows the job secret: a
// rank needs one round trip; a stranger gets no more than a quarter of the
// timeout, between 1 and 10 s.
Seconds handshake_window(Seconds timeout) { return std::clamp(timeout / 4.0, Seconds(1.0), Seconds(10.0)); }

// The secret that rank `env.rank` (not 0) finds in `path`, waiting for rank 0
// to publish it.
std::string await_secret_file(const DistEnvironment& env, const std::string& path, Clock::time_point deadline,
                              Seconds timeout) {
  while (true) {
    if (auto secret = read_secret_file(path)) return *secret;
    if (Clock::now() >= deadline)
      fail("rank 0 of {} never joined within {}: no job secret appeared in {} ({} is not set, so rank 0 publishes "
           "one there; is rank 0 running on this host, as MASTER_ADDR={} says?)",
           env.world_size, format_seconds(timeout), path, kJobSecretVariable, env.master_addr);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

DistSession rendezvous(const DistEnvironment& env, Seconds timeout) {
  const auto deadline = after(timeout);
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<PublishedSecret> published;
  std::string host = env.master_addr;
  int port = env.store();
  std::string secret = env.job_secret;
  std::string secret_file;  // where the ranks of one host exchange a secret nobody gave them
  StoreServerOptions options;
  options.handshake_timeout = handshake_window(timeout);
  if (env.world_size == 1) {
    if (secret.empty()) secret = generate_job_secret();
    server = std::make_unique<StoreServer>(0, 1, "127.0.0.1", secret, options);
    host = "127.0.0.1";
    port = server->port();
  } else {
    if (secret.empty()) {
      if (env.local_world_size < env.world_size && !is_loopback(env.master_addr))
        fail("{} is not set, and the {} ranks run on several nodes ({} on this one, MASTER_ADDR={}): set it to the "
             "same random value for every rank, such as {}=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n'); the "
             "store refuses a rank without it",
             kJobSecretVariable, env.world_size, env.local_world_size, env.master_addr, kJobSecretVariable);
      secret_file = secret_file_path(secret_directory(env.runtime_dir), port);
    }
    if (env.rank == 0) {
      if (secret.empty()) secret = generate_job_secret();
      try {
        server = std::make_unique<StoreServer>(port, env.world_size, env.master_addr, secret, options);
      } catch (const Error& e) {
        const bool derived = port != env.master_port;
        fail("rank 0 cannot start the store (MASTER_ADDR={}, {}={}): {}{}", env.master_addr,
             derived ? "store port" : "MASTER_PORT", port, e.what(),
             derived ? fmt::format(" (MASTER_PORT {} is torchrun's own store; set ANATOMY_STORE_PORT to another "
                                   "free port for every rank)",
                                   env.master_port)
                     : "");
      }
      // Published once the port is ours: a rank 0 that could not listen
      // leaves another run's file alone.
      if (!secret_file.empty()) published = std::make_unique<PublishedSecret>(secret_file, secret);
      host = server->address() == "0.0.0.0" ? "127.0.0.1" : server->address();  // its own server
    }
  }
  std::unique_ptr<StoreClient> client;
  while (!client) {
    if (!secret_file.empty() && env.rank != 0) secret = await_secret_file(env, secret_file, deadline, timeout);
    const Seconds left = std::max(Seconds(0.1), std::chrono::duration_cast<Seconds>(deadline - Clock::now()));
    try {
      client = std::make_unique<StoreClient>(host, port, env.rank, env.world_size, secret, left);
    } catch (const Unreachable& e) {
      fail("rank 0 of {} never joined within {} (MASTER_ADDR={}: {})", env.world_size, format_seconds(timeout),
           env.master(), e.reason);
    } catch (const SecretMismatch& e) {
      // A file left by an earlier run on this port, read before rank 0
      // replaced it: read it again.
      if (secret_file.empty() || env.rank == 0 || Clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const Seconds left = std::max(Seconds(0), std::chrono::duration_cast<Seconds>(deadline - Clock::now()));
  const std::string what = "joining the rendezvous";
  const StoreClient::Reply reply = client->call(
      Writer().u8(static_cast<uint8_t>(Op::Barrier)).str(kRendezvousBarrier).i64(to_ms(left)).frame(), left, what);
  if (reply.status == Status::Timeout)
    fail("{} of {} never joined within {} (MASTER_ADDR={})", rank_list(reply.ranks), env.world_size,
         format_seconds(timeout), env.master());
  throw_unless_ok(reply, env.rank, what);
  DistEnvironment joined = env;
  joined.timeout_seconds = timeout.count();
  return DistSession(joined, std::move(server), std::move(client), std::move(published));
}

// ---- the server's parser without sockets ------------------------------------------

WireOutcome feed_store_connection(const std::string& secret, int world_size, std::string_view bytes, size_t chunk,
                                  int as_rank) {
  WireOutcome out;
  StoreServer::Impl s;
  s.world_size = std::max(1, world_size);
  s.ranks.resize(static_cast<size_t>(s.world_size));
  s.secret = secret;
  s.log = [&out](const std::string& line) { out.log.push_back(line); };
  StoreServer::Impl::Connection fresh;
  fresh.peer = "192.0.2.1:4321";
  fresh.last_seen = Clock::now();
  fresh.handshake_deadline = fresh.last_seen + std::chrono::seconds(10);
  if (as_rank >= 0 && as_rank < s.world_size) {
    fresh.phase = StoreServer::Impl::Phase::Ready;
    fresh.rank = as_rank;
    s.ranks[static_cast<size_t>(as_rank)].joined = true;
  }
  const int id = s.next_connection++;
  s.connections.emplace(id, std::move(fresh));
  if (chunk == 0) chunk = bytes.size() + 1;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    StoreServer::Impl::Connection& c = s.connections.at(id);
    if (c.closing || c.closed) break;
    c.in.append(bytes.substr(at, chunk));
    s.consume(id, c);
    out.replies += c.out;
    c.out.clear();
  }
  StoreServer::Impl::Connection& c = s.connections.at(id);
  out.closed = c.closing || c.closed;
  // The stream ends: the connection closes.
  if (!c.closing && !c.closed) {
    if (c.phase != StoreServer::Impl::Phase::Ready) s.refuse(c, StoreServer::Impl::closed_early(c));
    c.closed = true;
  }
  out.authenticated = c.phase == StoreServer::Impl::Phase::Ready;
  s.drop(id, c);
  s.expire(Clock::now() + std::chrono::hours(24 * 365));
  return out;
}

}  // namespace anatomy::distributed
