#include "agent/run_agent.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/agent.h"
#include "agent/agent_store.h"
#include "agent/master_port.h"
#include "agent/measuring_client.h"
#include "agent/node_probe.h"
#include "agent/preflight_runner.h"
#include "agent/reporter.h"
#include "agent/reporter_grpc.h"
#include "common/code_pages.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/host_names.h"
#include "common/logging.h"
#include "common/periodic.h"
#include "config/coordinator_options.h"
#include "config/options.h"
#include "kubeflow/https_post.h"
#include "kubeflow/trainer_status.h"
#include "launcher/command_resolver.h"
#include "launcher/signals.h"
#include "launcher/supervisor.h"
#include "launcher/termination_log.h"
#include "launcher/worker_spawner.h"
#include "preflight/dns.h"
#include "preflight/gpu_loopback.h"
#include "progress/gpu_sample.h"
#include "progress/slow_signals.h"
#include "progress/tcp_diag.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_host.h"
#include "rendezvous/health_server.h"
#include "rendezvous/in_process_client.h"
#include "rendezvous/keepalive.h"
#include "topology/nvml.h"

namespace trainlet::agent {
namespace {

// How long node 0 keeps its coordinator up after the verdict, so that every
// agent hears it.
constexpr absl::Duration kDrainWait = absl::Seconds(10);

// A free TCP port on this host (bound and released: the worker that listens
// on it, rank 0's torch store, binds it shortly after).
absl::StatusOr<int> PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ResourceExhaustedError("cannot create a socket to pick a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  if (port <= 0) return absl::ResourceExhaustedError("cannot pick a free port for MASTER_PORT");
  return port;
}

// MASTER_PORT for a single-node run, found without a socket (such a run
// opens none; agent/master_port.h); a port the kernel picks when /proc and
// netlink cannot tell.
absl::StatusOr<int> PickUnusedPortWithoutSocket() {
  absl::StatusOr<int> port = PickMasterPort(RealPortPickSeams());
  if (port.ok()) return port;
  TLOG(kDebug) << "MASTER_PORT without a socket: " << port.status().message()
               << "; binding port 0 instead";
  return PickFreePort();
}

// Where the hosting agent dials its own coordinator: the address it listens
// on, or loopback for a wildcard.
std::string DialAddressFor(const std::string& bind_addr) {
  if (bind_addr == "0.0.0.0" || bind_addr.empty()) return "127.0.0.1";
  if (bind_addr == "::") return "::1";
  return bind_addr;
}

// Whether the coordinator port this agent could not bind is held by a
// coordinator of this very job: another agent of it on this host that took
// node rank 0 (or --host-coordinator=yes) first. A Leave from this agent's
// new incarnation, which no coordinator knows yet, is refused as "not a
// member" by this job's coordinator, as another job's (or with another
// token) by any other; a port that is not a coordinator's does not answer.
bool PortHeldByThisJob(const RunConfig& config, uint64_t incarnation) {
  rendezvous::ClientOptions o;
  o.target = JoinHostPort(DialAddressFor(config.bind_addr), config.coordinator_port);
  o.token = config.token;
  o.tls = config.tls;
  o.tls.server_name = CoordinatorTlsName(config, /*hosting=*/true);
  rendezvous::CoordinatorClient client(o);
  v1::LeaveRequest leave;
  leave.mutable_member()->set_node_id(config.node_id);
  leave.mutable_member()->set_incarnation(incarnation);
  leave.set_job_id(config.job_id);
  leave.set_reason("checking who holds the coordinator port");
  const absl::Status s = client.Leave(leave, absl::Seconds(1));
  TLOG(kDebug) << "the holder of the coordinator port answers a Leave with: " << s;
  return absl::IsFailedPrecondition(s);
}

// What to do when two agents of one job both try to host its coordinator.
std::string SecondHostMessage(const RunConfig& config) {
  const std::string where = JoinHostPort(config.bind_addr, config.coordinator_port);
  return absl::StrCat(
      "another agent of job ", config.job_id, " already hosts the coordinator at ", where,
      " on this host: only one agent of a job hosts it. ",
      config.node_rank_hint == 0
          ? "Give this agent another --node-rank (1 to nnodes-1, each node its own), or "
            "none: the agents that find the coordinator taken then join it"
          : "Pass --host-coordinator=yes to one agent only (the others auto or no)",
      "; to run two jobs on this host, give the second its own --coordinator port and "
      "--job-id");
}

// --preflight's checks on this node (preflight_runner.h), off until a policy says.
std::unique_ptr<PreflightRunner> MakePreflightRunner(
    const RunConfig& config, const std::map<std::string, std::string>& base_env,
    uint64_t incarnation, std::shared_ptr<const std::string> master, MeasuringClient* measuring) {
  // Made even with --preflight=off: the coordinator's policy, once an
  // assignment says it, decides (PreflightRunner::SetPolicy).
  preflight::NodeCheckConfig checks;
  checks.path = config.preflight_path;
  auto checker = std::make_unique<preflight::NodeChecker>(checks, config.node_id,
                                                          preflight::MakeAresResolver());
  PreflightRunner::Options o;
  o.policy = config.policy.preflight;
  o.interval = config.policy.preflight_interval;
  o.node_id = config.node_id;
  o.incarnation = incarnation;
  o.beside_delay = PreflightRunner::kBesideDelay;
  if (measuring != nullptr) {
    o.measure_links = [measuring](const v1::NetworkPlan& plan) { return measuring->Measure(plan); };
  }
  if (config.preflight_gpu) {
    preflight::GpuLoopbackOptions gpu;
    gpu.python = PythonInterpreterArgv(config);
    for (const auto& [k, v] : base_env) gpu.env.push_back(absl::StrCat(k, "=", v));
    gpu.min_busbw_gbps = config.preflight_min_gpu_busbw;
    o.gpu_check = [gpu = std::move(gpu)] { return preflight::RunGpuLoopback(gpu); };
  }
  auto inputs = [probe = config.node_probe, coordinator = config.coordinator_host, master] {
    preflight::NodeCheckInputs in;
    if (probe != nullptr) in.gpus = preflight::GpuInputsFromProbe(*probe);
    in.host = preflight::ReadHostLimits();
    // Names only: an address literal needs no DNS (and a single-node run
    // opens no socket).
    for (const std::string* name : {&coordinator, master.get()}) {
      if (!name->empty() && !IsIpLiteral(*name)) in.names.push_back(*name);
    }
    return in;
  };
  return std::make_unique<PreflightRunner>(o, std::move(checker), std::move(inputs),
                                           Clock::Monotonic());
}

void LogNodeProbe(std::shared_ptr<const v1::NodeProbe> probe) {
  if (probe == nullptr) return;
  TLOG(kInfo) << "node probe: " << ProbeSummaryLine(*probe);
  // A timing is for whoever debugs the probe, not a lifecycle event.
  TLOG(kDebug) << "node probe took "
               << absl::StrFormat("%.1f ms", static_cast<double>(probe->probe_micros()) / 1000.0);
  for (const std::string& w : probe->warnings()) {
    TLOG(kWarning) << "node probe: " << SafeForLog(w, 400);
  }
}

// Keeps node 0's coordinator up after the verdict until every agent heard
// it (at most kDrainWait); a terminating signal cuts the wait short.
void AwaitVerdictHeard(rendezvous::CoordinatorHost* host, launcher::Supervisor* supervisor) {
  const rendezvous::Phase phase = host->core().GetSnapshot().phase;
  if (phase != rendezvous::Phase::kSucceeded && phase != rendezvous::Phase::kFailed) return;
  const absl::Time give_up = Clock::Monotonic()->Now() + kDrainWait;
  bool drained = false;
  while (!(drained = host->core().AwaitDrained(absl::Milliseconds(100))) &&
         Clock::Monotonic()->Now() < give_up) {
    if (supervisor == nullptr) continue;
    launcher::WorkerGroup::Event ev = supervisor->Wait(absl::ZeroDuration());
    if (ev.type == launcher::WorkerGroup::EventType::kSignal &&
        launcher::IsTerminatingSignal(ev.signal)) {
      TLOG(kInfo) << "signal " << ev.signal
                  << " while waiting for every agent to hear the verdict: exiting now";
      break;
    }
  }
  if (!drained) {
    TLOG(kWarning) << "not every agent acknowledged the verdict (waited at most "
                   << absl::FormatDuration(kDrainWait) << ")";
  }
}

// What one run owns, in the order it is built. However the run ends (a
// start-up error, a plan that cannot be set up, the agent's exit), the
// destructor tears it down once, in this order: the reports stop (their
// enrichment reads the coordinator); the in-process coordinator shuts down
// with its ticker (its stored callbacks refer to the client); the client
// goes (its callbacks refer to the agent), then the agent; node 0's
// coordinator stays until every agent heard the verdict; the health
// server; last the supervisor, which stops and reaps whatever still runs
// and flushes the workers' output; then the progress files.
struct RunServices {
  RunServices() = default;
  RunServices(const RunServices&) = delete;
  RunServices& operator=(const RunServices&) = delete;
  ~RunServices() {
    reporter.reset();
    report_transport.reset();
    trainjob_status.reset();
    trainjob_poster.reset();
    local_ticker.reset();
    if (local_core) local_core->Shutdown("the agent is exiting");
    // The preflight's warn thread measures through `measuring`, which wraps
    // `client` and may still call it (a re-join after a measurement): each
    // goes before what it uses, while the agent its answers reach lives.
    preflight.reset();
    measuring.reset();
    client.reset();
    agent.reset();
    if (host) {
      AwaitVerdictHeard(host.get(), supervisor.get());
      host->Shutdown(absl::Milliseconds(100));
    }
    if (health) health->Shutdown();
    supervisor.reset();
    output_progress.reset();
    progress.reset();
  }

