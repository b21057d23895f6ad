// test_task_metrics.cpp: the token classification (seqeval.h) and question
// answering (squad_metrics.h) metrics against their Python references, case by
// case: fixtures/task-metrics/seqeval.json (seqeval as evaluate's "seqeval"
// metric calls it) and squad.json (the official evaluate-v1.1.py and
// evaluate-v2.0.py), written by tests/tools/make_task_metrics_fixtures.py.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/normalized_text.h"
#include "anatomy/data/wordpiece_unicode.h"
#include "anatomy/train/seqeval.h"
#include "anatomy/train/squad_metrics.h"
#include "test_util.h"

namespace anatomy {
namespace {

using nlohmann::json;

constexpr double kRelative = 1e-12;

json read_fixture(const std::string& name) {
  std::ifstream in(test::fixture("task-metrics/" + name));
  EXPECT_TRUE(in) << "missing fixture task-metrics/" << name;
  return json::parse(in);
}

// |actual − expected| within kRelative of |expected| (0 only for 0).
void expect_close(double actual, double expected, const std::string& what) {
  EXPECT_LE(test::relative(actual, expected), kRelative) << what << ": " << actual << " vs " << expected;
}

std::vector<std::vector<std::string>> sentences(const json& j) {
  return j.get<std::vector<std::vector<std::string>>>();
}

std::string utf8(char32_t c) {
  std::string s;
  data::tok::append_utf8(s, c);
  return s;
}

// ---------------------------------------------------------------- seqeval

TEST(Seqeval, EntitiesMatchGetEntities) {
  const json f = read_fixture("seqeval.json");
  ASSERT_FALSE(f["entities"].empty());
  for (const json& c : f["entities"]) {
    std::vector<Entity> expected;
    for (const json& e : c["entities"])
      expected.push_back({e[0].get<std::string>(), e[1].get<int64_t>(), e[2].get<int64_t>()});
    EXPECT_EQ(seqeval_entities(c["tags"].get<std::vector<std::string>>()), expected) << c["name"];
  }
}

TEST(Seqeval, CorporaMatchEvaluate) {
  const json f = read_fixture("seqeval.json");
  ASSERT_GE(f["corpora"].size(), 40u);
  for (const json& c : f["corpora"]) {
    const std::string name = c["name"];
    const SeqevalResult r = seqeval(sentences(c["truth"]), sentences(c["predicted"]));
    const json& e = c["expect"];
    expect_close(r.precision, e["overall_precision"], name + " overall_precision");
    expect_close(r.recall, e["overall_recall"], name + " overall_recall");
    expect_close(r.f1, e["overall_f1"], name + " overall_f1");
    expect_close(r.accuracy, e["overall_accuracy"], name + " overall_accuracy");
    std::set<std::string> expected_types, types;
    for (const auto& [type, s] : e["types"].items()) {
      expected_types.insert(type);
      if (!r.types.count(type)) continue;
      const EntityScore& t = r.types.at(type);
      expect_close(t.precision, s["precision"], name + " " + type + " precision");
      expect_close(t.recall, s["recall"], name + " " + type + " recall");
      expect_close(t.f1, s["f1"], name + " " + type + " f1");
      EXPECT_EQ(t.number, s["number"].get<int64_t>()) << name << " " << type;
    }
    for (const auto& [type, s] : r.types) types.insert(type);
    EXPECT_EQ(types, expected_types) << name;
  }
}

TEST(Seqeval, RejectsWhatSeqevalRejects) {
  const auto message = [](const auto& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { seqeval({{"O"}, {"B-PER", "O"}}, {{"O"}, {"B-PER"}}); }),
            "seqeval: sentence 1 has 2 true tags but 1 predicted");
  EXPECT_EQ(message([] { seqeval({{"O"}}, {{"O"}, {"O"}}); }), "seqeval: 1 true sentences but 2 predicted");
  EXPECT_EQ(message([] { seqeval({}, {}); }), "seqeval: no sentences");
  EXPECT_EQ(message([] { seqeval({{}, {}}, {{}, {}}); }),
            "seqeval: no tags in 2 sentences (accuracy divides by the tag count)");
  EXPECT_EQ(message([] { seqeval({{"O", "O"}}, {{"O", ""}}); }), "seqeval: sentence 0 has an empty tag (position 1)");
}

// ---------------------------------------------------------------- SQuAD

// The tables the normalization uses against Python's: str.lower() of every code
// point (the tokenizer's Unicode 16.0 table may lowercase characters that the
// fixture's Python does not have yet, and only those), and str.isspace().
TEST(Squad, LowercaseAndWhiteSpaceMatchPython) {
  const json f = read_fixture("squad.json");
  const json& u = f["unicode"];
  std::vector<std::u32string> python(0x110000);
  for (const json& l : u["lower"]) {
    const std::string lowered = l[1];
    for (char32_t c : data::tok::decode_utf8(lowered)) python[l[0].get<uint32_t>()] += c;
  }
  std::vector<bool> unassigned(0x110000);
  for (const json& r : u["unassigned"])
    for (uint32_t c = r[0].get<uint32_t>(); c <= r[1].get<uint32_t>(); ++c) unassigned[c] = true;
  int newer = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c < 0xE000) continue;
    const auto ours = data::unicode::lowercase(c);
    std::u32string lowered(ours.begin(), ours.end());
    if (lowered.empty()) lowered = c;
    const std::u32string expected = python[c].empty() ? std::u32string(1, c) : python[c];
    if (lowered == expected) continue;
    EXPECT_TRUE(unassigned[c]) << "U+" << std::hex << static_cast<uint32_t>(c);
    ++newer;
  }
  EXPECT_LT(newer, 100);  // the characters of newer Unicode versions, a few dozen
  // White space: every str.isspace() character splits; nothing else does.
  const auto listed = u["space"].get<std::vector<uint32_t>>();
  const std::set<uint32_t> space(listed.begin(), listed.end());
  for (char32_t c = 0; c < 0x110000; ++c) {
    const bool ours = data::tok::is_white_space(c) || (c >= 0x1C && c <= 0x1F);
    EXPECT_EQ(ours, space.count(c) != 0) << "U+" << std::hex << static_cast<uint32_t>(c);
  }
  for (uint32_t c : space) EXPECT_EQ(squad_normalize_answer("x" + utf8(c) + "y"), "x y") << std::hex << c;
}

