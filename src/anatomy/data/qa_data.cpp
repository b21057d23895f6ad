// qa_data.cpp: see qa_data.h.
#include "anatomy/data/qa_data.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/text_table.h"
#include "anatomy/data/wordpiece.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy {

namespace {

// ------------------------------------------------------------------------------------------------ UTF-8 text

// The code point at s[at] (valid UTF-8), advancing `at`.
char32_t next_char(std::string_view s, size_t& at) {
  const auto b = static_cast<unsigned char>(s[at]);
  const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n && at + k < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[at + k]) & 0x3F);
  at += n;
  return c;
}

// The byte offset of every code point of `s`, and s.size() after them: Python's indexes into the str.
std::vector<size_t> char_starts(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t at = 0; at < s.size();) {
    out.push_back(at);
    next_char(s, at);
  }
  out.push_back(s.size());
  return out;
}

int64_t char_count(std::string_view s) {
  int64_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Python's str.isspace(): bidirectional class WS, B or S, or category Zs: Unicode's White_Space and U+001C..U+001F.
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// str.lstrip().
std::string_view python_lstrip(std::string_view s) {
  size_t at = 0;
  while (at < s.size()) {
    size_t next = at;
    if (!python_space(next_char(s, next))) break;
    at = next;
  }
  return s.substr(at);
}

// Python's s[begin:end] for non-negative indexes, by code point.
std::string_view python_slice(std::string_view s, const std::vector<size_t>& starts, int64_t begin, int64_t end) {
  const auto n = static_cast<int64_t>(starts.size()) - 1;
  begin = std::clamp<int64_t>(begin, 0, n);
  end = std::clamp<int64_t>(end, 0, n);
  if (end <= begin) return {};
  return s.substr(starts[static_cast<size_t>(begin)],
                  starts[static_cast<size_t>(end)] - starts[static_cast<size_t>(begin)]);
}

// A text for a one-line message: at most 40 characters, line breaks and control characters escaped.
std::string shown(std::string_view text) {
  std::string out;
  size_t at = 0;
  for (int chars = 0; at < text.size(); ++chars) {
    if (chars == 40) {
      out += "...";
      break;
    }
    const size_t begin = at;
    const char32_t c = next_char(text, at);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    else out.append(text.substr(begin, at - begin));
  }
  return out;
}

// ------------------------------------------------------------------------- where the questions of a .json are

// An iterator over the bytes of a text that counts the line breaks it passes, so that a SAX parse can tell the
// line of each object (the parser reads the text through it once, in order).
struct CountingIterator {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  int64_t* breaks = nullptr;
  reference operator*() const { return *p; }
  CountingIterator& operator++() {
    if (*p == '\n') ++*breaks;
    ++p;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p == o.p; }
  bool operator!=(const CountingIterator& o) const { return p != o.p; }
};

// The line where each item of "data", each paragraph and each question object starts, as the DOM will hold them
// (a repeated key: its last value, as nlohmann::json keeps it).
class LineSax {
 public:
  explicit LineSax(const int64_t* breaks) : breaks_(breaks) {}
  std::vector<int64_t> items;                          // data[i]
  std::vector<std::vector<std::vector<int64_t>>> qas;  // data[i].paragraphs[j].qas[k]

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(nlohmann::json::number_integer_t) { return true; }
  bool number_unsigned(nlohmann::json::number_unsigned_t) { return true; }
  bool number_float(nlohmann::json::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(nlohmann::json::binary_t&) { return true; }
  bool key(std::string& k) {
    if (!stack_.empty()) stack_.back().key = k;
    return true;
  }
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  enum Role { kOther, kRoot, kData, kItem, kParagraphs, kParagraph, kQas, kQa };
  struct Frame {
    Role role;
    std::string key;
  };
  bool open(bool array) {
    const int64_t line = *breaks_ + 1;
    Role role = kOther;
    if (stack_.empty()) {
      role = array ? kOther : kRoot;
    } else {
      const Frame& parent = stack_.back();
      if (parent.role == kRoot && array && parent.key == "data") {
        role = kData;
        items.clear();
        qas.clear();
      } else if (parent.role == kData && !array) {
        role = kItem;
        items.push_back(line);
        qas.emplace_back();
      } else if (parent.role == kItem && array && parent.key == "paragraphs") {
        role = kParagraphs;
        qas.back().clear();
      } else if (parent.role == kParagraphs && !array) {
        role = kParagraph;
        qas.back().emplace_back();
      } else if (parent.role == kParagraph && array && parent.key == "qas") {
        role = kQas;
        qas.back().back().clear();
      } else if (parent.role == kQas && !array) {
        role = kQa;
        qas.back().back().push_back(line);
      }
    }
    stack_.push_back({role, {}});
    return true;
  }
  bool close() {
    if (!stack_.empty()) stack_.pop_back();
    return true;
  }
  const int64_t* breaks_;
  std::vector<Frame> stack_;
};

// ---------------------------------------------------------------------------------------------------- reading

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  // Where an error is: the file and line, and the question's id once known.
  std::string where(int64_t line, const std::string& id) const {
    std::string out = line > 0 ? fmt::format("{}:{}", path_, line) : path_;
    if (!id.empty()) out += fmt::format(": question '{}'", shown(id));
    return out;
  }

  static const char* kind(const nlohmann::json& v) {
    if (v.is_string()) return "a string";
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_boolean()) return "a boolean";
    if (v.is_array()) return "a list";
    if (v.is_object()) return "an object";
    return "null";
  }

  const nlohmann::json& field(const nlohmann::json& j, const char* name, int64_t line, const std::string& id) const {
    if (!j.contains(name)) fail("{}: no field '{}'", where(line, id), name);
    return j[name];
  }

  std::string text_field(const nlohmann::json& j, const char* name, int64_t line, const std::string& id) const {
    const nlohmann::json& v = field(j, name, line, id);
    if (!v.is_string()) fail("{}: field '{}' is {}, expected a string", where(line, id), name, kind(v));
    return v.get<std::string>();
  }

  std::string id_field(const nlohmann::json& j, int64_t line) const {
    const nlohmann::json& v = field(j, "id", line, "");
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return v.dump();
    fail("{}: field 'id' is {}, expected a string", where(line, ""), kind(v));
  }

  int64_t start_value(const nlohmann::json& v, size_t k, int64_t line, const std::string& id) const {
    if (!v.is_number_integer())
      fail("{}: answer_start of answer {} is {}, expected an integer", where(line, id), k, kind(v));
    return v.get<int64_t>();
  }

  // The answers of a SQuAD question: [{"text", "answer_start"}, ...].
  void squad_answers(const nlohmann::json& qa, QaExample& e) const {
    const nlohmann::json& answers = field(qa, "answers", e.line, e.id);
    if (!answers.is_array()) fail("{}: field 'answers' is {}, expected a list", where(e.line, e.id), kind(answers));
    for (size_t k = 0; k < answers.size(); ++k) {
      const nlohmann::json& a = answers[k];
      if (!a.is_object()) fail("{}: answer {} is {}, expected an object", where(e.line, e.id), k, kind(a));
      if (!a.contains("text")) fail("{}: answer {} has no field 'text'", where(e.line, e.id), k);
      if (!a.contains("answer_start")) fail("{}: answer {} has no field 'answer_start'", where(e.line, e.id), k);
      if (!a["text"].is_string())
        fail("{}: text of answer {} is {}, expected a string", where(e.line, e.id), k, kind(a["text"]));
      e.answer_texts.push_back(a["text"].get<std::string>());
      e.answer_starts.push_back(start_value(a["answer_start"], k, e.line, e.id));
    }
    if (qa.contains("is_impossible")) {
      const nlohmann::json& v = qa["is_impossible"];
      if (!v.is_boolean())
        fail("{}: field 'is_impossible' is {}, expected true or false", where(e.line, e.id), kind(v));
      if (v.get<bool>() && !e.answer_texts.empty())
        fail("{}: is_impossible is true, yet it has {} answer(s)", where(e.line, e.id), e.answer_texts.size());
    }
  }

  // A flat row: {"id", "title", "context", "question", "answers": {"text": [...], "answer_start": [...]}}.
  QaExample row(const nlohmann::json& j, int64_t line) const {
    if (!j.is_object()) fail("{}: expected a JSON object, got {}", where(line, ""), kind(j));
    QaExample e;
    e.line = line;
    e.id = id_field(j, line);
    if (j.contains("title") && !j["title"].is_null()) e.title = text_field(j, "title", line, e.id);
    e.context = text_field(j, "context", line, e.id);
    e.question = text_field(j, "question", line, e.id);
    const nlohmann::json& answers = field(j, "answers", line, e.id);
    if (!answers.is_object())
      fail("{}: field 'answers' is {}, expected an object {{\"text\": [...], \"answer_start\": [...]}}",
           where(line, e.id), kind(answers));
    for (const char* name : {"text", "answer_start"}) {
      if (!answers.contains(name)) fail("{}: answers has no field '{}'", where(line, e.id), name);
      if (!answers[name].is_array())
        fail("{}: answers' '{}' is {}, expected a list", where(line, e.id), name, kind(answers[name]));
    }
    const nlohmann::json& texts = answers["text"];
    const nlohmann::json& starts = answers["answer_start"];
    if (texts.size() != starts.size())
      fail("{}: answers has {} text(s) and {} answer_start value(s)", where(line, e.id), texts.size(), starts.size());
    for (size_t k = 0; k < texts.size(); ++k) {
      if (!texts[k].is_string())
        fail("{}: text of answer {} is {}, expected a string", where(line, e.id), k, kind(texts[k]));
      e.answer_texts.push_back(texts[k].get<std::string>());
      e.answer_starts.push_back(start_value(starts[k], k, line, e.id));
    }
    return e;
  }

  // context[start:start + len(text)] == text for every answer, by code points.
  void check_answers(const QaExample& e) const {
    std::vector<size_t> starts;
    for (size_t k = 0; k < e.answer_texts.size(); ++k) {
      const std::string& text = e.answer_texts[k];
      const int64_t s = e.answer_starts[k];
      if (text.empty()) fail("{}: answer {} is empty", where(e.line, e.id), k);
      if (s < 0)
        fail("{}: answer {} has answer_start {}, expected a character index (0 or more)", where(e.line, e.id), k, s);
      if (starts.empty()) starts = char_starts(e.context);
      const auto n = static_cast<int64_t>(starts.size()) - 1;
      const int64_t length = char_count(text);
      if (s + length > n)
        fail("{}: answer {} '{}' at answer_start {} runs past the end of the context ({} characters)",
             where(e.line, e.id), k, shown(text), s, n);
      const std::string_view found = python_slice(e.context, starts, s, s + length);
      if (found != text)
        fail("{}: answer {} '{}' is not at answer_start {} of the context, which has '{}' there", where(e.line, e.id),
             k, shown(text), s, shown(found));
    }
  }

  QaCorpus read() {
    const std::string bytes = read_utf8_file(path_);
    const std::string ext = lower_extension(path_);
    QaCorpus corpus;
    corpus.source = path_;
    if (ext == ".jsonl") read_lines(bytes, corpus);
    else if (ext == ".json") read_document(bytes, corpus);
    else
      fail(
          "{}: unknown format '{}' for question answering: expected .json (SQuAD, or run_qa's {{\"data\": [rows]}}) "
          "or .jsonl (a question a line)",
          path_, ext);
    if (corpus.examples.empty()) fail("{}: no questions", path_);
    std::unordered_map<std::string, int64_t> seen;
    for (const QaExample& e : corpus.examples) {
      check_answers(e);
      const auto [it, fresh] = seen.emplace(e.id, e.line);
      if (!fresh) fail("{}: the id is repeated (first at line {})", where(e.line, e.id), it->second);
    }
    return corpus;
  }

 private:
  void read_lines(const std::string& bytes, QaCorpus& corpus) const {
    for_each_line(bytes, [&](int64_t line, std::string_view text) {
      if (!blank_line(text))
        corpus.examples.push_back(row(io::parse_json(text, fmt::format("{}:{}", path_, line)), line));
    });
  }

  void read_document(const std::string& bytes, QaCorpus& corpus) const {
    const nlohmann::json document = io::parse_json(bytes, path_);
    int64_t breaks = 0;
    LineSax lines(&breaks);
    nlohmann::json::sax_parse(CountingIterator{bytes.data(), &breaks},
                              CountingIterator{bytes.data() + bytes.size(), &breaks}, &lines);
    if (!document.is_object())
      fail("{}: expected a JSON object with a 'data' list (SQuAD), got {}", path_, kind(document));
    if (!document.contains("data")) fail("{}: no field 'data' (SQuAD: {{\"version\": ..., \"data\": [...]}})", path_);
    if (document.contains("version") && document["version"].is_string())
      corpus.version = document["version"].get<std::string>();
    const nlohmann::json& data = document["data"];
    if (!data.is_array()) fail("{}: field 'data' is {}, expected a list", path_, kind(data));
    auto item_line = [&](size_t i) { return i < lines.items.size() ? lines.items[i] : 0; };
    // SQuAD's articles hold paragraphs; run_qa's rows hold a question each.
    const bool nested = !data.empty() && data[0].is_object() && data[0].contains("paragraphs");
    for (size_t i = 0; i < data.size(); ++i) {
      const nlohmann::json& item = data[i];
      if (!nested) {
        corpus.examples.push_back(row(item, item_line(i)));
        continue;
      }
      if (!item.is_object())
        fail("{}: item {} of 'data' is {}, expected an object", where(item_line(i), ""), i, kind(item));
      std::string title;
      if (item.contains("title") && !item["title"].is_null()) {
        if (!item["title"].is_string())
          fail("{}: field 'title' is {}, expected a string", where(item_line(i), ""), kind(item["title"]));
        title = item["title"].get<std::string>();
      }
      if (!item.contains("paragraphs"))
        fail("{}: item {} of 'data' has no field 'paragraphs'", where(item_line(i), ""), i);
      const nlohmann::json& paragraphs = item["paragraphs"];
      if (!paragraphs.is_array())
        fail("{}: field 'paragraphs' is {}, expected a list", where(item_line(i), ""), kind(paragraphs));
      for (size_t p = 0; p < paragraphs.size(); ++p) {
        const nlohmann::json& paragraph = paragraphs[p];
        const auto qa_line = [&](size_t q) {
          if (i < lines.qas.size() && p < lines.qas[i].size() && q < lines.qas[i][p].size()) return lines.qas[i][p][q];
          return item_line(i);
        };
        if (!paragraph.is_object())
          fail("{}: paragraph {} is {}, expected an object", where(item_line(i), ""), p, kind(paragraph));
        const nlohmann::json* qas = nullptr;
        if (paragraph.contains("qas")) qas = &paragraph["qas"];
        const int64_t first = qa_line(0);
        if (qas == nullptr) fail("{}: paragraph {} has no field 'qas'", where(item_line(i), ""), p);
        if (!qas->is_array())
          fail("{}: field 'qas' of paragraph {} is {}, expected a list", where(item_line(i), ""), p, kind(*qas));
        if (!paragraph.contains("context")) fail("{}: paragraph {} has no field 'context'", where(first, ""), p);
        if (!paragraph["context"].is_string())
          fail("{}: field 'context' of paragraph {} is {}, expected a string", where(first, ""), p,
               kind(paragraph["context"]));
        const std::string context = paragraph["context"].get<std::string>();
        for (size_t q = 0; q < qas->size(); ++q) {
          const nlohmann::json& qa = (*qas)[q];
          const int64_t line = qa_line(q);
          if (!qa.is_object())
            fail("{}: question {} of paragraph {} is {}, expected an object", where(line, ""), q, p, kind(qa));
          QaExample e;
          e.line = line;
          e.id = id_field(qa, line);
          e.title = title;
          e.context = context;
          e.question = text_field(qa, "question", line, e.id);
          squad_answers(qa, e);
          corpus.examples.push_back(std::move(e));
        }
      }
    }
  }

  std::string path_;
};

