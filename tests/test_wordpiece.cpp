// test_wordpiece.cpp: the WordPiece tokenizer against Hugging Face
// (tests/fixtures/wordpiece-*; see the README there): the shared uncased
// fixture exactly, a cased vocabulary and more texts (CJK, accents, control
// characters, long words, empty strings, special tokens), batches with
// truncation and both paddings through the library and through
// `anatomy tokenize`, every code point through the normalizer and
// pre-tokenizer, and the command's errors on bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/normalized_text.h"
#include "anatomy/data/wordpiece.h"
#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

using data::tok::append_utf8;

using data::Encoding;
using data::EncodeOptions;
using data::Padding;
using data::TextInput;
using data::WordPieceOptions;
using data::WordPieceTokenizer;
using nlohmann::json;
using test::failed_cleanly;
using test::fixture;
using test::run_anatomy;
using test::TempDir;

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

std::string vocab_path(const std::string& name) { return fixture(name) + "/vocab.txt"; }

WordPieceTokenizer load(const std::string& vocab, bool lowercase, std::optional<bool> strip = std::nullopt) {
  WordPieceOptions options;
  options.lowercase = lowercase;
  options.strip_accents = strip;
  return WordPieceTokenizer::from_file(vocab_path(vocab), options);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// The JSON lines of `anatomy tokenize`'s output (notes on stderr are skipped).
std::vector<json> output_records(const std::string& output) {
  std::vector<json> rows;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') rows.push_back(json::parse(line));
  return rows;
}

// ------------------------------------------------------- the case files

struct CaseFile {
  std::string cases;  // fixture directory holding cases.jsonl
  std::string vocab;  // fixture directory holding vocab.txt
  bool lowercase;
};

std::string case_name(const ::testing::TestParamInfo<CaseFile>& info) { return test::test_name(info.param.cases); }
void PrintTo(const CaseFile& c, std::ostream* os) { *os << c.cases; }

class WordPieceCases : public ::testing::TestWithParam<CaseFile> {};

// Every case: the text alone (ids and tokens) and the pair truncated
// (longest_first) and padded to pair_max_length.
TEST_P(WordPieceCases, MatchHuggingFaceExactly) {
  const CaseFile& c = GetParam();
  const WordPieceTokenizer tokenizer = load(c.vocab, c.lowercase);
  const std::vector<json> cases = read_jsonl(fixture(c.cases) + "/cases.jsonl");
  ASSERT_GE(cases.size(), 16u);
  for (const json& k : cases) {
    const std::string text = k["text"];
    SCOPED_TRACE("text: " + k["text"].dump());
    const Encoding single = tokenizer.encode({text, std::nullopt}, {});
    EXPECT_EQ(single.input_ids, k["ids"].get<std::vector<int32_t>>());
    std::vector<std::string> tokens;
    for (int32_t id : single.input_ids) tokens.push_back(tokenizer.id_to_token(id));
    EXPECT_EQ(tokens, k["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(single.token_type_ids, std::vector<int32_t>(single.input_ids.size(), 0));
    EXPECT_EQ(single.attention_mask, std::vector<int32_t>(single.input_ids.size(), 1));

    const std::string second = k["pair_second"];
    const size_t max_length = k["pair_max_length"];
    EncodeOptions options;
    options.truncate_to = max_length;
    options.padding = Padding::kMaxLength;
    options.pad_to = max_length;
    // A single call tokenizer(text, "") takes an empty second text for none
    // (`if text_pair`); in a batch, as in `anatomy tokenize`, it is a pair.
    const Encoding pair = tokenizer.encode(
        {text, second.empty() ? std::nullopt : std::optional<std::string_view>(second)}, options);
    EXPECT_EQ(pair.input_ids, k["pair_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(pair.token_type_ids, k["pair_token_type_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(pair.attention_mask, k["pair_attention_mask"].get<std::vector<int32_t>>());
  }
}

// The same cases through `anatomy tokenize`: the texts alone, then the pairs
// with --truncation --padding max_length, one run per max length.
TEST_P(WordPieceCases, MatchHuggingFaceThroughTheCommand) {
  const CaseFile& c = GetParam();
  const std::vector<json> cases = read_jsonl(fixture(c.cases) + "/cases.jsonl");
  TempDir tmp;
  const std::string common = "tokenize --vocab " + shell_quote(vocab_path(c.vocab)) +
                             " --do-lower-case " + (c.lowercase ? "true" : "false") + " --threads 2";
  {
    std::string lines;
    for (const json& k : cases) lines += json{{"text", k["text"]}}.dump() + "\n";
    write_file(tmp.file("texts.jsonl"), lines);
    const test::CommandResult r = run_anatomy(common + " --input " + tmp.file("texts.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<json> out = output_records(r.output);
    ASSERT_EQ(out.size(), cases.size()) << r.output;
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(out[i]["input_ids"], cases[i]["ids"]) << cases[i]["text"];
      EXPECT_EQ(out[i]["attention_mask"].size(), cases[i]["ids"].size());
    }
  }
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < cases.size(); ++i) by_length[cases[i]["pair_max_length"]].push_back(i);
  for (const auto& [max_length, indices] : by_length) {
    std::string lines;
    for (size_t i : indices) {
      json record{{"text", cases[i]["text"]}};
      if (cases[i]["pair_second"] != "") record["text_pair"] = cases[i]["pair_second"];  // see above
      lines += record.dump() + "\n";
    }
    write_file(tmp.file("pairs.jsonl"), lines);
    const test::CommandResult r = run_anatomy(common + " --truncation --padding max_length --max-length " +
                                              std::to_string(max_length) + " --input " + tmp.file("pairs.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<json> out = output_records(r.output);
    ASSERT_EQ(out.size(), indices.size()) << r.output;
    for (size_t j = 0; j < indices.size(); ++j) {
      const json& k = cases[indices[j]];
      EXPECT_EQ(out[j]["input_ids"], k["pair_ids"]) << k["text"];
      EXPECT_EQ(out[j]["token_type_ids"], k["pair_token_type_ids"]) << k["text"];
      EXPECT_EQ(out[j]["attention_mask"], k["pair_attention_mask"]) << k["text"];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WordPieceCases,
                         ::testing::Values(CaseFile{"wordpiece-uncased", "wordpiece-uncased", true},
                                           CaseFile{"wordpiece-extra", "wordpiece-uncased", true},
                                           CaseFile{"wordpiece-cased", "wordpiece-cased", false}),
                         case_name);

// ------------------------------------------------------------- batches

// A batch's settings as Hugging Face resolves tokenizer(..., max_length,
// padding, truncation); the same rules as `anatomy tokenize`.
EncodeOptions batch_options(const json& row) {
  EncodeOptions options;
  const bool has_length = !row["max_length"].is_null();
  const size_t length = has_length ? row["max_length"].get<size_t>() : 0;
  const std::string padding = row["padding"].is_null() ? "" : row["padding"].get<std::string>();
  if (padding == "max_length") options.padding = Padding::kMaxLength, options.pad_to = length;
  if (padding == "longest") options.padding = Padding::kLongest;
  if (row["truncation"].get<bool>() || (has_length && padding.empty())) options.truncate_to = length;
  return options;
}

std::string describe(const json& row) {
  return fmt::format("vocab {} lower {} strip {} max_length {} padding {} truncation {} pairs {}",
                     row["vocab"].get<std::string>(), row["do_lower_case"].dump(), row["strip_accents"].dump(),
                     row["max_length"].dump(), row["padding"].dump(), row["truncation"].dump(),
                     !row["text_pairs"].is_null());
}

std::vector<TextInput> batch_inputs(const json& row, std::vector<std::string>& storage) {
  const size_t n = row["texts"].size();
  storage.clear();
  storage.reserve(2 * n);
  std::vector<TextInput> inputs;
  for (size_t i = 0; i < n; ++i) {
    storage.push_back(row["texts"][i]);
    TextInput input{storage.back(), std::nullopt};
    if (!row["text_pairs"].is_null()) {
      storage.push_back(row["text_pairs"][i]);
      input.pair = storage.back();
    }
    inputs.push_back(input);
  }
  return inputs;
}

TEST(WordPieceBatches, MatchHuggingFaceThroughTheLibrary) {
  const std::vector<json> rows = read_jsonl(fixture("wordpiece-extra") + "/batches.jsonl");
  ASSERT_GE(rows.size(), 20u);
  for (const json& row : rows) {
    SCOPED_TRACE(describe(row));
    std::optional<bool> strip;
    if (!row["strip_accents"].is_null()) strip = row["strip_accents"].get<bool>();
    const WordPieceTokenizer tokenizer = load(row["vocab"], row["do_lower_case"], strip);
    std::vector<std::string> storage;
    const std::vector<TextInput> inputs = batch_inputs(row, storage);
    for (int threads : {1, 3}) {
      const std::vector<Encoding> out = tokenizer.encode_batch(inputs, batch_options(row), threads);
      ASSERT_EQ(out.size(), inputs.size());
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(out[i].input_ids, row["input_ids"][i].get<std::vector<int32_t>>()) << "input " << i;
        EXPECT_EQ(out[i].token_type_ids, row["token_type_ids"][i].get<std::vector<int32_t>>()) << "input " << i;
        EXPECT_EQ(out[i].attention_mask, row["attention_mask"][i].get<std::vector<int32_t>>()) << "input " << i;
      }
    }
  }
}

TEST(WordPieceBatches, MatchHuggingFaceThroughTheCommand) {
  const std::vector<json> rows = read_jsonl(fixture("wordpiece-extra") + "/batches.jsonl");
  TempDir tmp;
  for (const json& row : rows) {
    SCOPED_TRACE(describe(row));
    std::string lines;
    for (size_t i = 0; i < row["texts"].size(); ++i) {
      json record{{"text", row["texts"][i]}, {"id", i}};
      if (!row["text_pairs"].is_null()) record["text_pair"] = row["text_pairs"][i];
      lines += record.dump() + "\n";
    }
    write_file(tmp.file("batch.jsonl"), lines);
    std::string args = "tokenize --vocab " + shell_quote(vocab_path(row["vocab"])) + " --input " +
                       tmp.file("batch.jsonl") + " --do-lower-case " + row["do_lower_case"].dump();
    if (!row["strip_accents"].is_null()) args += " --strip-accents " + row["strip_accents"].dump();
    if (!row["max_length"].is_null()) args += " --max-length " + row["max_length"].dump();
    if (!row["padding"].is_null()) args += " --padding " + row["padding"].get<std::string>();
    if (row["truncation"].get<bool>()) args += " --truncation";
    const test::CommandResult r = run_anatomy(args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    const std::vector<json> out = output_records(r.output);
    ASSERT_EQ(out.size(), row["texts"].size()) << r.output;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i]["input_ids"], row["input_ids"][i]) << "input " << i;
      EXPECT_EQ(out[i]["token_type_ids"], row["token_type_ids"][i]) << "input " << i;
      EXPECT_EQ(out[i]["attention_mask"], row["attention_mask"][i]) << "input " << i;
    }
  }
}

// ------------------------------------------------------ every code point

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// Each chunk of consecutive code points, as one text, gives Hugging Face's
// words (normalizer + pre-tokenizer), in four settings of lowercase and
// strip_accents: every table entry and the canonical ordering of marks.
TEST(WordPieceUnicode, EveryCodePointAsHuggingFace) {
  std::ifstream in(fixture("wordpiece-extra") + "/unicode.json");
  ASSERT_TRUE(in);
  const json ref = json::parse(in);
  const char32_t chunk = ref["chunk"];
  for (size_t mode_index = 0; mode_index < ref["modes"].size(); ++mode_index) {
    const json& mode = ref["modes"][mode_index];
    const bool lower = mode["lowercase"], strip = mode["strip_accents"];
    const WordPieceTokenizer tokenizer = load("wordpiece-uncased", lower, strip);
    const std::vector<std::string> hashes = mode["hashes"];
    ASSERT_EQ(hashes.size(), 0x110000 / chunk);
    size_t mismatches = 0;
    for (char32_t start = 0; start < 0x110000; start += chunk) {
      std::string text;
      for (char32_t cp = start; cp < start + chunk; ++cp)
        if (cp < 0xD800 || cp > 0xDFFF) append_utf8(text, cp);
      std::string joined;
      for (const std::string& w : tokenizer.pre_tokenize(text)) {
        if (!joined.empty()) joined += '\n';
        joined += w;
      }
      const std::string got = fmt::format("{:016x}", fnv1a64(joined));
      if (got != hashes[start / chunk] && ++mismatches <= 5)
        ADD_FAILURE() << fmt::format(
            "lowercase {} strip_accents {}: the words of U+{:04X}..U+{:04X} differ (see them with "
            "tests/tools/make_wordpiece_fixture.py --dump-chunk {} 0x{:X})",
            lower, strip, static_cast<uint32_t>(start), static_cast<uint32_t>(start + chunk - 1),
            mode_index, static_cast<uint32_t>(start));
    }
    EXPECT_EQ(mismatches, 0u);
  }
}

// -------------------------------------------------------- the library

TEST(WordPieceTokenizerTest, BatchOnManyThreadsEqualsOneByOne) {
  const WordPieceTokenizer tokenizer = load("wordpiece-uncased", true);
  std::vector<std::string> texts;
  for (const char* name : {"wordpiece-uncased", "wordpiece-extra", "wordpiece-cased"})
    for (const json& k : read_jsonl(fixture(name) + "/cases.jsonl")) texts.push_back(k["text"]);
  std::vector<TextInput> inputs;
  for (int round = 0; round < 40; ++round)
    for (size_t i = 0; i < texts.size(); ++i)
      inputs.push_back({texts[i], round % 2 ? std::optional<std::string_view>(texts[(i + 7) % texts.size()])
                                            : std::nullopt});
  EncodeOptions options;
  options.truncate_to = 40;
  options.padding = Padding::kLongest;
  const std::vector<Encoding> many = tokenizer.encode_batch(inputs, options, 4);
  ASSERT_EQ(many.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EncodeOptions alone = options;
    alone.padding = Padding::kMaxLength;
    alone.pad_to = 40;
    const Encoding e = tokenizer.encode(inputs[i], alone);
    ASSERT_EQ(many[i].input_ids, e.input_ids) << i;
    ASSERT_EQ(many[i].token_type_ids, e.token_type_ids) << i;
    ASSERT_EQ(many[i].attention_mask, e.attention_mask) << i;
  }
}

TEST(WordPieceTokenizerTest, VocabularyLinesAsHuggingFaceReadsThem) {
  TempDir tmp;
  // CRLF endings and trailing white space are trimmed; a repeated token keeps its last id.
  write_file(tmp.file("v1.txt"), "[PAD]\r\n[UNK]\n[CLS]  \n[SEP]\t\nhello\nworld\u00a0\n##s\nhello\n[MASK]\n");
  const WordPieceTokenizer t = WordPieceTokenizer::from_file(tmp.file("v1.txt"));
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.cls_id(), 2);
  EXPECT_EQ(t.sep_id(), 3);
  EXPECT_EQ(t.mask_id(), 8);
  EXPECT_EQ(t.token_to_id("hello"), 7);
  EXPECT_EQ(t.token_to_id("world"), 5);
  // Hugging Face: [2, 7, 5, 6, 8, 1, 3].
  EXPECT_EQ(t.encode({"Hello worlds [MASK] x", std::nullopt}, {}).input_ids,
            (std::vector<int32_t>{2, 7, 5, 6, 8, 1, 3}));
  // [MASK] missing: it gets the next id (Hugging Face: [2, 4, 5, 6, 7, 1, 3]).
  write_file(tmp.file("v2.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n");
  const WordPieceTokenizer u = WordPieceTokenizer::from_file(tmp.file("v2.txt"));
  EXPECT_EQ(u.mask_id(), 7);
  EXPECT_EQ(u.vocab_size(), 8u);
  EXPECT_EQ(u.encode({"Hello worlds [MASK] x", std::nullopt}, {}).input_ids,
            (std::vector<int32_t>{2, 4, 5, 6, 7, 1, 3}));
}

TEST(WordPieceTokenizerTest, ErrorsNameTheirCause) {
  TempDir tmp;
  write_file(tmp.file("nounk.txt"), "[PAD]\n[CLS]\n[SEP]\nhello\n");
  try {
    WordPieceTokenizer::from_file(tmp.file("nounk.txt"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nounk.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[UNK]"), std::string::npos) << e.what();
  }
  write_file(tmp.file("bad.txt"), "[PAD]\n[UNK]\nab\xff\n");
  try {
    WordPieceTokenizer::from_file(tmp.file("bad.txt"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(WordPieceTokenizer::from_file(tmp.file("absent.txt")), Error);
  write_file(tmp.file("empty.txt"), "");
  EXPECT_THROW(WordPieceTokenizer::from_file(tmp.file("empty.txt")), Error);

  const WordPieceTokenizer t = load("wordpiece-uncased", true);
  for (const char* bad : {"ab\xff", "\xc3", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"})
    EXPECT_THROW(t.tokenize(bad), Error) << bad;
  EncodeOptions options;
  options.truncate_to = 2;
  EXPECT_THROW(t.encode({"a", std::string_view("b")}, options), Error);
  EXPECT_EQ(t.encode({"a b c", std::nullopt}, options).input_ids, (std::vector<int32_t>{t.cls_id(), t.sep_id()}));
  EXPECT_EQ(data::find_invalid_utf8("plain ascii, then é and 中 and 😀"), std::string_view::npos);
  EXPECT_EQ(data::find_invalid_utf8("0123456789abcdef\x80"), 16u);
}

// ------------------------------------------------------------ the command

class TokenizeCommandErrors : public ::testing::Test {
 protected:
  test::CommandResult tokenize(const std::string& jsonl, const std::string& flags = "") {
    write_file(input_, jsonl);
    return run_anatomy("tokenize --vocab " + shell_quote(vocab_path("wordpiece-uncased")) + " --input " + input_ + " " +
                       flags);
  }
  TempDir tmp_;
  std::string input_ = tmp_.file("texts.jsonl");
};

TEST_F(TokenizeCommandErrors, InvalidJsonNamesFileAndLine) {
  const test::CommandResult r = tokenize("{\"text\": \"fine\"}\n{\"text\": \"fine\"}\n{\"text\": oops}\n");
  EXPECT_TRUE(failed_cleanly(r, {input_ + ":3", "invalid JSON"}));
  EXPECT_TRUE(output_records(r.output).empty()) << "printed before failing:\n" << r.output;
}

TEST_F(TokenizeCommandErrors, MissingTextNamesFileAndLine) {
  EXPECT_TRUE(failed_cleanly(tokenize("{\"text\": \"a\"}\n{\"sentence\": \"b\"}\n"), {input_ + ":2", "\"text\""}));
}

TEST_F(TokenizeCommandErrors, FieldsThatAreNotStrings) {
  EXPECT_TRUE(failed_cleanly(tokenize("{\"text\": 5}\n"), {input_ + ":1", "\"text\"", "a number"}));
  EXPECT_TRUE(failed_cleanly(tokenize("{\"text\": \"a\", \"text_pair\": [1]}\n"), {input_ + ":1", "text_pair"}));
  EXPECT_TRUE(failed_cleanly(tokenize("[\"a list\"]\n"), {input_ + ":1", "JSON object"}));
}

TEST_F(TokenizeCommandErrors, NonUtf8BytesNameFileLineAndByte) {
  EXPECT_TRUE(failed_cleanly(tokenize("{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n"), {input_ + ":2", "UTF-8", "0xE9"}));
  // A lone surrogate escaped in JSON is no text either.
  EXPECT_TRUE(failed_cleanly(tokenize("{\"text\": \"\\ud800\"}\n"), {input_ + ":1"}));
}

TEST_F(TokenizeCommandErrors, MissingFilesAndBadVocabulary) {
  EXPECT_TRUE(failed_cleanly(run_anatomy("tokenize --vocab " + vocab_path("wordpiece-uncased") + " --input " +
                                         tmp_.file("absent.jsonl")),
                             {"absent.jsonl"}));
  write_file(input_, "{\"text\": \"a\"}\n");
  EXPECT_TRUE(failed_cleanly(run_anatomy("tokenize --vocab " + tmp_.file("absent.txt") + " --input " + input_),
                             {"absent.txt"}));
  write_file(tmp_.file("nounk.txt"), "[PAD]\n[CLS]\n[SEP]\n");
  EXPECT_TRUE(failed_cleanly(run_anatomy("tokenize --vocab " + tmp_.file("nounk.txt") + " --input " + input_),
                             {"nounk.txt", "[UNK]"}));
}

TEST_F(TokenizeCommandErrors, FlagsThatCannotWork) {
  const std::string ok = "{\"text\": \"a b\", \"text_pair\": \"c\"}\n";
  EXPECT_TRUE(failed_cleanly(tokenize(ok, "--padding max_length"), {"--max-length"}));
  EXPECT_TRUE(failed_cleanly(tokenize(ok, "--truncation"), {"--max-length"}));
  EXPECT_TRUE(failed_cleanly(tokenize(ok, "--truncation --max-length 2"), {"--max-length 2", "3 special tokens"}));
  EXPECT_TRUE(failed_cleanly(tokenize(ok, "--padding shortest"), {"--padding"}));
  EXPECT_TRUE(failed_cleanly(tokenize(ok, "--max-length 0"), {"--max-length"}));
  EXPECT_TRUE(failed_cleanly(tokenize(ok, "--max-length 99999999999999999999 --padding max_length"), {"--max-length"}));
  EXPECT_TRUE(failed_cleanly(tokenize(ok, "--do-lower-case maybe"), {"--do-lower-case"}));
}

TEST_F(TokenizeCommandErrors, BlankLinesAreSkippedAndEmptyTextsEncodedWithCounts) {
  const test::CommandResult r = tokenize("{\"text\": \"a\"}\n\n   \n{\"text\": \"\"}\n{\"text\": \"b\", \"text_pair\": null}\r\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped 2 blank lines"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 empty text (the first at line 4"), std::string::npos) << r.output;
  const std::vector<json> out = output_records(r.output);
  ASSERT_EQ(out.size(), 3u);
  const WordPieceTokenizer t = load("wordpiece-uncased", true);
  EXPECT_EQ(out[1]["input_ids"], json({t.cls_id(), t.sep_id()}));
  EXPECT_EQ(out[2]["input_ids"], json(t.encode({"b", std::nullopt}, {}).input_ids));
}

TEST_F(TokenizeCommandErrors, BenchmarkReportsThroughput) {
  const test::CommandResult r = tokenize("{\"text\": \"Hello, world!\"}\n{\"text\": \"second line\"}\n",
                                         "--benchmark --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MB/s"), std::string::npos) << r.output;
  EXPECT_TRUE(output_records(r.output).empty()) << r.output;
}

}  // namespace
}  // namespace anatomy
