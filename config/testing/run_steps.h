// For the resolvers' own tests (config/resolve_*_test.cc): a command line
// parsed against the option table, then RunConfigFromOptions()'s steps
// (run_resolvers.h) run one by one up to the one a test looks at.
#ifndef TRAINLET_CONFIG_TESTING_RUN_STEPS_H_
#define TRAINLET_CONFIG_TESTING_RUN_STEPS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "config/mpi_config.h"
#include "config/options.h"
#include "config/run_config.h"
#include "config/run_resolvers.h"
#include "config/system_probe.h"

namespace trainlet::agent::testing {

// A workstation: 8 CPUs, no GPU, no probe.
inline SystemInfo Workstation() {
  SystemInfo sys;
  sys.hostname = "workstation";
  sys.cpu_count = 8;
  return sys;
}

class RunSteps {
 public:
  // `flags` before `--`; the command is "python train.py" (none for an MPI
  // worker, which takes none).
  explicit RunSteps(std::vector<std::string> flags, std::map<std::string, std::string> env = {},
                    SystemInfo sys = Workstation(), MpiRole role = MpiRole::kNone)
      : env_(std::move(env)),
        sys_(std::move(sys)),
        table_(role == MpiRole::kNone ? RunOptionTable() : MpiOptionTable(role)),
        mode_{"trainlet run", role} {
    if (role != MpiRole::kWorker) {
      for (const char* word : {"--", "python", "train.py"}) flags.push_back(word);
    }
    absl::StatusOr<ParsedOptions> parsed = ParseOptions(table_, flags, env_, mode_.usage);
    parse_status_ = parsed.status();
    if (parsed.ok()) parsed_ = *std::move(parsed);
    in_ = std::make_unique<RunInputs>(RunInputs{parsed_, table_, mode_, env_, sys_});
    config_.command = parsed_.command;
  }

  // Runs the steps before `last` (each must succeed: their status is
  // returned otherwise, with a note), then `last`, and returns its status.
  absl::Status Through(RunStep last) {
    if (!parse_status_.ok()) return parse_status_;
    for (RunStep step : kRunSteps) {
      absl::Status s = step(in_.get(), &config_);
      if (step == last) return s;
      if (!s.ok())
        return absl::InternalError(absl::StrCat("an earlier step failed: ", s.message()));
    }
    return absl::InternalError("not a step of kRunSteps");
  }

  const RunConfig& config() const { return config_; }
  RunConfig& mutable_config() { return config_; }
  const RunInputs& inputs() const { return *in_; }

 private:
  const std::map<std::string, std::string> env_;
  const SystemInfo sys_;
  const std::vector<OptionSpec> table_;
  const RunConfigMode mode_;
  absl::Status parse_status_;
  ParsedOptions parsed_;
  std::unique_ptr<RunInputs> in_;
  RunConfig config_;
};

}  // namespace trainlet::agent::testing

#endif  // TRAINLET_CONFIG_TESTING_RUN_STEPS_H_
