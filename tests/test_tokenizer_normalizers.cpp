// test_tokenizer_normalizers.cpp: tokenizer.json's normalizers and the Unigram
// model against Hugging Face tokenizers (tests/fixtures/tokenizers-normalizers/
// cases.jsonl, made by tests/tools/make_normalizer_cases.py): every normalized
// string with the original span of every character (NF* on Hangul, reordered
// and blocked combining marks, compatibility characters and every code point
// that NFKD changes; SentencePiece's nmt_nfkc charsmap and small charsmaps
// that reach the grapheme and replacement quirks; BertNormalizer, Lowercase,
// StripAccents, Strip, Prepend, Replace, Nmt, ByteLevel and real Sequences),
// Unigram ids and offsets (byte fallback on and off, unknown characters, ties,
// no unk_id), and the errors of malformed normalizers, charsmaps and models.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/normalized_text.h"
#include "anatomy/data/tokenizer/normalizers.h"
#include "anatomy/data/tokenizer/unicode_tables.h"
#include "anatomy/data/tokenizer/unigram.h"

namespace anatomy {
namespace {

using data::tok::NormalizedText;
using data::tok::Normalizer;
using data::tok::normalizer_from_json;
using data::tok::UnigramModel;
using nlohmann::json;

struct Cases {
  std::map<std::string, json> normalizers, models;
  std::vector<json> normalizer_cases, model_cases;
};

const Cases& cases() {
  static const Cases all = [] {
    Cases c;
    const std::string path = std::string(ANATOMY_FIXTURES_DIR) + "/tokenizers-normalizers/cases.jsonl";
    std::ifstream in(path);
    EXPECT_TRUE(in) << path;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      json row = json::parse(line);
      if (row.contains("define")) {
        (row.contains("model") ? c.models : c.normalizers)[row["define"].get<std::string>()] =
            row.contains("model") ? row["model"] : row["normalizer"];
      } else {
        (row.contains("model") ? c.model_cases : c.normalizer_cases).push_back(std::move(row));
      }
    }
    return c;
  }();
  return all;
}

// A normalizer of the fixture: a name stands for its definition, in Sequences too.
json expand(const json& value) {
  if (value.is_string()) return expand(cases().normalizers.at(value.get<std::string>()));
  if (value.is_object() && value.value("type", "") == "Sequence") {
    json out = value;
    for (json& step : out["normalizers"]) step = expand(step);
    return out;
  }
  return value;
}

std::string hex(const std::string& s) {
  std::string out;
  for (size_t at = 0; at < s.size();) {
    const char32_t c = data::tok::next_utf8(s, at);
    out += fmt::format("{}{:04X}", out.empty() ? "" : " ", static_cast<uint32_t>(c));
  }
  return out;
}

// The original span of each normalized character: [start, end) of its bytes' alignments.
std::vector<uint32_t> char_spans(const NormalizedText& text) {
  std::vector<uint32_t> spans;
  const std::string& s = text.get();
  for (size_t at = 0; at < s.size();) {
    const size_t start = at;
    data::tok::next_utf8(s, at);
    spans.push_back(text.alignments()[start].first);
    spans.push_back(text.alignments()[at - 1].second);
  }
  return spans;
}

TEST(TokenizerNormalizers, MatchTheLibraryStringsAndOffsets) {
  std::map<std::string, std::unique_ptr<Normalizer>> built;
  size_t checked = 0, failures = 0;
  for (const json& c : cases().normalizer_cases) {
    const std::string key = c["normalizer"].dump();
    auto& normalizer = built[key];
    if (!normalizer) normalizer = normalizer_from_json(expand(c["normalizer"]), "cases.jsonl");
    const std::string text = c["text"].get<std::string>();
    NormalizedText normalized(text);
    if (normalizer) normalizer->normalize(normalized);
    const std::string expected = c["normalized"].get<std::string>();
    bool ok = normalized.get() == expected;
    std::vector<uint32_t> spans = char_spans(normalized);
    if (ok && c.contains("offsets")) ok = spans == c["offsets"].get<std::vector<uint32_t>>();
    ++checked;
    if (!ok && ++failures <= 20) {
      ADD_FAILURE() << c["name"].get<std::string>() << ": text [" << hex(text) << "]\n  expected ["
                    << hex(expected) << "] " << (c.contains("offsets") ? c["offsets"].dump() : "") << "\n  got      ["
                    << hex(normalized.get()) << "] " << json(spans).dump();
    }
  }
  EXPECT_EQ(failures, 0u) << "of " << checked << " cases";
  EXPECT_GT(checked, 1000u);
}

TEST(TokenizerNormalizers, UnigramMatchesTheLibraryIdsAndOffsets) {
  std::map<std::string, std::unique_ptr<UnigramModel>> built;
  size_t checked = 0;
  for (const json& c : cases().model_cases) {
    const std::string name = c["model"].get<std::string>();
    auto& model = built[name];
    if (!model) model = UnigramModel::from_json(cases().models.at(name), name);
    const std::string text = c["text"].get<std::string>();
    std::vector<data::tok::ModelToken> tokens;
    if (c.value("error", false)) {
      EXPECT_THROW(model->tokenize(text, tokens), Error) << c["name"];
      continue;
    }
    model->tokenize(text, tokens);
    std::vector<int32_t> ids;
    std::vector<uint32_t> offsets;
    for (const auto& t : tokens) {
      ids.push_back(t.id);
      offsets.push_back(t.start);
      offsets.push_back(t.end);
    }
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << c["name"] << " [" << hex(text) << "]";
    EXPECT_EQ(offsets, c["offsets"].get<std::vector<uint32_t>>()) << c["name"];
    ++checked;
  }
  EXPECT_GT(checked, 200u);
  const UnigramModel& hand = *built.at("hand");
  EXPECT_EQ(hand.vocab_size(), 16u);
  EXPECT_EQ(hand.token_to_id("a"), 7);  // the last of a repeated piece
  EXPECT_EQ(hand.token_to_id("zz"), -1);
  EXPECT_EQ(hand.id_to_token(1), "a");
  EXPECT_EQ(hand.id_to_token(16), "");
  EXPECT_EQ(hand.unk_id(), 0);
  EXPECT_EQ(built.at("hand_no_unk")->unk_id(), -1);
}

// The message of the Error that `f` throws ("" if none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string normalizer_error(const std::string& text) {
  return error_of([&] { normalizer_from_json(json::parse(text), "t.json"); });
}

