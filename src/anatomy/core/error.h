// error.h: the one exception type the engine throws for bad input, bad flags and
// impossible settings. Its message is a single line that names the file, tensor
// or flag at fault; the CLI prints it as "error: <message>" and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace anatomy {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error with a formatted one-line message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Internal invariant: a broken one is a bug in the engine, not bad input.
#define ANATOMY_CHECK(cond, ...)                                               \
  do {                                                                         \
    if (!(cond)) ::anatomy::fail("internal check failed ({}:{}): {}", __FILE__, \
                                 __LINE__, fmt::format(__VA_ARGS__));          \
  } while (0)

}  // namespace anatomy
