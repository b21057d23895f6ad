// test_text_table.cpp: JSON Lines, CSV and TSV examples, label vocabularies,
// and every kind of bad data as one error naming the file and line.
#include <gtest/gtest.h>

#include <fstream>

#include "anatomy/core/error.h"
#include "anatomy/data/text_table.h"
#include "test_util.h"

namespace anatomy {
namespace {

std::string write(const test::TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// The error's message, or "" when there was none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TextTable, JsonLinesWithPairsAndLabels) {
  test::TempDir dir;
  const std::string path = write(dir, "train.jsonl",
                                 "{\"sentence1\": \"A man.\", \"sentence2\": \"A person.\", \"label\": \"entailment\"}\n"
                                 "\n"
                                 "{\"sentence1\": \"Caf\xc3\xa9\", \"sentence2\": \"x\", \"label\": \"neutral\"}\n");
  const TextTable t = read_text_table(path, {"sentence1", "sentence2", "label"});
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1].text, "Caf\xc3\xa9");
  EXPECT_EQ(t.rows[1].line, 3);
  EXPECT_EQ(t.blank_lines_skipped, 1);
  const LabelVocabulary v = LabelVocabulary::from(t);
  EXPECT_EQ(v.names, (std::vector<std::string>{"entailment", "neutral"}));
  EXPECT_EQ(v.id_of(t.rows[1], path), 1);
}

TEST(TextTable, CsvQuotingAndTsv) {
  test::TempDir dir;
  const std::string csv = write(dir, "d.csv",
                                "\xEF\xBB\xBFtext,label\r\n"
                                "\"Hello, \"\"world\"\"\",1\r\n"
                                "\"two\nlines\",0\r\n"
                                "plain,1\r\n");
  const TextTable t = read_text_table(csv, {"text", "", "label"});
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0].text, "Hello, \"world\"");
  EXPECT_EQ(t.rows[1].text, "two\nlines");
  EXPECT_EQ(t.rows[2].line, 5);
  const LabelVocabulary v = LabelVocabulary::from(t);
  EXPECT_FALSE(v.regression);
  EXPECT_EQ(v.num_labels(), 2);
  EXPECT_EQ(v.id_of(t.rows[0], csv), 1);
  const std::string tsv = write(dir, "d.tsv", "label\ttext\n0.5\ta b\n1.25\tc\n");
  const TextTable r = read_text_table(tsv, {"text", "", "label"});
  const LabelVocabulary reg = LabelVocabulary::from(r);
  EXPECT_TRUE(reg.regression);
  EXPECT_DOUBLE_EQ(reg.value_of(r.rows[1], tsv), 1.25);
}

TEST(TextTable, BadDataNamesFileAndLine) {
  test::TempDir dir;
  struct Case {
    std::string name, bytes, expected;
  };
  const std::vector<Case> cases = {
      {"a.jsonl", "{\"text\": \"ok\", \"label\": 1}\n{not json}\n", "a.jsonl:2: not valid JSON"},
      {"b.jsonl", "{\"text\": \"ok\", \"label\": 1}\n{\"txt\": \"x\", \"label\": 1}\n", "b.jsonl:2: no field 'text'"},
      {"c.jsonl", "{\"text\": \"  \", \"label\": 1}\n", "c.jsonl:1: column 'text' is empty"},
      {"d.jsonl", "{\"text\": \"ok\", \"label\": 1}\n{\"text\": \"\xff\xfe\", \"label\": 1}\n", "d.jsonl:2: bytes that are not UTF-8"},
      {"e.jsonl", "[1, 2]\n", "e.jsonl:1: expected a JSON object"},
      {"f.csv", "text,label\nx,1\ny\n", "f.csv:3: 1 fields, the header has 2"},
      {"g.csv", "text,label\n\"open,1\n", "g.csv:2: a quoted field is not closed"},
      {"h.csv", "body,label\nx,1\n", "h.csv:1: no column 'text'"},
      {"i.txt", "x\n", "unknown format '.txt'"},
      {"j.jsonl", "\n\n", "j.jsonl: no examples"},
      {"k.jsonl", "{\"text\": \"x\", \"label\": [1]}\n", "k.jsonl:1: field 'label' is array"},
      {"l.jsonl", "{\"text\": \"ok\", \"label\": 1}\n{\"text\": \"\xed\xa0\x80\", \"label\": 1}\n", "l.jsonl:2: bytes that are not UTF-8"},
  };
  for (const Case& c : cases) {
    const std::string path = write(dir, c.name, c.bytes);
    const std::string message = error_of([&] { read_text_table(path, {"text", "", "label"}); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
  }
  // A validation label the training data never had.
  const std::string train = write(dir, "t.jsonl", "{\"text\": \"a\", \"label\": \"pos\"}\n");
  const std::string val = write(dir, "v.jsonl", "{\"text\": \"a\", \"label\": \"pos\"}\n{\"text\": \"b\", \"label\": \"neg\"}\n");
  const LabelVocabulary v = LabelVocabulary::from(read_text_table(train, {"text", "", "label"}));
  const TextTable vt = read_text_table(val, {"text", "", "label"});
  EXPECT_NE(error_of([&] { v.id_of(vt.rows[1], val); }).find("v.jsonl:2: label 'neg'"), std::string::npos);
}

// A header name, a label or a tag may hold a newline (a quoted CSV field, a
// JSON string): the error that shows it stays one line (found by
// fuzz/fuzz_text_data: a CSV header whose quoted name held a newline).
TEST(TextTable, ErrorsShowingTheDataStayOneLine) {
  test::TempDir dir;
  const std::string csv = write(dir, "h.csv", "\"te\nxt\",label\nx,1\n");
  const std::string header = error_of([&] { read_text_table(csv, {"text", "", "label"}); });
  EXPECT_EQ(header, csv + ":1: no column 'text' in the header (te\\nxt, label)");
  const std::string train = write(dir, "t.jsonl", "{\"text\": \"a\", \"label\": \"p\\nos\"}\n");
  const std::string val = write(dir, "v.jsonl", "{\"text\": \"a\", \"label\": \"n\\reg\\u0001\"}\n");
  const LabelVocabulary v = LabelVocabulary::from(read_text_table(train, {"text", "", "label"}));
  const TextTable vt = read_text_table(val, {"text", "", "label"});
  EXPECT_EQ(error_of([&] { v.id_of(vt.rows[0], val); }),
            val + ":1: label 'n\\reg\\x01' is not one of the 1 known labels (p\\nos)");
  EXPECT_EQ(error_of([&] { v.value_of(vt.rows[0], val); }), val + ":1: label 'n\\reg\\x01' is not a number");
  EXPECT_EQ(escaped_text("tab\there\x7f"), "tab\\there\\x7F");
}

}  // namespace
}  // namespace anatomy
