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
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "anatomy/core/error.h"

namespace anatomy::distributed {

namespace {

using Clock = std::chrono::steady_clock;

enum class Op : uint8_t { Hello = 1, Set, Get, Add, Wait, Barrier, Health, Goodbye, Erase };
enum class Status : uint8_t { Ok = 0, Timeout = 1, PeerFailed = 2, Failed = 3 };
enum class Role : uint8_t { Control = 0, Heartbeat = 1 };
enum class Missing : uint8_t { Ranks = 0, Keys = 1 };

constexpr uint32_t kMagic = 0x414e4154;  // "ANAT"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxFrame = 64u << 20;
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
  struct Connection {
    int fd = -1;
    std::string in, out;
    int rank = -1;  // after a hello
    Role role = Role::Control;
    int64_t liveness_ms = 0;  // heartbeat connections: silence longer than this is death
    Clock::time_point last_seen;
    bool goodbye = false;
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
  void handle(int id, Connection& c, const std::string& body);
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

StoreServer::StoreServer(int port, int world_size, const std::string& address) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.world_size = world_size;
  s.ranks.resize(static_cast<size_t>(world_size));
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
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient failure of one connection
    set_nodelay(fd);
    Connection c;
    c.fd = fd;
    c.last_seen = Clock::now();
    connections.emplace(next_connection++, std::move(c));
  }
}

void StoreServer::Impl::read_from(int id, Connection& c) {
  char buffer[65536];
  bool eof = false;
  while (true) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      c.in.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
    break;
  }
  // Whole frames first: a goodbye followed at once by the close is a goodbye.
  size_t at = 0;
  while (!c.closed && c.in.size() - at >= 4) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(c.in[at + i]);
    if (n > kMaxFrame) {
      c.closed = true;  // not our protocol
      break;
    }
    if (c.in.size() - at - 4 < n) break;
    c.last_seen = Clock::now();
    try {
      handle(id, c, c.in.substr(at + 4, n));
    } catch (const ProtocolError&) {
      c.closed = true;
    }
    at += 4 + n;
  }
  c.in.erase(0, at);
  if (eof) c.closed = true;
}