TEST(TokenizerNormalizers, MalformedNormalizersAreErrorsThatNameTheField) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"(42)", "must be an object"},
      {R"({})", "no \"type\""},
      {R"({"type": 3})", "\"type\" must be a string"},
      {R"({"type": "Foo"})", "\"Foo\" is not one"},
      {R"({"type": "BertNormalizer", "handle_chinese_chars": true, "lowercase": true})", "\"clean_text\""},
      {R"({"type": "BertNormalizer", "clean_text": null, "handle_chinese_chars": true, "lowercase": true})",
       "\"clean_text\" must be true or false"},
      {R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "lowercase": true,
           "strip_accents": "yes"})",
       "\"strip_accents\""},
      {R"({"type": "Strip", "strip_left": true})", "\"strip_right\""},
      {R"({"type": "Prepend"})", "\"prepend\""},
      {R"({"type": "Prepend", "prepend": 1})", "\"prepend\" must be a string"},
      {R"({"type": "Replace", "pattern": "b", "content": "x"})", "\"pattern\""},
      {R"({"type": "Replace", "pattern": {"String": "b", "Regex": "c"}, "content": "x"})", "\"pattern\""},
      {R"({"type": "Replace", "pattern": {"Glob": "b"}, "content": "x"})", "\"pattern\""},
      {R"({"type": "Replace", "pattern": {"String": "b"}})", "\"content\""},
      {R"({"type": "Replace", "pattern": {"Regex": "("}, "content": "x"})", "\"pattern\""},
      {R"({"type": "Sequence"})", "\"normalizers\""},
      {R"({"type": "Sequence", "normalizers": null})", "\"normalizers\" must be an array"},
      {R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, null]})", "step 2"},
      {R"({"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": [{"type": "Bad"}]}]})",
       "\"Bad\""},
      {R"({"type": "Precompiled"})", "\"precompiled_charsmap\""},
      {R"({"type": "Precompiled", "precompiled_charsmap": null})", "\"precompiled_charsmap\" must be a string"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "A"})", "not valid base64"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "AAAA===="})", "not valid base64"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "AAAAAB=="})", "not valid base64"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "AA$A"})", "not valid base64"},
      {R"({"type": "Precompiled", "precompiled_charsmap": ""})", "too few"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "AAAA"})", "too few"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "BAAAAA=="})", "runs past its end"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "////fw=="})", "runs past its end"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "AAAAAA=="})", "trie is empty"},
      {R"({"type": "Precompiled", "precompiled_charsmap": "BAAAAAAAAAD/"})", "not valid UTF-8"},
  };
  for (const auto& [text, fragment] : bad) {
    const std::string message = normalizer_error(text);
    EXPECT_NE(message.find("t.json"), std::string::npos) << text << " -> " << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << text << " -> " << message;
  }
  EXPECT_EQ(normalizer_from_json(json(nullptr), "t.json"), nullptr);
  // What the library accepts: both Bert names, strip_accents left out, unknown fields, base64 without padding.
  for (const char* ok : {R"({"type": "Bert", "clean_text": true, "handle_chinese_chars": true, "lowercase": true})",
                         R"({"type": "NFC", "extra": 1})", R"({"type": "Sequence", "normalizers": []})",
                         R"({"type": "Precompiled", "precompiled_charsmap": "BAAAAAAAAAA"})"})
    EXPECT_EQ(normalizer_error(ok), "") << ok;
}

