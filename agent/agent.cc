#include "agent/agent.h"

#include <signal.h>

#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "agent/coordinator_options.h"
#include "agent/options.h"
#include "agent/verdict.h"
#include "agent/worker_env.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/periodic.h"
#include "launcher/command_resolver.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/error_reason.h"
#include "rendezvous/grpc_server.h"

namespace trainlet::agent {
namespace {

namespace v1 = ::trainlet::v1;
using launcher::Supervisor;

// Above this many nodes the member list is not requested (TF_CONFIG would
// not fit in an environment variable anyway); see docs/environment.md.
constexpr int kMaxNodesForMemberList = 256;
// How long node 0 keeps the coordinator up after the verdict so that every
// agent hears it, and how long any agent waits for a verdict.
constexpr absl::Duration kVerdictWait = absl::Seconds(10);
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);

bool IsLoopback(const std::string& addr) {
  return addr == "::1" || addr == "localhost" || addr.rfind("127.", 0) == 0;
}

// What the gRPC threads hand to the main loop.
struct Inbox {
  absl::Mutex mu;
  std::deque<v1::Directive> directives ABSL_GUARDED_BY(mu);
  std::optional<absl::Status> stream_end ABSL_GUARDED_BY(mu);
  std::optional<absl::StatusOr<v1::Assignment>> join_result ABSL_GUARDED_BY(mu);
  // Set when the coordinator answers a heartbeat saying this incarnation is
  // fenced (it was declared lost while frozen): the job went on without us.
  std::optional<absl::Status> fenced ABSL_GUARDED_BY(mu);
};

// How a round ended for this agent.
struct RoundOutcome {
  bool rejoin = false;  // elastic: join the next round.
  int exit_code = kExitSuccess;
};

class AgentRun {
 public:
  AgentRun(const RunConfig& config, const std::map<std::string, std::string>& base_env)
      : config_(config), base_env_(base_env), incarnation_(rendezvous::NewIncarnation()) {}

  int Run();

 private:
  void SetPrefix(int rank) {
    SetLogPrefix(absl::StrFormat("node=%s rank=%s inc=%08x", config_.node_id,
                                 rank < 0 ? "?" : absl::StrCat(rank),
                                 static_cast<uint32_t>(incarnation_ >> 32)));
  }
  absl::Status StartServer();
  // Joins on a helper thread while the main loop keeps serving signals.
  // Returns the assignment, or sets *exit_code.
  std::optional<v1::Assignment> Join(int* exit_code);
  RoundOutcome RunRound(const v1::Assignment& assignment);
  std::vector<launcher::WorkerSpec> WorkerSpecs(const v1::Assignment& a) const;
  absl::Status Report(const v1::Assignment& a, v1::ReportRequest::State state, int exit_code,
                      int local_rank, const std::string& message);
  void Leave(const std::string& reason);
  // Stops workers (forwarding `sig` first when non-zero) within the grace period.
  void StopWorkers();
  int Finish(int exit_code);

