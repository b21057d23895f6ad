// json_fields.h: reading the fields of tokenizer.json's objects, each mistake
// one error that names where the object is (`where`) and the field.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace anatomy::data::tok {

// "a string", "an array", ... for messages.
const char* json_kind(const nlohmann::json& value);
// `value` as JSON, cut for a message.
std::string short_dump(const nlohmann::json& value);
// A string from a file, cut to about 40 characters for a message.
std::string short_text(std::string_view text);

// The field, or nullptr when absent (or `object` is not an object).
const nlohmann::json* optional_field(const nlohmann::json& object, const char* name);
const nlohmann::json& required_field(const nlohmann::json& object, const char* name, const std::string& where);
// Absent or null: `fallback`. Present with another type: an error.
std::string string_field(const nlohmann::json& object, const char* name, const std::string& where,
                         const std::string& fallback);
bool bool_field(const nlohmann::json& object, const char* name, const std::string& where, bool fallback);
size_t size_field(const nlohmann::json& object, const char* name, const std::string& where, size_t fallback);

}  // namespace anatomy::data::tok
