#include "cmd/standalone_coordinator.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "config/coordinator_options.h"
#include "config/options.h"
#include "launcher/signal_wait.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_host.h"
#include "rendezvous/health_server.h"

namespace trainlet::agent {

int RunStandaloneCoordinator(const CoordinatorConfig& config) {
  SetLogPrefix("coordinator");
  // Before any gRPC object exists: a too-low `ulimit -n` is a clear error
  // here, not a hang, an abort inside gRPC or a misleading bind error.
  const int max_nodes = config.nnodes.max;
  if (absl::Status s = CheckDescriptorBudget(
          DescriptorsForCoordinator(max_nodes),
          absl::StrCat(kBaseDescriptors, " for the coordinator and 1 per node, ", max_nodes,
                       " nodes"));
      !s.ok()) {
    TLOG(kError) << s.message();
    return kExitOsError;
  }
  // Serves until a terminating signal or the job's end; no workers here.
  auto signals = launcher::SignalWait::Create();
  if (!signals.ok()) {
    TLOG(kError) << signals.status().message();
    return kExitOsError;
  }
  for (const std::string& warning : config.warnings) TLOG(kWarning) << warning;
  // Plaintext health for kubelet probes (the TLS coordinator port wants a
  // client certificate).
  std::unique_ptr<rendezvous::HealthServer> health;
  if (config.health_port > 0) {
    auto started = rendezvous::HealthServer::Start(config.bind_addr, config.health_port);
    if (!started.ok()) {
      TLOG(kError) << started.status().message() << " (--health-port)";
      return kExitOsError;
    }
    health = std::move(*started);
  }
  rendezvous::CoordinatorHostOptions options;
  options.core = CoordinatorOptionsFrom(config);
  options.token = config.token;
  options.bind_addr = config.bind_addr;
  options.port = config.port;
  options.tls = config.tls;
  auto host = rendezvous::CoordinatorHost::Start(std::move(options));
  if (!host.ok()) {
    TLOG(kError) << host.status().message();
    return kExitOsError;
  }
  rendezvous::Coordinator& core = (*host)->core();
  (*host)->SetServing(true);
  if (health) health->SetServing(true);
  EndingFacts ending;
  while (true) {
    if (const int sig = (*signals)->AwaitTerminatingSignal(absl::Milliseconds(100)); sig != 0) {
      TLOG(kInfo) << "received signal " << sig << "; shutting down";
      ending.ending = Ending::kSignal;
      ending.signal = sig;
      break;
    }
    if (core.Drained()) {
      rendezvous::Coordinator::Snapshot s = core.GetSnapshot();
      ending.ending =
          s.phase == rendezvous::Phase::kSucceeded ? Ending::kJobFinished : Ending::kJobFailed;
      ending.restarts_exhausted = s.restarts_exhausted;
      break;
    }
  }
  (*host)->Shutdown(absl::Milliseconds(200));
  if (health) health->Shutdown();
  const int exit_code = ExitCodeFor(ending);
  TLOG(kInfo) << "exiting with code " << exit_code;
  return exit_code;
}

}  // namespace trainlet::agent