TEST(Squad, NormalizeAnswerMatchesScripts) {
  const json f = read_fixture("squad.json");
  ASSERT_GE(f["normalize"].size(), 200u);
  for (const json& c : f["normalize"]) EXPECT_EQ(squad_normalize_answer(c[0].get<std::string>()), c[1]) << c[0];
}

TEST(Squad, ExactAndF1MatchScripts) {
  const json f = read_fixture("squad.json");
  ASSERT_GE(f["pairs"].size(), 300u);
  for (const json& c : f["pairs"]) {
    const std::string gold = c["gold"], pred = c["prediction"];
    const std::string what = "gold \"" + gold + "\" prediction \"" + pred + "\"";
    EXPECT_EQ(squad_exact(gold, pred), c["exact_v1"].get<double>()) << what;
    EXPECT_EQ(squad_exact(gold, pred), c["exact_v2"].get<double>()) << what;
    expect_close(squad_f1(gold, pred, 1), c["f1_v1"], what + " v1.1 f1");
    expect_close(squad_f1(gold, pred, 2), c["f1_v2"], what + " v2.0 f1");
  }
}

std::vector<SquadQuestion> questions_of(const json& c) {
  std::vector<SquadQuestion> out;
  for (const json& q : c["questions"])
    out.push_back({q["id"].get<std::string>(), q["answers"].get<std::vector<std::string>>()});
  return out;
}

