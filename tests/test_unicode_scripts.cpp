// Tests of the UnicodeScripts pre-tokenizer (data/tokenizer/unicode_scripts.h):
// the pieces and original offsets of Hugging Face tokenizers on
// tests/fixtures/tokenizers-scripts/cases.jsonl (made with the library by
// tests/tools/make_unicode_scripts_cases.py), and the script table itself.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/data/tokenizer/normalized_text.h"
#include "anatomy/data/tokenizer/unicode_scripts.h"

namespace anatomy::data::tok {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = fs::path(ANATOMY_FIXTURES_DIR) / "tokenizers-scripts" / "cases.jsonl";

std::string name_of(char32_t c) { return unicode_script_name(unicode_script(c)); }

TEST(UnicodeScripts, TableIsSortedAndComplete) {
  using namespace script_table;
  ASSERT_GT(kRangeCount, 100u);
  EXPECT_EQ(kRanges[0] >> 8, 0u);
  for (size_t i = 0; i < kRangeCount; ++i) {
    EXPECT_LT(kRanges[i] & 0xFFu, kNameCount) << i;
    EXPECT_LE(kRanges[i] >> 8, 0x10FFFFu) << i;
    if (i > 0) {
      EXPECT_LT(kRanges[i - 1] >> 8, kRanges[i] >> 8) << i;
      EXPECT_NE(kRanges[i - 1] & 0xFFu, kRanges[i] & 0xFFu) << i;  // neighbours merged
    }
  }
  EXPECT_STREQ(kNames[0], "Any");
  // The lookup gives every code point its range's script.
  size_t wrong = 0;
  for (size_t i = 0; i < kRangeCount; ++i) {
    const uint32_t end = i + 1 < kRangeCount ? kRanges[i + 1] >> 8 : 0x110000u;
    for (uint32_t c = kRanges[i] >> 8; c < end; ++c) wrong += unicode_script(c) != (kRanges[i] & 0xFFu);
  }
  EXPECT_EQ(wrong, 0u);
}

TEST(UnicodeScripts, ScriptsAsTheLibraryFixesThem) {
  // The library's own examples (pre_tokenizer.rs): kana and U+30FC count as Han, U+0020 as Any.
  for (const char32_t c : {U'京', U'太', U'い', U'グ', U'ー', U'ア', U'ｱ'}) EXPECT_EQ(name_of(c), "Han") << uint32_t(c);
  EXPECT_EQ(name_of(U'a'), "Latin");
  EXPECT_EQ(name_of(U'A'), "Latin");
  for (const char32_t c : {U'0', U'$', U'@', U'-', U'\t', U'\u3000', U'\u00A0', U'。', U'\uFFFD'})
    EXPECT_EQ(name_of(c), "Common") << uint32_t(c);
  EXPECT_EQ(name_of(U' '), "Any");
  EXPECT_EQ(name_of(U'\u0301'), "Inherited");
  EXPECT_EQ(name_of(U'Ж'), "Cyrillic");
  EXPECT_EQ(name_of(U'Ω'), "Greek");
  EXPECT_EQ(name_of(U'ا'), "Arabic");
  EXPECT_EQ(name_of(U'한'), "Hangul");
  // Unassigned, or assigned after the crate's Unicode: Any.
  EXPECT_EQ(name_of(0x0378), "Any");
  EXPECT_EQ(name_of(0x0560), "Any");       // ARMENIAN SMALL LETTER TURNED AYB (Unicode 11)
  EXPECT_EQ(name_of(0x1E900), "Adlam");    // Unicode 9, in the crate
  EXPECT_EQ(name_of(0x11800), "Any");      // Dogra (Unicode 11), not in the crate
  EXPECT_EQ(name_of(0x10FFFF), "Any");
  EXPECT_EQ(name_of(0x110000), "Any");
}

std::vector<Piece> pre_tokenize(const NormalizedText& text) {
  std::vector<Piece> pieces{{text, std::nullopt}};
  make_unicode_scripts_pre_tokenizer()->pre_tokenize(pieces);
  return pieces;
}

TEST(UnicodeScripts, SplitsWhereTheScriptChanges) {
  const std::vector<Piece> pieces = pre_tokenize(NormalizedText("  Apples are りんご 林檎。Yes"));
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].text.get(), "Apples are ");  // the leading spaces are dropped
  EXPECT_EQ(pieces[0].text.original_span(), Span(2, 13));
  EXPECT_EQ(pieces[1].text.get(), "りんご 林檎");
  EXPECT_EQ(pieces[2].text.get(), "。");
  EXPECT_EQ(pieces[3].text.get(), "Yes");
  EXPECT_EQ(pieces[3].text.original_span(), Span(32, 35));
  EXPECT_TRUE(pre_tokenize(NormalizedText("   ")).empty());
  EXPECT_TRUE(pre_tokenize(NormalizedText("")).empty());
}

