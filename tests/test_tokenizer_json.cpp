// Tests of the tokenizer.json reader (data/tokenizer/): the ids, type ids and
// offsets of Hugging Face tokenizers on the fixtures of tests/fixtures/tokenizers
// (made with the library by tests/tools/check_tokenizer_exactness.py), and one
// clear error, never a crash, for each kind of malformed file.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/tokenizer.h"

namespace anatomy::data::tok {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(ANATOMY_FIXTURES_DIR) / "tokenizers";

std::vector<fs::path> fixture_directories() {
  std::vector<fs::path> dirs;
  if (!fs::exists(kFixtures)) return dirs;
  for (const auto& entry : fs::directory_iterator(kFixtures))
    if (fs::exists(entry.path() / "tokenizer.json") && fs::exists(entry.path() / "expected.jsonl"))
      dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

TEST(TokenizerJson, FixturesHaveExpectedEncodings) {
  // Six kinds at least: WordPiece cased and uncased, byte-level BPE twice, Unigram twice.
  EXPECT_GE(fixture_directories().size(), 6u) << kFixtures;
}

// Every line of every fixture's expected.jsonl: the library's encoding of a text (and pair).
TEST(TokenizerJson, MatchesHuggingFaceTokenizers) {
  for (const fs::path& dir : fixture_directories()) {
    SCOPED_TRACE(dir.filename().string());
    const Tokenizer tokenizer = Tokenizer::from_file((dir / "tokenizer.json").string());
    std::ifstream in(dir / "expected.jsonl");
    std::string line;
    size_t lines = 0, differing = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      ++lines;
      const nlohmann::json record = nlohmann::json::parse(line);
      const std::string text = record.at("text").get<std::string>();
      std::string pair;
      TextInput input{text, std::nullopt};
      if (record.contains("text_pair") && !record["text_pair"].is_null()) {
        pair = record["text_pair"].get<std::string>();
        input.pair = pair;
      }
      const Encoding e = tokenizer.encode(input, EncodeOptions{});
      const auto ids = record.at("input_ids").get<std::vector<int32_t>>();
      const auto types = record.at("token_type_ids").get<std::vector<int32_t>>();
      const auto offsets = record.at("offsets").get<std::vector<std::pair<uint32_t, uint32_t>>>();
      const bool same = e.input_ids == ids && e.token_type_ids == types && e.offsets == offsets;
      if (!same && ++differing <= 3) {
        ADD_FAILURE() << "line " << lines << ": " << record.at("text").dump() << "\n  ids      " << nlohmann::json(e.input_ids)
                      << "\n  expected " << nlohmann::json(ids) << "\n  offsets  " << nlohmann::json(e.offsets)
                      << "\n  expected " << nlohmann::json(offsets);
      }
    }
    EXPECT_GT(lines, 100u);
    EXPECT_EQ(differing, 0u) << "of " << lines << " lines";
  }
}

// A minimal valid document to break one field at a time.
nlohmann::json word_piece_document() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "added_tokens": [{"id": 0, "content": "[UNK]", "special": true}],
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                   "strip_accents": null, "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100,
              "vocab": {"[UNK]": 0, "[PAD]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "##s": 6}}
  })");
}

std::string error_of(const nlohmann::json& document) {
  try {
    Tokenizer tokenizer(document, "t/tokenizer.json");
    tokenizer.encode({"Hello worlds!", std::nullopt}, EncodeOptions{});  // '!' is unknown
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerJson, MinimalWordPieceDocument) {
  const Tokenizer tokenizer(word_piece_document(), "t/tokenizer.json");
  const Encoding e = tokenizer.encode({"Hello worlds!", std::nullopt}, EncodeOptions{});
  EXPECT_EQ(e.input_ids, (std::vector<int32_t>{2, 4, 5, 6, 0, 3}));
  EXPECT_EQ(e.offsets, (std::vector<std::pair<uint32_t, uint32_t>>{{0, 0}, {0, 5}, {6, 11}, {11, 12}, {12, 13}, {0, 0}}));
}

TEST(TokenizerJson, MalformedDocumentsAreOneError) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> change;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"no model", [](nlohmann::json& d) { d.erase("model"); }, "no \"model\""},
      {"model not an object", [](nlohmann::json& d) { d["model"] = 3; }, "\"model\" must be an object"},
      {"unknown model", [](nlohmann::json& d) { d["model"]["type"] = "Magic"; }, "model type \"Magic\""},
      {"vocab not an object", [](nlohmann::json& d) { d["model"]["vocab"] = nlohmann::json::array(); },
       "\"vocab\" must be an object"},
      {"negative id", [](nlohmann::json& d) { d["model"]["vocab"]["hello"] = -4; }, "must be an integer from 0"},
      {"huge id", [](nlohmann::json& d) { d["model"]["vocab"]["hello"] = 1LL << 40; }, "must be an integer from 0"},
      {"unk missing", [](nlohmann::json& d) { d["model"]["unk_token"] = "<nope>"; }, "unk_token"},
      {"version", [](nlohmann::json& d) { d["version"] = "2.0"; }, "unknown tokenizer.json version"},
      {"unknown pre-tokenizer", [](nlohmann::json& d) { d["pre_tokenizer"]["type"] = "Nope"; },
       "pre-tokenizer type \"Nope\""},
      {"bad regex", [](nlohmann::json& d) { d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}},
                                                                  {"behavior", "Isolated"}, {"invert", false}}; },
       "regular expression \"(a\""},
      {"bad behavior", [](nlohmann::json& d) { d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}},
                                                                     {"behavior", "Sideways"}, {"invert", false}}; },
       "\"behavior\" must be one of"},
      {"cls not a pair", [](nlohmann::json& d) { d["post_processor"]["cls"] = "[CLS]"; }, "\"cls\" must be"},
      {"template undefined token", [](nlohmann::json& d) {
         d["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "[X]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [{"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}})"); },
       "does not define"},
      {"added token without content", [](nlohmann::json& d) { d["added_tokens"][0].erase("content"); },
       "no \"content\""},
      {"added token flag not boolean", [](nlohmann::json& d) { d["added_tokens"][0]["lstrip"] = "yes"; },
       "\"lstrip\" must be true or false"},
      {"BPE merge not in vocab", [](nlohmann::json& d) {
         d["model"] = nlohmann::json::parse(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]})"); },
       "merged token \"ab\" is not in the vocabulary"},
      {"BPE merge of three", [](nlohmann::json& d) {
         d["model"] = nlohmann::json::parse(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b c"]})"); },
       "two tokens separated by one space"},
      {"BPE dropout", [](nlohmann::json& d) {
         d["model"] = nlohmann::json::parse(R"({"type": "BPE", "dropout": 0.1, "vocab": {"a": 0}, "merges": []})"); },
       "dropout"},
  };
  for (const Case& c : cases) {
    nlohmann::json document = word_piece_document();
    c.change(document);
    const std::string message = error_of(document);
    EXPECT_NE(message.find(c.message), std::string::npos) << c.what << ": got \"" << message << "\"";
    EXPECT_NE(message.find("t/tokenizer.json"), std::string::npos) << c.what << ": " << message;
  }
}

