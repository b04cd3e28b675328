// The coordinator's options from either configuration that can host one:
// RunConfig (node rank 0's agent) or CoordinatorConfig (standalone). Both
// carry the same job and elastic fields under the same names; every value
// comes from the config (whose defaults are its option table's), none from
// rendezvous::CoordinatorOptions itself.
#ifndef TRAINLET_CONFIG_COORDINATOR_OPTIONS_H_
#define TRAINLET_CONFIG_COORDINATOR_OPTIONS_H_

#include "config/options.h"
#include "rendezvous/coordinator.h"

namespace trainlet::agent {

template <typename Config>
rendezvous::CoordinatorOptions CoordinatorOptionsFrom(const Config& config) {
  rendezvous::CoordinatorOptions o;
  o.job_id = config.job_id;
  o.min_nodes = config.nnodes.min;
  o.max_nodes = config.nnodes.max;
  o.max_restarts = config.policy.max_restarts;
  o.last_call = config.policy.last_call;
  o.heartbeat_timeout = config.policy.heartbeat_timeout;
  o.min_nodes_timeout = config.policy.min_nodes_timeout;
  o.release_streams_from = config.policy.release_streams_from;
  o.preflight = config.policy.preflight;
  o.quarantine = config.policy.quarantine;
  o.preflight_min_bandwidth = config.policy.preflight_min_bandwidth;
  o.slow_nodes = config.policy.slow_nodes;
  o.slow_node_threshold = config.policy.slow_node_threshold;
  o.slow_node_window = config.policy.slow_node_window;
  o.incarnation = rendezvous::NewIncarnation();
  return o;
}

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_COORDINATOR_OPTIONS_H_
