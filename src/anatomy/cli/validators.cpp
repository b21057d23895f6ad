// validators.cpp: checks of number flags.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

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
// An integer flag's check: the whole input an integer of at least `min` that
// fits the flag's 64 bits (CLI11 would clamp 99999999999999999999 to the
// largest value instead of refusing it).
template <typename Int>
CLI::Validator integer_check(Int min, const std::string& expected, const char* name) {
  return CLI::Validator(
      [min, expected](std::string& input) -> std::string {
        Int value{};
        const char* begin = input.data();
        const char* end = begin + input.size();
        if (!input.empty() && *begin == '+') ++begin;
        const auto [at, ec] = std::from_chars(begin, end, value);
        if (ec == std::errc::result_out_of_range)
          return "expected " + expected + " that fits " + std::to_string(8 * sizeof(Int)) + " bits, got " + input;
        if (input.empty() || ec != std::errc() || at != end || value < min) return "expected " + expected + ", got " + input;
        return {};
      },
      name);
}
}  // namespace

const CLI::Validator& positive_integer() {
  static const CLI::Validator check = integer_check<int64_t>(1, "a positive integer", "POSITIVE");
  return check;
}

const CLI::Validator& non_negative_integer() {
  static const CLI::Validator check = integer_check<int64_t>(0, "a non-negative integer", "NONNEGATIVE");
  return check;
}

const CLI::Validator& max_steps_integer() {
  static const CLI::Validator check = integer_check<int64_t>(-1, "an integer of at least -1", "INT");
  return check;
}

const CLI::Validator& seed_integer() {
  static const CLI::Validator check = integer_check<uint64_t>(0, "a non-negative integer", "UINT");
  return check;
}

const CLI::Validator& probability_below_one() {
  static const CLI::Validator check(
      [](std::string& input) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(input.c_str(), &end);
        const bool number = !input.empty() && end == input.c_str() + input.size() && std::isfinite(value);
        if (!number || value < 0.0 || value >= 1.0) return "expected a number in [0, 1), got " + input;
        return {};
      },
      "[0, 1)");
  return check;
}

const CLI::Validator& positive_number() {
  static const CLI::Validator check = number_check(false);
  return check;
}

const CLI::Validator& non_negative_number() {
  static const CLI::Validator check = number_check(true);
  return check;
}

}  // namespace anatomy::cli
