// token_data.cpp: see token_data.h.
#include "anatomy/data/token_data.h"

#include <algorithm>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/text_table.h"
#include "anatomy/io/json.h"

namespace anatomy {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// The white-space separated columns of a line.
std::vector<std::string_view> columns_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const size_t begin = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > begin) out.push_back(line.substr(begin, i - begin));
  }
  return out;
}

TaggedCorpus read_conll(const std::string& path, const std::string& bytes, bool with_tags) {
  TaggedCorpus corpus;
  corpus.source = path;
  TaggedSentence sentence;
  auto finish = [&] {
    if (!sentence.words.empty()) corpus.sentences.push_back(std::move(sentence));
    sentence = TaggedSentence();
  };
  for_each_line(bytes, [&](int64_t line, std::string_view text) {
    if (blank_line(text)) {
      finish();
      return;
    }
    const std::vector<std::string_view> columns = columns_of(text);
    if (columns[0] == "-DOCSTART-") {  // a document boundary, not a sentence (as Hugging Face's conll2003 reader)
      finish();
      return;
    }
    if (with_tags && columns.size() < 2)
      fail("{}:{}: '{}' has no tag: a CoNLL line is a word and its tag (the last column)", path, line,
           std::string(text.substr(0, 40)));
    if (sentence.words.empty()) sentence.line = line;
    sentence.words.emplace_back(columns.front());
    if (with_tags) sentence.tags.emplace_back(columns.back());
  });
  finish();
  return corpus;
}

TaggedCorpus read_json_lines(const std::string& path, const std::string& bytes, const std::string& words_field,
                             const std::string& tags_field) {
  TaggedCorpus corpus;
  corpus.source = path;
  std::string tags_name = tags_field;
  for_each_line(bytes, [&](int64_t line, std::string_view text) {
    if (blank_line(text)) {
      ++corpus.blank_lines_skipped;
      return;
    }
    const nlohmann::json j = io::parse_json(text, fmt::format("{}:{}", path, line));
    if (!j.is_object()) fail("{}:{}: expected a JSON object, got {}", path, line, j.type_name());
    // "tags" by default, and the datasets library's "ner_tags" when the rows have that instead.
    if (!tags_name.empty() && tags_name == "tags" && !j.contains("tags") && j.contains("ner_tags"))
      tags_name = "ner_tags";
    auto list = [&](const std::string& name, bool tags) {
      if (!j.contains(name)) fail("{}:{}: no field '{}'", path, line, name);
      const nlohmann::json& v = j[name];
      if (!v.is_array()) fail("{}:{}: field '{}' is {}, expected a list", path, line, name, v.type_name());
      std::vector<std::string> out;
      out.reserve(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        const nlohmann::json& e = v[i];
        if (e.is_string()) out.push_back(e.get<std::string>());
        else if (tags && e.is_number_integer()) out.push_back(std::to_string(e.get<int64_t>()));
        else
          fail("{}:{}: item {} of '{}' is {}, expected {}", path, line, i, name, io::short_dump(e),
               tags ? "a tag (a string or an integer)" : "a word (a string)");
        if (!tags && blank_line(out.back())) fail("{}:{}: word {} of '{}' is empty", path, line, i, name);
      }
      return out;
    };
    TaggedSentence sentence;
    sentence.line = line;
    sentence.words = list(words_field, false);
    if (!tags_name.empty()) {
      sentence.tags = list(tags_name, true);
      if (sentence.tags.size() != sentence.words.size())
        fail("{}:{}: {} words in '{}' and {} tags in '{}'", path, line, sentence.words.size(), words_field,
             sentence.tags.size(), tags_name);
    }
    if (sentence.words.empty()) {
      ++corpus.empty_sentences_skipped;
      return;
    }
    corpus.sentences.push_back(std::move(sentence));
  });
  return corpus;
}

}  // namespace

bool is_conll_file(const std::string& path) { return lower_extension(path) == ".conll"; }

TaggedCorpus read_tagged_corpus(const std::string& path, const std::string& words_field,
                                const std::string& tags_field) {
  if (words_field.empty()) fail("--text-column: must name the field of the words");
  const std::string bytes = read_utf8_file(path);
  const std::string ext = lower_extension(path);
  TaggedCorpus corpus;
  if (ext == ".conll") corpus = read_conll(path, bytes, !tags_field.empty());
  else if (ext == ".jsonl" || ext == ".json") corpus = read_json_lines(path, bytes, words_field, tags_field);
  else fail("{}: unknown format '{}' for token classification: expected .jsonl, .json or .conll", path, ext);
  if (corpus.sentences.empty()) fail("{}: no sentences", path);
  return corpus;
}

LabelVocabulary tag_vocabulary(const TaggedCorpus& training) {
  std::set<std::string> names;
  std::set<int64_t> integers;
  bool all_integers = true;
  for (const TaggedSentence& s : training.sentences)
    for (const std::string& tag : s.tags) {
      names.insert(tag);
      int64_t i = 0;
      if (parse_integer(tag, &i) && i >= 0 && i < 100000) integers.insert(i);
      else all_integers = false;
    }
  if (names.empty()) fail("{}: no tags", training.source);
  LabelVocabulary v;
  if (all_integers) {
    for (int64_t i = 0; i <= *integers.rbegin(); ++i) {
      v.names.push_back(std::to_string(i));
      v.ids[std::to_string(i)] = i;
    }
    return v;
  }
  for (const std::string& name : names) {
    v.ids[name] = static_cast<int64_t>(v.names.size());
    v.names.push_back(name);
  }
  return v;
}

