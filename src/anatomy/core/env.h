// env.h: switches read from the environment.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "anatomy/core/error.h"

namespace anatomy {

// The value of the environment variable `name` when it is one of `allowed`,
// or "" when it is unset or empty; any other value ends the run with
// "NAME=value: expected <expected>".
inline std::string_view env_choice(const char* name, std::initializer_list<std::string_view> allowed,
                                   std::string_view expected) {
  const char* value = std::getenv(name);
  const std::string_view v = value ? value : "";
  if (v.empty()) return v;
  for (std::string_view a : allowed)
    if (v == a) return v;
  fail("{}={}: expected {}", name, v, expected);
}

}  // namespace anatomy
