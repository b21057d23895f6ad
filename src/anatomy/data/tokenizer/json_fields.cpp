// json_fields.cpp: see json_fields.h.
#include "anatomy/data/tokenizer/json_fields.h"

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/io/json.h"

namespace anatomy::data::tok {

const char* json_kind(const nlohmann::json& value) {
  return value.is_string() ? "a string" : value.is_boolean() ? "a boolean" : value.is_number() ? "a number"
       : value.is_array() ? "an array" : value.is_object() ? "an object" : "null";
}

std::string short_dump(const nlohmann::json& value) { return io::short_dump(value); }

std::string short_text(std::string_view text) {
  size_t cut = text.size();
  if (cut > 40) {
    cut = 40;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  }
  // Control characters as escapes: an error stays one line.
  std::string out;
  for (const char c : text.substr(0, cut)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7F) out += fmt::format("\\x{:02X}", u);
    else out += c;
  }
  return cut < text.size() ? out + "..." : out;
}

const nlohmann::json* optional_field(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

const nlohmann::json& required_field(const nlohmann::json& object, const char* name, const std::string& where) {
  if (!object.is_object()) fail("{}: expected an object, got {}", where, json_kind(object));
  const nlohmann::json* field = optional_field(object, name);
  if (field == nullptr) fail("{}: no \"{}\"", where, name);
  return *field;
}

std::string string_field(const nlohmann::json& object, const char* name, const std::string& where,
                         const std::string& fallback) {
  const nlohmann::json* field = optional_field(object, name);
  if (field == nullptr || field->is_null()) return fallback;
  if (!field->is_string()) fail("{}: \"{}\" must be a string, got {}", where, name, short_dump(*field));
  return field->get<std::string>();
}

bool bool_field(const nlohmann::json& object, const char* name, const std::string& where, bool fallback) {
  const nlohmann::json* field = optional_field(object, name);
  if (field == nullptr || field->is_null()) return fallback;
  if (!field->is_boolean()) fail("{}: \"{}\" must be true or false, got {}", where, name, short_dump(*field));
  return field->get<bool>();
}

size_t size_field(const nlohmann::json& object, const char* name, const std::string& where, size_t fallback) {
  const nlohmann::json* field = optional_field(object, name);
  if (field == nullptr || field->is_null()) return fallback;
  if (!field->is_number_unsigned() && !(field->is_number_integer() && field->get<int64_t>() >= 0))
    fail("{}: \"{}\" must be a non-negative integer, got {}", where, name, short_dump(*field));
  return field->get<size_t>();
}

}  // namespace anatomy::data::tok
