#include "agent/warm_workers.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/worker_env.h"
#include "common/logging.h"

namespace trainlet::agent {
namespace {

absl::string_view NameOf(absl::string_view entry) { return entry.substr(0, entry.find('=')); }

bool IsRoundVariable(absl::string_view entry) {
  static const auto* const kNames = [] {
    auto* names = new std::set<std::string, std::less<>>;
    for (const std::string& name : RoundVariableNames()) names->insert(name);
    return names;
  }();
  return kNames->count(NameOf(entry)) > 0;
}

// `env` without the round's variables: what a standby is prepared with.
std::vector<std::string> StaticEnv(const std::vector<std::string>& env) {
  std::vector<std::string> out;
  for (const std::string& entry : env) {
    if (!IsRoundVariable(entry)) out.push_back(entry);
  }
  return out;
}

// The -c program: reads the standby program (exactly `size` bytes) from the
// control socket, where the agent put it before the process started, and
// runs it in __main__ (which it then cleans for the script).
std::string Loader(size_t size) {
  return absl::StrCat("import os\nb=b''\nwhile len(b)<", size, ":\n c=os.read(3,", size,
                      "-len(b))\n if not c:raise SystemExit(1)\n b+=c\nexec(b)\n");
}

}  // namespace

const std::string& StandbyBoot() {
  static const auto* const kBoot = new std::string(
#include "agent/warm_bootstrap.inc"
  );
  return *kBoot;
}

std::string WhyNotWarmable(const std::vector<std::string>& argv) {
  std::optional<PythonCommand> python = ParsePythonCommand(argv);
  if (!python.has_value()) {
    return "COMMAND is not a Python interpreter (python[3] [OPTIONS] SCRIPT|-m MODULE ...)";
  }
  switch (python->target) {
    case PythonCommand::Target::kScript:
    case PythonCommand::Target::kModule:
      break;
    case PythonCommand::Target::kCode:
      return "COMMAND runs `python -c CODE`, not a script or module";
    case PythonCommand::Target::kStdin:
      return "COMMAND runs a program from stdin";
    case PythonCommand::Target::kNone:
      return "COMMAND runs no script or module";
  }
  for (const std::string& option : python->options) {
    // -i: an interactive prompt after the script; -x: skip the first line
    // (a standby would have to repeat how the interpreter reads the file).
    if (option.size() >= 2 && option[0] == '-' && option[1] != '-' &&
        option.find_first_of("WX") == std::string::npos &&
        option.find_first_of("ix") != std::string::npos) {
      return absl::StrCat("COMMAND's interpreter option ", option, " is not supported warm");
    }
  }
  if (!python->env_unknown_option.empty()) {
    return absl::StrCat("COMMAND's env(1) option ", python->env_unknown_option,
                        " is not supported warm");
  }
  return "";
}

std::vector<std::string> EnvAsInterpreterSees(const std::vector<std::string>& env,
                                              const PythonCommand& command) {
  if (command.launcher.size() <= 1) return env;  // no `env` prefix.
  std::vector<std::string> out;
  if (!command.env_clears) {
    for (const std::string& entry : env) {
      const absl::string_view name = NameOf(entry);
      if (std::find(command.env_unsets.begin(), command.env_unsets.end(), name) ==
          command.env_unsets.end()) {
        out.push_back(entry);
      }
    }
  }
  for (const std::string& set : command.env_sets) {
    const absl::string_view name = NameOf(set);
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&](const std::string& e) { return NameOf(e) == name; }),
              out.end());
    out.push_back(set);
  }
  return out;
}

launcher::ProcessSpec StandbySpecFor(const launcher::ProcessSpec& worker,
                                     const PythonCommand& command, const std::string& preload) {
  launcher::ProcessSpec standby = worker;
  standby.from_standby = false;
  standby.standby_env.clear();
  standby.argv = command.launcher;
  standby.argv.insert(standby.argv.end(), command.options.begin(), command.options.end());
  standby.argv.push_back("-c");
  standby.argv.push_back(Loader(StandbyBoot().size()));
  standby.argv.push_back(command.target == PythonCommand::Target::kModule ? "--module"
                                                                          : "--script");
  standby.argv.push_back(command.target_name);
  standby.argv.push_back(preload);
  standby.argv.insert(standby.argv.end(), command.args.begin(), command.args.end());
  standby.env = StaticEnv(worker.env);
  return standby;
}

WarmWorkers::WarmWorkers(const RunConfig& config) {
  if (!config.warm_workers) return;
  const std::string why = WhyNotWarmable(config.command);
  if (!why.empty()) {
    TLOG(kInfo) << "warm workers: off: " << why << "; workers start cold";
    return;
  }
  command_ = ParsePythonCommand(config.command);
  preload_ = config.preload.empty() ? "auto" : absl::StrJoin(config.preload, ",");
  enabled_ = true;
}

