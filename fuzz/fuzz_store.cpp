// fuzz_store: the bytes of one connection to the rendezvous store (store.h,
// protocol 2) through the server's frame parser and handshake, without
// sockets (feed_store_connection). The first byte picks how the stream is cut
// (pieces of 1 to 16 bytes, or whole), the second who sends it: a stranger
// (before the handshake: frames of 256 bytes at most, a hello, a proof) or
// rank 0 or 1 of a world of two, already authenticated (set, get, add, wait,
// barrier, health, goodbye, erase). Checked besides the sanitizers: a
// stranger never authenticates (it cannot make the HMAC of the server's fresh
// nonce), is refused with one line at most, and every reply is whole frames.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "anatomy/distributed/store.h"

namespace {

// Whether `replies` is a sequence of whole frames.
bool whole_frames(const std::string& replies) {
  size_t at = 0;
  while (replies.size() - at >= 4) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(replies[at + static_cast<size_t>(i)]);
    if (replies.size() - at - 4 < n) return false;
    at += 4 + n;
  }
  return at == replies.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t chunk = data[0] % 17;           // 0: the whole stream at once
  const int as_rank = static_cast<int>(data[1] % 3) - 1;  // -1: a stranger
  const std::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);
  const anatomy::distributed::WireOutcome out =
      anatomy::distributed::feed_store_connection("fuzz-job-secret-0123456789abcdef", 2, bytes, chunk, as_rank);
  if (as_rank < 0 && out.authenticated) __builtin_trap();
  if (as_rank < 0 && out.log.size() > 1) __builtin_trap();
  if (!whole_frames(out.replies)) __builtin_trap();
  return 0;
}
