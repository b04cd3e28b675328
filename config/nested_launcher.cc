#include "config/nested_launcher.h"

#include "config/python_command.h"

namespace trainlet::agent {

NestedLauncher DetectNestedLauncher(const std::vector<std::string>& argv) {
  if (ProgramAfterEnv(argv) == "fleetrun") return NestedLauncher::kPaddle;
  std::optional<PythonCommand> python = ParsePythonCommand(argv);
  if (!python.has_value() || python->target != PythonCommand::Target::kModule) {
    return NestedLauncher::kNone;
  }
  const std::string& module = python->target_name;
  return module == "paddle.distributed.launch" || module == "paddle.distributed.fleet.launch"
             ? NestedLauncher::kPaddle
             : NestedLauncher::kNone;
}

}  // namespace trainlet::agent