// Every key of the script's output, and no other.
void expect_scores(const SquadResult& r, const json& expected, const std::string& name) {
  std::set<std::string> keys, expected_keys;
  for (const auto& [key, value] : expected.items()) {
    expected_keys.insert(key);
    if (r.scores.count(key)) expect_close(r.scores.at(key), value.get<double>(), name + " " + key);
  }
  for (const auto& [key, value] : r.scores) keys.insert(key);
  EXPECT_EQ(keys, expected_keys) << name;
}

TEST(Squad, V1MatchesScript) {
  const json f = read_fixture("squad.json");
  int errors = 0;
  for (const json& c : f["v1"]) {
    const std::string name = c["name"];
    const auto questions = questions_of(c);
    const auto predictions = c["predictions"].get<std::map<std::string, std::string>>();
    if (c.contains("error")) {
      EXPECT_THROW(squad_v1(questions, predictions), Error) << name << ": the script failed with " << c["error"];
      ++errors;
      continue;
    }
    const SquadResult r = squad_v1(questions, predictions);
    expect_scores(r, c["expect"], name);
    EXPECT_EQ(static_cast<int>(r.unanswered.size()), c["unanswered"].get<int>()) << name;
  }
  EXPECT_EQ(errors, 1);
}

TEST(Squad, V2MatchesScript) {
  const json f = read_fixture("squad.json");
  int errors = 0;
  for (const json& c : f["v2"]) {
    const std::string name = c["name"];
    const auto questions = questions_of(c);
    const auto predictions = c["predictions"].get<std::map<std::string, std::string>>();
    std::vector<std::pair<std::string, double>> na_probs;
    if (c.contains("na_probs"))
      for (const json& p : c["na_probs"]) na_probs.emplace_back(p[0].get<std::string>(), p[1].get<double>());
    const auto* probs = c.contains("na_probs") ? &na_probs : nullptr;
    const double thresh = c.value("na_prob_thresh", 1.0);
    if (c.contains("error")) {
      EXPECT_THROW(squad_v2(questions, predictions, probs, thresh), Error)
          << name << ": the script failed with " << c["error"];
      ++errors;
      continue;
    }
    expect_scores(squad_v2(questions, predictions, probs, thresh), c["expect"], name);
  }
  EXPECT_EQ(errors, 2);
}

TEST(Squad, NamesWhatIsWrong) {
  const auto message = [](const auto& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { squad_v2({{"q1", {"x"}}, {"q2", {}}}, {{"q1", "x"}}); }),
            "squad v2.0: no prediction for question q2 (the script fails on it)");
  EXPECT_EQ(message([] { squad_v1({{"q1", {}}}, {{"q1", "x"}}); }), "squad v1.1: question q1 has no answers");
  EXPECT_EQ(message([] { squad_v1({}, {}); }), "squad v1.1: no questions");
  EXPECT_EQ(message([] { squad_v1({{"q1", {"x"}}}, {{"q1", "\xff"}}); }),
            "squad v1.1: the prediction for question q1 is not UTF-8 (byte 0xFF at offset 0)");
  const std::vector<std::pair<std::string, double>> twice = {{"q1", 0.5}, {"q1", 0.25}};
  EXPECT_EQ(message([&] { squad_v2({{"q1", {"x"}}}, {{"q1", "x"}}, &twice); }),
            "squad v2.0: two no-answer probabilities for question q1");
  EXPECT_EQ(message([] { squad_f1("a", "b", 3); }), "squad_f1: version 3 (SQuAD has 1 and 2)");
  // v1.1 scores an unanswered question 0 and names it.
  const SquadResult r = squad_v1({{"q1", {"Paris"}}, {"q2", {"Rome"}}}, {{"q1", "paris"}});
  EXPECT_EQ(r.unanswered, std::vector<std::string>{"q2"});
  EXPECT_EQ(r.scores.at("exact_match"), 50.0);
}

}  // namespace
}  // namespace anatomy
