// text_table.cpp: JSON Lines, CSV and TSV readers and the label vocabulary.
#include "anatomy/data/text_table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/wordpiece.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy {

namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}


void check_text(const std::string& path, int64_t line, const std::string& column, const std::string& text) {
  if (blank(text)) fail("{}:{}: column '{}' is empty", path, line, column);
}

TextTable read_jsonl(const std::string& path, const std::string& bytes, const TextColumns& columns) {
  TextTable table;
  table.source = path;
  for_each_line(bytes, [&](int64_t line, std::string_view text) {
    if (blank(text)) {
      ++table.blank_lines_skipped;
      return;
    }
    const nlohmann::json j = io::parse_json(text, fmt::format("{}:{}", path, line));
    if (!j.is_object()) fail("{}:{}: expected a JSON object, got {}", path, line, j.type_name());
    auto field = [&](const std::string& name, bool is_label) -> std::string {
      if (!j.contains(name)) fail("{}:{}: no field '{}'", path, line, name);
      const auto& v = j[name];
      if (v.is_string()) return v.get<std::string>();
      if (is_label && v.is_number_integer()) return std::to_string(v.get<int64_t>());
      if (is_label && v.is_number()) return v.dump();
      fail("{}:{}: field '{}' is {}, expected {}", path, line, name, v.type_name(),
           is_label ? "a string or a number" : "a string");
    };
    TextExample row;
    row.line = line;
    row.text = field(columns.text, false);
    check_text(path, line, columns.text, row.text);
    if (!columns.text_pair.empty()) {
      row.text_pair = field(columns.text_pair, false);
      check_text(path, line, columns.text_pair, row.text_pair);
    }
    if (!columns.label.empty()) row.label = field(columns.label, true);
    table.rows.push_back(std::move(row));
  });
  return table;
}

// RFC 4180 records: fields separated by `delimiter`, optionally quoted with
// '"' ("" inside quotes is a quote), quoted fields may span lines; CRLF or LF.
struct Record {
  std::vector<std::string> fields;
  int64_t line = 0;
};

std::vector<Record> parse_delimited(const std::string& path, const std::string& bytes, char delimiter) {
  std::vector<Record> records;
  Record current;
  std::string field;
  bool quoted = false, field_started = false, after_quote = false;
  int64_t line = 1;
  current.line = 1;
  auto end_field = [&] {
    current.fields.push_back(std::move(field));
    field.clear();
    field_started = after_quote = false;
  };
  auto end_record = [&] {
    end_field();
    const bool empty = current.fields.size() == 1 && current.fields[0].empty();
    if (!empty) records.push_back(std::move(current));
    current = Record();
    current.line = line;
  };
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < bytes.size() && bytes[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
          after_quote = true;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && !field_started) {
      quoted = field_started = true;
    } else if (c == delimiter) {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < bytes.size() && bytes[i + 1] == '\n') ++i;
      ++line;
      end_record();
    } else {
      if (after_quote) fail("{}:{}: text after a closing quote", path, line);
      field += c;
      field_started = true;
    }
  }
  if (quoted) fail("{}:{}: a quoted field is not closed before the end of the file", path, current.line);
  if (field_started || !current.fields.empty()) end_record();
  return records;
}

TextTable read_delimited(const std::string& path, const std::string& bytes, char delimiter,
                         const TextColumns& columns) {
  const std::vector<Record> records = parse_delimited(path, bytes, delimiter);
  if (records.empty()) fail("{}: no header row", path);
  const std::vector<std::string>& header = records[0].fields;
  auto column = [&](const std::string& name) -> size_t {
    const auto it = std::find(header.begin(), header.end(), name);
    // A quoted name may hold a newline: the error stays one line.
    if (it == header.end()) fail("{}:{}: no column '{}' in the header ({})", path, records[0].line, name,
                                 escaped_text(fmt::format("{}", fmt::join(header, ", "))));
    return static_cast<size_t>(it - header.begin());
  };
  const size_t text = column(columns.text);
  const size_t pair = columns.text_pair.empty() ? 0 : column(columns.text_pair);
  const size_t label = columns.label.empty() ? 0 : column(columns.label);
  TextTable table;
  table.source = path;
  for (size_t r = 1; r < records.size(); ++r) {
    const Record& rec = records[r];
    if (rec.fields.size() != header.size())
      fail("{}:{}: {} fields, the header has {}", path, rec.line, rec.fields.size(), header.size());
    TextExample row;
    row.line = rec.line;
    row.text = rec.fields[text];
    check_text(path, rec.line, columns.text, row.text);
    if (!columns.text_pair.empty()) {
      row.text_pair = rec.fields[pair];
      check_text(path, rec.line, columns.text_pair, row.text_pair);
    }
    if (!columns.label.empty()) {
      row.label = rec.fields[label];
      if (blank(row.label)) fail("{}:{}: column '{}' is empty", path, rec.line, columns.label);
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace

void for_each_line(std::string_view bytes, const std::function<void(int64_t, std::string_view)>& visit) {
  size_t start = 0;
  int64_t line = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string_view::npos) end = bytes.size();
    visit(++line, bytes.substr(start, end - start));
    start = end + 1;
  }
}

bool blank_line(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; });
}

