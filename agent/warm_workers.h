// WarmWorkers: `--warm-workers` (docs/warm-workers.md). While a round's
// workers run, one standby Python interpreter per local rank waits with the
// round's static environment and --preload's modules imported; when the next
// round starts, each worker whose standby was prepared exactly as that
// worker would start becomes it (launcher/standby_pool.h hands over the
// round's variables and stdout/stderr) instead of starting cold.
//
//   off (not asked, or COMMAND cannot be warmed: one line why, once)
//   on:  no standbys -AfterStart()-> pending -Tick(), kStartDelay later->
//          ^                         standbys prepared for these specs
//          |                                  |
//          |              BeforeStart(next specs): same argv, static env
//          |              and placement? yes: from_standby; no: dropped,
//          +------------- one INFO line why, the round starts cold
//
// What "prepared exactly" compares: the COMMAND, the local world size, each
// worker's environment without RoundVariableNames() (worker_env.h) and its
// CPU and NUMA placement. The standby is the same interpreter with the same
// options, cwd, rlimits, umask, process group and PDEATHSIG as a cold
// worker; agent/warm_bootstrap.py makes sys.argv, sys.path[0], __main__ and
// the environment a cold worker's.
//
// Threading: the executor's thread only.
#ifndef TRAINLET_AGENT_WARM_WORKERS_H_
#define TRAINLET_AGENT_WARM_WORKERS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "config/python_command.h"
#include "config/run_config.h"
#include "launcher/worker.h"
#include "launcher/worker_group.h"

namespace trainlet::agent {

// Why `argv` cannot be warmed, or "" when it can (a Python interpreter
// running a script or -m module, behind `env` with -i, -u, -C and
// NAME=VALUE at most).
std::string WhyNotWarmable(const std::vector<std::string>& argv);

// The standby of a worker: `worker` with its argv rewritten to run the
// standby program (loader in -c; `boot` holds the rest) with `preload`
// ("auto" or "a,b"), its environment without the round's variables, and
// from_standby false. `command` must be warmable.
launcher::ProcessSpec StandbySpecFor(const launcher::ProcessSpec& worker,
                                     const PythonCommand& command, const std::string& preload);

// The program a standby reads from its socket (agent/warm_bootstrap.py).
const std::string& StandbyBoot();

// The environment `env` as the interpreter behind the command's `env`
// prefix sees it (-i, -u NAME, NAME=VALUE applied); `env` itself without one.
std::vector<std::string> EnvAsInterpreterSees(const std::vector<std::string>& env,
                                              const PythonCommand& command);

class WarmWorkers {
 public:
  // Off unless config.warm_workers; then off with one INFO line when the
  // COMMAND cannot be warmed, or (at the first AfterStart) when the worker
  // is given the terminal: its stdin and line buffering are the terminal's.
  explicit WarmWorkers(const RunConfig& config);

  bool enabled() const { return enabled_; }

  // Before a round's Start(): marks each spec from_standby when the
  // standbys were prepared as these workers start (with the environment
  // the interpreter is to see), else drops them with one INFO line why.
  void BeforeStart(std::vector<launcher::ProcessSpec>* specs, launcher::WorkerGroup* group);
  // After the round's workers started: standbys for the next round, started
  // by Tick() kStartDelay after `now`, so that their interpreters' start
  // (at the pod's priority; only the preload runs at nice 19) does not
  // compete with the new workers' and the other agents' restart.
  static constexpr absl::Duration kStartDelay = absl::Seconds(1);
  void AfterStart(const std::vector<launcher::ProcessSpec>& specs, launcher::WorkerGroup* group,
                  absl::Time now);
  // Starts the pending standbys once due; when Tick() is next needed.
  void Tick(absl::Time now, launcher::WorkerGroup* group);
  absl::Time NextDeadline() const { return pending_due_; }

 private:
  struct Prepared {
    std::vector<std::string> argv;
    std::vector<std::string> static_env;
    std::vector<int> cpus;
    int numa_node = -1;
  };
  // Why the standby prepared as `prepared` cannot become `worker`, or "".
  static std::string Mismatch(const Prepared& prepared, const launcher::ProcessSpec& worker);
  static Prepared PreparedFor(const launcher::ProcessSpec& worker);

  bool enabled_ = false;
  std::optional<PythonCommand> command_;
  std::string preload_;                         // "auto" or "a,b"
  std::map<int, Prepared> prepared_;            // by local rank, of the standbys started
  std::vector<launcher::ProcessSpec> pending_;  // AfterStart's, until Tick() starts them
  absl::Time pending_due_ = absl::InfiniteFuture();
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_WARM_WORKERS_H_
