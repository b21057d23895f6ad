// tokenize_command.cpp: `anatomy tokenize`: tokenizes the texts of a JSON-lines
// file as Hugging Face does, printing one JSON line per input with input_ids,
// token_type_ids and attention_mask (and offsets with --offsets); or, with
// --benchmark, times the encoding alone. The tokenizer is a tokenizer.json
// (--tokenizer: any model, normalizer, pre-tokenizer and post-processor the
// `tokenizers` library writes; data/tokenizer/; a directory's tokenizer.json
// with what its tokenizer_config.json changes, as AutoTokenizer reads it) or a
// WordPiece vocab.txt (--vocab, as BertTokenizer(Fast) builds it, with the
// --do-lower-case family).
//
// Input: one JSON object a line with "text" (a string) and optionally
// "text_pair" (a string, or null for none); other fields are ignored. Blank
// lines are skipped and counted. Any other bad line (invalid UTF-8, invalid
// JSON, no "text", a field that is not a string) stops the command before it
// prints anything, with the file and line number. An empty text is valid, as in
// Hugging Face ([CLS] [SEP]); their number is reported.
//
// The flags resolve as tokenizer(texts, max_length=..., padding=...,
// truncation=...) resolves them: --max-length alone truncates (longest_first);
// with --padding and without --truncation it only pads (max_length); padding
// longest pads to the longest encoding of the file.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <functional>
#include <span>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/cli/commands.h"
#include "anatomy/core/error.h"
#include "anatomy/data/tokenizer/tokenizer.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/tokenizer/tokenizer_config.h"
#include "anatomy/data/wordpiece.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"

namespace anatomy::cli {

namespace {

struct TokenizeFlags {
  std::string vocab, tokenizer, input, padding;
  bool offsets = false;
  bool add_special_tokens = true;
  bool lowercase = true;
  std::optional<bool> strip_accents;
  bool chinese = true;
  std::optional<size_t> max_length;
  bool truncation = false;
  int threads = 0;
  bool benchmark = false;
};

// The texts of the input file; `storage` owns the strings the inputs view.
struct Texts {
  std::vector<std::string> storage;
  std::vector<data::TextInput> inputs;
  size_t blank_lines = 0;
  size_t empty_texts = 0;
  size_t first_empty_line = 0;
  size_t bytes = 0;
  bool any_pair = false;
};

std::string read_input(const std::string& path) {
  std::stringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path);
  buffer << in.rdbuf();
  if (in.bad()) fail("cannot read {}", path);
  return buffer.str();
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: ..." as "column 5: ...".
std::string json_reason(const std::string& what) {
  std::string reason = what;
  if (const size_t at = reason.find("] "); at != std::string::npos) reason = reason.substr(at + 2);
  for (const char* prefix : {"parse error at line 1, ", "parse error: "})
    if (reason.rfind(prefix, 0) == 0) reason = reason.substr(std::char_traits<char>::length(prefix));
  if (reason.size() > 200) reason = reason.substr(0, 200) + "...";
  return reason;
}

const char* json_kind(const nlohmann::json& value) {
  return value.is_number() ? "a number" : value.is_boolean() ? "a boolean" : value.is_array() ? "an array"
       : value.is_object() ? "an object" : value.is_null() ? "null" : "a string";
}

Texts read_texts(const std::string& path) {
  const std::string name = path == "-" ? "<stdin>" : path;
  const std::string bytes = read_input(path);
  Texts texts;
  size_t line_number = 0;
  for (size_t start = 0; start < bytes.size();) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    std::string_view line(bytes.data() + start, end - start);
    start = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      ++texts.blank_lines;
      continue;
    }
    if (const size_t bad = data::find_invalid_utf8(line); bad != std::string_view::npos)
      fail("{}:{}: invalid UTF-8 (byte 0x{:02X} at column {})", name, line_number,
           static_cast<unsigned char>(line[bad]), bad + 1);
    io::check_json_depth(line, fmt::format("{}:{}", name, line_number));
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line.begin(), line.end());
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: invalid JSON: {}", name, line_number, json_reason(e.what()));
    }
    if (!record.is_object())
      fail("{}:{}: expected a JSON object with \"text\", got {}", name, line_number, json_kind(record));
    const auto text = record.find("text");
    if (text == record.end()) fail("{}:{}: no \"text\" field", name, line_number);
    if (!text->is_string()) fail("{}:{}: \"text\" is {}, not a string", name, line_number, json_kind(*text));
    texts.storage.push_back(text->get<std::string>());
    if (texts.storage.back().empty() && texts.empty_texts++ == 0) texts.first_empty_line = line_number;
    texts.bytes += texts.storage.back().size();
    const auto pair = record.find("text_pair");
    if (pair != record.end() && !pair->is_null()) {
      if (!pair->is_string())
        fail("{}:{}: \"text_pair\" is {}, not a string", name, line_number, json_kind(*pair));
      texts.storage.push_back(pair->get<std::string>());
      texts.bytes += texts.storage.back().size();
      texts.inputs.push_back({{}, std::string_view{}});  // marked as a pair; views filled below
      texts.any_pair = true;
    } else {
      texts.inputs.push_back({});
    }
  }
  // storage no longer grows: point the inputs at it.
  size_t k = 0;
  for (data::TextInput& input : texts.inputs) {
    input.text = texts.storage[k++];
    if (input.pair) input.pair = std::string_view(texts.storage[k++]);
  }
  return texts;
}

