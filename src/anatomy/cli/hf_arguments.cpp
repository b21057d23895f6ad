// hf_arguments.cpp: HfArgumentParser's syntax before CLI11 (see hf_arguments.h).
#include "anatomy/cli/hf_arguments.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>

#include "anatomy/core/error.h"

namespace anatomy::cli {

namespace {

// TrainingArguments' fields (transformers 5.24 and the 4.x names since removed) and run_glue's own arguments.
constexpr const char* kHuggingFaceNames[] = {
#include "anatomy/cli/hf_argument_names.inc"
};

bool is_hugging_face_name(const std::string& dashed) {
  std::string name = dashed;
  std::replace(name.begin(), name.end(), '-', '_');
  return std::any_of(std::begin(kHuggingFaceNames), std::end(kHuggingFaceNames),
                     [&](const char* n) { return name == n; });
}

// transformers' string_to_bool.
std::optional<bool> boolean_word(std::string word) {
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (word == "yes" || word == "true" || word == "t" || word == "y" || word == "1") return true;
  if (word == "no" || word == "false" || word == "f" || word == "n" || word == "0") return false;
  return std::nullopt;
}

const CLI::Option* long_option(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& l : opt->get_lnames())
      if (l == name) return opt;
  return nullptr;
}

}  // namespace

std::vector<std::string> normalize_hf_arguments(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  const CLI::App* command = nullptr;  // the subcommand, once its name is seen
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {  // the rest is another program's (launch)
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (command == nullptr) {
      if (arg.rfind("-", 0) != 0)
        for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
          if (sub->get_name() == arg) command = sub;
      out.push_back(arg);
      continue;
    }
    if (arg.size() <= 2 || arg.rfind("--", 0) != 0) {
      out.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::optional<std::string> attached;
    if (eq != std::string::npos) attached = arg.substr(eq + 1);
    std::string dashed = name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    const CLI::Option* opt = long_option(*command, name);  // as written (--model_name_or_path is a name)
    if (opt != nullptr) dashed = name;
    else opt = long_option(*command, dashed);
    if (opt == nullptr) {
      if (dashed == "help") {  // CLI11's own help flag
        out.push_back(arg);
        continue;
      }
      if (is_hugging_face_name(dashed))
        fail("--{}: a Hugging Face TrainingArguments (or run_glue) option that `anatomy {}` does not support "
             "(`anatomy {} --help` lists what it does)",
             name, command->get_name(), command->get_name());
      fail("--{}: unknown flag of `anatomy {}` (`anatomy {} --help` lists them)", name, command->get_name(),
           command->get_name());
    }
    if (opt->get_expected_max() == 0) {  // a flag: alone, or followed (or joined by '=') by a boolean
      std::optional<bool> value;
      if (attached) {
        value = boolean_word(*attached);
        if (!value) fail("--{}={}: expected true or false", name, *attached);
      } else if (i + 1 < args.size()) {
        value = boolean_word(args[i + 1]);
        if (value) ++i;
      }
      if (!value || *value) out.push_back("--" + dashed);
      continue;
    }
    out.push_back("--" + dashed);
    if (attached) out.push_back(*attached);
  }
  return out;
}

}  // namespace anatomy::cli