std::string base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// A charsmap blob: the trie's units, then the replacements.
std::string charsmap(const std::vector<uint32_t>& units, const std::string& replacements) {
  std::string blob;
  const auto put = [&](uint32_t v) {
    for (int k = 0; k < 4; ++k) blob += static_cast<char>((v >> (8 * k)) & 0xFF);
  };
  put(static_cast<uint32_t>(units.size() * 4));
  for (uint32_t u : units) put(u);
  return blob + replacements;
}

std::unique_ptr<Normalizer> precompiled(const std::string& blob) {
  return normalizer_from_json(json{{"type", "Precompiled"}, {"precompiled_charsmap", base64(blob)}}, "t.json");
}

TEST(TokenizerNormalizers, ACharsmapThatPointsOutsideItselfIsAnErrorNotACrash) {
  // Root at 0 with base 256 (offset 256 << 10 ... encoded as 256 >> 8 with the shift bit): "A" at 256 ^ 65.
  std::vector<uint32_t> units(512, 0);
  units[0] = (1u << 10) | (1u << 9);  // offset 1 << 8 = 256
  const uint32_t a = 256 ^ 'A';
  units[a] = 'A' | (1u << 8) | ((a ^ 256u) << 10);  // has a leaf; its base is back at 256, value unit at 256
  units[256] = (1u << 31) | 2;                        // the replacement at byte 2
  auto ok = precompiled(charsmap(units, std::string("xyz\0", 4)));
  NormalizedText text("BAB");
  ok->normalize(text);
  EXPECT_EQ(text.get(), "BzB");
  // The same trie with its replacement offset past the end, inside a character, or its units cut short.
  for (const auto& [value, replacements] : std::vector<std::pair<uint32_t, std::string>>{
           {9, std::string("xyz\0", 4)}, {1, "\xC3\xA9"}}) {
    units[256] = (1u << 31) | value;
    auto bad = precompiled(charsmap(units, replacements));
    NormalizedText t("A");
    const std::string message = error_of([&] { bad->normalize(t); });
    EXPECT_NE(message.find("points outside"), std::string::npos) << message;
    EXPECT_NE(message.find("t.json"), std::string::npos) << message;
  }
  units.resize(200);
  auto cut = precompiled(charsmap(units, ""));
  NormalizedText t("A");
  EXPECT_NE(error_of([&] { cut->normalize(t); }).find("points outside"), std::string::npos);

  // Random tries on random texts: a result or an Error, never a crash or a read out of bounds.
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"a", "b", "\xC3\xA9", "e\xCC\x81", "\xE2\x84\xA2", "\xF0\x9F\x98\x80",
                                           " ", "\n", "\x1E"};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint32_t> random_units(1 + rng() % 300);
    for (uint32_t& u : random_units) u = rng() % 4 == 0 ? rng() : (rng() % 512) << 10 | (rng() & 0x3FF);
    std::string replacements;
    for (size_t n = rng() % 12; n > 0; --n) replacements += rng() % 3 == 0 ? '\0' : static_cast<char>('a' + rng() % 26);
    auto n = precompiled(charsmap(random_units, replacements));
    std::string s;
    for (size_t k = rng() % 10; k > 0; --k) s += pieces[rng() % pieces.size()];
    NormalizedText text(s);
    try {
      n->normalize(text);
    } catch (const Error&) {
    }
  }
}

TEST(TokenizerNormalizers, Base64AsTheLibraryReadsIt) {
  using data::tok::decode_base64;
  EXPECT_EQ(decode_base64(""), std::string());
  EXPECT_EQ(decode_base64("aGk="), std::string("hi"));
  EXPECT_EQ(decode_base64("aGk"), std::string("hi"));
  EXPECT_EQ(decode_base64("aGVsbG8/"), std::string("hello?"));
  EXPECT_EQ(decode_base64("+/+/"), std::string("\xFB\xFF\xBF"));
  for (const char* bad : {"a", "aGk==", "aGl=", "aG=k", "aGk=a", "aGVsbG8/=", "aGVs bG8", "aGVs\nbG8", "aGV-"})
    EXPECT_FALSE(decode_base64(bad)) << bad;
}