// ------------------------------------------------------------------------------------------------- features

std::string feature_where(const QaCorpus& corpus, const QaExample& e) {
  return fmt::format("{}:{}: question '{}'", corpus.source, e.line, e.id);
}

// run_qa's tokenizer call on every question: the windows, and the example of each.
data::OverflowingEncodings encode_windows(const QaCorpus& corpus, const data::TextTokenizer& tokenizer,
                                          const QaFeatureOptions& options) {
  const auto specials = static_cast<int64_t>(tokenizer.special_tokens(true));
  if (options.max_seq_length <= specials)
    fail("max_seq_length {}: too short for the {} special tokens {} adds to a question and its context (at least {})",
         options.max_seq_length, specials, tokenizer.file(), specials + 1);
  if (options.doc_stride < 0) fail("doc_stride {}: must be 0 or more", options.doc_stride);
  if (tokenizer.pad_id() < 0)
    fail("{}: the tokenizer has no pad token ([PAD] or <pad>), which batches of text need", tokenizer.file());
  std::vector<data::TextInput> inputs;
  inputs.reserve(corpus.examples.size());
  for (const QaExample& e : corpus.examples) inputs.push_back({python_lstrip(e.question), std::string_view(e.context)});
  data::OverflowOptions o;
  o.max_length = static_cast<size_t>(options.max_seq_length);
  o.stride = static_cast<size_t>(options.doc_stride);
  o.padding = options.pad_to_max_length ? data::Padding::kMaxLength : data::Padding::kNone;
  o.add_prefix_space = options.add_prefix_space;
  try {
    return tokenizer.encode_overflowing_batch(inputs, o, options.threads);
  } catch (const Error& batch_error) {
    // Name the question: the first one the tokenizer refuses alone.
    for (size_t i = 0; i < inputs.size(); ++i) {
      try {
        tokenizer.encode_overflowing(inputs[i], o);
      } catch (const Error& e) {
        fail("{}: {}", feature_where(corpus, corpus.examples[i]), e.what());
      }
    }
    fail("{}: {}", corpus.source, batch_error.what());
  }
}

