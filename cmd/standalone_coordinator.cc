#include "cmd/standalone_coordinator.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "config/coordinator_options.h"
#include "config/options.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"
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
  // The signal-handling part of the supervisor: no workers here.
  auto events = launcher::Supervisor::Create({});
  if (!events.ok()) {
    TLOG(kError) << events.status().message();
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
  int exit_code = kExitSuccess;
  while (true) {
    launcher::Supervisor::Event ev = (*events)->Wait(absl::Milliseconds(100));
    if (ev.type == launcher::Supervisor::EventType::kSignal &&
        launcher::IsTerminatingSignal(ev.signal)) {
      TLOG(kInfo) << "received signal " << ev.signal << "; shutting down";
      exit_code = kExitSignalBase + ev.signal;
      break;
    }
    if (core.Drained()) {
      rendezvous::Coordinator::Snapshot s = core.GetSnapshot();
      if (s.phase == rendezvous::Phase::kSucceeded) {
        exit_code = kExitSuccess;
      } else {
        exit_code = s.restarts_exhausted ? kExitRestartsExhausted : kExitPeerFailed;
      }
      break;
    }
  }
  (*host)->Shutdown(absl::Milliseconds(200));
  if (health) health->Shutdown();
  TLOG(kInfo) << "exiting with code " << exit_code;
  return exit_code;
}

}  // namespace trainlet::agent
