// tokenizer_config.json over a tokenizer.json, as transformers' AutoTokenizer applies it
// (data/tokenizer/tokenizer_config.h): the cases of tests/fixtures/tokenizer-config/cases.json, made by
// tests/tools/make_tokenizer_config_fixture.py with transformers, each a fixture's tokenizer.json under a
// tokenizer_config.json that asks for another lower-casing, other special tokens or a prefix space.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/text_dataset.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(ANATOMY_FIXTURES_DIR);

nlohmann::json read_cases() {
  std::ifstream in(kFixtures / "tokenizer-config" / "cases.json");
  return nlohmann::json::parse(in);
}

// A directory with the base fixture's tokenizer.json and `config` as tokenizer_config.json.
void make_directory(const test::TempDir& dir, const std::string& base, const nlohmann::json& config) {
  fs::copy_file(kFixtures / "tokenizers" / base / "tokenizer.json", dir.path() / "tokenizer.json");
  std::ofstream(dir.path() / "tokenizer_config.json") << config.dump();
}

TEST(TokenizerConfig, MatchesAutoTokenizer) {
  const nlohmann::json cases = read_cases().at("cases");
  ASSERT_GE(cases.size(), 10u);
  for (const nlohmann::json& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    test::TempDir dir;
    make_directory(dir, c.at("base").get<std::string>(), c.at("config"));
    const std::optional<TokenizerSettings> settings = read_tokenizer_settings(dir.path().string());
    ASSERT_TRUE(settings.has_value());
    const data::TextTokenizer tokenizer = load_tokenizer(*settings);
    EXPECT_EQ(tokenizer.pad_id(), c.at("pad_id").get<int32_t>());
    const nlohmann::json& encodings = c.at("encodings");
    std::vector<std::string> texts, pairs;
    for (const nlohmann::json& e : encodings) {
      texts.push_back(e.at("text").get<std::string>());
      pairs.push_back(e.at("text_pair").is_null() ? "" : e.at("text_pair").get<std::string>());
    }
    std::vector<data::TextInput> inputs;
    for (size_t i = 0; i < texts.size(); ++i) {
      data::TextInput in{texts[i], std::nullopt};
      if (!encodings[i].at("text_pair").is_null()) in.pair = std::string_view(pairs[i]);
      inputs.push_back(in);
    }
    const std::vector<data::Encoding> got = tokenizer.encode_batch(inputs, data::EncodeOptions{}, 1);
    ASSERT_EQ(got.size(), encodings.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(texts[i]);
      EXPECT_EQ(got[i].input_ids, encodings[i].at("input_ids").get<std::vector<int32_t>>());
      EXPECT_EQ(got[i].token_type_ids, encodings[i].at("token_type_ids").get<std::vector<int32_t>>());
      EXPECT_EQ(got[i].offsets, (encodings[i].at("offsets").get<std::vector<std::pair<uint32_t, uint32_t>>>()));
    }
  }
}

std::string settings_error(const std::string& base, const nlohmann::json& config, bool vocab_only = false) {
  test::TempDir dir;
  if (vocab_only) {
    std::ofstream(dir.path() / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n";
    std::ofstream(dir.path() / "tokenizer_config.json") << config.dump();
  } else {
    make_directory(dir, base, config);
  }
  try {
    const std::optional<TokenizerSettings> settings = read_tokenizer_settings(dir.path().string());
    if (settings) load_tokenizer(*settings);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerConfig, BadSpecialTokensAreOneError) {
  EXPECT_THAT(settings_error("wordpiece-uncased", {{"tokenizer_class", "BertTokenizer"}, {"cls_token", "<s>"}}),
              testing::MatchesRegex(".*tokenizer_config.json: cls_token \"<s>\" is not in the tokenizer's vocabulary"));
  EXPECT_THAT(settings_error("roberta-bpe", {{"pad_token", "[NOPE]"}}),
              testing::MatchesRegex(".*tokenizer_config.json: pad_token \"\\[NOPE\\]\" is not in the tokenizer's "
                                    "vocabulary"));
  EXPECT_THAT(settings_error("roberta-bpe", {{"pad_token", 7}}),
              testing::MatchesRegex(".*tokenizer_config.json: 'pad_token' must be a token .*, not a number"));
  EXPECT_THAT(settings_error("wordpiece-uncased", {{"tokenizer_class", "BertTokenizer"}, {"do_lower_case", "yes"}}),
              testing::HasSubstr("'do_lower_case' must be true or false"));
  // A vocab.txt alone cannot take other special tokens: refused, not ignored.
  EXPECT_THAT(settings_error("", {{"cls_token", "<s>"}}, /*vocab_only=*/true),
              testing::HasSubstr("tokenizer_config.json: cls_token \"<s>\" is not supported with a vocab.txt"));
  EXPECT_EQ(settings_error("", {{"cls_token", "[CLS]"}, {"pad_token", {{"content", "[PAD]"}}}}, true), "");
}

// `anatomy tokenize --tokenizer DIR` reads the directory as AutoTokenizer does; a file alone is the file.
TEST(TokenizerConfig, TokenizeCommandReadsTheDirectorysConfig) {
  const nlohmann::json cases = read_cases().at("cases");
  const nlohmann::json* lower = nullptr;
  for (const nlohmann::json& c : cases)
    if (c.at("name") == "bert-lower-over-cased") lower = &c;
  ASSERT_NE(lower, nullptr);
  test::TempDir dir;
  make_directory(dir, "wordpiece-cased", lower->at("config"));
  const std::string input = dir.file("in.jsonl");
  std::ofstream(input) << nlohmann::json{{"text", lower->at("encodings")[0].at("text")}}.dump() << "\n";
  const test::CommandResult from_dir = test::run_anatomy("tokenize --tokenizer " + dir.path().string() + " --input " +
                                                         input);
  ASSERT_EQ(from_dir.exit_code, 0) << from_dir.output;
  EXPECT_EQ(nlohmann::json::parse(from_dir.output).at("input_ids"), lower->at("encodings")[0].at("input_ids"));
  const test::CommandResult from_file =
      test::run_anatomy("tokenize --tokenizer " + dir.file("tokenizer.json") + " --input " + input);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_NE(nlohmann::json::parse(from_file.output).at("input_ids"), lower->at("encodings")[0].at("input_ids"));
}

}  // namespace
}  // namespace anatomy
