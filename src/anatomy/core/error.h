// error.h: the one exception type the engine throws for bad input, bad flags and
// impossible settings. Its message is a single line that names the file, tensor
// or flag at fault (the constructor escapes any line break a name or value
// brings in); the CLI prints it as "error: <message>" and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace anatomy {

// A message as one line: the control characters that a file's names and
// values can carry into it (a newline in a tensor name, a header field, a
// path) written as escapes (\n, \r, \xHH); tabs and everything else kept.
inline std::string one_line(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if ((c < 0x20 && c != '\t') || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(one_line(message)) {}
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