  // --progress-from-output; the supervisor feeds it until it is gone.
  std::unique_ptr<OutputProgress> output_progress;
  std::unique_ptr<launcher::Supervisor> supervisor;
  std::unique_ptr<rendezvous::HealthServer> health;
  std::unique_ptr<rendezvous::CoordinatorHost> host;    // node 0's coordinator, over gRPC.
  std::unique_ptr<rendezvous::Coordinator> local_core;  // a single-node run's, in process.
  std::unique_ptr<PeriodicThread> local_ticker;  // local_core's, from the workers' first idle.
  std::unique_ptr<rendezvous::RendezvousClient> client;
  std::unique_ptr<ProgressDir> progress;
  std::unique_ptr<GrpcReportTransport> report_transport;
  std::unique_ptr<Reporter> reporter;
  // Kubeflow Trainer's TrainJob progress (kubeflow/trainer_status.h).
  std::unique_ptr<kubeflow::OpenSslPoster> trainjob_poster;
  std::unique_ptr<kubeflow::TrainerStatusSender> trainjob_status;
  std::unique_ptr<AgentStore> store;  // --agent-store; its helper is the supervisor's.
  // --preflight's network measurement: `client` wrapped, and this node's
  // link measurer (null: --preflight=off, or a single-node run).
  std::unique_ptr<MeasuringClient> measuring;
  std::unique_ptr<PreflightRunner> preflight;  // --preflight (its policy may be off).
  // --slow-nodes: the workers' signals, sampled when an assignment asks.
  std::unique_ptr<TcpInfoSource> tcp_diag;
  std::unique_ptr<GpuClockSampler> gpu_clocks;  // where the node probe found NVML.
  std::unique_ptr<ProcSlowSampler> slow;
  std::optional<Agent> agent;
};

// --slow-nodes' GPU signal (progress/gpu_sample.h): where the node probe
// read GPUs through NVML, their clocks, read again the same way (in process
// or through the NVML reader) without health, NVLinks' worth of calls
// aside. Null without NVML. Its thread starts with the first sampled round.
std::unique_ptr<GpuClockSampler> StartGpuClocks(const RunConfig& config,
                                                const std::map<std::string, std::string>& base_env,
                                                Clock* clock) {
  const std::shared_ptr<const v1::NodeProbe>& probe = config.node_probe;
  if (probe == nullptr || probe->nvml().status() != v1::Source::OK || probe->gpus_size() == 0) {
    return nullptr;
  }
  topology::NvmlOptions nvml = AgentProbeOptions(base_env).nvml;
  if (nvml.library.empty() || !nvml.absent_reason.empty()) return nullptr;
  nvml.health = false;
  return std::make_unique<GpuClockSampler>(
      [nvml](std::vector<v1::Gpu>* gpus) {
        v1::NodeProbe scratch;
        topology::ReadNvml(nvml, &scratch, gpus);
      },
      clock);
}

// --preflight's network measurement (measuring_client.h): this node's link
// measurer and the Join that measures when asked. Null (a warning) when it
// cannot listen: the node is then neither measured nor measures.
std::unique_ptr<MeasuringClient> StartMeasuring(const RunConfig& config, RunServices* run) {
  MeasuringClient::Options o;
  o.job_id = config.job_id;
  o.node_id = config.node_id;
  o.port = config.preflight_port;
  MeasuringClient::Hooks hooks;
  hooks.due = [run] { return run->preflight != nullptr && run->preflight->NetworkDue(); };
  hooks.measured = [run] {
    if (run->preflight != nullptr) run->preflight->NetworkMeasured();
  };
  hooks.clock = [run](const preflight::ClockSample& sample) {
    if (run->preflight != nullptr) run->preflight->NoteClock(sample);
  };
  hooks.refresh = [run](v1::PreflightReport* report) {
    if (run->preflight != nullptr) run->preflight->RefreshClock(report);
  };
  std::shared_ptr<preflight::Resolver> resolver = preflight::MakeAresResolver();
  // Both address families where the pod has IPv6, else IPv4 alone.
  absl::Status why;
  for (const char* host : {"::", "0.0.0.0"}) {
    o.host = host;
    absl::StatusOr<std::unique_ptr<MeasuringClient>> started =
        MeasuringClient::Start(run->client.get(), o, hooks, resolver);
    if (started.ok()) {
      TLOG(kDebug) << "preflight: link measurer on port " << (*started)->port();
      return *std::move(started);
    }
    why = started.status();
  }
  TLOG(kWarning) << "preflight: no link measurer (" << why.message()
                 << "); this node's links are not measured"
                 << (config.preflight_port != 0 ? "; check --preflight-port" : "");
  return nullptr;
}

// The coordinator, when this agent hosts it: in process for a single-node
// run, else node 0's over gRPC. kIfPortFree: whoever binds the port hosts
// it, the others join (torchrun's c10d semantics). The exit code when it
// cannot be hosted.
std::optional<int> StartCoordinator(const RunConfig& config, uint64_t incarnation, bool in_process,
                                    RunServices* run) {
  if (in_process) {
    // Its ticker starts with the workers' first idle wait (SeamsOf): a single
    // member's round closes when it joins and its verdicts come with its
    // reports, so until then there is nothing to time out, and a job that
    // ends at once never pays for the thread.
    rendezvous::CoordinatorOptions core = CoordinatorOptionsFrom(config);
    core.hosted_by_agent = true;  // this agent's log says the round and verdict
    run->local_core = std::make_unique<rendezvous::Coordinator>(std::move(core));
  } else if (config.host_coordinator != HostCoordinator::kNo) {
    rendezvous::CoordinatorHostOptions o;
    o.core = CoordinatorOptionsFrom(config);
    o.core.hosted_by_agent = true;  // this agent's log says the round and verdict
    o.token = config.token;
    o.bind_addr = config.bind_addr;
    o.port = config.coordinator_port;
    o.reserved_descriptors = DescriptorsForAgent(config.nproc_per_node, 0);
    o.tls = config.tls;
    auto started = rendezvous::CoordinatorHost::Start(std::move(o));
    if (started.ok()) {
      run->host = std::move(*started);
    } else if (config.host_coordinator == HostCoordinator::kIfPortFree &&
               rendezvous::IsAddressInUse(started.status())) {
      TLOG(kInfo) << "another agent on this host holds the coordinator port "
                  << config.coordinator_port << ": joining it";
    } else if (rendezvous::IsAddressInUse(started.status()) &&
               PortHeldByThisJob(config, incarnation)) {
      // Not a port to change: two agents of one job both meant to host.
      TLOG(kError) << "cannot host the coordinator: " << SecondHostMessage(config);
      return kExitConfig;
    } else {
      TLOG(kError) << started.status().message();
      return kExitOsError;
    }
  }
  return std::nullopt;
}

// The rendezvous client: direct calls to the in-process coordinator, else
// gRPC (the hosting agent dials its own coordinator where it listens).
void Connect(const RunConfig& config, bool in_process, RunServices* run) {
  rendezvous::ClientOptions client_options;
  client_options.target = run->host
                              ? JoinHostPort(DialAddressFor(config.bind_addr), run->host->port())
                              : JoinHostPort(config.coordinator_host, config.coordinator_port);
  client_options.token = config.token;
  client_options.tls = config.tls;
  client_options.tls.server_name = CoordinatorTlsName(config, run->host != nullptr);
  client_options.port_watch = config.nnodes.max <= rendezvous::kPortWatchMaxNodes;
  client_options.port_watch_every = rendezvous::PortWatchInterval(config.nnodes.max);
  const rendezvous::KeepaliveSettings keepalive =
      rendezvous::KeepaliveFor(config.policy.heartbeat_timeout);
  client_options.keepalive_time = keepalive.time;
  client_options.keepalive_timeout = keepalive.timeout;
  if (in_process) {
    run->client = std::make_unique<rendezvous::InProcessRendezvousClient>(run->local_core.get(),
                                                                          DialAddressFor(""));
  } else {
    run->client = std::make_unique<rendezvous::GrpcRendezvousClient>(client_options);
  }
  TLOG(kInfo) << "joining job " << config.job_id << " at "
              << (in_process ? std::string("this agent's own coordinator") : client_options.target)
              << " as node " << config.node_id
              << (config.node_rank_hint >= 0
                      ? absl::StrCat(" (rank hint ", config.node_rank_hint, ")")
                      : "")
              << "; command: " << SafeForLog(absl::StrJoin(config.command, " "), 512);
}

// The executor's seams over the services of `run`.
AgentSeams SeamsOf(const RunConfig& config, const std::map<std::string, std::string>& base_env,
                   RunServices* run) {
  AgentSeams seams;
  seams.workers = run->supervisor.get();
  seams.progress = run->progress.get();
  seams.output_progress = run->output_progress.get();
  if (config.node_probe != nullptr && config.policy.max_restarts > 0 &&
      config.probe_timeout > absl::ZeroDuration()) {
    seams.node_health = [&config, &base_env]() -> std::vector<std::string> {
      std::string note;
      std::shared_ptr<const v1::NodeProbe> probe =
          ProbeNodeBounded(AgentProbeOptions(base_env), config.probe_timeout, &note);
      if (probe == nullptr) {
        TLOG(kWarning) << "GPU health re-check: " << note << "; re-joining regardless";
        return {};
      }
      return FatalGpuHealth(*probe);
    };
  }
  seams.client = run->client.get();
  seams.clock = Clock::Monotonic();
  seams.stdin_is_terminal = launcher::StdinIsForegroundTerminal();
  rendezvous::HealthServer* health_server = run->health.get();
  rendezvous::CoordinatorHost* coordinator_host = run->host.get();
  seams.set_serving = [health_server, coordinator_host](bool on) {
    if (health_server != nullptr) health_server->SetServing(on);
    if (coordinator_host != nullptr) coordinator_host->SetServing(on);
  };
  // Once the workers run and the agent is idle: the in-process coordinator's
  // ticker starts, a node probe that changes nothing here starts (logged
  // when it ends), and the code of start-up (static initialisers, options,
  // probe, join), which does not run again, leaves the resident set.
  seams.idle_with_workers = [&local_ticker = run->local_ticker, core = run->local_core.get(),
                             &config, &base_env] {
    StartNodeProbeOnceWorkersRun(config, base_env, &LogNodeProbe);
    if (core != nullptr) {
      local_ticker = std::make_unique<PeriodicThread>(rendezvous::kCoordinatorTickEvery,
                                                      [core] { core->Tick(); });
    }
    if (absl::Status s = DropCodePages(); !s.ok()) TLOG(kDebug) << s.message();
  };
  return seams;
}

// Health reports to the controller (docs/controller.md): a thread of
// their own; nothing the controller does reaches the job.
Reporter* StartReports(const RunConfig& config, uint64_t incarnation, RunServices* run) {
  rendezvous::TlsConfig controller_tls = config.tls;
  controller_tls.server_name.clear();  // --tls-server-name names the coordinator.
  run->report_transport = std::make_unique<GrpcReportTransport>(
      config.controller, config.token, controller_tls, config.report_interval);
  ReporterOptions ro;
  ro.job_id = config.job_id;
  ro.node_id = config.node_id;
  ro.incarnation = incarnation;
  ro.interval = config.report_interval;
  ro.send_timeout = std::min(absl::Seconds(2), config.report_interval);
  ro.command = CommandLineOf(config.command);
  for (const auto& [key, value] : config.topology_domains) {
    absl::StrAppend(&ro.topology, ro.topology.empty() ? "" : ",", key, "=", value);
  }
  ro.min_nodes = config.nnodes.min;
  ro.max_nodes = config.nnodes.max;
  ro.join_timeout = config.join_timeout;
  std::shared_ptr<const v1::NodeProbe> probe = config.node_probe;
  rendezvous::Coordinator* coordinator = run->host ? &run->host->core() : run->local_core.get();
  ro.enrich = [probe, coordinator](v1::HealthReport* r) {
    r->set_agent_rss_bytes(AgentRssBytes());
    if (probe) AddGpuReports(*probe, r);
    if (coordinator != nullptr) AddCoordinatorView(coordinator->GetSnapshot(), r);
  };
  run->reporter =
      std::make_unique<Reporter>(std::move(ro), run->report_transport.get(), Clock::Monotonic());
  run->reporter->Start();
  TLOG(kInfo) << "health reports to the controller at " << SafeForLog(config.controller)
              << " every " << absl::FormatDuration(config.report_interval);
  return run->reporter.get();
}

// Kubeflow Trainer's TrainJob progress (docs/kubernetes.md): where the pod
// has Trainer's status endpoint, a thread of its own sends the progress
// while this node has rank 0; nothing it meets reaches the job.
kubeflow::TrainerStatusSender* StartTrainJobStatus(
    const RunConfig& config, const std::map<std::string, std::string>& base_env, RunServices* run) {
  absl::StatusOr<std::optional<kubeflow::TrainerEndpoint>> endpoint =
      kubeflow::EndpointFromEnv(base_env);
  if (!endpoint.ok()) {
    TLOG(kWarning) << endpoint.status().message();
    return nullptr;
  }
  if (!endpoint->has_value()) {
    TLOG(kDebug) << "no " << kubeflow::kServerUrlEnv << ": the TrainJob's progress is not sent";
    return nullptr;
  }
  if (!config.kubeflow_progress) {
    TLOG(kInfo) << "--kubeflow-progress=false: the job's progress is not sent to "
                << SafeForLog((*endpoint)->url, 200);
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<kubeflow::OpenSslPoster>> poster =
      kubeflow::OpenSslPoster::Create(preflight::MakeAresResolver());
  if (!poster.ok()) {
    TLOG(kWarning) << "Kubeflow Trainer progress: " << poster.status().message();
    return nullptr;
  }
  run->trainjob_poster = std::move(*poster);
  kubeflow::SenderOptions options;
  options.endpoint = std::move(**endpoint);
  TLOG(kInfo) << "the job's progress goes to Kubeflow Trainer at "
              << SafeForLog(options.endpoint.url, 200)
              << " from the agent of node rank 0, at most every "
              << absl::FormatDuration(options.min_gap);
  run->trainjob_status = std::make_unique<kubeflow::TrainerStatusSender>(
      std::move(options), run->trainjob_poster.get(), Clock::Monotonic());
  run->trainjob_status->Start();
  return run->trainjob_status.get();
}

}  // namespace

int RunAgent(const RunConfig& config, const std::map<std::string, std::string>& base_env,
             const PlanSetup& setup) {
  const uint64_t incarnation = rendezvous::NewIncarnation();
  SetLogPrefix(absl::StrFormat("node=%s rank=? inc=%08x", config.node_id,
                               static_cast<uint32_t>(incarnation >> 32)));
  for (const std::string& note : config.notes) TLOG(kInfo) << note;
  for (const std::string& note : config.discovery_notes) TLOG(kInfo) << "discovered " << note;
  for (const std::string& warning : config.warnings) TLOG(kWarning) << warning;
  LogNodeProbe(config.node_probe);
  // An elastic job can go on without this node: a node whose GPUs need a
  // reset or a reboot leaves it at once, with a code a podFailurePolicy can
  // match to reschedule the pod elsewhere (docs/exit-codes.md).
  if (config.node_probe != nullptr && config.policy.max_restarts > 0) {
    const std::vector<std::string> fatal = FatalGpuHealth(*config.node_probe);
    if (!fatal.empty()) {
      for (const std::string& reason : fatal) TLOG(kError) << "GPU health: " << reason;
      TLOG(kError) << "this node's GPU health is fatal; leaving the elastic job so that the pod "
                      "is rescheduled on another node: exiting with code "
                   << kExitNodeUnhealthy;
      return kExitNodeUnhealthy;
    }
  }
  if (config.bind_numa && !launcher::MemoryPolicyAvailable()) {
    TLOG(kWarning) << "--bind-numa: this pod may not set memory policies (set_mempolicy is "
                      "refused; container seccomp profiles allow it only with CAP_SYS_NICE): "
                      "binding CPUs only";
  }

  RunServices run;
  launcher::Supervisor::Options supervision;
  // Progress from output reads what the supervisor relays, prefixed or not.
  if ((config.prefix_output || config.relay_output) &&
      config.progress_from_output.format != OutputFormat::kOff) {
    absl::StatusOr<std::unique_ptr<OutputProgress>> from_output =
        OutputProgress::Create(config.progress_from_output, Clock::Monotonic());
    if (!from_output.ok()) {  // validated with the options already
      TLOG(kError) << from_output.status().message();
      return kExitUsage;
    }
    run.output_progress = *std::move(from_output);
    supervision.on_worker_output = [p = run.output_progress.get()](int local_rank, int stream,
                                                                   absl::string_view bytes) {
      return p->OnOutput(local_rank, stream, bytes);
    };
  }
  if (auto supervisor = launcher::Supervisor::Create(supervision); supervisor.ok()) {
    run.supervisor = *std::move(supervisor);
  } else {
    TLOG(kError) << "cannot supervise workers: " << supervisor.status().message();
    return kExitOsError;
  }
  // Fail before any rendezvous when COMMAND cannot run, like tini.
  auto path = base_env.find("PATH");
  if (!config.command.empty()) {
    absl::StatusOr<std::string> resolved =
        launcher::ResolveCommand(config.command[0], path == base_env.end() ? "" : path->second);
    if (!resolved.ok()) {
      TLOG(kError) << resolved.status().message();
      return ExitCodeForSpawnError(resolved.status());
    }
  }
  // A single-node run: the coordinator inside this agent, called directly.
  const bool in_process = config.in_process_coordinator && !setup;
  int master_port = config.master_port;
  if (master_port == 0) {
    absl::StatusOr<int> port = in_process ? PickUnusedPortWithoutSocket() : PickFreePort();
    if (!port.ok()) {
      TLOG(kError) << port.status().message();
      return kExitOsError;
    }
    master_port = *port;
  }

  // --agent-store: the store starts now, beside the coordinator and the
  // connection; the agent joins once it listens.
  if (config.agent_store && setup) {
    TLOG(kWarning) << "--agent-store is for `run`'s torch workers; ignored here";
  } else if (config.agent_store) {
    const int port = AgentStorePort(config, master_port);
    // Whatever answers on the port is taken for the store: it must be ours.
    if (port <= 0 || AcceptsOnLoopback(port)) {
      TLOG(kError) << "--agent-store: "
                   << (port <= 0 ? absl::StrCat("no port for the store (--master-port - 1 is ",
                                                master_port - 1, ")")
                                 : absl::StrCat("port ", port, " already has a listener"))
                   << "; pick another --agent-store-port";
      return kExitConfig;
    }
    run.store = std::make_unique<AgentStore>(run.supervisor.get(), port);
    if (absl::Status s = run.store->Launch(AgentStoreSpec(config, base_env, port)); !s.ok()) {
      TLOG(kError) << "--agent-store: " << s.message();
      return ExitCodeForSpawnError(s);
    }
  }

  // The health server: grpc.health.v1 only (kubelet probes).
  if (config.health_port > 0) {
    auto started = rendezvous::HealthServer::Start(config.health_bind_addr, config.health_port);
    if (!started.ok()) {
      TLOG(kError) << started.status().message() << " (--health-port)";
      return kExitOsError;
    }
    run.health = std::move(*started);
  }

  if (std::optional<int> failed = StartCoordinator(config, incarnation, in_process, &run)) {
    return *failed;
  }
  Connect(config, in_process, &run);

  // Progress files (docs/progress.md); without them no hang detection.
  if (absl::StatusOr<std::unique_ptr<ProgressDir>> dir = ProgressDir::Create({}, base_env);
      dir.ok()) {
    run.progress = std::move(*dir);
  } else if (config.hang_timeout > absl::ZeroDuration()) {
    TLOG(kWarning) << dir.status().message() << "; --hang-timeout is off";
  } else {
    TLOG(kDebug) << dir.status().message();
  }

  if (run.store != nullptr) {
    int signal = 0;
    if (absl::Status s = run.store->AwaitListening(kAgentStoreStartTimeout, &signal); !s.ok()) {
      if (signal != 0) return 128 + signal;
      TLOG(kError) << s.message();
      return kExitConfig;
    }
  }
  AgentSeams seams = SeamsOf(config, base_env, &run);
  if (!config.controller.empty()) seams.reporter = StartReports(config, incarnation, &run);
  seams.trainjob_status = StartTrainJobStatus(config, base_env, &run);
  RoundOptions round_options = RoundOptionsFrom(config, incarnation, master_port);
  // The master's name, for the preflight's DNS check (the agent's thread).
  auto master = std::make_shared<std::string>();
  seams.round_starting = [store = run.store.get(), master](const v1::Assignment& a) {
    *master = a.master_addr();
    if (store != nullptr) store->OnRound(a);
  };
  if (run.store != nullptr) round_options.agent_store_port = run.store->port();
  if (!in_process && config.policy.preflight != v1::PREFLIGHT_OFF) {
    run.measuring = StartMeasuring(config, &run);
    if (run.measuring != nullptr) seams.client = run.measuring.get();
  }
  run.preflight = MakePreflightRunner(config, base_env, incarnation, master, run.measuring.get());
  seams.preflight = run.preflight.get();
  // Made whatever --slow-nodes says here: the coordinator's assignment
  // (slow_signals_interval_ms) decides whether it samples.
  run.tcp_diag = NewSockDiagSource();
  ProcSlowSampler::Options slow;
  slow.proc_root = seams.proc_root;
  slow.tcp = run.tcp_diag.get();
  run.gpu_clocks = StartGpuClocks(config, base_env, seams.clock);
  slow.gpu = run.gpu_clocks.get();
  run.slow = std::make_unique<ProcSlowSampler>(std::move(slow));
  seams.slow = run.slow.get();
  if (setup) {
    absl::StatusOr<LaunchPlan*> plan = setup(run.supervisor.get(), &round_options);
    if (!plan.ok()) {
      TLOG(kError) << plan.status().message();
      return ExitCodeForConfigError(plan.status());
    }
    seams.plan = *plan;
  }
  Agent& agent = run.agent.emplace(config, base_env, std::move(round_options), seams);
  const int exit_code = agent.Run();
  launcher::SetTerminationReason(agent.status().exit_reason);
  // The final state goes out once more (at most 500 ms, and only when the
  // controller answered the last report); the exit code is already decided.
  if (run.reporter) run.reporter->Stop(absl::Milliseconds(500));
  // The job's final progress to Kubeflow Trainer likewise (at most 1 s).
  if (run.trainjob_status) run.trainjob_status->Stop(absl::Seconds(1));
  return exit_code;  // `run` tears everything down, in order.
}

}  // namespace trainlet::agent
