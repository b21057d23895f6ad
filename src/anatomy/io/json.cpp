// json.cpp: the nesting check and the parse of outside JSON (json.h).
#include "anatomy/io/json.h"

#include "anatomy/core/error.h"

namespace anatomy::io {

void check_json_depth(std::string_view text, const std::string& source) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        fail("{}: JSON nested more than {} levels deep (at byte {})", source, kMaxJsonDepth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  check_json_depth(text, source);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", source, e.what());
  }
}

std::string short_dump(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

}  // namespace anatomy::io
