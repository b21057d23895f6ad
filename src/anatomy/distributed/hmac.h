// hmac.h: SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the store's
// challenge-response handshake (store.h): each side proves it knows the job
// secret without sending it. Written out here (about a hundred lines, checked
// against the FIPS and RFC 4231 test vectors) rather than linking a crypto
// library for one primitive that needs no speed.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace anatomy::distributed {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);

// Compares two byte strings in time that depends on their lengths only, not
// on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// `n` bytes from the kernel's random generator (getrandom, /dev/urandom).
// Throws Error when neither is available.
std::string random_bytes(size_t n);

// "0a1b...": lower-case hexadecimal.
std::string to_hex(std::string_view bytes);

}  // namespace anatomy::distributed