void StoreServer::Impl::handle(int id, Connection& c, const std::string& body) {
  Reader r{body};
  const Op op = static_cast<Op>(r.u8());
  if (op != Op::Hello && c.rank < 0) {
    reply_failed(c, "the store expects a hello first");
    c.goodbye = true;
    return;
  }
  switch (op) {
    case Op::Hello: {
      const uint32_t magic = r.u32(), version = r.u32();
      const int64_t rank = r.i64(), size = r.i64();
      const Role role = static_cast<Role>(r.u8());
      const int64_t liveness_ms = r.i64();
      if (magic != kMagic || version != kVersion) {
        reply_failed(c, fmt::format("the store speaks protocol {} of anatomy, the client {}", kVersion, version));
        return;
      }
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
      RankState& s = ranks[static_cast<size_t>(rank)];
      if (role == Role::Control) {
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
      c.liveness_ms = role == Role::Heartbeat ? liveness_ms : 0;
      reply_ok(c);
      return;
    }
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
        const long long old = std::strtoll(it->second.c_str(), &end, 10);
        if (it->second.empty() || *end != '\0') {
          reply_failed(c, fmt::format("key '{}' holds no counter", key));
          return;
        }
        sum += old;
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
  ::close(c.fd);
  c.fd = -1;
  if (c.rank >= 0 && !c.goodbye)
    mark_dead(c.rank, fmt::format("rank {} died (its connection to the store closed)", c.rank));
}

Clock::time_point StoreServer::Impl::next_deadline(Clock::time_point now) const {
  Clock::time_point next = now + std::chrono::seconds(1);
  for (const Waiter& w : waiters) next = std::min(next, w.deadline);
  for (const auto& [id, c] : connections)
    if (c.liveness_ms > 0 && !c.goodbye) next = std::min(next, c.last_seen + std::chrono::milliseconds(c.liveness_ms));
  return next;
}

void StoreServer::Impl::expire(Clock::time_point now) {
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

std::string hello(int rank, int world_size, Role role, Seconds liveness) {
  return Writer()
      .u8(static_cast<uint8_t>(Op::Hello))
      .u32(kMagic)
      .u32(kVersion)
      .i64(rank)
      .i64(world_size)
      .u8(static_cast<uint8_t>(role))
      .i64(to_ms(liveness))
      .frame();
}

std::string goodbye(bool ok) { return Writer().u8(static_cast<uint8_t>(Op::Goodbye)).u8(ok ? 1 : 0).frame(); }

// Sends a goodbye on `fd` and waits briefly for its acknowledgement, so that the
// close that follows cannot overtake it.
void say_goodbye(int fd, bool ok) {
  const auto deadline = after(kGoodbyeWait);
  std::string body;
  if (send_all(fd, goodbye(ok), deadline) == Io::Ok) recv_frame(fd, body, deadline);
}

// Connects and says hello; throws Error on refusal.
int open_connection(const std::string& host, int port, int rank, int world_size, Role role, Seconds timeout,
                    Seconds liveness) {
  const auto deadline = after(timeout);
  const int fd = connect_to(host, port, deadline, timeout);
  std::string body;
  Io io = send_all(fd, hello(rank, world_size, role, liveness), after(std::max(timeout, kReplyGrace)));
  if (io == Io::Ok) io = recv_frame(fd, body, after(std::max(timeout, kReplyGrace)));
  if (io != Io::Ok) {
    ::close(fd);
    throw Unreachable(fmt::format("the store at {}:{} did not answer rank {}'s hello", host, port, rank),
                      "no answer to the hello");
  }
  StoreClient::Reply reply;
  try {
    reply = decode(body);
  } catch (const ProtocolError&) {
    ::close(fd);
    fail("{}:{} does not speak the anatomy store's protocol", host, port);
  }
  if (reply.status != Status::Ok) {
    ::close(fd);
    fail("{}", reply.message);
  }
  return fd;
}

}  // namespace

StoreClient::StoreClient(const std::string& host, int port, int rank, int world_size, Seconds timeout)
    : host_(host), address_(fmt::format("{}:{}", host, port)), port_(port), rank_(rank), world_size_(world_size),
      default_timeout_(timeout) {
  fd_ = open_connection(host, port, rank, world_size, Role::Control, timeout, Seconds(0));
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
  heartbeat_fd_ = open_connection(host_, port_, rank_, world_size_, Role::Heartbeat, timeout, timeout);
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
                         std::unique_ptr<StoreClient> client)
    : env_(std::move(env)), server_(std::move(server)), client_(std::move(client)) {}

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
}

DistSession rendezvous(const DistEnvironment& env, Seconds timeout) {
  const auto deadline = after(timeout);
  std::unique_ptr<StoreServer> server;
  std::string host = env.master_addr;
  int port = env.master_port;
  if (env.world_size == 1) {
    server = std::make_unique<StoreServer>(0, 1, "127.0.0.1");
    host = "127.0.0.1";
    port = server->port();
  } else if (env.rank == 0) {
    try {
      server = std::make_unique<StoreServer>(env.master_port, env.world_size, env.master_addr);
    } catch (const Error& e) {
      fail("rank 0 cannot start the store (MASTER_ADDR={}, MASTER_PORT={}): {}", env.master_addr, env.master_port,
           e.what());
    }
    host = server->address() == "0.0.0.0" ? "127.0.0.1" : server->address();  // its own server
  }
  std::unique_ptr<StoreClient> client;
  try {
    client = std::make_unique<StoreClient>(host, port, env.rank, env.world_size, timeout);
  } catch (const Unreachable& e) {
    fail("rank 0 of {} never joined within {} (MASTER_ADDR={}: {})", env.world_size, format_seconds(timeout),
         env.master(), e.reason);
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
  return DistSession(joined, std::move(server), std::move(client));
}

}  // namespace anatomy::distributed