// input_ids, token_type_ids and attention_mask of the windows, right-padded to max_seq_length or the longest.
Dataset window_rows(const QaCorpus& corpus, const data::TextTokenizer& tokenizer, const QaFeatureOptions& options,
                    const data::OverflowingEncodings& windows) {
  Dataset d = padded_examples(corpus.source, windows.features, tokenizer.pad_id(),
                              options.pad_to_max_length ? options.max_seq_length : 0);
  d.pad_per_batch = !options.pad_to_max_length;
  return d;
}

std::vector<int64_t> example_indexes(const data::OverflowingEncodings& windows) {
  return {windows.overflow_to_sample_mapping.begin(), windows.overflow_to_sample_mapping.end()};
}

// prepare_train_features' labels of one window: (start, end), and whether the window holds the answer.
struct Label {
  int64_t start, end;
  bool inside;
};

Label label_window(const data::Encoding& e, const QaExample& example, const std::vector<int64_t>& answer_span,
                   const QaFeatureOptions& options) {
  const std::vector<int32_t>& ids = e.input_ids;
  const auto n = static_cast<int64_t>(ids.size());
  int64_t cls = 0;
  const auto first = [&](int32_t id) -> int64_t {
    if (id < 0) return -1;
    const auto it = std::find(ids.begin(), ids.end(), id);
    return it == ids.end() ? -1 : it - ids.begin();
  };
  if (const int64_t c = first(options.cls_token_id); c >= 0) cls = c;
  else if (const int64_t b = first(options.bos_token_id); b >= 0) cls = b;
  const Label none{cls, cls, false};
  if (example.answer_texts.empty()) return none;
  const int64_t start_char = answer_span[0], end_char = answer_span[1];
  const auto seq = [&](int64_t t) { return e.sequence_ids[static_cast<size_t>(t)]; };
  const auto begin_of = [&](int64_t t) { return static_cast<int64_t>(e.offsets[static_cast<size_t>(t)].first); };
  const auto end_of = [&](int64_t t) { return static_cast<int64_t>(e.offsets[static_cast<size_t>(t)].second); };
  // The window's first and last context tokens. A window without any (an empty context) has no span: run_qa
  // fails there (IndexError), the window is labelled as not holding the answer here.
  int64_t ts = 0;
  while (ts < n && seq(ts) != 1) ++ts;
  if (ts == n) return none;
  int64_t te = n - 1;
  while (seq(te) != 1) --te;
  if (!(begin_of(ts) <= start_char && end_of(te) >= end_char)) return none;
  // The tokens that start at or before the answer: the last of them starts it. Past the context (the answer starts
  // in its last token) the walk goes on through the special and padding tokens, whose offsets are (0, 0).
  while (ts < n && begin_of(ts) <= start_char) ++ts;
  // The tokens that end at or after the answer's end, from the window's last context token back.
  while (te >= 0 && end_of(te) >= end_char) --te;
  return {ts - 1, te + 1, true};
}

