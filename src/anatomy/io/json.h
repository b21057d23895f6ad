// json.h: reading JSON that comes from outside (config.json, safetensors
// headers and indexes, trainer_state.json, tokenizer_config.json, JSON-lines
// data): one error line naming the source for anything that is not JSON the
// engine can hold, never a crash.
//
// nlohmann::json parses without recursion, but copies, compares and dumps
// recursively: a document nested thousands of levels deep overflows the
// stack the first time it is copied or printed in an error message. So the
// nesting is checked, without recursion, before parsing.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace anatomy::io {

// The deepest nesting of arrays and objects accepted: far above any
// configuration, header or record the engine reads.
constexpr int kMaxJsonDepth = 100;

// Fails, naming `source`, where `text` nests arrays and objects deeper than
// kMaxJsonDepth (brackets inside strings do not count).
void check_json_depth(std::string_view text, const std::string& source);

// Parses `text`: too deep, not JSON, or a number beyond a double's range
// (1e400) is one error: "<source>: not valid JSON (...)".
nlohmann::json parse_json(std::string_view text, const std::string& source);

// `value` as JSON text for an error message, cut to about 40 characters.
std::string short_dump(const nlohmann::json& value);

}  // namespace anatomy::io
