// Whether the worker command is itself a launcher that starts the
// per-device processes (PaddlePaddle's `paddle.distributed.launch`), read
// from its argv: such a command gets node-level variables only
// (agent/worker_env.h), and `--nproc-per-node` defaults to 1 for it
// (config/run_config.h).
//
// Pure function; thread-compatible.
#ifndef TRAINLET_CONFIG_NESTED_LAUNCHER_H_
#define TRAINLET_CONFIG_NESTED_LAUNCHER_H_

#include <string>
#include <vector>

namespace trainlet::agent {

// A launcher that the worker command is itself, which starts the per-device
// processes and so must get node-level variables only.
enum class NestedLauncher {
  kNone,
  kPaddle,  // python -m paddle.distributed.launch
};

// kPaddle for `python[3[.N]] [OPTIONS] -m paddle.distributed.launch ...` and
// `-m paddle.distributed.fleet.launch` (also "-mMODULE" and combined
// options such as "-um MODULE"), for `fleetrun ...`, and for either behind
// `env [-i] [-u NAME] [NAME=VALUE]...`; programs are matched by basename.
// kNone otherwise, including commands wrapped in a shell.
NestedLauncher DetectNestedLauncher(const std::vector<std::string>& argv);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_NESTED_LAUNCHER_H_
