// validators.cpp: checks of number flags.
#include <cmath>
#include <cstdlib>

#include "anatomy/cli/commands.h"

namespace anatomy::cli {

namespace {
// A number flag's check. CLI11 2.1's PositiveNumber and NonNegativeNumber say
// "Value 0 not in range 0.000000 to 1797693...(300 digits).000000", and the same
// of a value that is no number at all: this says what was expected.
CLI::Validator number_check(bool zero_allowed) {
  const std::string expected = zero_allowed ? "a non-negative number" : "a positive number";
  return CLI::Validator(
      [zero_allowed, expected](std::string& input) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(input.c_str(), &end);
        const bool number = !input.empty() && end == input.c_str() + input.size() && std::isfinite(value);
        if (!number || value < 0.0 || (!zero_allowed && value == 0.0))
          return "expected " + expected + ", got " + input;
        return {};
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}
}  // namespace

const CLI::Validator& positive_number() {
  static const CLI::Validator check = number_check(false);
  return check;
}

const CLI::Validator& non_negative_number() {
  static const CLI::Validator check = number_check(true);
  return check;
}

}  // namespace anatomy::cli