std::string escaped_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7F) out += fmt::format("\\x{:02X}", u);
    else out += c;
  }
  return out;
}

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool parse_integer(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

std::string read_utf8_file(const std::string& path) {
  std::string bytes;
  {
    const std::vector<uint8_t> raw = io::read_file_bytes(path);
    bytes.assign(raw.begin(), raw.end());
  }
  if (bytes.rfind("\xEF\xBB\xBF", 0) == 0) bytes.erase(0, 3);  // a UTF-8 byte order mark
  if (const size_t bad = data::find_invalid_utf8(bytes); bad != std::string::npos)
    fail("{}:{}: bytes that are not UTF-8 (byte {} of the file)", path,
         1 + std::count(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bad), '\n'), bad);
  return bytes;
}

TextTable read_text_table(const std::string& path, const TextColumns& columns) {
  if (columns.text.empty()) fail("--text-column: must name a column");
  const std::string bytes = read_utf8_file(path);
  const std::string ext = lower_extension(path);
  TextTable table;
  if (ext == ".jsonl" || ext == ".json") table = read_jsonl(path, bytes, columns);
  else if (ext == ".csv") table = read_delimited(path, bytes, ',', columns);
  else if (ext == ".tsv") table = read_delimited(path, bytes, '\t', columns);
  else fail("{}: unknown format '{}': expected .jsonl, .json, .csv or .tsv", path, ext);
  if (table.rows.empty()) fail("{}: no examples", path);
  return table;
}

LabelVocabulary LabelVocabulary::from(const TextTable& training) {
  LabelVocabulary v;
  std::set<std::string> names;
  bool all_integers = true, all_numbers = true;
  std::set<int64_t> integers;
  for (const TextExample& row : training.rows) {
    names.insert(row.label);
    int64_t i = 0;
    double d = 0;
    if (parse_integer(row.label, &i)) integers.insert(i);
    else all_integers = false;
    if (!parse_number(row.label, &d)) all_numbers = false;
  }
  // Integers 0..n-1 (each present or not) are class ids as written.
  if (all_integers && !integers.empty() && *integers.begin() >= 0 && *integers.rbegin() < 100000) {
    const int64_t n = *integers.rbegin() + 1;
    for (int64_t i = 0; i < n; ++i) {
      v.names.push_back(std::to_string(i));
      v.ids[std::to_string(i)] = i;
    }
    return v;
  }
  if (all_numbers && !all_integers) {
    v.regression = true;
    return v;
  }
  for (const std::string& name : names) {
    v.ids[name] = static_cast<int64_t>(v.names.size());
    v.names.push_back(name);
  }
  return v;
}

int64_t LabelVocabulary::id_of(const TextExample& row, const std::string& source) const {
  auto it = ids.find(row.label);
  if (it == ids.end()) {
    int64_t i = 0;  // "3" and "03" name the same integer class
    if (parse_integer(row.label, &i)) it = ids.find(std::to_string(i));
  }
  if (it == ids.end()) {
    // Name the known labels (the first ten): the training data's, or a trained model's.
    const size_t shown = std::min<size_t>(names.size(), 10);
    const std::string known =
        fmt::format("{}", fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ", "));
    fail("{}:{}: label '{}' is not one of the {} known labels ({}{})", source, row.line, escaped_text(row.label),
         names.size(), escaped_text(known), shown < names.size() ? ", ..." : "");
  }
  return it->second;
}

double LabelVocabulary::value_of(const TextExample& row, const std::string& source) const {
  double d = 0;
  if (!parse_number(row.label, &d)) fail("{}:{}: label '{}' is not a number", source, row.line, escaped_text(row.label));
  return d;
}

}  // namespace anatomy