TEST(UnicodeScripts, LeavesTokenizedPiecesAlone) {
  std::vector<Piece> pieces;
  pieces.push_back({NormalizedText("ab12"), std::nullopt});
  pieces.push_back({NormalizedText("x1"), std::vector<ModelToken>{{7, 0, 2}}});
  pieces.push_back({NormalizedText(" "), std::nullopt});
  pieces.push_back({NormalizedText("日本"), std::nullopt});
  make_unicode_scripts_pre_tokenizer()->pre_tokenize(pieces);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].text.get(), "ab");
  EXPECT_EQ(pieces[1].text.get(), "12");
  EXPECT_EQ(pieces[2].text.get(), "x1");
  ASSERT_TRUE(pieces[2].tokens.has_value());
  EXPECT_EQ(pieces[2].tokens->at(0).id, 7);
  EXPECT_EQ(pieces[3].text.get(), "日本");
}

// The normalization steps of a case, as NormalizedString's methods.
void normalize(NormalizedText& text, const nlohmann::json& steps) {
  for (const nlohmann::json& step : steps) {
    const std::string op = step.at(0).get<std::string>();
    if (op == "lowercase") {
      text.lowercase();
    } else if (op == "prepend") {
      text.prepend(step.at(1).get<std::string>());
    } else if (op == "replace") {
      const std::string pattern = step.at(1).get<std::string>();
      text.replace(find_string_matches(text.get(), pattern), step.at(2).get<std::string>());
    } else {
      FAIL() << "unknown step " << op;
    }
  }
}

// A piece as the cases give it: normalized string, original [start, end).
using PieceSpan = std::tuple<std::string, uint32_t, uint32_t>;

std::string show(const std::vector<PieceSpan>& pieces, size_t at) {
  if (at >= pieces.size()) return "-";
  const auto& [text, start, end] = pieces[at];
  return "'" + text + "' " + std::to_string(start) + ".." + std::to_string(end);
}

TEST(UnicodeScripts, MatchesHuggingFaceTokenizers) {
  std::ifstream in(kCases);
  ASSERT_TRUE(in) << kCases;
  std::string line;
  size_t cases = 0, differing = 0, pieces_seen = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++cases;
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string name = record.at("name").get<std::string>();
    NormalizedText text(record.at("text").get<std::string>());
    if (record.contains("normalize")) normalize(text, record["normalize"]);
    const std::vector<Piece> pieces = pre_tokenize(text);
    std::vector<PieceSpan> got, expected;
    for (const Piece& piece : pieces)
      got.emplace_back(piece.text.get(), piece.text.original_span().first, piece.text.original_span().second);
    for (const nlohmann::json& piece : record.at("pieces"))
      expected.emplace_back(piece.at(0).get<std::string>(), piece.at(1).get<uint32_t>(), piece.at(2).get<uint32_t>());
    pieces_seen += expected.size();
    if (got != expected) {
      ++differing;
      if (differing <= 5) {
        std::string message;
        for (size_t i = 0; i < std::max(got.size(), expected.size()); ++i) {
          if (i >= got.size() || i >= expected.size() || got[i] != expected[i]) {
            message = "piece " + std::to_string(i) + ": got " + show(got, i) + ", expected " + show(expected, i);
            break;
          }
        }
        ADD_FAILURE() << name << ": " << got.size() << " pieces, expected " << expected.size() << "; " << message;
      }
    }
  }
  EXPECT_GE(cases, 300u);
  EXPECT_GE(pieces_seen, 1000u);
  EXPECT_EQ(differing, 0u) << "of " << cases << " cases";
}

}  // namespace
}  // namespace anatomy::data::tok