// ---------------------------------------------------------------------------------------------- post-processing

// numpy's pairwise summation (add.reduce of a contiguous array, from 0): 8 accumulators in blocks of 128.
template <typename T>
T pairwise_sum(const T* a, size_t n) {
  if (n < 8) {
    T res = 0;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    T r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// np.exp(scores - np.max(scores)) / sum, in T.
template <typename T>
std::vector<T> softmax(const std::vector<T>& scores) {
  const T top = *std::max_element(scores.begin(), scores.end());
  std::vector<T> e(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) e[i] = std::exp(static_cast<T>(scores[i] - top));
  const T sum = static_cast<T>(T(0) + pairwise_sum(e.data(), e.size()));
  for (T& v : e) v = v / sum;
  return e;
}

// The indexes of the k largest of row[0, width), largest first: np.argsort(row)[-1:-k-1:-1], equal values by
// the higher index first (a stable ascending sort, reversed; numpy's default sort does not promise an order).
std::vector<int64_t> top_indexes(const float* row, int64_t width, int64_t k) {
  std::vector<int64_t> idx(static_cast<size_t>(width));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, width);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a > b); });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

struct Candidate {
  int64_t begin = 0, end = 0;  // character offsets into the context
  float score = 0, start_logit = 0, end_logit = 0;
};

}  // namespace

