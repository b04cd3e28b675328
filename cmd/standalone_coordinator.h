// `trainlet coordinator`: the rendezvous coordinator as its own process (for
// jobs where no pod should host it, or for tests). Serves until the job has
// a verdict and every agent heard it, or until SIGTERM/SIGINT.
#ifndef TRAINLET_CMD_STANDALONE_COORDINATOR_H_
#define TRAINLET_CMD_STANDALONE_COORDINATOR_H_

#include "config/coordinator_config.h"

namespace trainlet::agent {

// Exit code: 0 when the job succeeded, 75 when it failed, 79 when its
// restart budget ran out, 71 when it cannot listen (port taken, address not
// local, too few descriptors), 128+N on signal N.
int RunStandaloneCoordinator(const CoordinatorConfig& config);

}  // namespace trainlet::agent

#endif  // TRAINLET_CMD_STANDALONE_COORDINATOR_H_