void append_ids(std::string& out, const char* name, const std::vector<int32_t>& ids) {
  out += '"';
  out += name;
  out += "\": [";
  char buffer[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    const auto r = std::to_chars(buffer, buffer + sizeof buffer, ids[i]);
    out.append(buffer, r.ptr);
  }
  out += ']';
}

void append_offsets(std::string& out, const std::vector<std::pair<uint32_t, uint32_t>>& offsets) {
  out += "\"offsets\": [";
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (i) out += ", ";
    out += fmt::format("[{}, {}]", offsets[i].first, offsets[i].second);
  }
  out += ']';
}

void print_encodings(const std::vector<data::Encoding>& encodings, bool offsets) {
  std::string out;
  out.reserve(1 << 20);
  for (const data::Encoding& e : encodings) {
    out += '{';
    append_ids(out, "input_ids", e.input_ids);
    out += ", ";
    append_ids(out, "token_type_ids", e.token_type_ids);
    out += ", ";
    append_ids(out, "attention_mask", e.attention_mask);
    if (offsets) {
      out += ", ";
      append_offsets(out, e.offsets);
    }
    out += "}\n";
    if (out.size() >= (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

// Either tokenizer, as one call.
using EncodeBatch = std::function<std::vector<data::Encoding>(std::span<const data::TextInput>, int threads)>;

int run_benchmark(const EncodeBatch& encode_batch, const Texts& texts, int threads) {
  constexpr int kRounds = 3;
  std::vector<double> seconds;
  size_t tokens = 0;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<data::Encoding> encodings = encode_batch(texts.inputs, threads);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    tokens = 0;
    for (const data::Encoding& e : encodings)
      tokens += static_cast<size_t>(std::count(e.attention_mask.begin(), e.attention_mask.end(), 1));
  }
  const double best = *std::min_element(seconds.begin(), seconds.end());
  fmt::print("Encoded {} inputs ({:.2f} MB of text, {} tokens with the special ones) on {} thread{}\n",
             texts.inputs.size(), texts.bytes / 1e6, tokens, threads, threads == 1 ? "" : "s");
  fmt::print("Best of {} rounds: {:.4f} s, {:.2f} MB/s, {:.0f} tokens/s (rounds: {:.4f} s)\n", kRounds, best,
             texts.bytes / 1e6 / best, tokens / best, fmt::join(seconds, " s, "));
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto f = std::make_shared<TokenizeFlags>();
  auto* vocab = app.add_option("--vocab", f->vocab, "vocab.txt: one WordPiece token a line");
  auto* tokenizer = app.add_option("--tokenizer", f->tokenizer,
                                   "tokenizer.json (or a directory holding one): Hugging Face tokenizers' format");
  vocab->excludes(tokenizer);
  app.add_flag("--offsets", f->offsets, "Also print each token's character span [start, end) in its text");
  app.add_option("--add-special-tokens", f->add_special_tokens,
                 "Add the post-processor's special tokens ([CLS], [SEP], <s>, ...)")
      ->default_str("true");
  app.add_option("--input", f->input, "JSON lines with \"text\" and optional \"text_pair\" (- for stdin)")
      ->required();
  app.add_option("--do-lower-case", f->lowercase, "Lowercase (and, unless --strip-accents says, strip accents)")
      ->default_str("true");
  app.add_option("--strip-accents", f->strip_accents, "NFD and drop nonspacing marks (default: as --do-lower-case)");
  app.add_option("--tokenize-chinese-chars", f->chinese, "Split CJK ideographs into words of their own")
      ->default_str("true");
  app.add_option("--max-length", f->max_length, "Tokens per encoding, special ones included")
      ->check(positive_number())->check(CLI::Range(size_t{1}, size_t{1} << 30));
  app.add_option("--padding", f->padding, "max_length (to --max-length) or longest (to the longest of the file)")
      ->check(CLI::IsMember({"max_length", "longest"}));
  app.add_flag("--truncation", f->truncation, "Truncate to --max-length (longest_first)");
  app.add_option("--threads", f->threads, "Encoding threads (0: one per hardware thread)")
      ->capture_default_str()->check(non_negative_number())->check(CLI::Range(0, 1024));
  app.add_flag("--benchmark", f->benchmark, "Time the encoding (best of 3 rounds) instead of printing it");

  return [f]() -> int {
    data::EncodeOptions options;
    if (f->padding == "max_length") {
      if (!f->max_length) fail("--padding max_length needs --max-length");
      options.padding = data::Padding::kMaxLength;
      options.pad_to = *f->max_length;
    } else if (f->padding == "longest") {
      options.padding = data::Padding::kLongest;
    }
    if (f->truncation) {
      if (!f->max_length) fail("--truncation needs --max-length");
      options.truncate_to = *f->max_length;
    } else if (f->max_length && f->padding.empty()) {
      // Hugging Face: "Truncation was not explicitly activated but max_length
      // is provided ... Defaulting to 'longest_first' truncation strategy."
      options.truncate_to = *f->max_length;
    }

    if (f->vocab.empty() && f->tokenizer.empty()) fail("--vocab or --tokenizer is required");
    EncodeBatch encode_batch;
    size_t specials = 0;
    std::string special_text;
    Texts texts;
    if (!f->tokenizer.empty()) {
      std::string path = f->tokenizer;
      std::optional<TokenizerSettings> settings;
      if (io::is_directory(path)) {
        // A directory is read as AutoTokenizer reads it: tokenizer.json with what tokenizer_config.json changes.
        path += "/tokenizer.json";
        if (!io::path_exists(path)) fail("{}: no tokenizer.json in this directory", f->tokenizer);
        settings = read_tokenizer_settings(f->tokenizer);
      }
      const bool configured = settings && !settings->config_file.empty();
      auto json = std::make_shared<const data::tok::Tokenizer>(
          data::tok::read_configured_tokenizer(path, configured ? &settings->config : nullptr,
                                               configured ? settings->config_file : std::string()),
          path);
      texts = read_texts(f->input);
      specials = f->add_special_tokens ? json->added_special_tokens(texts.any_pair) : 0;
      special_text = fmt::format("the {} special tokens that {} adds to {}", specials, path,
                                 texts.any_pair ? "a pair" : "a text");
      const bool add = f->add_special_tokens;
      encode_batch = [json, options, add](std::span<const data::TextInput> inputs, int threads) {
        return json->encode_batch(inputs, options, add, threads);
      };
    } else {
      if (f->offsets) fail("--offsets needs --tokenizer (a tokenizer.json)");
      if (!f->add_special_tokens) fail("--add-special-tokens false needs --tokenizer (a tokenizer.json)");
      data::WordPieceOptions tokenizer_options;
      tokenizer_options.lowercase = f->lowercase;
      tokenizer_options.strip_accents = f->strip_accents;
      tokenizer_options.tokenize_chinese_chars = f->chinese;
      auto wordpiece = std::make_shared<const data::WordPieceTokenizer>(
          data::WordPieceTokenizer::from_file(f->vocab, tokenizer_options));
      texts = read_texts(f->input);
      specials = texts.any_pair ? 3 : 2;
      special_text = fmt::format("the {} special tokens of {}", specials,
                                 texts.any_pair ? "a pair ([CLS] A [SEP] B [SEP])" : "[CLS] A [SEP]");
      encode_batch = [wordpiece, options](std::span<const data::TextInput> inputs, int threads) {
        return wordpiece->encode_batch(inputs, options, threads);
      };
    }
    if (options.truncate_to > 0 && options.truncate_to < specials)
      fail("--max-length {} is shorter than {}", options.truncate_to, special_text);

    const std::string name = f->input == "-" ? "<stdin>" : f->input;
    if (texts.blank_lines > 0)
      fmt::print(stderr, "note: skipped {} blank line{} of {}\n", texts.blank_lines, texts.blank_lines == 1 ? "" : "s",
                 name);
    if (texts.empty_texts > 0)
      fmt::print(stderr, "note: {} empty text{} (the first at line {} of {}), encoded as Hugging Face does{}\n",
                 texts.empty_texts, texts.empty_texts == 1 ? "" : "s", texts.first_empty_line, name,
                 f->tokenizer.empty() ? " ([CLS] [SEP])" : "");

    const int threads = f->threads > 0 ? f->threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (f->benchmark) return run_benchmark(encode_batch, texts, threads);
    print_encodings(encode_batch(texts.inputs, threads), f->offsets);
    return 0;
  };
}

}  // namespace anatomy::cli
