// tokenizer_config.h: what a model directory's tokenizer_config.json changes in
// its tokenizer.json, as transformers 5's AutoTokenizer applies it.
//
// AutoTokenizer reads tokenizer.json and then lets the class that
// tokenizer_config.json names rebuild parts of the pipeline from the config's
// keys (transformers 5, checked against 5.24 case by case):
//   BertTokenizer, DistilBertTokenizer, ElectraTokenizer (and their *Fast
//   names), over a WordPiece model: the normalizer becomes BertNormalizer
//   (clean_text; handle_chinese_chars = tokenize_chinese_chars, default true;
//   strip_accents, default null; lowercase = do_lower_case, default true), the
//   pre-tokenizer BertPreTokenizer, the post-processor
//   "cls_token $A sep_token" / "cls_token $A sep_token $B:1 sep_token:1"
//   (defaults [CLS], [SEP]).
//   RobertaTokenizer (and RobertaTokenizerFast): the post-processor becomes
//   RobertaProcessing
//   with sep_token, cls_token, trim_offsets and add_prefix_space (defaults
//   </s>, <s>, true, false); a ByteLevel pre-tokenizer takes add_prefix_space.
//   GPT2Tokenizer: a ByteLevel pre-tokenizer takes add_prefix_space, when the
//   config has it.
//   Every class: pad_token names the padding token.
// Other classes keep the file's pipeline. DebertaV2Tokenizer and
// XLMRobertaTokenizer are left as the file has them on purpose: transformers 5
// rebuilds their normalizers without the file's SentencePiece character map
// (Precompiled), so that, for example, "ﬁ" is no longer "fi"; the `tokenizers`
// library, transformers 4 and this program follow the file.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace anatomy::data::tok {

// Rewrites `tokenizer` (a tokenizer.json document) as `config` (tokenizer_config.json's object) asks; a special
// token the vocabulary lacks, or a key of the wrong type, is one error naming `config_path` and the key.
void apply_tokenizer_config(nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& config_path);
// The tokenizer.json at `path` (Tokenizer::read_document), rebuilt as `config` asks when it is an object.
nlohmann::json read_configured_tokenizer(const std::string& path, const nlohmann::json* config,
                                         const std::string& config_path);

}  // namespace anatomy::data::tok