WarmWorkers::Prepared WarmWorkers::PreparedFor(const launcher::ProcessSpec& worker) {
  Prepared p;
  p.argv = worker.argv;
  p.static_env = StaticEnv(worker.env);
  p.cpus = worker.cpus;
  p.numa_node = worker.numa_node;
  return p;
}

std::string WarmWorkers::Mismatch(const Prepared& prepared, const launcher::ProcessSpec& worker) {
  const Prepared now = PreparedFor(worker);
  if (now.argv != prepared.argv) return "COMMAND changed";
  if (now.cpus != prepared.cpus || now.numa_node != prepared.numa_node) {
    return absl::StrCat("local rank ", worker.local_rank, "'s CPU or NUMA binding changed");
  }
  if (now.static_env != prepared.static_env) {
    // Name the first variable that differs.
    std::set<std::string> before(prepared.static_env.begin(), prepared.static_env.end());
    std::set<std::string> after(now.static_env.begin(), now.static_env.end());
    std::vector<std::string> changed;
    for (const std::string& e : after) {
      if (before.count(e) == 0) changed.emplace_back(NameOf(e));
    }
    for (const std::string& e : before) {
      if (after.count(e) == 0) changed.emplace_back(NameOf(e));
    }
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    return absl::StrCat("local rank ", worker.local_rank, "'s environment changed (",
                        absl::StrJoin(changed, ", "), ")");
  }
  return "";
}

void WarmWorkers::BeforeStart(std::vector<launcher::ProcessSpec>* specs,
                              launcher::WorkerGroup* group) {
  // Standbys not started yet (the round ended within kStartDelay): none.
  pending_.clear();
  pending_due_ = absl::InfiniteFuture();
  if (!enabled_ || prepared_.empty()) return;
  std::string why;
  int workers = 0;
  for (const launcher::ProcessSpec& spec : *specs) {
    if (spec.role == launcher::ProcessRole::kWorker) ++workers;
  }
  if (workers != static_cast<int>(prepared_.size())) {
    why = absl::StrCat("this round has ", workers, " local worker", workers == 1 ? "" : "s",
                       ", the standbys were for ", prepared_.size());
  }
  for (const launcher::ProcessSpec& spec : *specs) {
    if (!why.empty()) break;
    if (spec.role != launcher::ProcessRole::kWorker) continue;
    auto it = prepared_.find(spec.local_rank);
    why = it == prepared_.end() ? absl::StrCat("no standby for local rank ", spec.local_rank)
                                : Mismatch(it->second, spec);
  }
  prepared_.clear();
  if (!why.empty()) {
    group->DropStandbys(absl::StrCat(why, "; this round starts cold"));
    return;
  }
  for (launcher::ProcessSpec& spec : *specs) {
    if (spec.role != launcher::ProcessRole::kWorker) continue;
    spec.from_standby = true;
    if (command_->launcher.size() > 1) spec.standby_env = EnvAsInterpreterSees(spec.env, *command_);
  }
}

void WarmWorkers::AfterStart(const std::vector<launcher::ProcessSpec>& specs,
                             launcher::WorkerGroup* group, absl::Time now) {
  if (!enabled_) return;
  prepared_.clear();
  for (const launcher::ProcessSpec& spec : specs) {
    if (spec.foreground_tty) {
      TLOG(kInfo) << "warm workers: off: the worker is given the terminal (its stdin and line "
                     "buffering are the terminal's); workers start cold";
      enabled_ = false;
      return;
    }
  }
  pending_ = specs;
  pending_due_ = now + kStartDelay;
  Tick(now, group);
}

void WarmWorkers::Tick(absl::Time now, launcher::WorkerGroup* group) {
  if (!enabled_ || pending_.empty() || now < pending_due_) return;
  std::vector<launcher::ProcessSpec> specs = std::move(pending_);
  pending_.clear();
  pending_due_ = absl::InfiniteFuture();
  for (const launcher::ProcessSpec& spec : specs) {
    if (spec.role != launcher::ProcessRole::kWorker) continue;
    absl::Status started =
        group->StartStandby(StandbySpecFor(spec, *command_, preload_), StandbyBoot());
    if (!started.ok()) {
      TLOG(kWarning) << "warm workers: off: cannot start a standby for local rank "
                     << spec.local_rank << ": " << started.message() << "; workers start cold";
      group->DropStandbys("");
      prepared_.clear();
      enabled_ = false;
      return;
    }
    prepared_[spec.local_rank] = PreparedFor(spec);
  }
}

}  // namespace trainlet::agent