TEST(TokenizerNormalizers, UnicodeTables) {
  using namespace data::tok;
  EXPECT_TRUE(is_numeric(U'7'));
  EXPECT_TRUE(is_numeric(U'\u00BD'));   // VULGAR FRACTION ONE HALF (No)
  EXPECT_TRUE(is_numeric(U'\u2167'));   // ROMAN NUMERAL EIGHT (Nl)
  EXPECT_FALSE(is_numeric(U'a'));
  EXPECT_TRUE(is_punctuation(U'!'));
  EXPECT_TRUE(is_punctuation(U'$'));    // ASCII punctuation, though Sc
  EXPECT_TRUE(is_punctuation(U'\u3001'));
  EXPECT_FALSE(is_punctuation(U'\u20AC'));  // EURO SIGN: Sc, not ASCII
  EXPECT_TRUE(is_combining_mark(U'\u0301'));
  EXPECT_TRUE(is_combining_mark(U'\u093F'));  // Mc
  EXPECT_FALSE(is_combining_mark(U'a'));
  EXPECT_EQ(grapheme_category(U'\u0301'), GraphemeCategory::kExtend);
  EXPECT_EQ(grapheme_category(U'\u200D'), GraphemeCategory::kZWJ);
  EXPECT_EQ(grapheme_category(U'\U0001F600'), GraphemeCategory::kExtendedPictographic);
  EXPECT_EQ(grapheme_category(U'\u0915'), GraphemeCategory::kInCBConsonant);
  EXPECT_TRUE(is_incb_linker(U'\u094D'));
  EXPECT_EQ(grapheme_category(U'\r'), GraphemeCategory::kCR);
  EXPECT_EQ(grapheme_category(U'\uAC00'), GraphemeCategory::kLV);
  EXPECT_EQ(compose(U'e', U'\u0301'), U'\u00E9');
  EXPECT_EQ(compose(U'\u1100', U'\u1161'), U'\uAC00');
  EXPECT_EQ(compose(U'\uAC00', U'\u11A8'), U'\uAC01');
  EXPECT_EQ(compose(U'\uAC00', U'\u11A7'), 0u);
  EXPECT_EQ(compose(U'\u0915', U'\u093C'), 0u);  // U+0958 is a composition exclusion
  const std::span<const char32_t> fi = compatibility_decomposition(U'\uFB01');
  EXPECT_EQ(std::u32string(fi.begin(), fi.end()), U"fi");
  EXPECT_TRUE(compatibility_decomposition(U'\u00E9').empty());  // canonical only
}

std::string unigram_error(const std::string& text) {
  return error_of([&] { UnigramModel::from_json(json::parse(text), "u.json"); });
}

TEST(TokenizerNormalizers, MalformedUnigramModelsAreErrors) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"([])", "must be an object"},
      {R"({"type": "BPE", "vocab": []})", "\"type\""},
      {R"({"unk_id": 0})", "\"vocab\""},
      {R"({"vocab": {"a": 1}})", "\"vocab\" must be an array"},
      {R"({"vocab": [["a"]]})", "entry 0"},
      {R"({"vocab": [["a", -1], [1, -1]]})", "entry 1"},
      {R"({"vocab": [["a", "x"]]})", "entry 0"},
      {R"({"vocab": [], "unk_id": 0})", "empty"},
      {R"({"vocab": [["a", -1]], "unk_id": 1})", "outside the vocabulary"},
      {R"({"vocab": [["a", -1]], "unk_id": -1})", "\"unk_id\""},
      {R"({"vocab": [["a", -1]], "unk_id": "0"})", "\"unk_id\""},
      {R"({"vocab": [["a", -1]], "byte_fallback": 1})", "\"byte_fallback\""},
  };
  for (const auto& [text, fragment] : bad) {
    const std::string message = unigram_error(text);
    EXPECT_NE(message.find("u.json"), std::string::npos) << text << " -> " << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << text << " -> " << message;
  }
  // No unk_id: a character no piece covers is an error at tokenize time, naming it.
  const auto model = UnigramModel::from_json(json::parse(R"({"vocab": [["a", -1]], "unk_id": null})"), "u.json");
  std::vector<data::tok::ModelToken> tokens;
  model->tokenize("aa", tokens);
  EXPECT_EQ(tokens.size(), 2u);
  const std::string message = error_of([&] { model->tokenize("ab", tokens); });
  EXPECT_NE(message.find("\"b\""), std::string::npos) << message;
}

}  // namespace
}  // namespace anatomy