// ------------------------------------------------------------------------------------------------------ API

bool QaCorpus::has_unanswerable() const {
  return std::any_of(examples.begin(), examples.end(), [](const QaExample& e) { return e.answer_texts.empty(); });
}

QaCorpus read_qa_corpus(const std::string& path) { return Reader(path).read(); }

QaTrainFeatures prepare_train_features(const QaCorpus& corpus, const data::TextTokenizer& tokenizer,
                                       const QaFeatureOptions& options) {
  const data::OverflowingEncodings windows = encode_windows(corpus, tokenizer, options);
  QaTrainFeatures out;
  out.data = window_rows(corpus, tokenizer, options, windows);
  out.example_index = example_indexes(windows);
  Dataset& d = out.data;
  d.label_dtype = DType::I64;
  d.label_width = 2;
  d.span_labels = true;
  d.labels_i64.assign(static_cast<size_t>(2 * d.size), 0);
  // The first answer's character span [start, end) of each example.
  std::vector<std::vector<int64_t>> spans(corpus.examples.size());
  for (size_t i = 0; i < corpus.examples.size(); ++i) {
    const QaExample& e = corpus.examples[i];
    if (e.answer_texts.empty()) continue;
    ++out.answerable;
    spans[i] = {e.answer_starts[0], e.answer_starts[0] + char_count(e.answer_texts[0])};
  }
  std::vector<char> covered(corpus.examples.size(), 0);
  for (size_t f = 0; f < windows.features.size(); ++f) {
    const auto ex = static_cast<size_t>(windows.overflow_to_sample_mapping[f]);
    const Label label = label_window(windows.features[f], corpus.examples[ex], spans[ex], options);
    d.labels_i64[2 * f] = label.start;
    d.labels_i64[2 * f + 1] = label.end;
    covered[ex] |= static_cast<char>(label.inside);
  }
  for (size_t i = 0; i < corpus.examples.size(); ++i)
    if (!corpus.examples[i].answer_texts.empty() && !covered[i]) out.uncovered.push_back(static_cast<int64_t>(i));
  return out;
}

