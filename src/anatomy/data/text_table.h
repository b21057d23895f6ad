// text_table.h: labelled text examples from JSON Lines, CSV or TSV files (the
// formats of Hugging Face's run_glue-style --train_file / --validation_file),
// and the label vocabulary that maps their labels to ids.
//
// Every bad input is an Error naming the file and line: a line that is not a
// JSON object, a missing column, an empty text, bytes that are not UTF-8, a
// label the training data never had. Blank lines of a JSON Lines file are
// skipped (and counted).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace anatomy {

struct TextColumns {
  std::string text = "text";
  std::string text_pair;        // empty: single texts
  std::string label = "label";  // empty: no labels (prediction)
};

struct TextExample {
  std::string text, text_pair;
  std::string label;   // as written: "positive", "3", "0.25"
  int64_t line = 0;    // 1-based line of the file where the example starts
};

struct TextTable {
  std::string source;
  std::vector<TextExample> rows;
  int64_t blank_lines_skipped = 0;
};

// The text of a data file (text tables, word-tagged sentences, SQuAD
// questions): a UTF-8 byte order mark dropped; bytes that are not UTF-8 are
// an Error naming the file and line.
std::string read_utf8_file(const std::string& path);
// Calls `visit(number, line)` for each line of `bytes` (split at '\n', the
// line numbered from 1; a final '\n' ends the last line, no empty line after it).
void for_each_line(std::string_view bytes, const std::function<void(int64_t, std::string_view)>& visit);
// Whether a line of a word-tagged, SQuAD or masked-LM text file holds nothing
// but white space (space, tab, CR, VT, FF).
bool blank_line(std::string_view line);
// `text` for an error message, on one line: control characters (a newline a
// quoted CSV field or a JSON string holds) written as \n, \r, \t or \xNN.
std::string escaped_text(std::string_view text);
// The file's extension, lowercased (".jsonl").
std::string lower_extension(const std::string& path);
// A whole string as a decimal integer (strtoll's, no trailing characters); false if it is not one.
bool parse_integer(const std::string& s, int64_t* out);

// .jsonl / .json (one object per line), .csv or .tsv (a header row naming the
// columns; RFC 4180 quoting, quoted fields may hold newlines), by extension.
// Labels in JSON may be strings, integers or numbers.
TextTable read_text_table(const std::string& path, const TextColumns& columns);

// How labels become model targets. Integers 0..n-1 stay themselves; other
// strings are sorted and numbered (as a datasets ClassLabel); numbers that are
// not all integers make a regression target.
struct LabelVocabulary {
  bool regression = false;
  std::vector<std::string> names;  // id -> label (classification)
  std::map<std::string, int64_t> ids;

  static LabelVocabulary from(const TextTable& training);
  int64_t num_labels() const { return regression ? 1 : static_cast<int64_t>(names.size()); }
  // The id of a row's label; an Error naming the file and line for a label
  // the vocabulary lacks.
  int64_t id_of(const TextExample& row, const std::string& source) const;
  double value_of(const TextExample& row, const std::string& source) const;
};

}  // namespace anatomy