TEST(TokenizerJson, FileErrorsNameTheFile) {
  const fs::path dir = fs::temp_directory_path() / "anatomy_tokenizer_json_test";
  fs::create_directories(dir);
  const fs::path file = dir / "tokenizer.json";
  for (const std::string& text : {std::string("{\"model\": "), std::string(5000, '[') + std::string(5000, ']'),
                                  std::string("[1, 2]")}) {
    std::ofstream(file) << text;
    try {
      Tokenizer::from_file(file.string());
      ADD_FAILURE() << "accepted " << text.substr(0, 20);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Tokenizer::from_file((dir / "missing.json").string()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anatomy::data::tok

namespace anatomy::data::tok {
namespace {

nlohmann::json fixture_document(const std::string& name) {
  std::ifstream in(kFixtures / name / "tokenizer.json");
  return nlohmann::json::parse(in);
}

// Found by fuzzing: an added token that normalizes to nothing (a control
// character that BertNormalizer drops) hung the added-token search. The library
// matches it, empty, at every character, so every character is a piece of its
// own (tokenizers 0.23.3: h e l l o w o r l d, each alone).
TEST(TokenizerJson, AddedTokenThatNormalizesToNothing) {
  nlohmann::json document = fixture_document("wordpiece-uncased");
  document["added_tokens"].push_back({{"id", 100000}, {"content", "\x01"}, {"single_word", false}, {"lstrip", false},
                                      {"rstrip", false}, {"normalized", true}, {"special", false}});
  const Tokenizer tokenizer(document, "wordpiece-uncased + empty added token");
  const Encoding e = tokenizer.encode({"hello world", std::nullopt}, EncodeOptions{});
  const std::vector<std::pair<uint32_t, uint32_t>> expected = {{0, 0}, {0, 1}, {1, 2},  {2, 3},  {3, 4},  {4, 5},
                                                               {6, 7}, {7, 8}, {8, 9}, {9, 10}, {10, 11}, {0, 0}};
  EXPECT_EQ(e.offsets, expected);
}

// Found by fuzzing: a file's strings (a type named "\n") made an error of several lines.
TEST(TokenizerJson, ErrorsStayOneLine) {
  nlohmann::json document = word_piece_document();
  document["pre_tokenizer"]["type"] = "line\nbreak";
  const std::string message = error_of(document);
  EXPECT_NE(message.find("line\\nbreak"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// Found by fuzzing: max_input_chars_per_word 2^63-1 let the greedy search try
// every substring of a 5,000-character word, each hashed whole (minutes). The
// search now starts at the longest token's length: the same tokens, at once.
TEST(TokenizerJson, LongWordsWithoutALengthLimit) {
  nlohmann::json document = word_piece_document();
  document["model"]["max_input_chars_per_word"] = INT64_MAX;
  document["model"]["vocab"]["##hello"] = 7;
  const Tokenizer tokenizer(document, "t/tokenizer.json");
  std::string word;
  for (int i = 0; i < 2000; ++i) word += "hello";
  const Encoding e = tokenizer.encode({word, std::nullopt}, EncodeOptions{});
  ASSERT_EQ(e.input_ids.size(), 2002u);  // [CLS] hello ##hello x 1999 [SEP]
  EXPECT_EQ(e.input_ids[1], 4);
  EXPECT_EQ(e.input_ids[2000], 7);
  EXPECT_EQ(e.offsets[2000], (std::pair<uint32_t, uint32_t>{9995, 10000}));
}

}  // namespace
}  // namespace anatomy::data::tok