QaEvalFeatures prepare_validation_features(const QaCorpus& corpus, const data::TextTokenizer& tokenizer,
                                           const QaFeatureOptions& options) {
  const data::OverflowingEncodings windows = encode_windows(corpus, tokenizer, options);
  QaEvalFeatures out;
  out.data = window_rows(corpus, tokenizer, options, windows);
  out.example_index = example_indexes(windows);
  const int64_t L = out.data.seq_len;
  out.offsets.assign(static_cast<size_t>(out.data.size * L), {-1, -1});
  for (size_t f = 0; f < windows.features.size(); ++f) {
    const data::Encoding& e = windows.features[f];
    for (size_t t = 0; t < e.input_ids.size(); ++t)
      if (e.sequence_ids[t] == 1)
        out.offsets[f * static_cast<size_t>(L) + t] = {static_cast<int32_t>(e.offsets[t].first),
                                                       static_cast<int32_t>(e.offsets[t].second)};
  }
  return out;
}

std::map<std::string, std::string> QaPredictions::prediction_map() const {
  return {predictions.begin(), predictions.end()};
}

QaPredictions postprocess_qa_predictions(const QaCorpus& corpus, const QaEvalFeatures& features,
                                         std::span<const float> start_logits, std::span<const float> end_logits,
                                         int64_t width, const QaPostprocessOptions& options) {
  const auto n = static_cast<int64_t>(features.example_index.size());
  const int64_t L = features.data.seq_len;
  if (width < 1 || static_cast<int64_t>(start_logits.size()) != n * width ||
      static_cast<int64_t>(end_logits.size()) != n * width)
    fail("{}: {} start and {} end logits for {} features of {} positions", corpus.source, start_logits.size(),
         end_logits.size(), n, width);
  ANATOMY_CHECK(static_cast<int64_t>(features.offsets.size()) == n * L, "{} offsets for {} x {}",
                features.offsets.size(), n, L);
  if (options.n_best_size < 0) fail("n_best_size {}: must be 0 or more", options.n_best_size);
  for (int64_t i = 0; i < n * width; ++i)
    if (std::isnan(start_logits[static_cast<size_t>(i)]) || std::isnan(end_logits[static_cast<size_t>(i)]))
      fail("{}: the {} logits of feature {} have a NaN at position {}", corpus.source,
           std::isnan(start_logits[static_cast<size_t>(i)]) ? "start" : "end", i / width, i % width);

  std::vector<std::vector<int64_t>> features_of(corpus.examples.size());
  for (int64_t f = 0; f < n; ++f) {
    const int64_t ex = features.example_index[static_cast<size_t>(f)];
    ANATOMY_CHECK(ex >= 0 && ex < static_cast<int64_t>(corpus.examples.size()), "feature {} of example {}", f, ex);
    features_of[static_cast<size_t>(ex)].push_back(f);
  }

  const bool v2 = options.version_2_with_negative;
  const auto threshold = static_cast<float>(options.null_score_diff_threshold);
  QaPredictions out;
  out.nbest.reserve(corpus.examples.size());
  for (size_t ex = 0; ex < corpus.examples.size(); ++ex) {
    const QaExample& example = corpus.examples[ex];
    if (v2 && features_of[ex].empty())
      fail("{}: question '{}' has no feature, so no null score", corpus.source, shown(example.id));
    std::vector<Candidate> prelim;
    Candidate null_candidate;
    bool have_null = false;
    for (const int64_t f : features_of[ex]) {
      const float* s = start_logits.data() + f * width;
      const float* e = end_logits.data() + f * width;
      const auto* offsets = features.offsets.data() + f * L;
      const float null_score = s[0] + e[0];
      if (!have_null || null_candidate.score > null_score) {
        null_candidate = {0, 0, null_score, s[0], e[0]};
        have_null = true;
      }
      const std::vector<int64_t> starts = top_indexes(s, width, options.n_best_size);
      const std::vector<int64_t> ends = top_indexes(e, width, options.n_best_size);
      for (const int64_t si : starts)
        for (const int64_t ei : ends) {
          if (si >= L || ei >= L || offsets[si].first < 0 || offsets[ei].first < 0) continue;
          if (ei < si || ei - si + 1 > options.max_answer_length) continue;
          prelim.push_back({offsets[si].first, offsets[ei].second, s[si] + e[ei], s[si], e[ei]});
        }
    }
    if (v2) prelim.push_back(null_candidate);
    std::stable_sort(prelim.begin(), prelim.end(),
                     [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
    if (static_cast<int64_t>(prelim.size()) > options.n_best_size)
      prelim.resize(static_cast<size_t>(options.n_best_size));
    if (v2 && std::none_of(prelim.begin(), prelim.end(), [](const Candidate& c) { return c.begin == 0 && c.end == 0; }))
      prelim.push_back(null_candidate);

    const std::vector<size_t> starts = char_starts(example.context);
    std::vector<QaNbestEntry> entries;
    entries.reserve(prelim.size() + 1);
    for (const Candidate& c : prelim)
      entries.push_back(
          {std::string(python_slice(example.context, starts, c.begin, c.end)), c.start_logit, c.end_logit, 0, false});
    const bool fallback = entries.empty() || (entries.size() == 1 && entries[0].text.empty());
    if (fallback) entries.insert(entries.begin(), QaNbestEntry{"empty", 0.0, 0.0, 0, true});
    // The scores as numpy holds them: float32, or float64 once the fallback's Python 0.0 is among them.
    if (fallback) {
      std::vector<double> scores;
      scores.push_back(0.0);
      for (const Candidate& c : prelim) scores.push_back(static_cast<double>(c.score));
      const std::vector<double> p = softmax(scores);
      for (size_t i = 0; i < entries.size(); ++i) entries[i].probability = p[i];
    } else {
      std::vector<float> scores;
      for (const Candidate& c : prelim) scores.push_back(c.score);
      const std::vector<float> p = softmax(scores);
      for (size_t i = 0; i < entries.size(); ++i) entries[i].probability = static_cast<double>(p[i]);
    }

    if (!v2) {
      out.predictions.emplace_back(example.id, entries[0].text);
    } else {
      const auto best =
          std::find_if(entries.begin(), entries.end(), [](const QaNbestEntry& x) { return !x.text.empty(); });
      if (best == entries.end())
        fail("{}: question '{}': every entry of its n-best list is empty (utils_qa fails there with an IndexError)",
             corpus.source, shown(example.id));
      // null_score - start_logit - end_logit in float32 (the fallback's 0.0 is a Python float: float32 still).
      float diff = null_candidate.score - static_cast<float>(best->start_logit);
      diff = diff - static_cast<float>(best->end_logit);
      out.null_odds.emplace_back(example.id, static_cast<double>(diff));
      out.predictions.emplace_back(example.id, diff > threshold ? std::string() : best->text);
    }
    out.nbest.push_back(std::move(entries));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------- Python's JSON

std::string python_json_string(std::string_view text) {
  std::string out = "\"";
  for (size_t at = 0; at < text.size();) {
    const char32_t c = next_char(text, at);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c >= 0x20 && c < 0x7F) {
          out += static_cast<char>(c);
        } else if (c < 0x10000) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          const char32_t v = c - 0x10000;
          out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                             static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
        }
    }
  }
  out += '"';
  return out;
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // The shortest digits that read back as `value` (Python's repr and to_chars agree on them), then Python's
  // layout: positional for decimal exponents -4 <= e < 16, else d.ddde+XX.
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  ANATOMY_CHECK(ec == std::errc(), "to_chars of {}", value);
  std::string_view s(buf, static_cast<size_t>(end - buf));
  std::string out;
  if (s.front() == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  const size_t e_at = s.find('e');
  std::string digits(s.substr(0, e_at));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(std::string(s.substr(e_at + 1)));
  const int decpt = exponent + 1;  // value = 0.digits × 10^decpt
  const auto nd = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt >= nd) {
    out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

void write_qa_predictions(const QaPredictions& predictions, const std::string& directory, const std::string& prefix,
                          bool version_2_with_negative) {
  if (!io::is_directory(directory)) fail("{}: not a directory", directory);
  const auto name = [&](const char* file) {
    return (std::filesystem::path(directory) / (prefix.empty() ? std::string(file) : prefix + "_" + file)).string();
  };
  const auto write = [](const std::string& path, const std::string& text) {
    io::AtomicFile f(path);
    f.write(text);
    f.commit();
  };
  // json.dumps(dict, indent=4): "{}" when empty.
  const auto object = [](const std::vector<std::string>& items) {
    if (items.empty()) return std::string("{}");
    std::string out = "{\n";
    for (size_t i = 0; i < items.size(); ++i) out += items[i] + (i + 1 < items.size() ? ",\n" : "\n");
    return out + "}";
  };
  std::vector<std::string> items;
  for (const auto& [id, text] : predictions.predictions)
    items.push_back("    " + python_json_string(id) + ": " + python_json_string(text));
  write(name("predictions.json"), object(items) + "\n");

  items.clear();
  for (size_t i = 0; i < predictions.nbest.size() && i < predictions.predictions.size(); ++i) {
    const std::vector<QaNbestEntry>& list = predictions.nbest[i];
    std::string item = "    " + python_json_string(predictions.predictions[i].first) + ": ";
    if (list.empty()) {
      item += "[]";
    } else {
      item += "[\n";
      for (size_t k = 0; k < list.size(); ++k) {
        const QaNbestEntry& x = list[k];
        const std::string text = "            \"text\": " + python_json_string(x.text);
        const std::string logits = "            \"start_logit\": " + python_float_repr(x.start_logit) +
                                   ",\n            \"end_logit\": " + python_float_repr(x.end_logit);
        item += "        {\n";
        // The keys in utils_qa's order: the fallback is built with its text first, the others get it later.
        item += x.empty_fallback ? text + ",\n" + logits : logits + ",\n" + text;
        item += ",\n            \"probability\": " + python_float_repr(x.probability) + "\n        }";
        item += k + 1 < list.size() ? ",\n" : "\n";
      }
      item += "    ]";
    }
    items.push_back(std::move(item));
  }
  write(name("nbest_predictions.json"), object(items) + "\n");

  if (version_2_with_negative) {
    items.clear();
    for (const auto& [id, value] : predictions.null_odds)
      items.push_back("    " + python_json_string(id) + ": " + python_float_repr(value));
    write(name("null_odds.json"), object(items) + "\n");
  }
}

}  // namespace anatomy
