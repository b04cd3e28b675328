#include "agent/agent.h"

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/gpu_placement.h"
#include "agent/worker_env.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "controller/report_limits.h"
#include "launcher/signals.h"
#include "progress/hang_evidence.h"
#include "topology/env_advice.h"

namespace trainlet::agent {
namespace {

// Above this many nodes the member list is not requested (TF_CONFIG would
// not fit in an environment variable anyway); see docs/environment.md.
constexpr int kMaxNodesForMemberList = 256;
// The loop wakes at least this often, whatever the machine's deadlines.
constexpr absl::Duration kMaxWait = absl::Seconds(1);
// The worker group's WatchFd slots: 0 the progress directory, 1 the liveness socket.
constexpr int kLivenessFdSlot = 1;
// How long Run() waits for the last reports and the leave to go out.
constexpr absl::Duration kFlushTimeout = absl::Seconds(2);
// Progress files are read at most this often.
constexpr absl::Duration kProgressMinInterval = absl::Milliseconds(100);
// The slow-node sampling interval the agent takes from an assignment:
// shorter ones are taken as the shortest (its cost grows with the rate).
constexpr absl::Duration kMinSlowInterval = absl::Seconds(1);
constexpr absl::Duration kMaxSlowInterval = absl::Minutes(10);

}  // namespace

RoundOptions RoundOptionsFrom(const RunConfig& config, uint64_t incarnation, int master_port) {
  RoundOptions o;
  o.me.set_node_id(config.node_id);
  o.me.set_incarnation(incarnation);
  o.job_id = config.job_id;
  o.rank_hint = config.node_rank_hint;
  o.advertise_addr = config.advertise_addr;
  o.local_world_size = config.nproc_per_node;
  o.master_port = master_port;
  o.want_nodes = config.nnodes.max <= kMaxNodesForMemberList;
  o.elastic = config.policy.max_restarts > 0;
  o.grace_period = config.grace_period;
  o.join_timeout = config.join_timeout;
  o.hang_timeout = config.hang_timeout;
  if (config.node_probe != nullptr) o.topology = JoinTopology(*config.node_probe);
  for (const auto& [key, value] : config.topology_domains) {
    v1::TopologyDomain& d = o.domains.emplace_back();
    d.set_key(key);
    d.set_value(value);
  }
  o.rank_order = config.rank_order;
  o.scheduler_placement = config.scheduler_placement;
  o.rank_hint_from_index = config.node_rank_from_index;
  return o;
}

void TorchrunPlan::Prepare(const v1::Assignment& assignment, Ready ready) {
  std::vector<std::string> notes;
  auto specs = WorkerSpecsFor(config_, base_env_, assignment, give_terminal_, &notes);
  // Placement and NCCL advice change only with the round's shape: say them
  // once, at DEBUG afterwards.
  const bool first = !said_placement_;
  said_placement_ = true;
  for (const std::string& note : notes) {
    if (first) {
      TLOG(kInfo) << note;
    } else {
      TLOG(kDebug) << note;
    }
  }
  ready(std::move(specs));
}

std::vector<launcher::ProcessSpec> WorkerSpecsFor(
    const RunConfig& config, const std::map<std::string, std::string>& base_env,
    const v1::Assignment& a, bool give_terminal, std::vector<std::string>* notes) {
  WorkerEnvInput in;
  in.job_id = config.job_id;
  in.node_rank = a.node_rank();
  in.nnodes = a.nnodes();
  in.local_world_size = a.self().local_world_size();
  in.first_global_rank = a.self().first_global_rank();
  in.world_size = a.world_size();
  in.master_addr = a.master_addr();
  in.master_port = a.master_port();
  in.agent_store_port = a.agent_store_port();
  in.restart_count = a.restart_count();
  in.max_restarts = a.max_restarts();
  for (const auto& n : a.nodes()) in.nodes.push_back({n.addr(), n.local_world_size()});
  in.self_addr = a.self().addr();
  in.nested = DetectNestedLauncher(config.command);

  std::vector<WorkerPlacement> placement;
  if (config.node_probe != nullptr) {
    PlacementInput p;
    p.local_world_size = in.local_world_size;
    p.gpu_binding = config.gpu_binding;
    p.bind_numa = config.bind_numa;
    p.allowed_cpus = config.allowed_cpus;
    p.env = base_env;
    placement = PlanPlacement(*config.node_probe, p);
  }
  // NCCL/CUDA advice (topology/env_advice.h): never over what the user set.
  topology::EnvAdvice advice;
  const bool nccl = config.node_probe != nullptr && topology::NcclAdviceApplies(*config.node_probe);
  if (nccl) {
    topology::EnvContext context;
    // What the user set: the environment, and NCCL's own config files
    // (which NCCL applies without overwriting, so advice would override them).
    context.user_env = config.nccl_conf_vars;
    for (const auto& [k, v] : base_env) context.user_env[k] = v;
    context.nccl_hostid = a.self().nccl_hostid();
    if (a.nnodes() > 1) {
      // The same rule on every node (node 0 included): the interface
      // towards the job's first numeric address.
      std::vector<std::string> job_addrs = {a.master_addr()};
      for (const auto& n : a.nodes()) job_addrs.push_back(n.addr());
      context.socket_interface = topology::JobSocketInterface(job_addrs);
      if (context.socket_interface.empty()) context.advertise_addr = a.self().addr();
    }
    advice = topology::AdviseEnv(*config.node_probe, context);
  }
  if (notes != nullptr) {
    for (const WorkerPlacement& p : placement) {
      if (!p.note.empty()) notes->push_back(p.note);
    }
    for (const topology::EnvVar& v : advice.vars) {
      notes->push_back(absl::StrCat("NCCL advice: ", v.name, "=", SafeForLog(v.value, 200)));
    }
    for (const std::string& n : advice.notes) notes->push_back("NCCL advice: " + n);
    if (nccl && a.self().colocated() > 1 && a.self().nccl_hostid().empty()) {
      notes->push_back(absl::StrCat(
          a.self().colocated() - 1,
          " other pod(s) of this job run on this machine, not sharing this pod's IPC namespace "
          "and GPUs: NCCL takes them for other hosts and goes through the network between "
          "them; run one pod per node, or give the pods hostIPC and all of the node's GPUs "
          "(trainlet then sets NCCL_HOSTID)"));
    }
  }

  std::vector<launcher::ProcessSpec> specs;
  for (int l = 0; l < in.local_world_size; ++l) {
    launcher::ProcessSpec s;
    s.role = launcher::ProcessRole::kWorker;
    s.local_rank = l;
    s.global_rank = in.first_global_rank + l;
    s.name = absl::StrCat("rank ", s.global_rank);
    s.argv = config.command;
    s.env = BuildWorkerEnv(base_env, in, l);
    for (const topology::EnvVar& v : advice.vars) {
      SetEnvVar(&s.env, v.name, v.value, /*overwrite=*/false);
    }
    if (l < static_cast<int>(placement.size())) {
      const WorkerPlacement& p = placement[l];
      if (p.cuda_visible_devices.has_value()) {
        SetEnvVar(&s.env, "CUDA_VISIBLE_DEVICES", *p.cuda_visible_devices, /*overwrite=*/true);
      }
      // PaddlePaddle picks its device from FLAGS_selected_gpus (its
      // launcher sets it): the worker's GPU among those it sees.
      if (p.gpu_ordinal >= 0 && config.gpu_binding != GpuBinding::kNone) {
        SetEnvVar(&s.env, "FLAGS_selected_gpus",
                  config.gpu_binding == GpuBinding::kSingle ? "0" : absl::StrCat(p.gpu_ordinal),
                  /*overwrite=*/false);
      }
      s.cpus = p.cpus;
      s.numa_node = p.numa_node;
    }
    s.output = config.prefix_output  ? launcher::OutputMode::kPrefix
               : config.relay_output ? launcher::OutputMode::kRelay
                                     : launcher::OutputMode::kDirect;
    s.foreground_tty = give_terminal && in.local_world_size == 1;
    specs.push_back(std::move(s));
  }
  return specs;
}

Agent::Agent(const RunConfig& config, std::map<std::string, std::string> base_env,
             RoundOptions options, AgentSeams seams)
    : config_(config),
      base_env_(std::move(base_env)),
      seams_(std::move(seams)),
      machine_(std::move(options), seams_.clock) {
  if (seams_.plan == nullptr) {
    default_plan_ = std::make_unique<TorchrunPlan>(config_, base_env_, seams_.stdin_is_terminal);
    warm_ = std::make_unique<WarmWorkers>(config_);
  }
  plan_ = seams_.plan != nullptr ? seams_.plan : default_plan_.get();
  // The handler runs before the same Report's callback, on the same thread.
  seams_.client->SetReportResponseHandler([plan = plan_, heard = udp_heard_,
                                           lines = preflight_lines_,
                                           slow = slow_lines_](const v1::ReportResponse& r) {
    heard->store(r.udp_heard());
    lines->Log(r.preflight_warnings());
    slow->Log(r.slow_nodes());
    plan->OnReportResponse(r);
  });
}

int Agent::Run() {
  Execute(machine_.Start());
  PublishStatus();
  while (!machine_.done()) {
    absl::Time next = machine_.NextDeadline();
    if (warm_ != nullptr) next = std::min(next, warm_->NextDeadline());
    if (slow_sampling_) next = std::min(next, seams_.slow->NextDeadline());
    if (seams_.output_progress != nullptr && seams_.clock->Now() < progress_quiet_until_) {
      next = std::min(next, progress_quiet_until_);  // what the output said meanwhile
    }
    if (seams_.progress != nullptr && seams_.progress->fd() >= 0) {
      const bool quiet = seams_.clock->Now() < progress_quiet_until_;
      if (quiet) next = std::min(next, progress_quiet_until_);
      if (quiet == progress_fd_watched_) {
        progress_fd_watched_ = !quiet;
        seams_.workers->WatchFd(quiet ? -1 : seams_.progress->fd());
      }
    }
    if (const int fd = seams_.client->liveness_fd(); fd != liveness_fd_watched_) {
      liveness_fd_watched_ = fd;
      seams_.workers->WatchFd(fd, kLivenessFdSlot);
    }
    const absl::Duration timeout =
        std::clamp(next - seams_.clock->Now(), absl::ZeroDuration(), kMaxWait);
    launcher::WorkerGroup::Event ev = seams_.workers->Wait(timeout);
    using Type = launcher::WorkerGroup::EventType;
    switch (ev.type) {
      case Type::kWorkerExited:
        if (auto w = workers_.find(ev.exit.local_rank);
            ev.exit.role == launcher::ProcessRole::kWorker && w != workers_.end()) {
          w->second.pid = 0;
          w->second.exited = true;
          w->second.exit_code = ev.exit.exit_code;
        }
        Feed(WorkerExited{ev.exit});
        break;
      case Type::kHelperExited:
        break;  // the supervisor logged it and restarts it by its policy.
      case Type::kWorkersGone:
        Feed(WorkersGone{});
        break;
      case Type::kSignal:
        Feed(SignalReceived{ev.signal});
        break;
      case Type::kTimeout:
        if (idle_hook_ == IdleHook::kDue) {
          idle_hook_ = IdleHook::kDone;
          if (seams_.idle_with_workers) seams_.idle_with_workers();
        }
        break;
      case Type::kFdReady:  // the progress directory (inotify), the liveness socket.
      case Type::kWakeup:
        break;
    }
    // Each turn, unless read just now: cheap with inotify (a non-blocking
    // read that finds nothing), a stat() per worker without it.
    if ((seams_.progress != nullptr || seams_.output_progress != nullptr) &&
        seams_.clock->Now() >= progress_quiet_until_) {
      CollectProgress();
    }
    // The coordinator's acks of this node's liveness datagrams: a turn
    // comes at least every datagram interval, so none waits long.
    acks_.clear();
    directive_datagrams_.clear();
    seams_.client->TakeLivenessDatagrams(&acks_, &directive_datagrams_);
    for (const rendezvous::LivenessBytes& ack : acks_) Feed(DatagramReceived{ack});
    for (std::string& d : directive_datagrams_) Feed(DirectiveDatagramReceived{std::move(d)});
    DrainInbox();
    Feed(Tick{});
    if (warm_ != nullptr) warm_->Tick(seams_.clock->Now(), seams_.workers);
    if (seams_.preflight != nullptr) {
      if (std::optional<v1::PreflightReport> r = seams_.preflight->Poll()) {
        if (seams_.reporter != nullptr) seams_.reporter->SetPreflight(*r);
        preflight_report_ = std::move(r);
        Feed(ReportDue{});
      }
    }
    StopSlowSamplingUnlessRunning();
    if (slow_sampling_) {
      if (std::optional<v1::SlowSignals> s = seams_.slow->Poll(seams_.clock->Now())) {
        TLOG(kDebug) << "slow-node signals: " << SlowSignalsText(*s);
        slow_report_ = std::move(s);
        Feed(ReportDue{});
        // (A round that stopped meanwhile never sends them.)
        slow_report_.reset();
      }
    }
    if (!machine_.done()) {
      if (absl::Status s = plan_->Tick(seams_.clock->Now()); !s.ok()) {
        Feed(LocalFailure{ExitCodeForPlanError(s), std::string(s.message())});
      }
    }
    PublishStatus();
  }
  if (round_started_) plan_->EndRound();
  StopSlowSamplingUnlessRunning();
  if (progress_fd_watched_) seams_.workers->WatchFd(-1);
  if (liveness_fd_watched_ >= 0) seams_.workers->WatchFd(-1, kLivenessFdSlot);
  watch_.reset();
  if (!seams_.client->Flush(kFlushTimeout)) {
    TLOG(kDebug) << "some reports did not reach the coordinator before exit";
  }
  return exit_code_;
}

void Agent::Feed(const RoundEvent& event) {
  if (machine_.done()) return;
  Execute(machine_.Handle(event));
}

void Agent::Post(RoundEvent event) {
  {
    absl::MutexLock lock(&inbox_mu_);
    inbox_.push_back(std::move(event));
  }
  seams_.workers->Wake();
}

void Agent::DrainInbox() {
  std::deque<RoundEvent> events;
  {
    absl::MutexLock lock(&inbox_mu_);
    events.swap(inbox_);
  }
  for (const RoundEvent& e : events) Feed(e);
  StartPrepared();
}

void Agent::PostPrepared(uint64_t round, absl::StatusOr<std::vector<launcher::ProcessSpec>> specs) {
  {
    absl::MutexLock lock(&inbox_mu_);
    prepared_ = Prepared{round, std::move(specs)};
  }
  seams_.workers->Wake();
}

void Agent::StartPrepared() {
  std::optional<Prepared> prepared;
  {
    absl::MutexLock lock(&inbox_mu_);
    prepared.swap(prepared_);
  }
  if (!prepared.has_value() || prepared->round != preparing_round_ || preparing_round_ == 0) {
    return;  // none, or of a round that was stopped meanwhile.
  }
  preparing_round_ = 0;
  if (!prepared->specs.ok()) {
    Feed(WorkersStarted{prepared->specs.status(), ExitCodeForPlanError(prepared->specs.status())});
    return;
  }
  std::vector<launcher::ProcessSpec>& specs = *prepared->specs;
  if (seams_.progress != nullptr) {
    int ranks = 0;
    for (launcher::ProcessSpec& spec : specs) {
      if (spec.role != launcher::ProcessRole::kWorker) continue;
      ranks = std::max(ranks, spec.local_rank + 1);
      SetEnvVar(&spec.env, "TRAINLET_PROGRESS_FILE", seams_.progress->ProgressFile(spec.local_rank),
                /*overwrite=*/true);
      SetEnvVar(&spec.env, "TRAINLET_TRACEBACK_FILE",
                seams_.progress->TracebackFile(spec.local_rank), /*overwrite=*/true);
    }
    seams_.progress->Reset(ranks);
    progress_pids_.clear();
  }
  if (seams_.output_progress != nullptr) {
    int ranks = 0;
    for (const launcher::ProcessSpec& spec : specs) {
      if (spec.role == launcher::ProcessRole::kWorker) ranks = std::max(ranks, spec.local_rank + 1);
    }
    seams_.output_progress->Reset(ranks);
  }
  file_progress_.clear();
  if (warm_ != nullptr) warm_->BeforeStart(&specs, seams_.workers);
  absl::Status started = seams_.workers->Start(specs);
  if (started.ok() && warm_ != nullptr) {
    warm_->AfterStart(specs, seams_.workers, seams_.clock->Now());
  }
  if (started.ok() && seams_.preflight != nullptr) seams_.preflight->AfterStart(prepared->round);
  if (started.ok() && idle_hook_ == IdleHook::kNotYet) idle_hook_ = IdleHook::kDue;
  workers_.clear();
  if (started.ok()) {
    for (const launcher::ProcessSpec& spec : specs) {
      if (spec.role != launcher::ProcessRole::kWorker) continue;
      WorkerStatus& w = workers_[spec.local_rank];
      w.local_rank = spec.local_rank;
      w.global_rank = spec.global_rank;
      w.pid = seams_.workers->worker_pid(spec.local_rank);
    }
    StartSlowSampling();
  }
  Feed(WorkersStarted{std::move(started)});
}

void Agent::StartSlowSampling() {
  if (seams_.slow == nullptr || slow_interval_ <= absl::ZeroDuration() || workers_.empty()) {
    return;
  }
  std::vector<pid_t> pids(workers_.rbegin()->first + 1, 0);  // by local rank
  for (const auto& [local_rank, w] : workers_) {
    if (local_rank >= 0) pids[local_rank] = w.pid;
  }
  seams_.slow->StartRound(pids, slow_interval_, seams_.clock->Now());
  slow_sampling_ = true;
}

void Agent::StopSlowSamplingUnlessRunning() {
  if (!slow_sampling_ || (!machine_.done() && machine_.state() == RoundState::kRunning)) return;
  seams_.slow->EndRound();
  slow_sampling_ = false;
}

void Agent::CollectProgress() {
  std::vector<ProgressUpdate> updates;
  if (seams_.progress != nullptr) updates = seams_.progress->Collect();
  for (const ProgressUpdate& u : updates) file_progress_.insert(u.local_rank);
  if (seams_.output_progress != nullptr) {
    for (ProgressUpdate& u : seams_.output_progress->Collect()) {
      if (file_progress_.count(u.local_rank) == 0) updates.push_back(std::move(u));
    }
  }
  if (!updates.empty()) progress_quiet_until_ = seams_.clock->Now() + kProgressMinInterval;
  for (ProgressUpdate& u : updates) {
    std::string text;
    if (u.line.has_value()) {
      text = u.line->Text();
      int pid = 0;
      if (const std::string* p = u.line->Find("pid"); p != nullptr && absl::SimpleAtoi(*p, &pid)) {
        progress_pids_[u.local_rank] = pid;
      }
      int64_t step = 0;
      if (const std::string* v = u.line->Find("step");
          slow_sampling_ && v != nullptr && absl::SimpleAtoi(*v, &step)) {
        seams_.slow->OnStep(u.local_rank, step, seams_.clock->Now());
      }
    }
    Feed(ProgressReported{u.local_rank, std::move(text)});
  }
}

void Agent::RequestTracebackOf(int local_rank) {
  const pid_t leader = seams_.workers->worker_pid(local_rank);
  std::string note;
  bool sent = false;
  int64_t before = -1;  // the traceback file's size before the signal.
  if (seams_.progress == nullptr || !seams_.progress->TracebackOptedIn(local_rank)) {
    note = "not requested: the worker did not create TRAINLET_TRACEBACK_FILE (docs/progress.md)";
  } else if (leader <= 0) {
    note = "not requested: the worker is gone";
  } else {
    // The process that reported (pid=N) if it is one of the worker's own
    // process group (a shell's python child), else the worker itself.
    pid_t target = leader;
    auto reported = progress_pids_.find(local_rank);
    if (reported != progress_pids_.end() && reported->second > 0 &&
        ProcessGroupOf(reported->second, seams_.proc_root) == leader) {
      target = reported->second;
    }
    before = seams_.progress->TracebackBytes(local_rank);
    if (kill(target, SIGUSR1) == 0) {
      sent = true;
      traceback_pids_[local_rank] = target;
      note = absl::StrCat("sent SIGUSR1 to pid ", target);
      TLOG(kInfo) << "asking worker local rank " << local_rank << " (pid " << target
                  << ") for its Python stacks (SIGUSR1)";
    } else {
      note = absl::StrCat("SIGUSR1 to pid ", target, " failed: ", strerror(errno));
    }
  }
  traceback_notes_[local_rank] = note;
  Feed(TracebackRequested{local_rank, sent, before});
}

void Agent::CollectEvidence(std::vector<HangEvidence> evidence) {
  HangEvidenceCollected collected;
  collected.report.set_collected(true);
  for (HangEvidence& e : evidence) {
    e.pid = seams_.workers->worker_pid(e.local_rank);
    if (e.pid > 0) e.processes = ReadProcessGroup(e.pid, &e.processes_total, seams_.proc_root);
    e.output_relayed = config_.prefix_output || config_.relay_output;
    e.output_tail = seams_.workers->OutputTail(e.local_rank);
    e.traceback_note =
        e.exited ? "not requested: the worker had exited" : traceback_notes_[e.local_rank];
    e.traceback_pid = traceback_pids_[e.local_rank];
    if (seams_.progress != nullptr && !e.exited) {
      e.traceback = seams_.progress->ReadTraceback(e.local_rank);
    }
    e.place = PlaceOf(e);
    // One log line per evidence line, each escaped (ToText does): the
    // whole evidence stays on the node.
    for (absl::string_view line : absl::StrSplit(e.ToText(), '\n', absl::SkipEmpty())) {
      TLOG(kError) << "hang evidence: " << line;
    }
    *collected.report.add_workers() = Summarize(e);
  }
  traceback_notes_.clear();
  traceback_pids_.clear();
  evidence_ = std::move(evidence);
  Feed(collected);
}

void Agent::OnHangJudged(const HangJudged& judged) {
  auto suspect = std::find_if(evidence_.begin(), evidence_.end(), [&](const HangEvidence& e) {
    return e.local_rank == judged.suspect_local_rank;
  });
  if (suspect == evidence_.end()) return;  // the suspect is another node's: that node reports
  // The suspect's evidence first, then the rest of this node's, within the
  // controller's bound; this node's log has every line.
  std::string text = absl::StrCat("hang: ", judged.summary, "\n", suspect->ToText());
  for (const HangEvidence& e : evidence_) {
    if (&e != &*suspect) absl::StrAppend(&text, e.ToText());
  }
  constexpr absl::string_view kCut =
      "\n...(cut: every line is in this node's log, the 'hang evidence:' lines)\n";
  if (text.size() > controller::kMaxHangEvidenceLength) {
    text.resize(controller::kMaxHangEvidenceLength - kCut.size());
    text.append(kCut.data(), kCut.size());
  }
  if (seams_.reporter != nullptr) {
    seams_.reporter->AddEvent(v1::ReportEvent::HANG, absl::StrCat("hang: ", judged.summary),
                              std::move(text));
  }
  absl::MutexLock lock(&status_mu_);
  last_hang_ = std::make_shared<const HangEvidence>(*suspect);
}

void Agent::Execute(const std::vector<RoundAction>& actions) {
  for (const RoundAction& action : actions) {
    std::visit(
        [&](const auto& a) {
          using T = std::decay_t<decltype(a)>;
          if constexpr (std::is_same_v<T, StartJoin>) {
            if (round_started_) plan_->EndRound();  // a re-join: the old round is over.
            round_started_ = false;
            // A worker that failed or hung may have taken its GPU down with
            // it: an unhealthy node leaves instead of joining again.
            if (a.after_local_failure && seams_.node_health) {
              const std::vector<std::string> fatal = seams_.node_health();
              for (const std::string& reason : fatal) TLOG(kError) << "GPU health: " << reason;
              if (!fatal.empty()) Feed(NodeUnhealthy{absl::StrJoin(fatal, "; ")});
              if (machine_.done()) return;
            }
            std::optional<v1::PreflightReport> checked;
            if (!a.on_stream && join_preflight_.has_value()) {
              // The Join call a re-join by datagram fell back to: its report
              // was just taken.
              checked.swap(join_preflight_);
            } else if (seams_.preflight != nullptr) {
              checked = seams_.preflight->BeforeJoin(a.request.last_round(), a.after_local_failure,
                                                     a.recheck);
              if (checked.has_value() && seams_.reporter != nullptr) {
                seams_.reporter->SetPreflight(*checked);
              }
            }
            if (a.on_stream) {  // a re-join by datagram: no Join call.
              if (checked.has_value()) {
                // A datagram cannot carry the report (the coordinator must
                // see a failure, or that an old one is gone): a Join call.
                join_preflight_ = std::move(checked);
                Post(StreamEnded{watch_id_, absl::AbortedError("a preflight check failed; "
                                                               "re-joining by a Join call")});
              }
              return;
            }
            v1::JoinRequest request = a.request;
            if (!checked.has_value()) checked.swap(join_preflight_);
            join_preflight_.reset();
            if (checked.has_value()) *request.mutable_preflight() = *std::move(checked);
            seams_.client->Join(request, a.timeout, [this](absl::StatusOr<v1::Assignment> r) {
              Post(JoinAnswered{std::move(r)});
            });
          } else if constexpr (std::is_same_v<T, CancelJoin>) {
            seams_.client->CancelJoin();
          } else if constexpr (std::is_same_v<T, OpenWatch>) {
            watch_.reset();  // waits for the old stream's callbacks
            const uint64_t id = a.watch_id;
            watch_id_ = id;
            watch_ = seams_.client->Watch(
                a.request,
                [this, id, lines = preflight_lines_, slow = slow_lines_](const v1::Directive& d) {
                  // Only lines to log: not the round machine's business.
                  if (d.has_preflight_warnings()) return lines->Log(d.preflight_warnings().lines());
                  if (d.has_slow_nodes()) return slow->Log(d.slow_nodes().lines());
                  Post(DirectiveReceived{id, d});
                },
                [this, id](const absl::Status& s) {
                  Post(StreamEnded{id, s});
                });
          } else if constexpr (std::is_same_v<T, CloseWatch>) {
            watch_.reset();
          } else if constexpr (std::is_same_v<T, StartWorkers>) {
            round_started_ = true;
            const uint64_t round = a.assignment.round();
            slow_interval_ =
                a.assignment.slow_signals_interval_ms() <= 0
                    ? absl::ZeroDuration()
                    : std::clamp(absl::Milliseconds(a.assignment.slow_signals_interval_ms()),
                                 kMinSlowInterval, kMaxSlowInterval);
            preparing_round_ = round;
            if (seams_.round_starting) seams_.round_starting(a.assignment);
            if (seams_.preflight != nullptr) {
              seams_.preflight->SetPolicy(a.assignment.preflight_policy());
              seams_.preflight->OnAssignment(a.assignment);
            }
            preflight_lines_->Log(a.assignment.preflight_warnings());
            plan_->Prepare(a.assignment,
                           [this, round](absl::StatusOr<std::vector<launcher::ProcessSpec>> specs) {
                             PostPrepared(round, std::move(specs));
                           });
            StartPrepared();  // a plan that answered at once (`run`) starts now.
          } else if constexpr (std::is_same_v<T, SignalWorkers>) {
            if (preparing_round_ != 0) {
              // Nothing runs yet. A stop (SIGTERM, SIGKILL, ...) cancels the
              // preparation; another signal (SIGUSR1) has no one to reach.
              if (a.signal == SIGKILL || launcher::IsTerminatingSignal(a.signal)) {
                plan_->CancelPrepare();
                preparing_round_ = 0;
                Feed(WorkersGone{});
              }
            }
            if (preparing_round_ == 0) seams_.workers->SignalWorkers(a.signal);
          } else if constexpr (std::is_same_v<T, SendReport>) {
            const uint64_t round = a.request.round();
            const auto state = a.request.state();
            v1::ReportRequest report = a.request;
            plan_->DecorateReport(&report);
            // The next Report carries it, whichever round that is (the
            // checks do not change with it).
            if (preflight_report_.has_value()) {
              *report.mutable_preflight() = *std::move(preflight_report_);
              preflight_report_.reset();
            }
            // An interval's slow-node signals go on the round's RUNNING
            // Report only.
            if (slow_report_.has_value() && state == v1::ReportRequest::RUNNING) {
              *report.mutable_slow() = *std::move(slow_report_);
              slow_report_.reset();
            }
            seams_.client->Report(report, [this, round, state](const absl::Status& s) {
              Post(ReportAnswered{round, state, s, s.ok() && udp_heard_->load()});
            });
          } else if constexpr (std::is_same_v<T, SendLiveness>) {
            seams_.client->SendLivenessDatagram(a.datagram);
          } else if constexpr (std::is_same_v<T, SendLeave>) {
            seams_.client->Leave(a.request, nullptr);
          } else if constexpr (std::is_same_v<T, SetServing>) {
            if (seams_.set_serving) seams_.set_serving(a.serving);
          } else if constexpr (std::is_same_v<T, RequestTraceback>) {
            RequestTracebackOf(a.local_rank);
          } else if constexpr (std::is_same_v<T, CollectHangEvidence>) {
            CollectEvidence(a.evidence);
          } else if constexpr (std::is_same_v<T, HangJudged>) {
            OnHangJudged(a);
          } else if constexpr (std::is_same_v<T, CheckTraceback>) {
            Feed(TracebackSize{a.local_rank, seams_.progress != nullptr
                                                 ? seams_.progress->TracebackBytes(a.local_rank)
                                                 : -1});
          } else {
            static_assert(std::is_same_v<T, Finish>);
            if (preparing_round_ != 0) {
              plan_->CancelPrepare();
              preparing_round_ = 0;
            }
            exit_code_ = a.exit_code;
          }
        },
        action);
  }
}

void Agent::PublishStatus() {
  AgentStatus s = machine_.status();
  s.workers.reserve(workers_.size());
  for (const auto& [local_rank, w] : workers_) s.workers.push_back(w);
  {
    absl::MutexLock lock(&status_mu_);
    s.last_hang = last_hang_;
    status_ = s;
  }
  if (seams_.reporter != nullptr) seams_.reporter->Update(s);
  if (seams_.trainjob_status != nullptr) seams_.trainjob_status->Update(s);
}

AgentStatus Agent::status() const {
  absl::MutexLock lock(&status_mu_);
  return status_;
}

}  // namespace trainlet::agent