  const RunConfig& config_;
  const std::map<std::string, std::string>& base_env_;
  const uint64_t incarnation_;
  v1::Member me_;

  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<rendezvous::Coordinator> coordinator_;
  std::unique_ptr<rendezvous::CoordinatorService> service_;
  std::unique_ptr<PeriodicThread> ticker_;
  std::unique_ptr<rendezvous::GrpcServer> server_;
  std::unique_ptr<rendezvous::CoordinatorClient> client_;
  Inbox inbox_;
  uint64_t last_round_ = 0;
  int last_restart_count_ = 0;
  int terminating_signal_ = 0;
};

absl::Status AgentRun::StartServer() {
  std::vector<std::string> listen;
  std::vector<grpc::Service*> services;
  if ((config_.host_coordinator != HostCoordinator::kNo)) {
    coordinator_ = std::make_unique<rendezvous::Coordinator>(CoordinatorOptionsFrom(config_));
    service_ = std::make_unique<rendezvous::CoordinatorService>(coordinator_.get(), config_.token);
    services.push_back(service_.get());
    listen.push_back(absl::StrCat("0.0.0.0:", config_.coordinator_port));
  }
  if (config_.health_port > 0 && !((config_.host_coordinator != HostCoordinator::kNo) &&
                                   config_.health_port == config_.coordinator_port)) {
    listen.push_back(absl::StrCat("0.0.0.0:", config_.health_port));
  }
  if (listen.empty()) return absl::OkStatus();
  auto server = rendezvous::GrpcServer::Start(listen, services);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  if (coordinator_) {
    rendezvous::Coordinator* core = coordinator_.get();
    ticker_ = std::make_unique<PeriodicThread>(absl::Milliseconds(20), [core] { core->Tick(); });
    TLOG(kInfo) << "coordinator for job " << config_.job_id << " listening on port "
                << server_->port(0) << " (" << config_.nnodes.min
                << (config_.nnodes.elastic() ? absl::StrCat("..", config_.nnodes.max) : "")
                << " nodes)";
  }
  return absl::OkStatus();
}

std::optional<v1::Assignment> AgentRun::Join(int* exit_code) {
  v1::JoinRequest req;
  *req.mutable_member() = me_;
  req.set_job_id(config_.job_id);
  req.set_rank_hint(config_.node_rank_hint);
  req.set_advertise_addr(config_.advertise_addr);
  req.set_local_world_size(config_.nproc_per_node);
  req.set_master_port(config_.master_port);
  req.set_last_round(last_round_);
  req.set_restart_count(last_restart_count_);
  req.set_want_nodes(config_.nnodes.max <= kMaxNodesForMemberList);
  const absl::Time deadline = absl::Now() + config_.join_timeout;
  {
    absl::MutexLock lock(&inbox_.mu);
    inbox_.join_result.reset();
  }
  std::thread joiner([this, req, deadline] {
    auto result = client_->Join(req, deadline);
    {
      absl::MutexLock lock(&inbox_.mu);
      inbox_.join_result = std::move(result);
    }
    supervisor_->Wake();
  });
  std::optional<absl::StatusOr<v1::Assignment>> result;
  while (!result) {
    Supervisor::Event ev = supervisor_->Wait(absl::Milliseconds(200));
    if (ev.type == Supervisor::EventType::kSignal && launcher::IsTerminatingSignal(ev.signal)) {
      TLOG(kWarning) << "received signal " << ev.signal << " (" << strsignal(ev.signal)
                     << ") during rendezvous; leaving";
      terminating_signal_ = ev.signal;
      client_->CancelJoin();
    }
    absl::MutexLock lock(&inbox_.mu);
    if (inbox_.join_result) result = std::move(inbox_.join_result);
  }
  joiner.join();
  if (terminating_signal_ != 0) {
    *exit_code = kExitSignalBase + terminating_signal_;
    return std::nullopt;
  }
  if (!result->ok()) {
    *exit_code = ExitCodeForJoinError(result->status());
    TLOG(kError) << "rendezvous failed: " << result->status().message() << "; exiting with "
                 << *exit_code;
    return std::nullopt;
  }
  return std::move(**result);
}

std::vector<launcher::WorkerSpec> AgentRun::WorkerSpecs(const v1::Assignment& a) const {
  WorkerEnvInput in;
  in.job_id = config_.job_id;
  in.node_rank = a.node_rank();
  in.nnodes = a.nnodes();
  in.local_world_size = a.self().local_world_size();
  in.first_global_rank = a.self().first_global_rank();
  in.world_size = a.world_size();
  in.master_addr = a.master_addr();
  in.master_port = a.master_port();
  in.restart_count = a.restart_count();
  in.max_restarts = a.max_restarts();
  // The node hosting the coordinator joins over loopback, so its recorded
  // address is a loopback one; every other node reaches it (and its rank-0
  // workers) at the coordinator address it dialed.
  const bool remote =
      !(config_.host_coordinator != HostCoordinator::kNo) && !IsLoopback(config_.coordinator_host);
  auto reachable = [&](const std::string& addr) {
    return remote && IsLoopback(addr) ? config_.coordinator_host : addr;
  };
  in.master_addr = reachable(a.master_addr());
  for (const auto& n : a.nodes()) in.nodes.push_back({reachable(n.addr()), n.local_world_size()});

  std::vector<launcher::WorkerSpec> specs;
  for (int l = 0; l < in.local_world_size; ++l) {
    launcher::WorkerSpec s;
    s.local_rank = l;
    s.global_rank = in.first_global_rank + l;
    s.argv = config_.command;
    s.env = BuildWorkerEnv(base_env_, in, l);
    s.prefix_output = config_.prefix_output;
    s.foreground_tty = in.local_world_size == 1 && launcher::StdinIsForegroundTerminal();
    specs.push_back(std::move(s));
  }
  return specs;
}

absl::Status AgentRun::Report(const v1::Assignment& a, v1::ReportRequest::State state,
                              int exit_code, int local_rank, const std::string& message) {
  v1::ReportRequest r;
  *r.mutable_member() = me_;
  r.set_job_id(config_.job_id);
  r.set_round(a.round());
  r.set_state(state);
  r.set_exit_code(exit_code);
  r.set_failed_local_rank(local_rank);
  r.set_message(message.substr(0, 1024));
  absl::Status s = client_->Report(r, kRpcTimeout);
  if (!s.ok()) {
    TLOG(kWarning) << "report to the coordinator failed: " << s.message();
  }
  return s;
}

void AgentRun::Leave(const std::string& reason) {
  v1::LeaveRequest r;
  *r.mutable_member() = me_;
  r.set_job_id(config_.job_id);
  r.set_reason(reason);
  absl::Status s = client_->Leave(r, absl::Seconds(2));
  if (!s.ok()) {
    TLOG(kDebug) << "leave: " << s.message();
  }
}

void AgentRun::StopWorkers() {
  if (supervisor_->running_count() == 0) return;
  TLOG(kInfo) << "stopping " << supervisor_->running_count()
              << " worker(s): SIGTERM, then SIGKILL after "
              << absl::FormatDuration(config_.grace_period);
  supervisor_->StopAll(config_.grace_period);
}

RoundOutcome AgentRun::RunRound(const v1::Assignment& a) {
  last_round_ = a.round();
  last_restart_count_ = a.restart_count();
  SetPrefix(a.node_rank());
  TLOG(kInfo) << absl::StrFormat(
      "round %d: node rank %d of %d, world size %d, master %s:%d, restart %d; starting %d "
      "worker(s): %s",
      a.round(), a.node_rank(), a.nnodes(), a.world_size(), a.master_addr(), a.master_port(),
      a.restart_count(), a.self().local_world_size(), absl::StrJoin(config_.command, " "));

  {
    absl::MutexLock lock(&inbox_.mu);
    inbox_.directives.clear();
    inbox_.stream_end.reset();
    inbox_.fenced.reset();
  }
  v1::WatchRequest w;
  *w.mutable_member() = me_;
  w.set_job_id(config_.job_id);
  w.set_round(a.round());
  Supervisor* sup = supervisor_.get();
  std::unique_ptr<rendezvous::WatchStream> stream = client_->Watch(
      w,
      [this, sup](const v1::Directive& d) {
        {
          absl::MutexLock lock(&inbox_.mu);
          inbox_.directives.push_back(d);
        }
        sup->Wake();
      },
      [this, sup](const absl::Status& s) {
        {
          absl::MutexLock lock(&inbox_.mu);
          inbox_.stream_end = s;
        }
        sup->Wake();
      });

  absl::Status started = supervisor_->Start(WorkerSpecs(a));
  if (!started.ok()) {
    int code = launcher::ExitCodeForSpawnError(started);
    TLOG(kError) << started.message();
    Report(a, v1::ReportRequest::FAILED, code, 0, std::string(started.message())).IgnoreError();
    return {false, code};
  }
  if (server_) server_->SetServing(true);
  std::unique_ptr<PeriodicThread> heartbeat;
  if (a.heartbeat_interval_ms() > 0) {
    heartbeat = std::make_unique<PeriodicThread>(
        absl::Milliseconds(a.heartbeat_interval_ms()), [this, a, sup] {
          absl::Status s = Report(a, v1::ReportRequest::RUNNING, 0, 0, "");
          if (IsFenced(s)) {
            {
              absl::MutexLock lock(&inbox_.mu);
              inbox_.fenced = s;
            }
            sup->Wake();
          }
        });
  }

  const int nworkers = a.self().local_world_size();
  int exited_ok = 0;
  int local_failure = 0;  // first failing worker's exit code.
  bool reported_success = false;
  absl::Time kill_at = absl::InfiniteFuture();
  absl::Time verdict_deadline = absl::InfiniteFuture();

  auto finish_round = [&](RoundOutcome o) {
    if (server_) server_->SetServing(false);
    heartbeat.reset();
    StopWorkers();
    stream.reset();
    return o;
  };

  while (true) {
    absl::Duration wait = absl::Milliseconds(500);
    absl::Time next = std::min(kill_at, verdict_deadline);
    if (next != absl::InfiniteFuture()) wait = std::max(absl::ZeroDuration(), next - absl::Now());
    Supervisor::Event ev = supervisor_->Wait(std::min(wait, absl::Milliseconds(500)));
    switch (ev.type) {
      case Supervisor::EventType::kWorkerExited: {
        const auto& x = ev.exit;
        if (x.exit_code == 0) {
          ++exited_ok;
          TLOG(kDebug) << "worker local rank " << x.local_rank << " exited 0";
        } else if (local_failure == 0) {
          local_failure = x.exit_code;
          TLOG(kError) << "worker local rank " << x.local_rank << " (rank " << x.global_rank
                       << ", pid " << x.pid << ") failed with exit code " << x.exit_code
                       << (x.exit_code > 128 ? absl::StrCat(" (signal ", x.exit_code - 128, ")")
                                             : "");
          if (terminating_signal_ == 0) {
            Report(a, v1::ReportRequest::FAILED, x.exit_code, x.local_rank, "").IgnoreError();
            // Fail fast: stop the other local workers now; the coordinator
            // tells every other node.
            StopWorkers();
            verdict_deadline = absl::Now() + kVerdictWait;
          }
        }
        if (supervisor_->running_count() == 0 && terminating_signal_ != 0) {
          int code = local_failure != 0 ? local_failure : kExitSignalBase + terminating_signal_;
          return finish_round({false, code});
        }
        if (exited_ok == nworkers && !reported_success) {
          reported_success = true;
          TLOG(kInfo) << "all " << nworkers << " local worker(s) exited 0; waiting for the job";
          Report(a, v1::ReportRequest::SUCCEEDED, 0, -1, "").IgnoreError();
          verdict_deadline = absl::Now() + kVerdictWait;
        }
        break;
      }
      case Supervisor::EventType::kSignal: {
        TLOG(kInfo) << "forwarding signal " << ev.signal << " (" << strsignal(ev.signal)
                    << ") to the workers";
        supervisor_->SignalAll(ev.signal);
        if (launcher::IsTerminatingSignal(ev.signal) && terminating_signal_ == 0) {
          terminating_signal_ = ev.signal;
          kill_at = absl::Now() + config_.grace_period;
          Leave(absl::StrCat("agent received signal ", ev.signal, " (", strsignal(ev.signal), ")"));
          if (supervisor_->running_count() == 0) {
            return finish_round({false, kExitSignalBase + ev.signal});
          }
        }
        break;
      }
      case Supervisor::EventType::kWakeup:
      case Supervisor::EventType::kTimeout:
        break;
    }
    if (absl::Now() >= kill_at) {
      TLOG(kWarning) << "grace period over; killing the workers";
      supervisor_->SignalAll(SIGKILL);
      kill_at = absl::InfiniteFuture();
    }

    // Directives and the stream's end, in arrival order.
    std::deque<v1::Directive> directives;
    std::optional<absl::Status> stream_end;
    std::optional<absl::Status> fenced;
    {
      absl::MutexLock lock(&inbox_.mu);
      directives.swap(inbox_.directives);
      if (directives.empty()) stream_end = inbox_.stream_end;
      fenced = inbox_.fenced;
    }
    if (!fenced && stream_end && IsFenced(*stream_end)) fenced = stream_end;
    if (fenced && terminating_signal_ == 0) {
      // We were frozen (or cut off) past the heartbeat timeout; the job went
      // on without this incarnation. Stop our stale workers and exit so that
      // the pod restarts as a new incarnation.
      TLOG(kError) << "this agent was declared lost by the coordinator: " << fenced->message()
                   << "; stopping workers and exiting with " << kExitUnavailable;
      return finish_round({false, kExitUnavailable});
    }
    for (const v1::Directive& d : directives) {
      if (d.has_job_finished()) {
        TLOG(kInfo) << "job finished: every worker on every node exited 0";
        return finish_round({false, kExitSuccess});
      }
      if (d.has_job_failed()) {
        const auto& f = d.job_failed();
        int code = ExitCodeForJobFailed(f, local_failure, terminating_signal_);
        TLOG(kError) << "job failed: " << f.reason() << "; exiting with " << code;
        return finish_round({false, code});
      }
      if (d.has_rejoin()) {
        TLOG(kInfo) << "restart: " << d.rejoin().reason() << "; re-joining round "
                    << d.rejoin().next_round();
        return finish_round({true, kExitSuccess});
      }
      if (d.has_stop_workers()) {
        TLOG(kInfo) << "coordinator asks to stop workers: " << d.stop_workers().reason();
        StopWorkers();
      }
    }
    if (stream_end) {
      if (terminating_signal_ != 0 && supervisor_->running_count() > 0) {
        // Shutting down anyway; keep waiting for the workers.
      } else if (reported_success) {
        TLOG(kWarning) << "lost the coordinator after our workers succeeded ("
                       << stream_end->message() << "); exiting 0";
        return finish_round({false, kExitSuccess});
      } else if (config_.policy.max_restarts > 0 && terminating_signal_ == 0) {
        // The coordinator is gone (node 0's pod restarts) or dropped our
        // stream: re-join with our last round; a restarted coordinator
        // rebuilds the job from the re-joins. A local failure we could not
        // report is covered by the restart that follows.
        TLOG(kWarning) << "lost the coordinator (" << stream_end->message()
                       << "); stopping workers and re-joining to continue the job";
        return finish_round({true, kExitSuccess});
      } else if (local_failure != 0) {
        return finish_round({false, local_failure});
      } else if (terminating_signal_ == 0) {
        TLOG(kError) << "lost the coordinator (" << stream_end->message() << "); stopping workers";
        return finish_round({false, kExitUnavailable});
      }
    }
    if (absl::Now() >= verdict_deadline) {
      int code = local_failure != 0 ? local_failure : kExitSuccess;
      TLOG(kWarning) << "no verdict from the coordinator within "
                     << absl::FormatDuration(kVerdictWait) << "; exiting with " << code;
      return finish_round({false, code});
    }
  }
}

int AgentRun::Finish(int exit_code) {
  const rendezvous::Phase phase =
      coordinator_ ? coordinator_->GetSnapshot().phase : rendezvous::Phase::kGathering;
  if (server_ && (phase == rendezvous::Phase::kSucceeded || phase == rendezvous::Phase::kFailed)) {
    // Keep the coordinator up until every agent heard the verdict. Without a
    // verdict (port taken, join timeout, signal during rendezvous) there is
    // nothing to hand out: the other agents see the coordinator go away.
    if (!coordinator_->AwaitDrained(kVerdictWait)) {
      TLOG(kWarning) << "not every agent acknowledged the verdict within "
                     << absl::FormatDuration(kVerdictWait);
    }
  }
  client_.reset();
  if (server_) server_->Shutdown(absl::Milliseconds(100));
  ticker_.reset();
  if (coordinator_) coordinator_->Shutdown("agent exiting");
  supervisor_.reset();
  TLOG(kInfo) << "exiting with code " << exit_code;
  return exit_code;
}

int AgentRun::Run() {
  me_.set_node_id(config_.node_id);
  me_.set_incarnation(incarnation_);
  SetPrefix(-1);
  for (const std::string& note : config_.discovery_notes) TLOG(kInfo) << "discovered " << note;

  auto sup = Supervisor::Create({});
  if (!sup.ok()) {
    TLOG(kError) << "cannot supervise workers: " << sup.status().message();
    return kExitOsError;
  }
  supervisor_ = std::move(*sup);
  // Fail before any rendezvous when COMMAND cannot run, like tini.
  auto path = base_env_.find("PATH");
  absl::StatusOr<std::string> resolved =
      launcher::ResolveCommand(config_.command[0], path == base_env_.end() ? "" : path->second);
  if (!resolved.ok()) {
    TLOG(kError) << resolved.status().message();
    return Finish(launcher::ExitCodeForSpawnError(resolved.status()));
  }
  if (absl::Status s = StartServer(); !s.ok()) {
    TLOG(kError) << s.message();
    return Finish(kExitOsError);
  }
  // Node 0 dials its own coordinator over loopback.
  const std::string target = JoinHostPort(
      (config_.host_coordinator != HostCoordinator::kNo) ? "127.0.0.1" : config_.coordinator_host,
      config_.coordinator_port);
  client_ = std::make_unique<rendezvous::CoordinatorClient>(
      rendezvous::ClientOptions{target, config_.token});
  TLOG(kInfo) << "joining job " << config_.job_id << " at " << target << " as node "
              << config_.node_id
              << (config_.node_rank_hint >= 0
                      ? absl::StrCat(" (rank hint ", config_.node_rank_hint, ")")
                      : "");
  while (true) {
    int exit_code = kExitSuccess;
    std::optional<v1::Assignment> assignment = Join(&exit_code);
    if (!assignment) return Finish(exit_code);
    RoundOutcome outcome = RunRound(*assignment);
    if (!outcome.rejoin) return Finish(outcome.exit_code);
    if (terminating_signal_ != 0) return Finish(kExitSignalBase + terminating_signal_);
  }
}

}  // namespace

int RunAgent(const RunConfig& config, const std::map<std::string, std::string>& base_env) {
  return AgentRun(config, base_env).Run();
}

}  // namespace trainlet::agent
