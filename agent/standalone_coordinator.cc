#include "agent/standalone_coordinator.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "agent/coordinator_options.h"
#include "agent/options.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/periodic.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_server.h"

namespace trainlet::agent {

int RunStandaloneCoordinator(const CoordinatorConfig& config) {
  SetLogPrefix("coordinator");
  rendezvous::Coordinator core(CoordinatorOptionsFrom(config));
  rendezvous::CoordinatorService service(&core, config.token);
  // The signal-handling part of the supervisor: no workers here.
  auto events = launcher::Supervisor::Create({});
  if (!events.ok()) {
    TLOG(kError) << events.status().message();
    return kExitOsError;
  }
  auto server =
      rendezvous::GrpcServer::Start({JoinHostPort(config.bind_addr, config.port)}, {&service});
  if (!server.ok()) {
    TLOG(kError) << server.status().message();
    return kExitOsError;
  }
  (*server)->SetServing(true);
  PeriodicThread ticker(absl::Milliseconds(20), [&core] { core.Tick(); });
  TLOG(kInfo) << "coordinator for job " << config.job_id << " listening on "
              << JoinHostPort(config.bind_addr, (*server)->port(0)) << ", "
              << NnodesToString(config.nnodes) << " nodes";
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
  core.Shutdown("coordinator exiting");
  (*server)->Shutdown(absl::Milliseconds(200));
  TLOG(kInfo) << "exiting with code " << exit_code;
  return exit_code;
}

}  // namespace trainlet::agent
