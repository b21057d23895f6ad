// regex_properties.h: where tokenizer.json's regular expressions (Oniguruma, in
// the `tokenizers` library, with its Unicode data) and PCRE2 10.42 (Unicode 14)
// disagree on the code points of a property (\p{L}, \p{Han}, \p{Alphabetic},
// ...) or of \w: the code points Oniguruma counts and PCRE2 does not (added)
// and the reverse (removed). regex.cpp writes each such property as PCRE2's
// with these ranges added and removed. The table (generated/regex_properties.cpp)
// comes from asking both engines about every code point
// (scripts/gen_regex_properties.py).
#pragma once

#include <cstddef>
#include <string_view>

#include "anatomy/data/tokenizer/whitespace_classes.h"

namespace anatomy::data::tok {

struct RangeList {
  const CodePointRange* ranges;
  size_t count;
};

struct PropertyDifference {
  const char* name;  // PCRE2's loose form: lower case, without ' ', '-', '_' ("han", "l", "alphabetic", "\w")
  RangeList added, removed;
};
extern const PropertyDifference kPropertyDifferences[];
extern const size_t kPropertyDifferenceCount;

}  // namespace anatomy::data::tok
