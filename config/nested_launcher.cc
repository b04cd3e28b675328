#include "config/nested_launcher.h"

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

}  // namespace

NestedLauncher DetectNestedLauncher(const std::vector<std::string>& argv) {
  size_t i = 0;
  // `env [-i] [-u NAME] [NAME=VALUE]... COMMAND`.
  if (!argv.empty() && Basename(argv[0]) == "env") {
    for (i = 1; i < argv.size(); ++i) {
      absl::string_view arg = argv[i];
      if (arg == "-u" || arg == "--unset" || arg == "-C" || arg == "--chdir") {
        ++i;
      } else if (arg == "--") {
        ++i;
        break;
      } else if (arg == "-S" || absl::StartsWith(arg, "--split-string") ||
                 (absl::StartsWith(arg, "-") && absl::StrContains(arg, 'S') &&
                  !absl::StartsWith(arg, "--"))) {
        return NestedLauncher::kNone;  // a command line in one word.
      } else if (!absl::StartsWith(arg, "-") && !absl::StrContains(arg, '=')) {
        break;
      }
    }
  }
  if (i >= argv.size()) return NestedLauncher::kNone;
  const absl::string_view program = Basename(argv[i]);
  if (program == "fleetrun") return NestedLauncher::kPaddle;  // paddle.distributed.fleet.launch
  if (!IsPythonInterpreter(program)) return NestedLauncher::kNone;
  std::string module;
  for (++i; i < argv.size() && module.empty(); ++i) {
    absl::string_view arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") break;  // a script, "-" or the end.
    if (arg[1] == '-') {
      if (arg == "--check-hash-based-pycs") ++i;  // the only long option with a value.
      continue;
    }
    // Single-letter options, maybe combined ("-um"): -c ends them; -m, -W and
    // -X take the rest of the word, else the next one.
    bool done = false;
    for (size_t k = 1; k < arg.size() && !done; ++k) {
      const char opt = arg[k];
      if (opt == 'c') return NestedLauncher::kNone;
      if (opt != 'm' && opt != 'W' && opt != 'X') continue;
      std::string value(arg.substr(k + 1));
      if (value.empty() && i + 1 < argv.size()) value = argv[++i];
      if (opt == 'm') {
        if (value.empty()) return NestedLauncher::kNone;
        module = value;
      }
      done = true;
    }
    if (!module.empty()) break;
  }
  return module == "paddle.distributed.launch" || module == "paddle.distributed.fleet.launch"
             ? NestedLauncher::kPaddle
             : NestedLauncher::kNone;
}

}  // namespace trainlet::agent
