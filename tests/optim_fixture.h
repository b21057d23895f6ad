// optim_fixture.h: what the optimizer tests share to read the fixtures that
// tests/tools/make_{adafactor,sgd}_fixture.py write (tests/fixtures/optim/),
// and to move a concatenation of every tensor's values into and out of a
// ParameterSet. A fixture is lines of "<record> <values...>"; '#' starts a
// comment line. Every fixture has the records weight_decay, lr (one learning
// rate a step), tensor (name, 1 if it decays, then its shape), param0 and
// grad (one a step), the floats as 8 hex digits of their bits; each has
// records of its own besides.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "anatomy/model/parameters.h"
#include "test_util.h"

namespace anatomy::test {

struct OptimizerFixture {
  double weight_decay = 0.0;
  std::vector<double> lrs;
  std::vector<ParamSpec> specs;
  std::vector<float> param0;
  std::vector<std::vector<float>> grads;  // per step, every tensor concatenated
};

// The rest of the line's words as floats, each written as the hex digits of its bits.
inline std::vector<float> hex_floats(std::istringstream& words) {
  std::vector<float> out;
  for (std::string w; words >> w;) out.push_back(std::bit_cast<float>(static_cast<uint32_t>(std::stoul(w, nullptr, 16))));
  return out;
}

// Reads tests/fixtures/<name>: the shared records into `f`, any other record
// to `own(key, words)`, which returns false for one it does not know either
// (a test failure naming the file and the record).
inline void read_optimizer_fixture(const std::string& name, OptimizerFixture& f,
                                   const std::function<bool(const std::string&, std::istringstream&)>& own) {
  std::ifstream in(fixture(name));
  EXPECT_TRUE(in) << "missing fixture " << name;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "weight_decay") {
      words >> f.weight_decay;
    } else if (key == "lr") {
      for (double lr; words >> lr;) f.lrs.push_back(lr);
    } else if (key == "tensor") {
      ParamSpec spec{"", {}, false, ParamInit::Zeros};
      int decays = 0;
      words >> spec.name >> decays;
      spec.weight_decay = decays != 0;
      for (int64_t d; words >> d;) spec.shape.push_back(d);
      f.specs.push_back(spec);
    } else if (key == "param0") {
      f.param0 = hex_floats(words);
    } else if (key == "grad") {
      f.grads.push_back(hex_floats(words));
    } else if (!own(key, words)) {
      ADD_FAILURE() << name << ": unknown record " << key;
    }
  }
}

// Copies a concatenation of every tensor's values into (or out of) a set, tensor by tensor.
inline void scatter(const ParameterSet& set, const std::vector<float>& values) {
  size_t at = 0;
  for (const Tensor& t : set.tensors()) {
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(at), t.numel(), t.data<float>());
    at += static_cast<size_t>(t.numel());
  }
  ASSERT_EQ(at, values.size());
}
inline std::vector<float> gather(const ParameterSet& set) {
  std::vector<float> out;
  for (const Tensor& t : set.tensors()) out.insert(out.end(), t.data<float>(), t.data<float>() + t.numel());
  return out;
}

}  // namespace anatomy::test