Dataset tokenize_tagged_corpus(const TaggedCorpus& corpus, const data::TextTokenizer& tokenizer,
                               const LabelVocabulary* tags, const TokenDataOptions& options) {
  const auto specials = static_cast<int64_t>(tokenizer.special_tokens(false));
  if (options.max_seq_length < specials + 1)
    fail("--max-seq-length {}: too short for the {} special tokens of {} and one token of text (at least {})",
         options.max_seq_length, specials, tokenizer.file(), specials + 1);
  if (tokenizer.pad_id() < 0)
    fail("{}: the tokenizer has no pad token ([PAD] or <pad>), which batches of text need", tokenizer.file());
  std::vector<std::vector<std::string>> words;
  words.reserve(corpus.sentences.size());
  for (const TaggedSentence& s : corpus.sentences) words.push_back(s.words);
  data::EncodeOptions encode;
  encode.truncate_to = static_cast<size_t>(options.max_seq_length);
  encode.add_prefix_space = options.add_prefix_space;
  std::vector<data::Encoding> encodings;
  try {
    encodings = tokenizer.encode_words(words, encode, options.threads);
  } catch (const Error& e) {
    fail("{}: {}", corpus.source, e.what());
  }

  // The ids of each sentence's tags, and for label_all_tokens the I- id of each B- id.
  std::vector<int64_t> inside;
  if (tags != nullptr && options.label_all_tokens) {
    for (int64_t id = 0; id < static_cast<int64_t>(tags->names.size()); ++id) {
      const std::string& name = tags->names[static_cast<size_t>(id)];
      int64_t to = id;
      if (name.rfind("B-", 0) == 0) {
        const auto it = tags->ids.find("I-" + name.substr(2));
        if (it != tags->ids.end()) to = it->second;
      }
      inside.push_back(to);
    }
  }

  Dataset d = padded_examples(corpus.source, encodings, tokenizer.pad_id());
  const auto cells = static_cast<size_t>(d.size * d.seq_len);
  d.word_ids.assign(cells, -1);
  if (tags != nullptr) {
    d.label_dtype = DType::I64;
    d.label_width = d.seq_len;
    d.token_labels = true;
    d.labels_i64.assign(cells, -100);
  }
  for (int64_t i = 0; i < d.size; ++i) {
    const data::Encoding& e = encodings[static_cast<size_t>(i)];
    const TaggedSentence& sentence = corpus.sentences[static_cast<size_t>(i)];
    std::vector<int64_t> ids;
    if (tags != nullptr) {
      for (size_t w = 0; w < sentence.tags.size(); ++w) {
        const std::string& tag = sentence.tags[w];
        auto it = tags->ids.find(tag);
        if (it == tags->ids.end()) {
          std::vector<std::string> known(tags->names.begin(),
                                         tags->names.begin() + std::min<size_t>(tags->names.size(), 12));
          fail("{}:{}: tag '{}' of word {} ('{}') is not one of the model's {} labels ({}{})", corpus.source,
               sentence.line, escaped_text(tag), w, escaped_text(sentence.words[w]), tags->names.size(),
               escaped_text(fmt::format("{}", fmt::join(known, ", "))),
               tags->names.size() > known.size() ? ", ..." : "");
        }
        ids.push_back(it->second);
      }
    }
    int32_t previous = -1;
    for (size_t t = 0; t < e.input_ids.size(); ++t) {
      const size_t at = static_cast<size_t>(i * d.seq_len) + t;
      const int32_t word = e.word_ids[t];
      d.word_ids[at] = word;
      if (tags != nullptr && word >= 0) {
        const int64_t id = ids.at(static_cast<size_t>(word));
        if (word != previous) d.labels_i64[at] = id;
        else if (options.label_all_tokens) d.labels_i64[at] = inside[static_cast<size_t>(id)];
      }
      previous = word;
    }
  }
  return d;
}

std::vector<std::vector<int64_t>> word_level(const Dataset& data, const std::vector<int64_t>& token_ids,
                                             const std::vector<int64_t>& words_per_example) {
  ANATOMY_CHECK(static_cast<int64_t>(token_ids.size()) == data.size * data.seq_len &&
                    static_cast<int64_t>(data.word_ids.size()) == data.size * data.seq_len &&
                    static_cast<int64_t>(words_per_example.size()) == data.size,
                "word_level: {} ids for {} x {}", token_ids.size(), data.size, data.seq_len);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(data.size));
  for (int64_t i = 0; i < data.size; ++i) {
    std::vector<int64_t>& words = out[static_cast<size_t>(i)];
    words.assign(static_cast<size_t>(words_per_example[static_cast<size_t>(i)]), -1);
    int64_t previous = -1;
    for (int64_t t = 0; t < data.seq_len; ++t) {
      const int64_t w = data.word_ids[static_cast<size_t>(i * data.seq_len + t)];
      if (w >= 0 && w != previous && w < static_cast<int64_t>(words.size()))
        words[static_cast<size_t>(w)] = token_ids[static_cast<size_t>(i * data.seq_len + t)];
      previous = w;
    }
  }
  return out;
}

}  // namespace anatomy
