#include "config/python_command.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace trainlet::agent {
namespace {

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// "python", "python3", "python3.11" (not "python3-config").
bool IsPythonInterpreter(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "python")) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.';
  });
}

// Reads an `env` prefix into `out`; returns the index of its COMMAND, or
// argv.size() when there is none, or -1 when env splits a command line.
long ReadEnvPrefix(const std::vector<std::string>& argv, PythonCommand* out) {
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-u" || arg == "--unset" || arg == "-C" || arg == "--chdir") {
      if (i + 1 >= argv.size()) return static_cast<long>(argv.size());
      (arg == "-u" || arg == "--unset" ? out->env_unsets.push_back(argv[i + 1])
                                       : void(out->env_chdir = argv[i + 1]));
      ++i;
    } else if (absl::StartsWith(arg, "--unset=")) {
      out->env_unsets.push_back(std::string(arg.substr(8)));
    } else if (absl::StartsWith(arg, "--chdir=")) {
      out->env_chdir = std::string(arg.substr(8));
    } else if (arg == "-i" || arg == "--ignore-environment" || arg == "-") {
      out->env_clears = true;
    } else if (arg == "--") {
      return static_cast<long>(i + 1);
    } else if (arg == "-S" || absl::StartsWith(arg, "--split-string") ||
               (absl::StartsWith(arg, "-") && absl::StrContains(arg, 'S') &&
                !absl::StartsWith(arg, "--"))) {
      return -1;  // a command line in one word.
    } else if (absl::StartsWith(arg, "-")) {
      if (out->env_unknown_option.empty()) out->env_unknown_option = std::string(arg);
    } else if (absl::StrContains(arg, '=')) {
      out->env_sets.push_back(std::string(arg));
    } else {
      break;
    }
  }
  return static_cast<long>(i);
}

}  // namespace

std::string ProgramAfterEnv(const std::vector<std::string>& argv) {
  if (argv.empty()) return "";
  size_t i = 0;
  if (Basename(argv[0]) == "env") {
    PythonCommand ignored;
    long at = ReadEnvPrefix(argv, &ignored);
    if (at < 0) return "";
    i = static_cast<size_t>(at);
  }
  return i < argv.size() ? std::string(Basename(argv[i])) : "";
}

std::optional<PythonCommand> ParsePythonCommand(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  PythonCommand cmd;
  size_t i = 0;
  if (Basename(argv[0]) == "env") {
    long at = ReadEnvPrefix(argv, &cmd);
    if (at < 0) return std::nullopt;
    i = static_cast<size_t>(at);
  }
  if (i >= argv.size() || !IsPythonInterpreter(Basename(argv[i]))) return std::nullopt;
  cmd.launcher.assign(argv.begin(), argv.begin() + static_cast<long>(i) + 1);
  for (++i; i < argv.size(); ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-") {
      cmd.target = PythonCommand::Target::kStdin;
      ++i;
      break;
    }
    if (arg == "--") {  // the script follows, whatever it looks like.
      if (++i < argv.size()) {
        cmd.target = PythonCommand::Target::kScript;
        cmd.target_name = argv[i++];
      }
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {  // the script.
      cmd.target = PythonCommand::Target::kScript;
      cmd.target_name = std::string(arg);
      ++i;
      break;
    }
    if (arg[1] == '-') {
      cmd.options.push_back(std::string(arg));
      // The only long option with a value.
      if (arg == "--check-hash-based-pycs" && i + 1 < argv.size()) cmd.options.push_back(argv[++i]);
      continue;
    }
    // Single-letter options, maybe combined ("-um"): -c and -m end them with
    // the rest of the word or the next one as their value; -W and -X take the
    // rest of the word, else the next one.
    size_t k = 1;
    while (k < arg.size() && arg[k] != 'c' && arg[k] != 'm' && arg[k] != 'W' && arg[k] != 'X') ++k;
    if (k == arg.size()) {  // flags only ("-u", "-OO").
      cmd.options.push_back(std::string(arg));
      continue;
    }
    const bool value_in_word = k + 1 < arg.size();
    if (arg[k] == 'W' || arg[k] == 'X') {
      cmd.options.push_back(std::string(arg));
      if (!value_in_word && i + 1 < argv.size()) cmd.options.push_back(argv[++i]);
      continue;
    }
    if (k > 1) cmd.options.push_back(std::string(arg.substr(0, k)));
    std::string value(arg.substr(k + 1));
    if (!value_in_word) {
      if (i + 1 >= argv.size()) return cmd;  // Python refuses it; nothing to run.
      value = argv[++i];
    }
    cmd.target = arg[k] == 'c' ? PythonCommand::Target::kCode : PythonCommand::Target::kModule;
    cmd.target_name = std::move(value);
    ++i;
    break;
  }
  for (; i < argv.size(); ++i) cmd.args.push_back(argv[i]);
  return cmd;
}

}  // namespace trainlet::agent
