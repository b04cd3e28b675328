#include "rendezvous/coordinator.h"

#include <sys/random.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <random>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/exit_codes.h"
#include "common/host_names.h"
#include "common/logging.h"
#include "preflight/check_result.h"
#include "rendezvous/colocation.h"
#include "rendezvous/error_reason.h"
#include "rendezvous/protocol_version.h"
#include "rendezvous/rank_assignment.h"
#include "rendezvous/rank_order.h"

namespace trainlet::rendezvous {

// How the network measurement's blame starts a member's failed-check line.
constexpr absl::string_view kNetworkFailurePrefix = "network: ";
namespace {

// At most this many missing ranks or nodes are named in one line.
constexpr int kMaxNamed = 8;
// Rejected requests logged per 10 s; the rest are counted.
constexpr int kRejectLogBurst = 5;

bool IsPrintableAscii(absl::string_view s, bool allow_space) {
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || (c == ' ' && !allow_space)) return false;
  }
  return true;
}

// "node-a/0000000000000001" for our own log lines (never for replies).
std::string Who(const v1::Member& m) {
  return absl::StrFormat("%s/%016x", SafeForLog(m.node_id(), 64), m.incarnation());
}

absl::Status CheckIdentity(const v1::Member& m) {
  if (m.node_id().empty()) return absl::InvalidArgumentError("member.node_id: must not be empty");
  if (m.node_id().size() > kMaxIdLength) {
    return absl::InvalidArgumentError(absl::StrFormat("member.node_id: at most %d bytes, got %d",
                                                      kMaxIdLength, m.node_id().size()));
  }
  if (!IsPrintableAscii(m.node_id(), /*allow_space=*/false)) {
    return absl::InvalidArgumentError(
        "member.node_id: only printable ASCII without spaces is allowed");
  }
  if (m.incarnation() == 0) {
    return absl::InvalidArgumentError("member.incarnation: must be non-zero");
  }
  return absl::OkStatus();
}

// The job id is compared, never echoed: a caller that does not know it must
// not learn it from the reply.
absl::Status CheckJobId(absl::string_view job_id, absl::string_view want) {
  if (job_id == want) return absl::OkStatus();
  return absl::PermissionDeniedError(
      "job_id: this coordinator serves another job; check --job-id on both sides");
}

absl::Status CheckTopology(const v1::Topology& t) {
  if (t.gpu_count() < 0 || t.gpu_count() > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(absl::StrFormat("topology.gpu_count: expected 0..%d, got %d",
                                                      kMaxGpusPerNode, t.gpu_count()));
  }
  if (t.gpu_uuids_size() > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "topology.gpu_uuids: at most %d entries, got %d", kMaxGpusPerNode, t.gpu_uuids_size()));
  }
  for (const std::string& uuid : t.gpu_uuids()) {
    if (uuid.empty() || uuid.size() > kMaxGpuUuidLength ||
        !IsPrintableAscii(uuid, /*allow_space=*/false)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "topology.gpu_uuids: each entry is 1..%d bytes of printable ASCII without spaces",
          kMaxGpuUuidLength));
    }
  }
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"boot_id", &t.boot_id()},
        {"ipc_namespace", &t.ipc_namespace()},
        {"nvlink_clique", &t.nvlink_clique()}}) {
    if (value->size() > kMaxHostIdentityLength ||
        !IsPrintableAscii(*value, /*allow_space=*/false)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topology.%s: at most %d bytes of printable ASCII without spaces", field,
                          kMaxHostIdentityLength));
    }
  }
  if (t.numa_nodes() < 0 || t.numa_nodes() > kMaxNumaNodes) {
    return absl::InvalidArgumentError(absl::StrFormat("topology.numa_nodes: expected 0..%d, got %d",
                                                      kMaxNumaNodes, t.numa_nodes()));
  }
  if (t.nccl_version().size() > kMaxNcclVersionLength ||
      !IsPrintableAscii(t.nccl_version(), /*allow_space=*/false)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topology.nccl_version: at most %d bytes of printable ASCII without spaces",
                        kMaxNcclVersionLength));
  }
  return absl::OkStatus();
}

absl::Status CheckSsh(const v1::SshInfo& ssh) {
  if (ssh.host_public_key().size() > kMaxSshKeyLength ||
      !IsPrintableAscii(ssh.host_public_key(), /*allow_space=*/true)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ssh.host_public_key: one line of at most %d bytes of printable ASCII", kMaxSshKeyLength));
  }
  if (ssh.client_public_key().size() > kMaxSshKeyLength ||
      !IsPrintableAscii(ssh.client_public_key(), /*allow_space=*/true)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ssh.client_public_key: one line of at most %d bytes of printable ASCII",
                        kMaxSshKeyLength));
  }
  if (ssh.port() < 0 || ssh.port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ssh.port: expected 0..65535, got %d", ssh.port()));
  }
  return absl::OkStatus();
}

// "rank 2", "ranks 2 and 5", "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 12 more".
std::string NameRanks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  const int named = std::min<int>(kMaxNamed, static_cast<int>(ranks.size()));
  for (int i = 0; i < named; ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 == static_cast<int>(ranks.size()) ? " and " : ", ");
    absl::StrAppend(&out, ranks[i]);
  }
  if (static_cast<int>(ranks.size()) > named) {
    absl::StrAppend(&out, " and ", ranks.size() - named, " more");
  }
  return out;
}

std::string NameNodes(const std::vector<std::string>& nodes) {
  std::string out = nodes.size() == 1 ? "node " : "nodes ";
  const int named = std::min<int>(kMaxNamed, static_cast<int>(nodes.size()));
  for (int i = 0; i < named; ++i) {
    if (i > 0) absl::StrAppend(&out, i + 1 == static_cast<int>(nodes.size()) ? " and " : ", ");
    absl::StrAppend(&out, SafeForLog(nodes[i], 64));
  }
  if (static_cast<int>(nodes.size()) > named) {
    absl::StrAppend(&out, " and ", nodes.size() - named, " more");
  }
  return out;
}

}  // namespace

absl::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kGathering:
      return "gathering";
    case Phase::kRunning:
      return "running";
    case Phase::kSucceeded:
      return "succeeded";
    case Phase::kFailed:
      return "failed";
  }
  return "unknown";
}

uint64_t NewIncarnation() {
  static std::mt19937_64* rng = [] {
    // getrandom(2) rather than std::random_device, whose set-up runs CPUID:
    // a trap to the hypervisor in a VM, on every agent's start-up path.
    uint32_t seed[4] = {};
    if (getrandom(seed, sizeof(seed), 0) != static_cast<ssize_t>(sizeof(seed))) {
      std::random_device rd;
      for (uint32_t& s : seed) s = rd();
    }
    std::seed_seq seq(std::begin(seed), std::end(seed));
    return new std::mt19937_64(seq);
  }();
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  uint64_t v = 0;
  while (v == 0) v = (*rng)();
  return v;
}

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      clock_(options_.clock ? options_.clock : Clock::Real()),
      elastic_(options_.min_nodes != options_.max_nodes),
      reject_log_(kRejectLogBurst, absl::Seconds(10), clock_) {
  // CoordinatorOptions hold no defaults (the option tables do): a heartbeat
  // timeout left unset would lose every member at the first tick.
  if (options_.heartbeat_timeout <= absl::ZeroDuration()) {
    std::fprintf(stderr, "trainlet: internal error: a coordinator without a heartbeat timeout\n");
    std::abort();
  }
  absl::MutexLock lock(&mu_);
  gathering_since_ = clock_->Now();
}

Coordinator::~Coordinator() { Shutdown("coordinator destroyed"); }

absl::Status Coordinator::ValidateJoinLocked(const v1::JoinRequest& r) const {
  if (absl::Status s = CheckIdentity(r.member()); !s.ok()) return s;
  // Before any other field: an agent of another protocol may mean them
  // differently.
  if (r.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node %s speaks rendezvous protocol %s, this coordinator speaks %d: run the same "
        "trainlet version on every pod of the job (`trainlet version` prints both)",
        SafeForLog(r.member().node_id(), 64),
        r.protocol_version() == 0 ? "0 (a trainlet from before protocol versions)"
                                  : absl::StrCat(r.protocol_version()),
        kProtocolVersion));
  }
  if (absl::Status s = CheckJobId(r.job_id(), options_.job_id); !s.ok()) return s;
  if (r.ByteSizeLong() > kMaxJoinRequestBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("JoinRequest: at most %d bytes, got %d",
                                                      kMaxJoinRequestBytes, r.ByteSizeLong()));
  }
  if (!v1::Role_IsValid(r.role())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "role: expected NODE, MPI_LAUNCHER or MPI_WORKER, got %d", static_cast<int>(r.role())));
  }
  // The MPI launcher hosts no ranks unless it runs as a node too.
  const int min_lws = r.role() == v1::ROLE_MPI_LAUNCHER ? 0 : 1;
  if (r.local_world_size() < min_lws || r.local_world_size() > kMaxLocalWorldSize) {
    return absl::InvalidArgumentError(absl::StrFormat("local_world_size: expected %d..%d, got %d",
                                                      min_lws, kMaxLocalWorldSize,
                                                      r.local_world_size()));
  }
  if (r.role() == v1::ROLE_MPI_LAUNCHER && !launcher_node_.empty() &&
      launcher_node_ != r.member().node_id()) {
    auto it = members_.find(launcher_node_);
    if (it != members_.end() && it->second.join.role() == v1::ROLE_MPI_LAUNCHER &&
        IsLiveLocked(it->second)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "node %s joins as the MPI launcher, but node %s already is the job's launcher; a "
          "job has one `trainlet mpi-launcher`",
          SafeForLog(r.member().node_id(), 64), SafeForLog(launcher_node_, 64)));
    }
  }
  if (r.master_port() < 1 || r.master_port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("master_port: expected 1..65535, got %d", r.master_port()));
  }
  if (r.agent_store_port() < 0 || r.agent_store_port() > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "agent_store_port: expected 0 (none) or 1..65535, got %d", r.agent_store_port()));
  }
  if (r.link_port() < 0 || r.link_port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("link_port: expected 0 (none) or 1..65535, got %d", r.link_port()));
  }
  if (!r.advertise_addr().empty() && !IsValidHost(r.advertise_addr())) {
    return absl::InvalidArgumentError(
        "advertise_addr: expected a host name or an IP address (no port, no brackets)");
  }
  if (r.rank_hint() < -1 || r.rank_hint() > kMaxRankHint) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank_hint: expected -1 (none) or 0..%d, got %d", kMaxRankHint, r.rank_hint()));
  }
  if (!elastic_ && r.rank_hint() >= options_.max_nodes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank_hint %d of node %s is out of range: the job has %d nodes "
        "(ranks 0..%d); check --node-rank / JOB_COMPLETION_INDEX and --nnodes",
        r.rank_hint(), r.member().node_id(), options_.max_nodes, options_.max_nodes - 1));
  }
  if (r.last_round() > kMaxRound) {
    return absl::InvalidArgumentError(
        absl::StrFormat("last_round: expected 0..%d, got %d", kMaxRound, r.last_round()));
  }
  if (r.restart_count() < 0 || r.restart_count() > kMaxRestartCount) {
    return absl::InvalidArgumentError(absl::StrFormat("restart_count: expected 0..%d, got %d",
                                                      kMaxRestartCount, r.restart_count()));
  }
  if (absl::Status s = CheckTopology(r.topology()); !s.ok()) return s;
  if (absl::Status s = CheckJoinTopology(r); !s.ok()) return s;
  if (r.has_preflight()) {
    if (absl::Status s = preflight::ValidateReport(r.preflight()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("preflight: ", s.message()));
    }
  }
  return CheckSsh(r.ssh());
}

absl::Status Coordinator::ValidateReportLocked(const v1::ReportRequest& r,
                                               const Member& member) const {
  if (r.has_preflight()) {
    if (absl::Status s = preflight::ValidateReport(r.preflight()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("preflight: ", s.message()));
    }
  }
  if (r.mpi_sessions() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("mpi_sessions: expected 0 or more, got %d", r.mpi_sessions()));
  }
  // The MPI launcher's one local process is its COMMAND.
  const int lws = member.join.role() == v1::ROLE_MPI_LAUNCHER ? 1 : member.join.local_world_size();
  if (r.has_hang()) {
    if (absl::Status s = ValidateHangReport(r.hang(), lws); !s.ok()) return s;
  }
  if (r.has_slow()) {
    if (absl::Status s = ValidateSlowSignals(r.slow()); !s.ok()) return s;
  }
  switch (r.state()) {
    case v1::ReportRequest::RUNNING:
    case v1::ReportRequest::SUCCEEDED:
      return absl::OkStatus();
    case v1::ReportRequest::FAILED:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "state: expected RUNNING, SUCCEEDED or FAILED, got %d", static_cast<int>(r.state())));
  }
  // Exit codes as a shell reports them: the status, or 128+signal.
  if (r.exit_code() < 0 || r.exit_code() > 255) {
    return absl::InvalidArgumentError(
        absl::StrFormat("exit_code: expected 0..255, got %d", r.exit_code()));
  }
  if (r.failed_local_rank() < 0 || r.failed_local_rank() >= lws) {
    return absl::InvalidArgumentError(
        absl::StrFormat("failed_local_rank: expected 0..%d (the node has %d workers), got %d",
                        lws - 1, lws, r.failed_local_rank()));
  }
  return absl::OkStatus();
}

void Coordinator::LogRejected(absl::string_view what, const v1::Member& who,
                              const absl::Status& error) {
  int64_t suppressed = 0;
  if (!reject_log_.Allow(&suppressed)) return;
  TLOG(kWarning) << "rejected " << what << " of " << Who(who) << ": "
                 << SafeForLog(error.message(), 512) << SuppressedNote(suppressed);
}

bool Coordinator::IsLiveLocked(const Member& m) const {
  // Heartbeats alone do not make an incarnation live: one that died while
  // stopping its workers for a restart round has neither a Join nor a Watch,
  // and its pod's next incarnation must be able to take its place.
  // A measurer away measuring its links (StartGateCheckLocked) holds its
  // place too.
  return m.ticket != 0 || m.sink != nullptr || gate_check_.Awaits(m.join.member().node_id());
}

int Coordinator::GatheringCountLocked() const { return gathering_; }

int Coordinator::RoundSizeLocked() const { return in_round_; }

void Coordinator::SetTicketLocked(Member& m, uint64_t ticket) {
  const bool expected = expected_.count(m.join.member().node_id()) > 0;
  if (m.ticket != 0) {
    --gathering_;
    gathering_excludable_ -= m.excludable_ticket;
    m.excludable_ticket = false;
    by_ticket_.erase(m.ticket);
    gathering_mpi_ -= m.join.role() != v1::ROLE_NODE;
    gathering_launchers_ -= m.join.role() == v1::ROLE_MPI_LAUNCHER;
    expected_back_ -= expected;
  }
  m.ticket = ticket;
  m.ready_join = false;
  if (ticket != 0) {
    ++gathering_;
    m.excludable_ticket = ExcludableLocked(m);
    gathering_excludable_ += m.excludable_ticket;
    by_ticket_[ticket] = m.join.member().node_id();
    gathering_mpi_ += m.join.role() != v1::ROLE_NODE;
    gathering_launchers_ += m.join.role() == v1::ROLE_MPI_LAUNCHER;
    expected_back_ += expected;
    if (expected) expected_joined_at_ = clock_->Now();
  }
}

bool Coordinator::MustSucceedLocked(const Member& m) const {
  return m.in_round && !(m.join.role() == v1::ROLE_MPI_WORKER && launcher_in_round_);
}

void Coordinator::AllocateSlotLocked(Member& m) {
  if (free_slots_.empty()) {
    m.slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    m.slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Slot& s = slots_[m.slot];
  s = Slot{};
  s.member = &m;
  s.incarnation = m.join.member().incarnation();
  s.key = NewLivenessKey();
  s.last_heard = clock_->Now();
}

void Coordinator::UpdateMustStayAliveLocked(Member& m) {
  SlotOf(m).must_stay_alive = m.in_round && m.state != v1::ReportRequest::SUCCEEDED;
}

void Coordinator::SetInRoundLocked(Member& m, bool in_round) {
  if (m.in_round == in_round) return;
  if (!in_round) {
    --in_round_;
    unfinished_ -= MustSucceedLocked(m) && m.state != v1::ReportRequest::SUCCEEDED;
  } else {
    ++in_round_;
  }
  m.in_round = in_round;
  UpdateMustStayAliveLocked(m);
}

void Coordinator::SetSucceededLocked(Member& m) {
  if (m.state == v1::ReportRequest::SUCCEEDED) return;
  unfinished_ -= MustSucceedLocked(m);
  m.state = v1::ReportRequest::SUCCEEDED;
  UpdateMustStayAliveLocked(m);
}

void Coordinator::SetSinkLocked(Member& m, std::shared_ptr<DirectiveSink> sink, uint64_t watch_id) {
  if (m.sink != nullptr) {
    --watching_;
    by_watch_.erase(m.watch_id);
  }
  m.sink = std::move(sink);
  m.watch_id = m.sink != nullptr ? watch_id : 0;
  if (m.sink != nullptr) {
    ++watching_;
    by_watch_[watch_id] = m.join.member().node_id();
  }
}

void Coordinator::SetReleasedLocked(Member& m, bool released) {
  if (m.released == released) return;
  released_ += released ? 1 : -1;
  m.released = released;
}

void Coordinator::SetVerdictPendingLocked(Member& m, bool pending) {
  if (m.verdict_pending == pending) return;
  verdict_pending_ += pending ? 1 : -1;
  m.verdict_pending = pending;
}

void Coordinator::EraseMemberLocked(std::map<std::string, Member>::iterator it) {
  gate_check_.Withdraw(it->first);
  warn_check_.Withdraw(it->first);
  SetTicketLocked(it->second, 0);
  SetInRoundLocked(it->second, false);
  SetSinkLocked(it->second, nullptr, 0);
  SetReleasedLocked(it->second, false);
  SetVerdictPendingLocked(it->second, false);
  probing_.erase(it->second.slot);
  slots_[it->second.slot] = Slot{};
  free_slots_.push_back(it->second.slot);
  members_.erase(it);
}

namespace {

// `a` with the round's member list (when it asked for it).
v1::Assignment WithNodes(v1::Assignment a,
                         const std::shared_ptr<const std::vector<v1::NodeAssignment>>& nodes) {
  if (nodes != nullptr) {
    a.mutable_nodes()->Reserve(static_cast<int>(nodes->size()));
    for (const v1::NodeAssignment& na : *nodes) *a.add_nodes() = na;
  }
  return a;
}

// What a released member's re-join is answered with (a DIRECTIVE datagram):
// its assignment, without the liveness key (the agent keeps the one it has;
// a datagram is signed, not encrypted).
v1::Directive AssignmentDirective(uint64_t coordinator_incarnation, v1::Assignment a) {
  v1::Directive d;
  d.set_coordinator_incarnation(coordinator_incarnation);
  d.set_round(a.round());
  a.clear_liveness_key();
  // The round's preflight warnings (up to 16 KiB) would not fit; the agent
  // hears them in its Report answers.
  a.clear_preflight_warnings();
  *d.mutable_assignment() = std::move(a);
  return d;
}

// `d` as it fits a DIRECTIVE datagram: a reason too long for one cut.
v1::Directive FitForDatagram(const v1::Directive& d) {
  if (d.ByteSizeLong() <= kMaxDirectivePayloadBytes) return d;
  // A reason too long for a datagram (a Leave's 1 KiB reason, long node
  // ids): cut, as a log line would be; the coordinator's log has it whole.
  v1::Directive shorter = d;
  std::string* reason = shorter.has_job_failed() ? shorter.mutable_job_failed()->mutable_reason()
                        : shorter.has_rejoin()   ? shorter.mutable_rejoin()->mutable_reason()
                                                 : nullptr;
  if (reason == nullptr) return d;
  const size_t overhead = shorter.ByteSizeLong() - reason->size();
  constexpr absl::string_view kCut = "...(cut: see the coordinator's log)";
  const size_t room = kMaxDirectivePayloadBytes - std::min(kMaxDirectivePayloadBytes, overhead);
  if (room <= kCut.size() + 8) return d;
  reason->resize(std::min(reason->size(), room - kCut.size() - 8));
  reason->append(kCut.data(), kCut.size());
  return shorter;
}

}  // namespace

uint64_t Coordinator::Join(const v1::JoinRequest& request, absl::string_view peer_addr,
                           absl::Time deadline, JoinDone done) {
  Actions actions;
  absl::Status error;
  uint64_t ticket = 0;
  std::string preflight_failed;  // the join's failed checks (FailedChecks)
  {
    absl::MutexLock lock(&mu_);
    error = ValidateJoinLocked(request);
    const std::string& node_id = request.member().node_id();
    if (error.ok() && shut_down_) error = absl::UnavailableError("coordinator is shutting down");
    if (error.ok() && (phase_ == Phase::kSucceeded || phase_ == Phase::kFailed)) {
      error = JobOverErrorLocked();
    }
    if (error.ok()) error = CheckNotFencedLocked(request.member());
    if (error.ok()) error = SlowQuarantineLocked(node_id);  // --slow-nodes=exclude
    auto it = members_.find(node_id);
    if (error.ok() && it != members_.end()) {
      Member& old = it->second;
      if (old.join.member().incarnation() == request.member().incarnation()) {
        if (old.in_round && phase_ == Phase::kRunning) {
          // A retried join whose answer was lost: same assignment again.
          SlotOf(old).last_heard = clock_->Now();
          actions.push_back(
              [done, a = old.assignment, nodes = old.join.want_nodes() ? round_nodes_ : nullptr] {
                done(WithNodes(a, nodes));
              });
          done = nullptr;
        } else if (old.ticket != 0) {
          // A retried join while the first is still parked: the new call wins.
          actions.push_back([d = std::move(old.done)] {
            d(absl::AbortedError("superseded by a retried join of the same member"));
          });
          SetTicketLocked(old, 0);
        }
      } else if (IsLiveLocked(old) && !old.in_round && (old.ticket == 0 || old.ready_join)) {
        // Live only through a stream kept across a restart (and maybe a
        // READY parked on it): the old agent may be re-joining, or dead with
        // a connection not yet closed. Retried (UNAVAILABLE) until that
        // stream ends (which withdraws a parked READY) or the round closes
        // with the old incarnation in it (then ALREADY_EXISTS).
        error = absl::UnavailableError(absl::StrFormat(
            "node id \"%s\": the previous incarnation's stream is still open after a restart; "
            "waiting for it to re-join or close",
            node_id));
      } else if (IsLiveLocked(old)) {
        // Neither incarnation is named: the caller may be the impostor.
        error = absl::AlreadyExistsError(absl::StrFormat(
            "node id \"%s\" is held by a live agent; two pods claim the same node id: give each a "
            "distinct --node-id (default: the hostname)",
            node_id));
      } else {
        // The old incarnation is dead (no Join parked, no Watch open): fence
        // it, and if it was running, its loss is a failure of the round.
        TLOG(kInfo) << "node " << SafeForLog(node_id) << ": new incarnation "
                    << absl::StrFormat("%016x", request.member().incarnation())
                    << " replaces dead incarnation "
                    << absl::StrFormat("%016x", old.join.member().incarnation());
        const bool was_running = old.in_round && phase_ == Phase::kRunning;
        const uint64_t old_incarnation = old.join.member().incarnation();
        const std::string label = NodeLabel(old);
        EraseMemberLocked(it);
        if (was_running) {
          HandleFailureLocked(node_id, absl::StrCat(label, " lost: it restarted (new incarnation)"),
                              0, true, &actions);
        }
        fenced_[node_id] = {
            old_incarnation,
            absl::StrCat("round ", round_, ": a new incarnation of the node replaced it")};
        if (phase_ == Phase::kFailed) error = JobOverErrorLocked();
      }
    }
    // A measurer back from the round's network measurement: its checks
    // were judged when it first joined.
    const bool measured_rejoin = error.ok() && done && gate_check_.Awaits(node_id);
    if (error.ok() && done && request.has_preflight()) {
      // Judged before the scale-up decision: a failing newcomer causes none.
      preflight_failed = FailedChecks(request.preflight());
      if (!measured_rejoin) error = JudgePreflightLocked(node_id, preflight_failed, &actions);
    }
    const std::string addr =
        request.advertise_addr().empty() ? std::string(peer_addr) : request.advertise_addr();
    // A newcomer while running, measured first (exclude|fail): a node whose
    // network is bad, back from each quarantine, must not restart the job.
    bool newcomer_measured = false;
    if (error.ok() && done && phase_ == Phase::kRunning && elastic_ &&
        RoundSizeLocked() < options_.max_nodes &&
        MeasureNewcomerLocked(request, addr, done, &preflight_failed, &newcomer_measured, &error,
                              &actions)) {
      done = nullptr;  // answered: measure first
    }
    if (error.ok() && done) {
      if (phase_ == Phase::kRunning) {
        // A newcomer while running: elastic scale-up, else the round is full.
        if (elastic_ && RoundSizeLocked() < options_.max_nodes) {
          ReopenLocked(absl::StrCat("scale-up: node ", node_id, " joined"), &actions);
        } else {
          error = absl::ResourceExhaustedError(absl::StrFormat(
              "round %d is full: %d of %d nodes joined and are running; check --nnodes, or "
              "whether another job uses the same coordinator address",
              round_, RoundSizeLocked(), options_.max_nodes));
        }
      }
    }
    if (error.ok() && done) {
      // Measurers away measuring their links hold their places.
      const int held = GatheringCountLocked() + gate_check_.awaited() - (measured_rejoin ? 1 : 0);
      if (held >= options_.max_nodes) {
        error = absl::ResourceExhaustedError(
            absl::StrFormat("the round is full: %d of %d nodes already joined; check --nnodes",
                            held, options_.max_nodes));
      }
    }
    if (error.ok() && done && !elastic_ && request.rank_hint() >= 0) {
      auto holder = hint_holder_.find(request.rank_hint());
      if (holder != hint_holder_.end() && holder->second != node_id) {
        auto h = members_.find(holder->second);
        if (h != members_.end() && (h->second.ticket != 0 || h->second.in_round) &&
            h->second.join.rank_hint() == request.rank_hint()) {
          error = absl::InvalidArgumentError(absl::StrFormat(
              "rank hint %d of node %s is already held by node %s; two pods have the same "
              "--node-rank / JOB_COMPLETION_INDEX",
              request.rank_hint(), node_id, h->first));
        }
      }
    }
    // A due joiner while the gate measures the others measures too (it
    // holds its place, as they do).
    if (error.ok() && done && phase_ == Phase::kGathering && !measured_rejoin &&
        ExtendGateCheckLocked(request, addr, done, &actions)) {
      done = nullptr;
    }
    if (error.ok() && done) {
      const absl::Time now = clock_->Now();
      auto [mit, inserted] = members_.try_emplace(node_id);
      Member& m = mit->second;
      m.join = request;
      m.join.clear_preflight();  // judged above; its failed checks are kept
      // Measured while the round ran: the round it scales up to does not
      // measure it again.
      if (newcomer_measured) m.join.set_network_due(false);
      if (request.has_preflight()) m.preflight_failed = preflight_failed;
      if (inserted) AllocateSlotLocked(m);
      m.addr = addr;
      m.join_received = now;
      if (measured_rejoin) gate_check_.Add(node_id, request.preflight().links());
      ticket = next_id_++;
      // A measurer back with its links re-arms no last call: its first
      // join did (else every measurement would add a last call).
      const absl::Time quiet_since = expected_joined_at_;
      SetTicketLocked(m, ticket);
      if (measured_rejoin) expected_joined_at_ = quiet_since;
      if (!elastic_ && request.rank_hint() >= 0) hint_holder_[request.rank_hint()] = node_id;
      if (request.role() == v1::ROLE_MPI_LAUNCHER) launcher_node_ = node_id;
      m.done = std::move(done);
      SlotOf(m).last_heard = now;
      m.answer_by = deadline == absl::InfiniteFuture()
                        ? absl::InfiniteFuture()
                        : deadline - std::min(kJoinAnswerMargin,
                                              std::max(absl::ZeroDuration(), deadline - now) / 4);
      next_join_expiry_ = std::min(next_join_expiry_, m.answer_by);
      TLOG(kDebug) << "join " << Who(request.member()) << " from " << SafeForLog(m.addr) << " ("
                   << GatheringCountLocked() << "/" << options_.min_nodes << ".."
                   << options_.max_nodes << ")";
      MaybeCloseRoundLocked(&actions);
      // `m` may be gone: the close can leave this node out (its network was
      // blamed) and erase it. Look it up again.
      auto after = members_.find(node_id);
      if (after == members_.end() || after->second.ticket == 0) {
        ticket = 0;  // the round closed with this join, or left this node out.
      }
    }
  }
  if (!error.ok()) {
    LogRejected("join", request.member(), error);
    done(error);
  }
  RunActions(&actions);
  return ticket;
}

void Coordinator::WithdrawSilentReadiesLocked(absl::Time now) {
  // A released member re-joining by READY has no stream whose close would
  // withdraw its re-join: its READYs (one every interval) are its life.
  // Dead (killed, or it gave up at its join timeout), it must not count
  // toward the round, nor keep its restarted pod's new incarnation out.
  if (released_ == 0 || gathering_ == 0) return;
  const absl::Duration limit = SilenceLimit(options_.heartbeat_timeout);
  std::vector<std::string> silent;
  ++member_walks_;
  for (const Slot& slot : slots_) {
    if (slot.member == nullptr) continue;
    const Member& m = *slot.member;
    if (m.released && m.ready_join && m.ticket != 0 && now - slot.last_heard >= limit) {
      silent.push_back(m.join.member().node_id());
    }
  }
  for (const std::string& id : silent) {
    auto it = members_.find(id);
    if (it == members_.end()) continue;
    TLOG(kInfo) << "node " << SafeForLog(id) << " went silent while re-joining round "
                << NextRoundLocked() << " by datagram; its re-join is withdrawn";
    it->second.done = nullptr;
    WithdrawJoinLocked(it);
  }
}

void Coordinator::WithdrawJoinLocked(std::map<std::string, Member>::iterator it) {
  SetTicketLocked(it->second, 0);
  it->second.answer_by = absl::InfiniteFuture();
  if (!it->second.in_round) EraseMemberLocked(it);
  if (GatheringCountLocked() < options_.min_nodes) min_reached_at_ = absl::InfiniteFuture();
}

void Coordinator::CancelJoin(uint64_t ticket) {
  if (ticket == 0) return;
  JoinDone done;
  {
    absl::MutexLock lock(&mu_);
    auto t = by_ticket_.find(ticket);
    auto it = t == by_ticket_.end() ? members_.end() : members_.find(t->second);
    if (it != members_.end() && it->second.ticket == ticket) {
      TLOG(kDebug) << "join of " << SafeForLog(it->first) << " cancelled by the caller";
      done = std::move(it->second.done);
      WithdrawJoinLocked(it);
    }
  }
  if (done) done(absl::CancelledError("join cancelled by the caller"));
}

void Coordinator::AnswerSent(const v1::Member& who, uint64_t round) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(who.node_id());
  if (it == members_.end()) return;
  Member& m = it->second;
  if (!m.in_round || round != round_ || m.join.member().incarnation() != who.incarnation()) return;
  Slot& slot = SlotOf(m);
  slot.last_heard = std::max(slot.last_heard, clock_->Now());
}

uint64_t Coordinator::NextRoundLocked() const {
  uint64_t last_round = round_;
  ++member_walks_;
  for (const auto& [id, m] : members_) {
    if (m.ticket != 0) last_round = std::max<uint64_t>(last_round, m.join.last_round());
  }
  return last_round + 1;
}

std::string Coordinator::GatheringStatusLocked() const {
  const int n = GatheringCountLocked();
  // After a restart: the survivors told to re-join that are not back yet.
  std::vector<std::string> missing_survivors;
  for (const std::string& id : expected_) {
    auto it = members_.find(id);
    if (it == members_.end() || it->second.ticket == 0) missing_survivors.push_back(id);
  }
  std::string out;
  if (!elastic_) {
    out = absl::StrFormat("%d/%d joined; ", n, options_.max_nodes);
    // With a hint on every joined node, the missing ones are known by rank.
    std::vector<bool> held(options_.max_nodes, false);
    bool all_hinted = true;
    ++member_walks_;
    for (const auto& [id, m] : members_) {
      if (m.ticket == 0) continue;
      if (m.join.rank_hint() < 0 || m.join.rank_hint() >= options_.max_nodes) {
        all_hinted = false;
      } else {
        held[m.join.rank_hint()] = true;
      }
    }
    std::vector<int> missing;
    for (int r = 0; r < options_.max_nodes; ++r) {
      if (!held[r]) missing.push_back(r);
    }
    if (all_hinted && !missing.empty()) {
      absl::StrAppend(&out, "waiting for ", NameRanks(missing));
    } else {
      const int more = options_.max_nodes - n;
      absl::StrAppend(&out, "waiting for ", more, " more node", more == 1 ? "" : "s");
    }
  } else {
    out =
        absl::StrFormat("%d joined (min %d, max %d); ", n, options_.min_nodes, options_.max_nodes);
    const int more = options_.min_nodes - n;
    if (more > 0) {
      absl::StrAppend(&out, "waiting for ", more, " more node", more == 1 ? "" : "s",
                      " to reach the minimum");
    } else {
      absl::StrAppend(&out, "closing after --last-call");
    }
  }
  if (!missing_survivors.empty()) {
    std::sort(missing_survivors.begin(), missing_survivors.end());
    absl::StrAppend(&out, " (not back yet: ", NameNodes(missing_survivors), ")");
  }
  return out;
}

void Coordinator::ExpireJoinsLocked(absl::Time now, Actions* actions) {
  if (now < next_join_expiry_) return;
  // What the round waits for, as it stood before any of these expired (once
  // per call: it walks the members).
  std::string msg;
  next_join_expiry_ = absl::InfiniteFuture();
  ++member_walks_;
  for (auto it = members_.begin(); it != members_.end();) {
    auto next = std::next(it);
    Member& m = it->second;
    if (m.ticket != 0 && now < m.answer_by) {
      next_join_expiry_ = std::min(next_join_expiry_, m.answer_by);
    } else if (m.ticket != 0) {
      if (msg.empty()) {
        msg = absl::StrCat("round ", NextRoundLocked(),
                           " did not close before the join's deadline: ", GatheringStatusLocked(),
                           "; check that those nodes started and can reach the coordinator, or "
                           "raise --join-timeout");
      }
      TLOG(kDebug) << "join of " << SafeForLog(it->first) << " reached its deadline";
      actions->push_back([d = std::move(m.done), msg] { d(absl::DeadlineExceededError(msg)); });
      WithdrawJoinLocked(it);
    }
    it = next;
  }
}

namespace {
// Whether a member's failures are only the network measurement's
// (JudgeLinksLocked's "network: ..." is then its whole line): a node check's
// name comes first otherwise.
bool BlamedOnlyByTheNetwork(absl::string_view failed) {
  return absl::StartsWith(failed, kNetworkFailurePrefix);
}
}  // namespace

bool Coordinator::ExcludableLocked(const Member& m) const {
  return options_.preflight == v1::PREFLIGHT_EXCLUDE && elastic_ && !m.preflight_failed.empty();
}

absl::Status Coordinator::ExcludedError(const std::string& node_id,
                                        const std::string& failed) const {
  v1::ErrorInfo info;
  info.set_reason(v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  info.set_retry_after_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.quarantine)));
  return WithErrorInfo(absl::FailedPreconditionError(absl::StrCat(
                           "preflight: node ", SafeForLog(node_id, 64),
                           " left out of the round (--preflight=exclude): ", failed,
                           "; checking again in ", absl::FormatDuration(options_.quarantine))),
                       info);
}

absl::Status Coordinator::JudgePreflightLocked(const std::string& node_id,
                                               const std::string& failed, Actions* actions) {
  if (failed.empty() || options_.preflight == v1::PREFLIGHT_OFF) return absl::OkStatus();
  if (options_.preflight == v1::PREFLIGHT_FAIL) {
    const std::string reason = SafeForLog(
        absl::StrCat("preflight: node ", node_id, " failed ", failed), kMaxPreflightLine);
    FailJobLocked(reason, node_id, kExitPreflightFailed, /*restarts_exhausted=*/false, actions,
                  /*hang=*/nullptr, /*preflight=*/true);
    return JobOverErrorLocked();
  }
  if (options_.preflight == v1::PREFLIGHT_EXCLUDE && elastic_) {
    TLOG(kWarning) << "preflight: node " << SafeForLog(node_id, 64) << " failed " << failed
                   << (phase_ == Phase::kRunning ? "; left out (a round runs)"
                                                 : "; left out of the round if enough pass");
    if (phase_ == Phase::kRunning) return ExcludedError(node_id, failed);
    return absl::OkStatus();
  }
  if (preflight_warnings_.Set(node_id, failed)) {
    TLOG(kWarning) << "preflight: node " << SafeForLog(node_id, 64) << " failed " << failed
                   << (options_.preflight == v1::PREFLIGHT_EXCLUDE
                           ? " (--preflight=exclude: a static job cannot leave it out)"
                           : "");
  }
  return absl::OkStatus();
}

void Coordinator::MaybeCloseRoundLocked(Actions* actions) {
  if (phase_ != Phase::kGathering || shut_down_) return;
  if (gate_check_.active()) {
    // The round closes once its network measurement is judged.
    if (!gate_check_.Complete(clock_->Now())) return;
    FinishGateCheckLocked(actions);
    if (phase_ != Phase::kGathering) return;
  }
  const int n = GatheringCountLocked();
  if (n < options_.min_nodes) return;
  // An MPI round needs its launcher: workers alone cannot run the job.
  if (gathering_mpi_ > 0 && gathering_launchers_ == 0) return;
  if (min_reached_at_ == absl::InfiniteFuture()) min_reached_at_ = clock_->Now();
  // After a restart the survivors are known: once all of them are back there
  // is nobody to wait for, so the restart does not pay the last call.
  const bool survivors_back =
      !expected_.empty() && expected_back_ == static_cast<int>(expected_.size());
  // The last call: from the minimum, or (a restart) from the last survivor
  // that came back, so that a wave of survivors is not cut in two; bounded.
  const absl::Time now = clock_->Now();
  const absl::Time quiet_since = std::max(min_reached_at_, expected_joined_at_);
  const bool last_call_over = now - quiet_since >= options_.last_call ||
                              now - min_reached_at_ >= kMaxLastCalls * options_.last_call;
  if (n >= options_.max_nodes || survivors_back || last_call_over) {
    if (StartGateCheckLocked(actions)) return;
    CloseRoundLocked(actions);
  }
}

NetworkCheck::Candidate Coordinator::NetworkCandidate(const Member& m) {
  // A member back by READY datagram cannot be told a plan: it is measured to.
  return {m.join.member().node_id(), m.addr, m.join.link_port(),
          m.join.network_due() && !m.ready_join};
}

v1::Assignment Coordinator::MeasureFirstAnswerLocked(v1::NetworkPlan plan,
                                                     absl::Time join_received) const {
  v1::Assignment a;
  a.set_coordinator_incarnation(options_.incarnation);
  a.set_job_id(options_.job_id);
  a.set_preflight_policy(options_.preflight);
  a.set_link_key(link_key_);
  a.set_join_received_unix_micros(absl::ToUnixMicros(join_received));
  a.set_answered_unix_micros(absl::ToUnixMicros(clock_->Now()));
  *a.mutable_measure_first() = std::move(plan);
  return a;
}

bool Coordinator::ExtendGateCheckLocked(const v1::JoinRequest& request, const std::string& addr,
                                        JoinDone& done, Actions* actions) {
  if (!gate_check_.active() || !request.network_due() || request.link_port() <= 0) return false;
  const std::string& id = request.member().node_id();
  std::vector<NetworkCheck::Candidate> others;
  ++member_walks_;
  for (const auto& [other_id, m] : members_) {
    if (other_id == id || m.join.link_port() <= 0) continue;
    if (m.ticket != 0 || gate_check_.Awaits(other_id)) others.push_back(NetworkCandidate(m));
  }
  std::optional<v1::NetworkPlan> plan =
      gate_check_.Extend({id, addr, request.link_port(), true}, others,
                         clock_->Now() + NetworkCheckBudget(2, options_.preflight_link_time));
  if (!plan.has_value()) return false;
  TLOG(kInfo) << "preflight: node " << SafeForLog(id, 64)
              << " joined while the network is measured; it measures too";
  actions->push_back([d = std::move(done),
                      a = MeasureFirstAnswerLocked(*std::move(plan), clock_->Now())] { d(a); });
  return true;
}

bool Coordinator::MeasureNewcomerLocked(const v1::JoinRequest& request, const std::string& addr,
                                        JoinDone& done, std::string* preflight_failed,
                                        bool* measured, absl::Status* error, Actions* actions) {
  if (options_.preflight != v1::PREFLIGHT_EXCLUDE && options_.preflight != v1::PREFLIGHT_FAIL) {
    return false;
  }
  const std::string& id = request.member().node_id();
  if (auto check = newcomer_checks_.find(id);
      check != newcomer_checks_.end() && check->second.Awaits(id)) {
    // Back with its links: judged against the job's median.
    check->second.Add(id, request.preflight().links());
    const std::map<std::string, std::string> blamed =
        JudgeLinksLocked(check->second, "of a newcomer");
    newcomer_checks_.erase(check);
    *measured = true;
    if (auto b = blamed.find(id); b != blamed.end()) {
      *preflight_failed = preflight::Truncated(
          preflight_failed->empty() ? b->second : absl::StrCat(*preflight_failed, "; ", b->second),
          kMaxPreflightLine);
      *error = JudgePreflightLocked(id, *preflight_failed, actions);
    }
    return false;
  }
  if (!request.network_due() || request.link_port() <= 0) return false;
  if (newcomer_checks_.size() >= static_cast<size_t>(options_.max_nodes)) return false;
  std::vector<NetworkCheck::Candidate> candidates;
  ++member_walks_;
  for (const auto& [other_id, m] : members_) {
    if (other_id == id || !m.in_round || m.join.link_port() <= 0) continue;
    NetworkCheck::Candidate c = NetworkCandidate(m);
    c.measures = false;  // running: measured to, never measuring
    candidates.push_back(std::move(c));
  }
  candidates.push_back({id, addr, request.link_port(), true});
  const absl::Time now = clock_->Now();
  NetworkCheck& check = newcomer_checks_[id];
  std::map<std::string, v1::NetworkPlan> plans = check.Start(
      candidates, NextRoundLocked(), link_key_, options_.preflight_link_bytes,
      options_.preflight_link_time, now + NetworkCheckBudget(2, options_.preflight_link_time));
  auto plan = plans.find(id);
  if (plan == plans.end()) {
    newcomer_checks_.erase(id);
    return false;  // nobody to measure to: the round it scales up to measures it
  }
  TLOG(kInfo) << "preflight: newcomer " << SafeForLog(id, 64)
              << " measures its network before it may join the running round";
  actions->push_back(
      [d = std::move(done), a = MeasureFirstAnswerLocked(std::move(plan->second), now)] { d(a); });
  return true;
}

bool Coordinator::StartGateCheckLocked(Actions* actions) {
  if (gate_measured_) return false;
  if (options_.preflight != v1::PREFLIGHT_EXCLUDE && options_.preflight != v1::PREFLIGHT_FAIL) {
    return false;
  }
  std::vector<NetworkCheck::Candidate> candidates;
  bool any_due = false;
  ++member_walks_;
  for (auto& [id, m] : members_) {
    if (m.ticket == 0 || m.join.link_port() <= 0) continue;
    candidates.push_back(NetworkCandidate(m));
    any_due |= candidates.back().measures;
  }
  gate_measured_ = true;
  if (!any_due) return false;
  const absl::Time now = clock_->Now();
  const uint64_t round = NextRoundLocked();
  std::map<std::string, v1::NetworkPlan> plans = gate_check_.Start(
      candidates, round, link_key_, options_.preflight_link_bytes, options_.preflight_link_time,
      now + NetworkCheckBudget(2, options_.preflight_link_time));
  if (plans.empty()) return false;
  TLOG(kInfo) << "preflight: measuring the network before round " << round << ": " << plans.size()
              << " of " << candidates.size() << " nodes measure, until "
              << absl::FormatDuration(gate_check_.deadline() - now) << " from now";
  for (auto& [id, plan] : plans) {
    Member& m = members_.at(id);
    actions->push_back([d = std::move(m.done),
                        a = MeasureFirstAnswerLocked(std::move(plan), m.join_received)] { d(a); });
    m.done = nullptr;
    SetTicketLocked(m, 0);
  }
  return true;
}

std::map<std::string, std::string> Coordinator::JudgeLinksLocked(NetworkCheck& check,
                                                                 absl::string_view when) {
  const int awaited = check.awaited();
  const int measurers = check.measurers();
  preflight::AnalysisOptions o;
  o.min_bandwidth_bytes_per_second = options_.preflight_min_bandwidth;
  o.reference_median = network_median_;
  const preflight::NetworkVerdict v = check.Finish(o);
  if (v.own_median && v.measuring_nodes >= preflight::kOwnMedianFrom && v.median_bandwidth > 0) {
    network_median_ = v.median_bandwidth;
  }
  TLOG_AT(v.flagged.empty() ? LogLevel::kInfo : LogLevel::kWarning)
      << "preflight: network " << when << ": " << v.links << " links from " << v.measuring_nodes
      << " nodes, job median " << preflight::HumanRate(v.median_bandwidth)
      << (v.own_median ? "" : " (the job's earlier median)") << ", " << v.flagged.size()
      << " node(s) blamed"
      << (awaited > 0
              ? absl::StrCat(", ", awaited, " of ", measurers, " measurers not back in time")
              : "");
  // At most kMaxUnattributedLines of them (a job of 1,000 nodes on a bad
  // switch would log thousands), then a count.
  constexpr size_t kMaxUnattributedLines = 8;
  for (size_t i = 0; i < v.unattributed.size() && i < kMaxUnattributedLines; ++i) {
    const preflight::BadLink& l = v.unattributed[i];
    TLOG(kInfo) << "preflight: network: link " << SafeForLog(l.from_node, 64) << "->"
                << SafeForLog(l.to_node, 64) << " " << l.why << " (no node blamed for it)";
  }
  if (v.unattributed.size() > kMaxUnattributedLines) {
    TLOG(kInfo) << "preflight: network: " << v.unattributed.size() - kMaxUnattributedLines
                << " more bad links with no node blamed";
  }
  std::map<std::string, std::string> blamed;
  for (const preflight::FlaggedNode& f : v.flagged) {
    blamed[f.node_id] = absl::StrCat(kNetworkFailurePrefix, f.reason);
  }
  return blamed;
}

void Coordinator::AddPreflightFailureLocked(Member& m, const std::string& why) {
  m.preflight_failed = preflight::Truncated(
      m.preflight_failed.empty() ? why : absl::StrCat(m.preflight_failed, "; ", why),
      kMaxPreflightLine);
  if (m.ticket != 0) {
    gathering_excludable_ -= m.excludable_ticket;
    m.excludable_ticket = ExcludableLocked(m);
    gathering_excludable_ += m.excludable_ticket;
  }
}

void Coordinator::FinishGateCheckLocked(Actions* actions) {
  for (const auto& [id, why] : JudgeLinksLocked(gate_check_, "before the round")) {
    auto it = members_.find(id);
    if (it == members_.end() || it->second.ticket == 0) continue;  // not in this round anyway
    AddPreflightFailureLocked(it->second, why);
    (void)JudgePreflightLocked(id, it->second.preflight_failed, actions);
    if (phase_ != Phase::kGathering) return;  // fail: the job failed.
  }
}

void Coordinator::FinishWarnCheckLocked() {
  bool changed = false;
  for (const auto& [id, why] : JudgeLinksLocked(warn_check_, "beside the workers")) {
    auto it = members_.find(id);
    if (it == members_.end() || !it->second.in_round) continue;
    AddPreflightFailureLocked(it->second, why);
    if (preflight_warnings_.Set(id, it->second.preflight_failed)) {
      TLOG(kWarning) << "preflight: node " << SafeForLog(id, 64) << " failed "
                     << it->second.preflight_failed;
      changed = true;
    }
  }
  if (changed) BroadcastPreflightWarningsLocked();
}

void Coordinator::BroadcastPreflightWarningsLocked() {
  // Every member hears it now, not at its next Report (minutes apart while
  // its datagrams are acked); a released one then.
  v1::Directive d = NewDirectiveLocked();
  for (std::string& line : preflight_warnings_.Lines()) {
    d.mutable_preflight_warnings()->add_lines(std::move(line));
  }
  ++member_walks_;
  for (auto& [other_id, other] : members_) {
    if (other.in_round && other.sink != nullptr) other.sink->Send(d, /*last=*/false);
  }
}

void Coordinator::CloseRoundLocked(Actions* actions) {
  // Round numbers and restart counts continue above what members carry, so a
  // restarted coordinator picks up where the job was.
  uint64_t last_round = round_;
  int carried_restarts = -1;
  std::vector<Member*> joined;
  std::vector<RankCandidate> candidates;
  std::vector<Member*> left_out;
  // --preflight=exclude: joiners that failed a check stay out while enough
  // passing ones make the round. When MIN leaves room for only some of them,
  // those that failed a node check (a fault of their own) stay out before
  // those the network measurement blamed (a comparison with the others, which
  // a loaded peer can skew), then in node-id order; the rest run, with a
  // warning.
  std::vector<Member*> excluded;
  const int room = gathering_ - options_.min_nodes;
  const bool exclude_all = gathering_excludable_ > 0 && gathering_excludable_ <= room;
  std::vector<const Member*> exclude_some;
  if (!exclude_all && gathering_excludable_ > 0 && room > 0) {
    ++member_walks_;
    for (const auto& [id, m] : members_) {
      if (m.ticket != 0 && m.excludable_ticket) exclude_some.push_back(&m);
    }
    std::stable_partition(exclude_some.begin(), exclude_some.end(), [](const Member* m) {
      return !BlamedOnlyByTheNetwork(m->preflight_failed);
    });
    exclude_some.resize(std::min<size_t>(exclude_some.size(), room));
    std::sort(exclude_some.begin(), exclude_some.end());  // for the lookups below
  }
  ++member_walks_;
  for (auto& [id, m] : members_) {
    if (m.ticket == 0) {
      SetInRoundLocked(m, false);
      if (m.sink != nullptr) left_out.push_back(&m);
      continue;
    }
    if ((exclude_all && m.excludable_ticket) ||
        std::binary_search(exclude_some.begin(), exclude_some.end(), &m)) {
      excluded.push_back(&m);
      continue;
    }
    joined.push_back(&m);
    last_round = std::max<uint64_t>(last_round, m.join.last_round());
    if (m.join.last_round() > 0)
      carried_restarts = std::max(carried_restarts, m.join.restart_count());
    auto prev = previous_rank_.find(id);
    candidates.push_back(
        {id, m.join.rank_hint(), prev == previous_rank_.end() ? -1 : prev->second});
  }
  if (round_ == 0 && carried_restarts >= 0) restart_count_ = carried_restarts + 1;
  round_ = last_round + 1;
  // Survivors whose stream was kept for a re-join by datagram but that did
  // not make the round (still stopping their workers): their streams end, and
  // each agent's Join call makes it a newcomer (a scale-up) as before.
  for (Member* m : excluded) {
    const std::string id = m->join.member().node_id();
    const absl::Status why = ExcludedError(id, m->preflight_failed);
    TLOG(kWarning) << why.message();
    actions->push_back([d = std::move(m->done), why] { d(why); });
    if (m->sink != nullptr) m->sink->Close(why);
    EraseMemberLocked(members_.find(id));
  }
  for (Member* m : left_out) {
    m->sink->Close(
        absl::AbortedError(absl::StrCat("round ", round_, " closed without this node; re-join")));
    SetSinkLocked(*m, nullptr, 0);
  }

  std::vector<const v1::JoinRequest*> joins;
  joins.reserve(joined.size());
  for (const Member* m : joined) joins.push_back(&m->join);
  RoundOrder order = OrderRound(joins, std::move(candidates), /*honor_hints=*/!elastic_);
  const std::vector<int>& ranks = order.ranks;
  const int n = static_cast<int>(joined.size());
  std::vector<Member*> by_rank(n);
  for (int i = 0; i < n; ++i) by_rank[ranks[i]] = joined[i];

  // What each node has (its topology) stays with the coordinator: no agent
  // reads another's, and at 10,000 nodes a member list carrying every node's
  // GPU UUIDs would pass gRPC's 4 MB message limit. Nor is it copied: the
  // colocation reads it where it is.
  std::vector<v1::NodeAssignment> nodes(n);
  std::vector<const v1::Topology*> topologies(n);
  int world_size = 0;
  bool any_wants_nodes = false;
  for (int r = 0; r < n; ++r) {
    Member& m = *by_rank[r];
    v1::NodeAssignment& na = nodes[r];
    *na.mutable_member() = m.join.member();
    na.set_node_rank(r);
    na.set_addr(m.addr);
    na.set_local_world_size(m.join.local_world_size());
    na.set_first_global_rank(world_size);
    topologies[r] = &m.join.topology();
    if (m.join.has_ssh()) *na.mutable_ssh() = m.join.ssh();
    na.set_role(m.join.role());
    world_size += m.join.local_world_size();
    any_wants_nodes |= m.join.want_nodes();
  }
  MarkColocated(topologies, absl::MakeSpan(nodes));

  v1::Assignment common;
  common.set_coordinator_incarnation(options_.incarnation);
  common.set_round(round_);
  common.set_nnodes(n);
  common.set_world_size(world_size);
  common.set_master_addr(by_rank[0]->addr);
  common.set_master_port(by_rank[0]->join.master_port());
  common.set_agent_store_port(by_rank[0]->join.agent_store_port());
  common.set_preflight_policy(options_.preflight);
  common.set_link_key(link_key_);
  common.set_slow_signals_interval_ms(SlowSignalsIntervalMs(n));
  common.set_rank_order_note(std::move(order.note));
  slow_judge_.Clear();
  if (common.slow_signals_interval_ms() > 0) {
    slow_judge_.SetInterval(absl::Milliseconds(common.slow_signals_interval_ms()));
  }
  // warn: the links due are measured beside the workers' start (unless the
  // round's close already measured them).
  warn_check_.Abandon();
  std::map<std::string, v1::NetworkPlan> warn_plans;
  if (options_.preflight == v1::PREFLIGHT_WARN && !gate_measured_) {
    std::vector<NetworkCheck::Candidate> candidates;
    bool any_due = false;
    for (int r = 0; r < n; ++r) {
      const Member& m = *by_rank[r];
      if (m.join.link_port() <= 0) continue;
      candidates.push_back(NetworkCandidate(m));
      any_due |= candidates.back().measures;
    }
    if (any_due) {
      warn_plans = warn_check_.Start(
          candidates, round_, link_key_, options_.preflight_link_bytes,
          options_.preflight_link_time,
          clock_->Now() + kWarnCheckSlack + NetworkCheckBudget(2, options_.preflight_link_time));
    }
  }
  gate_measured_ = false;
  preflight_warnings_.Clear();
  for (int r = 0; r < n; ++r) {
    const Member& m = *by_rank[r];
    if (m.preflight_failed.empty() || options_.preflight == v1::PREFLIGHT_OFF) continue;
    if (preflight_warnings_.Set(m.join.member().node_id(), m.preflight_failed) &&
        options_.preflight == v1::PREFLIGHT_EXCLUDE && elastic_) {
      TLOG(kWarning) << "preflight: node " << SafeForLog(m.join.member().node_id(), 64)
                     << " runs although it failed " << m.preflight_failed
                     << " (too few passing nodes to leave it out)";
    }
  }
  // Added to each answer, not kept in every member's assignment (16 KiB
  // each at most).
  auto warnings = std::make_shared<const std::vector<std::string>>(preflight_warnings_.Lines());
  common.set_restart_count(restart_count_);
  common.set_max_restarts(options_.max_restarts);
  common.set_job_id(options_.job_id);
  common.set_heartbeat_interval_ms(std::max<int64_t>(
      1, absl::ToInt64Milliseconds(HeartbeatInterval(options_.heartbeat_timeout))));
  common.set_heartbeat_timeout_ms(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.heartbeat_timeout)));
  common.set_report_interval_ms(std::max<int64_t>(
      1, absl::ToInt64Milliseconds(HeardReportInterval(options_.heartbeat_timeout, n))));
  // One copy of the list for the round; each member that asked for it gets
  // it added to its answer outside the lock.
  if (any_wants_nodes) {
    round_nodes_ = std::make_shared<const std::vector<v1::NodeAssignment>>(nodes);
  } else {
    round_nodes_ = nullptr;
  }

  const absl::Time now = clock_->Now();
  previous_rank_.clear();
  launcher_in_round_ = false;
  std::string launcher_key;
  for (int r = 0; r < n; ++r) {
    if (by_rank[r]->join.role() != v1::ROLE_MPI_LAUNCHER) continue;
    launcher_in_round_ = true;
    launcher_key = by_rank[r]->join.ssh().client_public_key();
  }
  unfinished_ = 0;
  for (int r = 0; r < n; ++r) {
    Member& m = *by_rank[r];
    m.join.set_network_due(false);  // measured now, or not to be this round
    m.mpi_sessions = 0;
    previous_rank_[m.join.member().node_id()] = r;
    m.assignment = common;
    m.assignment.set_node_rank(r);
    if (m.join.role() == v1::ROLE_MPI_WORKER)
      m.assignment.set_mpi_launcher_client_key(launcher_key);
    if (udp_port_ != 0 && m.join.udp_liveness()) {
      const Slot& slot = SlotOf(m);
      m.assignment.set_first_report_delay_ms(std::max<int64_t>(
          1, absl::ToInt64Milliseconds(FirstReportDelay(options_.heartbeat_timeout, n, r))));
      m.assignment.set_liveness_udp_port(static_cast<uint32_t>(udp_port_));
      m.assignment.set_liveness_slot(m.slot);
      m.assignment.set_liveness_key(
          std::string(reinterpret_cast<const char*>(slot.key.data()), slot.key.size()));
      // ("Stream loss": probes go from the liveness socket.)
      m.assignment.set_stream_loss_probes(datagram_sender_ != nullptr);
    }
    *m.assignment.mutable_self() = std::move(nodes[r]);
    SetTicketLocked(m, 0);
    m.state = v1::ReportRequest::STATE_UNSPECIFIED;
    SetInRoundLocked(m, true);
    // Its acks of this round count from its first (a release waits for the
    // second: the agent has seen an ack of this round by then).
    SlotOf(m).last_ack = absl::InfinitePast();
    UpdateMustStayAliveLocked(m);
    unfinished_ += MustSucceedLocked(m);
    SlotOf(m).last_heard = now;
    ClearStreamLossLocked(SlotOf(m));
    // The answer's one copy of the assignment (the member keeps its own).
    std::optional<v1::NetworkPlan> plan;
    if (auto p = warn_plans.find(m.join.member().node_id()); p != warn_plans.end()) {
      plan = std::move(p->second);
    }
    m.assignment.set_join_received_unix_micros(absl::ToUnixMicros(m.join_received));
    m.assignment.set_answered_unix_micros(absl::ToUnixMicros(now));
    actions->push_back([d = std::move(m.done), a = m.assignment,
                        list = m.join.want_nodes() ? round_nodes_ : nullptr, warnings,
                        plan = std::move(plan)]() mutable {
      for (const std::string& line : *warnings) a.add_preflight_warnings(line);
      if (plan.has_value()) *a.mutable_network_plan() = std::move(*plan);
      d(WithNodes(std::move(a), list));
    });
    m.done = nullptr;
  }
  phase_ = Phase::kRunning;
  min_reached_at_ = absl::InfiniteFuture();
  expected_.clear();
  expected_joined_at_ = absl::InfinitePast();
  TLOG_AT(OutcomeLevel(LogLevel::kInfo))
      << "round " << round_ << " closed: " << n << " nodes, world size " << world_size
      << ", master " << common.master_addr() << ":" << common.master_port() << ", restart count "
      << restart_count_;
  if (!order.log.empty()) {
    TLOG_AT(OutcomeLevel(LogLevel::kInfo)) << "round " << round_ << ": " << order.log;
  }
}

absl::StatusOr<Coordinator::Member*> Coordinator::FindMemberLocked(const v1::Member& who,
                                                                   absl::string_view job_id) {
  if (absl::Status s = CheckIdentity(who); !s.ok()) return s;
  if (absl::Status s = CheckJobId(job_id, options_.job_id); !s.ok()) return s;
  auto it = members_.find(who.node_id());
  if (it == members_.end()) {
    if (absl::Status s = CheckNotFencedLocked(who); !s.ok()) return s;
    return absl::FailedPreconditionError(
        absl::StrCat("node ", who.node_id(), " is not a member of this job; join first"));
  }
  if (it->second.join.member().incarnation() != who.incarnation()) {
    // Never name the other incarnation: the caller may be the impostor.
    return WithReason(absl::FailedPreconditionError(absl::StrCat(
                          "this incarnation of node ", who.node_id(),
                          " is fenced: another incarnation of the node holds its place; restart "
                          "the agent to join again as a new incarnation")),
                      v1::ErrorInfo::FENCED);
  }
  return &it->second;
}

absl::Status Coordinator::CheckNotFencedLocked(const v1::Member& who) const {
  auto it = fenced_.find(who.node_id());
  if (it == fenced_.end() || it->second.incarnation != who.incarnation()) return absl::OkStatus();
  return WithReason(absl::FailedPreconditionError(absl::StrCat(
                        "this incarnation of node ", who.node_id(),
                        " is fenced: it was declared lost (", it->second.why,
                        ") and the job went on without it; restart the agent to join again as a "
                        "new incarnation")),
                    v1::ErrorInfo::FENCED);
}

absl::Status Coordinator::JobOverErrorLocked() const {
  if (phase_ == Phase::kSucceeded) {
    return WithReason(absl::FailedPreconditionError("the job already succeeded"),
                      v1::ErrorInfo::JOB_SUCCEEDED);
  }
  return WithReason(
      absl::FailedPreconditionError(absl::StrCat(
          "the job failed", verdict_exhausted_ ? " (restarts exhausted)" : "", ": ", verdict_)),
      verdict_preflight_   ? v1::ErrorInfo::PREFLIGHT_FAILED
      : verdict_exhausted_ ? v1::ErrorInfo::RESTARTS_EXHAUSTED
                           : v1::ErrorInfo::JOB_FAILED);
}

absl::Status Coordinator::NotCurrentLocked(uint64_t round, const Member& member,
                                           absl::Status stale) const {
  if (round == round_ && !member.in_round && !recent_restarts_.empty() &&
      recent_restarts_.back().round == round_ + 1) {
    // Its round was restarted (its Rejoin may still be on the way): say why,
    // as the Rejoin does, so that the agent's one restart line can.
    return WithReason(absl::AbortedError(recent_restarts_.back().reason),
                      v1::ErrorInfo::ROUND_RESTARTED);
  }
  return stale;
}

v1::Directive Coordinator::NewDirectiveLocked() const {
  v1::Directive d;
  d.set_coordinator_incarnation(options_.incarnation);
  d.set_round(round_);
  return d;
}

absl::StatusOr<uint64_t> Coordinator::Watch(const v1::WatchRequest& request,
                                            std::shared_ptr<DirectiveSink> sink) {
  std::shared_ptr<DirectiveSink> replaced;
  v1::Directive verdict;
  bool send_verdict = false;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Member*> m = FindMemberLocked(request.member(), request.job_id());
    if (!m.ok()) return m.status();
    Member& member = **m;
    const bool terminal = phase_ == Phase::kSucceeded || phase_ == Phase::kFailed;
    if (!terminal) {
      if (request.round() != round_ || !member.in_round || phase_ != Phase::kRunning) {
        return NotCurrentLocked(request.round(), member,
                                absl::AbortedError(absl::StrFormat(
                                    "round %d is not current (current round %d, %s); re-join",
                                    request.round(), round_, PhaseName(phase_))));
      }
    }
    id = next_id_++;
    replaced = member.sink;
    SetSinkLocked(member, std::move(sink), id);
    member.accepts_assignment = request.accepts_assignment();
    member.accepts_rejoin_datagram =
        request.accepts_assignment() && request.accepts_rejoin_datagram();
    member.accepts_rejoin_directive =
        member.accepts_rejoin_datagram && request.accepts_rejoin_directive();
    member.accepts_release = member.accepts_rejoin_datagram && request.accepts_release();
    // A released member that opens a Watch again (its acks stopped) is
    // served on it from now on; a verdict goes down it.
    SetReleasedLocked(member, false);
    SetVerdictPendingLocked(member, false);
    SlotOf(member).last_heard = clock_->Now();
    ClearStreamLossLocked(SlotOf(member));  // re-opened in time
    if (terminal) {
      verdict = verdict_directive_;
      send_verdict = true;
    }
  }
  if (replaced) replaced->Close(absl::AbortedError("replaced by a newer Watch of the same member"));
  if (send_verdict) {
    // Hand out the verdict outside the lock; the stream then ends.
    std::shared_ptr<DirectiveSink> s;
    {
      absl::MutexLock lock(&mu_);
      auto it = members_.find(request.member().node_id());
      if (it != members_.end() && it->second.watch_id == id) s = it->second.sink;
    }
    if (s) s->Send(verdict, /*last=*/true);
  }
  return id;
}

void Coordinator::WatchClosed(uint64_t watch_id) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    auto w = watch_id == 0 ? by_watch_.end() : by_watch_.find(watch_id);
    auto it = w == by_watch_.end() ? members_.end() : members_.find(w->second);
    if (it != members_.end() && it->second.watch_id == watch_id) {
      Member& m = it->second;
      SetSinkLocked(m, nullptr, 0);
      if (m.ready_join) {
        // Its answer had no way back: it re-joins with a Join, or not at all.
        TLOG(kDebug) << "the stream of node " << SafeForLog(it->first)
                     << " closed before its round closed; its re-join is withdrawn";
        m.done = nullptr;
        WithdrawJoinLocked(it);
      } else if (phase_ == Phase::kRunning && m.in_round &&
                 m.state != v1::ReportRequest::SUCCEEDED) {
        // A dead agent, or a live one whose stream broke ("Stream loss"):
        // asked over UDP where that works both ways (CheckProbes decides),
        // else lost unless its agent re-opens the stream or heartbeats
        // within kStreamLossGrace (Tick decides).
        Slot& slot = SlotOf(m);
        ClearStreamLossLocked(slot);
        slot.stream_lost_at = clock_->Now();
        const bool probe = MayProbeLocked(m);
        if (probe) StartProbeLocked(slot, &actions);
        TLOG(kDebug) << "the stream of node " << SafeForLog(it->first) << " closed"
                     << (probe ? "; probing its agent over UDP" : "");
      }
    }
  }
  RunActions(&actions);
}

absl::Status Coordinator::Report(const v1::ReportRequest& request, v1::ReportResponse* response) {
  Actions actions;
  absl::Status over;  // the job's verdict is out: said in the answer too.
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Member*> m = FindMemberLocked(request.member(), request.job_id());
    if (!m.ok()) return m.status();
    Member& member = **m;
    if (request.round() != round_ || !member.in_round) {
      return NotCurrentLocked(request.round(), member,
                              absl::AbortedError(absl::StrFormat(
                                  "report for round %d, but the current round is %d; re-join",
                                  request.round(), round_)));
    }
    if (absl::Status s = ValidateReportLocked(request, member); !s.ok()) return s;
    const absl::Time now = clock_->Now();
    Slot& slot = SlotOf(member);
    slot.last_heard = now;
    ClearStreamLossLocked(slot);  // its agent is alive
    if (response != nullptr) {
      response->set_udp_heard(now - slot.last_datagram <=
                              UdpHeardWithin(options_.heartbeat_timeout));
    }
    member.mpi_sessions = std::max(member.mpi_sessions, request.mpi_sessions());
    if (response != nullptr && member.join.role() == v1::ROLE_MPI_LAUNCHER) {
      UnplacedWorkersLocked(response);
    }
    if (request.has_preflight() && phase_ == Phase::kRunning &&
        options_.preflight != v1::PREFLIGHT_OFF) {
      // Checks that ran beside the workers' start (warn): a running round is
      // not left; fail still fails the job. (A report of links only keeps
      // the node's last checks.)
      if (request.preflight().results_size() > 0) {
        member.preflight_failed = FailedChecks(request.preflight());
      }
      if (request.preflight().results_size() > 0 && !member.preflight_failed.empty()) {
        const std::string& id = member.join.member().node_id();
        if (options_.preflight == v1::PREFLIGHT_FAIL) {
          (void)JudgePreflightLocked(id, member.preflight_failed, &actions);
        } else if (preflight_warnings_.Set(id, member.preflight_failed)) {
          TLOG(kWarning) << "preflight: node " << SafeForLog(id, 64) << " failed "
                         << member.preflight_failed;
          BroadcastPreflightWarningsLocked();
        }
      }
    }
    if (request.has_preflight() && phase_ == Phase::kRunning && warn_check_.active() &&
        request.round() == warn_check_.round() &&
        warn_check_.Add(member.join.member().node_id(), request.preflight().links()) &&
        warn_check_.Complete(now)) {
      FinishWarnCheckLocked();
    }
    if (response != nullptr) {
      for (std::string& line : preflight_warnings_.Lines()) {
        response->add_preflight_warnings(std::move(line));
      }
      for (const auto& [id, node] : slow_judge_.named()) response->add_slow_nodes(node.evidence);
    }
    // The verdict is out: say it here too, for an agent whose stream cannot
    // deliver it (its heartbeats then carry the answer).
    if (phase_ != Phase::kRunning) over = JobOverErrorLocked();
    switch (over.ok() ? request.state() : v1::ReportRequest::STATE_UNSPECIFIED) {
      case v1::ReportRequest::RUNNING:
        if (member.state == v1::ReportRequest::STATE_UNSPECIFIED) member.state = request.state();
        if (request.has_hang()) NoteHangLocked(member, request.hang(), &actions);
        if (request.has_slow() && phase_ == Phase::kRunning && member.in_round) {
          NoteSlowSignalsLocked(member, request.slow(), &actions);
        }
        break;
      case v1::ReportRequest::SUCCEEDED: {
        // A job with an MPI launcher is done when its COMMAND is: the
        // workers host ranks through sshd and report no success of their own
        // (MustSucceedLocked).
        SetSucceededLocked(member);
        if (unfinished_ <= 0) {
          FinishJobLocked(&actions);
        } else {
          HangAnsweredLocked(member, &actions);  // no worker left to suspect
        }
        break;
      }
      case v1::ReportRequest::FAILED: {
        if (member.state == v1::ReportRequest::FAILED) break;  // a repeat (heartbeat)
        member.state = request.state();
        const int local_rank = request.failed_local_rank();
        const std::string detail =
            request.message().empty()
                ? ""
                : absl::StrCat(": ", SafeForLog(request.message(), kMaxMessageLength));
        std::string reason =
            member.join.role() == v1::ROLE_MPI_LAUNCHER
                ? absl::StrFormat("the MPI launcher's COMMAND on node %s exited with code %d%s",
                                  request.member().node_id(), request.exit_code(), detail)
                : absl::StrFormat(
                      "worker local rank %d (global rank %d) on node %s exited with code %d%s",
                      local_rank, member.assignment.self().first_global_rank() + local_rank,
                      request.member().node_id(), request.exit_code(), detail);
        HandleFailureLocked(request.member().node_id(), reason, request.exit_code(), false,
                            &actions);
        break;
      }
      default:  // ValidateReportLocked let no other state through.
        break;
    }
  }
  RunActions(&actions);
  return over;
}

absl::Status Coordinator::Leave(const v1::LeaveRequest& request) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Member*> m = FindMemberLocked(request.member(), request.job_id());
    if (!m.ok()) return m.status();
    std::string node = request.member().node_id();
    Member& member = **m;
    std::string reason =
        absl::StrCat(NodeLabel(member), " left: ", SafeForLog(request.reason(), kMaxMessageLength));
    if (member.ticket != 0) {
      actions.push_back([d = std::move(member.done)] {
        d(absl::CancelledError("left before the round closed"));
      });
      SetTicketLocked(member, 0);
    }
    if (phase_ == Phase::kRunning && member.in_round &&
        member.state != v1::ReportRequest::SUCCEEDED) {
      HandleFailureLocked(node, reason, 0, true, &actions);
    } else if (!member.in_round) {
      if (member.sink) member.sink->Close(absl::CancelledError("left the job"));
      EraseMemberLocked(members_.find(node));
    }
  }
  RunActions(&actions);
  return absl::OkStatus();
}

void Coordinator::HandleFailureLocked(const std::string& node_id, const std::string& reason,
                                      int exit_code, bool remove_node, Actions* actions,
                                      const v1::HangVerdict* hang) {
  // Every failure, a node lost or gone too, ends in a restart or a verdict
  // that every agent logs with this reason: the hosting agent's log says
  // it there, once.
  TLOG_AT(OutcomeLevel(LogLevel::kWarning)) << "round " << round_ << ": " << reason;
  if (hang == nullptr && hang_.round == round_ && round_ != 0) {
    // The hosting agent, asked for its evidence, says so itself.
    TLOG_AT(OutcomeLevel(LogLevel::kInfo))
        << "round " << round_
        << ": the hang investigation ends without a verdict (the failure above came first)";
  }
  hang_ = HangInvestigation{};
  if (remove_node) {
    // Each node once, the newest last (std::find: at most 64 entries).
    recent_lost_.erase(std::remove(recent_lost_.begin(), recent_lost_.end(), node_id),
                       recent_lost_.end());
    recent_lost_.push_back(node_id);
    while (static_cast<int>(recent_lost_.size()) > kSnapshotLostNodes) recent_lost_.pop_front();
    auto it = members_.find(node_id);
    if (it != members_.end()) {
      fenced_[node_id] = {it->second.join.member().incarnation(),
                          absl::StrCat("round ", round_, ": ", reason)};
      if (it->second.sink) {
        it->second.sink->Close(
            WithReason(absl::AbortedError(absl::StrCat("removed from the job: ", reason,
                                                       "; this incarnation is fenced")),
                       v1::ErrorInfo::FENCED));
      }
      EraseMemberLocked(it);
    }
  }
  if (failures_ < options_.max_restarts) {
    ++failures_;
    ReopenLocked(absl::StrFormat("%s (restart %d of %d)", reason, failures_, options_.max_restarts),
                 actions, hang);
    return;
  }
  const bool exhausted = options_.max_restarts > 0;
  FailJobLocked(exhausted
                    ? absl::StrFormat("restart budget exhausted (%d restarts); last failure: %s",
                                      options_.max_restarts, reason)
                    : reason,
                node_id, exit_code, exhausted, actions, hang);
}

void Coordinator::ReopenLocked(const std::string& reason, Actions* actions,
                               const v1::HangVerdict* hang) {
  ++restart_count_;
  const uint64_t next_round = round_ + 1;
  warn_check_.Abandon();  // the round it measured beside is over
  slow_judge_.Clear();
  recent_restarts_.push_back({next_round, reason.substr(0, kMaxMessageLength)});
  while (static_cast<int>(recent_restarts_.size()) > kSnapshotRestarts) {
    recent_restarts_.pop_front();
  }
  v1::Directive d = NewDirectiveLocked();
  d.mutable_rejoin()->set_next_round(next_round);
  d.mutable_rejoin()->set_reason(reason);
  if (hang != nullptr) *d.mutable_rejoin()->mutable_hang() = *hang;
  // Members whose stream takes an assignment keep it and may re-join with a
  // READY datagram: no Join, no new stream (docs/protocol.md). Those that
  // take it by datagram get the Rejoin as a REJOIN datagram: no stream write.
  // Logged before the Rejoins go out (thousands of stream writes or
  // datagrams at scale): the restart's start, for whoever times it.
  TLOG_AT(OutcomeLevel(LogLevel::kInfo)) << "opening round " << next_round << ": " << reason;
  rejoin_by_datagram_ = d;
  rejoin_by_datagram_.mutable_rejoin()->set_ready_by_datagram(true);
  std::vector<OutgoingDatagram> rejoins;
  rejoin_checks_ = {};
  expected_.clear();
  ++member_walks_;
  for (auto& [id, m] : members_) {
    if (!m.in_round) continue;
    expected_.insert(id);
    SetInRoundLocked(m, false);
    Slot& slot = SlotOf(m);
    slot.last_heard = clock_->Now();
    slot.rejoin_round = 0;
    if ((m.sink || m.released) && MayRejoinByDatagramLocked(m)) {
      if (m.accepts_rejoin_datagram && datagram_sender_ != nullptr && !shut_down_ &&
          slot.socket >= 0) {
        slot.rejoin_round = next_round;
        slot.rejoin_repeats = 0;
        ExpectRejoinConfirmedLocked(slot);
        rejoins.push_back(RejoinDatagramLocked(slot));
      } else if (m.sink) {
        m.sink->Send(rejoin_by_datagram_, /*last=*/false);
      }
      // (A released member that cannot be told: its acks stop, it opens its
      // Watch again, is told ABORTED, and re-joins with a Join call.)
    } else if (m.sink) {
      m.sink->Send(d, /*last=*/true);
      SetSinkLocked(m, nullptr, 0);
    }
  }
  if (!rejoins.empty()) {
    actions->push_back([sender = datagram_sender_, r = std::move(rejoins)]() mutable {
      sender->Send(std::move(r));
    });
  }
  // Survivors whose re-join is already parked (none, unless they joined
  // again before their round was re-opened).
  expected_back_ = 0;
  for (const std::string& id : expected_) {
    auto it = members_.find(id);
    expected_back_ += it != members_.end() && it->second.ticket != 0;
  }
  phase_ = Phase::kGathering;
  gathering_since_ = clock_->Now();
  min_reached_at_ = absl::InfiniteFuture();
  expected_joined_at_ = absl::InfinitePast();
  // Joins already parked (a scale-up joiner) may complete the round at once.
  MaybeCloseRoundLocked(actions);
}

void Coordinator::FailJobLocked(const std::string& reason, const std::string& node_id,
                                int exit_code, bool restarts_exhausted, Actions* actions,
                                const v1::HangVerdict* hang, bool preflight) {
  phase_ = Phase::kFailed;
  verdict_ = reason;
  verdict_exhausted_ = restarts_exhausted;
  verdict_preflight_ = preflight;
  verdict_directive_ = NewDirectiveLocked();
  auto* f = verdict_directive_.mutable_job_failed();
  f->set_reason(reason);
  f->set_failed_node_id(node_id);
  f->set_exit_code(exit_code);
  f->set_restarts_exhausted(restarts_exhausted);
  f->set_preflight(preflight);
  if (hang != nullptr) *f->mutable_hang() = *hang;
  TLOG_AT(OutcomeLevel(LogLevel::kError)) << "coordinator: the job failed: " << reason;
  const absl::Status over = JobOverErrorLocked();
  std::vector<OutgoingDatagram> verdicts;
  ++member_walks_;
  for (auto& [id, m] : members_) {
    if (m.ticket != 0) {
      actions->push_back([d = std::move(m.done), over] { d(over); });
      SetTicketLocked(m, 0);
    }
    if (m.sink) m.sink->Send(verdict_directive_, /*last=*/true);
    TellReleasedVerdictLocked(m, &verdicts);
  }
  SendLocked(std::move(verdicts), actions);
}

void Coordinator::FinishJobLocked(Actions* actions) {
  phase_ = Phase::kSucceeded;
  verdict_directive_ = NewDirectiveLocked();
  verdict_directive_.mutable_job_finished();
  TLOG_AT(OutcomeLevel(LogLevel::kInfo))
      << "coordinator: the job succeeded: every worker of round " << round_ << " exited 0";
  std::vector<OutgoingDatagram> verdicts;
  ++member_walks_;
  for (auto& [id, m] : members_) {
    if (m.sink) m.sink->Send(verdict_directive_, /*last=*/true);
    TellReleasedVerdictLocked(m, &verdicts);
  }
  SendLocked(std::move(verdicts), actions);
}

void Coordinator::NoteHangLocked(Member& m, const v1::HangReport& hang, Actions* actions) {
  const std::string& node = m.join.member().node_id();
  if (hang.declared() && hang_.round != round_) {
    // The first declaration of the round: ask every other member still
    // running for its evidence, before anything is stopped.
    hang_ = HangInvestigation{};
    hang_.round = round_;
    hang_.deadline = clock_->Now() + kHangEvidenceWait;
    hang_.declared_by = node;
    hang_.declared_rank = m.assignment.self().first_global_rank() + hang.declared_local_rank();
    hang_.silence_ms = hang.silence_ms();
    hang_.asked.insert(node);
    v1::Directive d = NewDirectiveLocked();
    d.mutable_collect_evidence()->set_declared_by_node(node);
    d.mutable_collect_evidence()->set_declared_rank(hang_.declared_rank);
    std::vector<OutgoingDatagram> datagrams;
    ++member_walks_;
    for (auto& [id, other] : members_) {
      if (!other.in_round || &other == &m || other.state == v1::ReportRequest::SUCCEEDED) continue;
      hang_.asked.insert(id);
      if (other.sink) {
        other.sink->Send(d, /*last=*/false);
      } else if (other.released) {
        // Lost on the way, its evidence is missing from the verdict, which
        // says from how many nodes it came.
        if (std::optional<OutgoingDatagram> g = DirectiveDatagramLocked(other, d); g.has_value()) {
          datagrams.push_back(*std::move(g));
        }
      }
    }
    SendLocked(std::move(datagrams), actions);
    // The hosting agent says it itself (its worker is hung, or it takes its
    // evidence for another node's).
    TLOG_AT(OutcomeLevel(LogLevel::kWarning))
        << "round " << round_ << ": " << NodeLabel(m) << " declared worker rank "
        << hang_.declared_rank << " hung (no progress for "
        << absl::FormatDuration(absl::Milliseconds(hang.silence_ms()))
        << "); asking every node for its evidence (at most "
        << absl::FormatDuration(kHangEvidenceWait) << ")";
  }
  if (hang_.round != round_ || !hang.collected() || hang_.asked.count(node) == 0) return;
  if (!hang_.answered.insert(node).second) return;  // a repeat (a heartbeat)
  AddHangCandidates(hang, node, m.assignment.self().first_global_rank(), &hang_.candidates);
  if (hang_.answered.size() >= hang_.asked.size()) JudgeHangLocked(actions);
}

void Coordinator::HangAnsweredLocked(const Member& m, Actions* actions) {
  const std::string& node = m.join.member().node_id();
  if (hang_.round != round_ || phase_ != Phase::kRunning || hang_.asked.count(node) == 0) return;
  if (!hang_.answered.insert(node).second) return;
  if (hang_.answered.size() >= hang_.asked.size()) JudgeHangLocked(actions);
}

void Coordinator::JudgeHangLocked(Actions* actions) {
  const HangInvestigation h = std::move(hang_);
  hang_ = HangInvestigation{};
  std::optional<v1::HangVerdict> verdict = ChooseHangSuspect(h.candidates);
  if (!verdict.has_value()) {
    // No worker's evidence came (or every worker had exited): the declared one.
    auto it = members_.find(h.declared_by);
    verdict.emplace();
    verdict->set_suspect_node_id(h.declared_by);
    verdict->set_suspect_rank(h.declared_rank);
    verdict->set_suspect_local_rank(
        it == members_.end() ? 0
                             : h.declared_rank - it->second.assignment.self().first_global_rank());
    verdict->set_summary(absl::StrCat("suspect rank ", h.declared_rank, " on ",
                                      SafeForLog(h.declared_by, kMaxIdLength),
                                      " (declared hung by its agent; no other evidence came)"));
  }
  const std::string reason = absl::StrFormat(
      "hang: %s; declared by node %s (rank %d: no progress for %s); evidence from %d of %d "
      "nodes",
      verdict->summary(), SafeForLog(h.declared_by, kMaxIdLength), h.declared_rank,
      absl::FormatDuration(absl::Trunc(absl::Milliseconds(h.silence_ms), absl::Seconds(1))),
      h.answered.size(), h.asked.size());
  // The suspect's node fails the round, as its worker's exit would have.
  HandleFailureLocked(verdict->suspect_node_id(), reason, kExitWorkerHung, false, actions,
                      &*verdict);
}

void Coordinator::TellReleasedVerdictLocked(Member& m, std::vector<OutgoingDatagram>* out) {
  if (!m.released) return;
  // Again for each of its alive datagrams until it says TAKEN
  // (NoteLivenessBatch); Drained waits for that, or its silence (Tick).
  SetVerdictPendingLocked(m, true);
  if (std::optional<OutgoingDatagram> v = VerdictDatagramLocked(m); v.has_value()) {
    out->push_back(*std::move(v));
  }
}

void Coordinator::SendLocked(std::vector<OutgoingDatagram> datagrams, Actions* actions) {
  if (datagrams.empty() || datagram_sender_ == nullptr) return;
  actions->push_back([sender = datagram_sender_, d = std::move(datagrams)]() mutable {
    sender->Send(std::move(d));
  });
}

void Coordinator::Tick() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    last_tick_ = now;
    // REJOIN datagrams nobody confirmed in time: again, or down the stream.
    std::vector<OutgoingDatagram> again;
    while (!rejoin_checks_.empty() && rejoin_checks_.top().due <= now) {
      const RejoinCheck check = rejoin_checks_.top();
      rejoin_checks_.pop();
      Slot& s = slots_[check.slot];
      if (s.rejoin_round == check.round && now >= s.rejoin_due && RejoinUnconfirmedLocked(s) &&
          RepeatRejoinLocked(s)) {
        again.push_back(RejoinDatagramLocked(s));
      }
    }
    if (!again.empty() && datagram_sender_ != nullptr) {
      actions.push_back([sender = datagram_sender_, r = std::move(again)]() mutable {
        sender->Send(std::move(r));
      });
    }
    if (phase_ == Phase::kGathering) {
      MaybeCloseRoundLocked(&actions);
    }
    for (auto c = newcomer_checks_.begin(); c != newcomer_checks_.end();) {
      // A newcomer that never came back with its links: measured again if it does.
      c = now >= c->second.deadline() + kWarnCheckSlack ? newcomer_checks_.erase(c) : std::next(c);
    }
    if (phase_ == Phase::kRunning && warn_check_.Complete(now)) {
      // Links beside the workers that did not all come in time: judged with what did.
      FinishWarnCheckLocked();
    }
    if (phase_ == Phase::kRunning) JudgeSlowNodesLocked(&actions);  // when due
    if (phase_ == Phase::kRunning && hang_.round == round_ && now >= hang_.deadline) {
      // A hang whose evidence did not all come in time: judged with what did.
      JudgeHangLocked(&actions);
    }
    if (phase_ == Phase::kGathering && !shut_down_) {
      ExpireJoinsLocked(now, &actions);
      WithdrawSilentReadiesLocked(now);
      if (round_ > 0 && now - gathering_since_ >= options_.min_nodes_timeout &&
          GatheringCountLocked() + gate_check_.awaited() < options_.min_nodes) {
        FailJobLocked(absl::StrFormat("only %d of the %d nodes needed re-joined within %s "
                                      "(--min-nodes-timeout): %s",
                                      GatheringCountLocked(), options_.min_nodes,
                                      absl::FormatDuration(options_.min_nodes_timeout),
                                      GatheringStatusLocked()),
                      "", 0, /*restarts_exhausted=*/true, &actions);
      } else if (now - gathering_since_ >= kProgressLogEvery &&
                 now - last_progress_log_ >= kProgressLogEvery) {
        last_progress_log_ = now;
        TLOG(kInfo) << "round " << NextRoundLocked() << ": " << GatheringStatusLocked();
      }
    } else if (verdict_pending_ > 0 && !shut_down_) {
      // After the verdict: a released member that went silent without
      // saying TAKEN is gone (or cannot be reached): stop waiting for it.
      const absl::Duration limit = SilenceLimit(options_.heartbeat_timeout);
      ++member_walks_;
      for (Slot& slot : slots_) {
        if (slot.member != nullptr && slot.member->verdict_pending &&
            now - slot.last_heard >= limit) {
          TLOG(kDebug) << "node " << SafeForLog(slot.member->join.member().node_id())
                       << " went silent without confirming the verdict";
          SetVerdictPendingLocked(*slot.member, false);
        }
      }
    } else if (phase_ == Phase::kRunning) {
      // One pass over the flat slot array; a member is looked at only when
      // one of its deadlines passed.
      const absl::Duration limit = SilenceLimit(options_.heartbeat_timeout);
      std::string disconnected, silent;
      ++member_walks_;
      for (const Slot& slot : slots_) {
        if (slot.member == nullptr) continue;
        // (A probed member is CheckProbes' to judge.)
        if (disconnected.empty() && slot.probe_nonce == 0 &&
            now - slot.stream_lost_at >= kStreamLossGrace && slot.member->in_round &&
            slot.member->sink == nullptr) {
          disconnected = slot.member->join.member().node_id();
        }
        if (silent.empty() && slot.must_stay_alive && now - slot.last_heard >= limit) {
          silent = slot.member->join.member().node_id();
        }
        if (!disconnected.empty() && !silent.empty()) break;
      }
      if (!disconnected.empty()) {
        HandleFailureLocked(disconnected,
                            absl::StrCat(NodeLabel(members_.at(disconnected)),
                                         " lost: its agent disconnected (watch stream closed)"),
                            0, true, &actions);
      }
      // (The first failure may have re-opened the round or ended the job.)
      auto it = silent.empty() ? members_.end() : members_.find(silent);
      if (phase_ == Phase::kRunning && it != members_.end() && SlotOf(it->second).must_stay_alive) {
        HandleFailureLocked(
            silent,
            absl::StrCat(NodeLabel(it->second), " lost: no heartbeat or liveness datagram for ",
                         absl::FormatDuration(options_.heartbeat_timeout),
                         " (--heartbeat-timeout)"),
            0, true, &actions);
      }
    }
  }
  RunActions(&actions);
}

// ---- Slow nodes (docs/slow-nodes.md; slow_nodes.h).

int32_t Coordinator::SlowSignalsIntervalMs(int n) const {
  if (options_.slow_nodes == v1::SLOW_NODES_OFF) return 0;
  const absl::Duration interval = std::max(SlowSignalsInterval(options_.slow_node_window),
                                           HeardReportInterval(options_.heartbeat_timeout, n));
  return static_cast<int32_t>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(interval), 1, kMaxSlowIntervalMs));
}

void Coordinator::NoteSlowSignalsLocked(const Member& m, const v1::SlowSignals& s,
                                        Actions* actions) {
  if (options_.slow_nodes == v1::SLOW_NODES_OFF) return;
  slow_judge_.Add(m.join.member().node_id(), s, clock_->Now());
  JudgeSlowNodesLocked(actions);
}

void Coordinator::JudgeSlowNodesLocked(Actions* actions) {
  if (options_.slow_nodes == v1::SLOW_NODES_OFF || phase_ != Phase::kRunning) return;
  const absl::Time now = clock_->Now();
  if (!slow_judge_.Due(now)) return;  // at most once per interval: O(1) until then
  const std::vector<SlowNodeEvent> events = slow_judge_.Judge(now);
  const bool exclude = options_.slow_nodes == v1::SLOW_NODES_EXCLUDE;
  // exclude: the round keeps at least min_nodes without it.
  const bool may_exclude = exclude && elastic_ && in_round_ - 1 >= options_.min_nodes;
  const SlowNode* excluded = nullptr;
  bool named = false;
  for (const SlowNodeEvent& e : events) {
    if (e.kind == SlowNodeEvent::kCleared) {
      TLOG(kInfo) << "slow node: " << e.node.evidence;
      continue;
    }
    named = true;
    if (may_exclude &&
        (excluded == nullptr || e.node.slowdown_percent > excluded->slowdown_percent)) {
      excluded = &e.node;
    }
  }
  if (excluded != nullptr && ExcludeSlowNodeLocked(*excluded, actions)) return;
  if (!named) return;
  for (const SlowNodeEvent& e : events) {
    if (e.kind != SlowNodeEvent::kNamed) continue;
    // The hosting agent logs the line it is told (below) itself.
    TLOG_AT(OutcomeLevel(LogLevel::kWarning))
        << "slow node: " << e.node.evidence
        << (!exclude   ? ""
            : elastic_ ? " (--slow-nodes=exclude: the round is at its minimum of nodes)"
                       : " (--slow-nodes=exclude: a static job cannot leave it out)");
  }
  // Every member logs the lines it has not logged yet.
  v1::Directive d = NewDirectiveLocked();
  for (const auto& [id, node] : slow_judge_.named()) {
    d.mutable_slow_nodes()->add_lines(node.evidence);
  }
  ++member_walks_;
  for (auto& [id, m] : members_) {
    if (m.in_round && m.sink != nullptr) m.sink->Send(d, /*last=*/false);
  }
}

bool Coordinator::ExcludeSlowNodeLocked(const SlowNode& node, Actions* actions) {
  auto it = members_.find(node.node_id);
  if (it == members_.end() || !it->second.in_round) return false;
  const absl::Time now = clock_->Now();
  // Quarantines over for kSlowRepeatWithin go first: the map holds the
  // nodes left out within the last hour or so, at most.
  for (auto q = slow_quarantine_.begin(); q != slow_quarantine_.end();) {
    q = now - q->second.until > kSlowRepeatWithin ? slow_quarantine_.erase(q) : std::next(q);
  }
  SlowQuarantine& q = slow_quarantine_[node.node_id];
  q.times = q.times > 0 ? q.times + 1 : 1;  // (an entry still here: within the hour)
  absl::Duration wait = options_.quarantine;
  for (int i = 1; i < q.times && wait < kMaxSlowQuarantine; ++i) wait *= 2;
  wait = std::max(options_.quarantine, std::min(wait, kMaxSlowQuarantine));
  q.until = now + wait;
  q.why = node.evidence;
  const std::string reason = preflight::Truncated(
      absl::StrCat(NodeLabel(it->second), " left out as a slow node (--slow-nodes=exclude, for ",
                   absl::FormatDuration(wait),
                   q.times > 1 ? absl::StrCat(": left out ", q.times, " times within an hour") : "",
                   "): ", node.evidence),
      kMaxMessageLength);
  TLOG_AT(OutcomeLevel(LogLevel::kWarning)) << "round " << round_ << ": " << reason;
  // Not a failure (no restart of --max-restarts is spent): a policy's
  // restart, as a scale-up is. Its agent is told to re-join like every
  // other, and its re-join is refused until the quarantine is over.
  ReopenLocked(reason, actions);
  expected_.erase(node.node_id);  // the others do not wait for it
  MaybeCloseRoundLocked(actions);
  return true;
}

absl::Status Coordinator::SlowQuarantineLocked(const std::string& node_id) {
  auto q = slow_quarantine_.find(node_id);
  if (q == slow_quarantine_.end()) return absl::OkStatus();
  const absl::Duration left = q->second.until - clock_->Now();
  if (left <= absl::ZeroDuration()) return absl::OkStatus();
  // A gathering round that cannot reach its minimum without it, even once
  // every survivor it waits for is back, takes it (as --preflight=exclude
  // runs a failing node when too few pass).
  const int coming = static_cast<int>(expected_.size()) - expected_back_;
  if (phase_ == Phase::kGathering && GatheringCountLocked() + coming < options_.min_nodes) {
    TLOG(kWarning) << "slow node: node " << SafeForLog(node_id, 64)
                   << " joins although quarantined: round " << NextRoundLocked()
                   << " cannot reach its minimum of " << options_.min_nodes << " nodes without it";
    return absl::OkStatus();
  }
  v1::ErrorInfo info;
  info.set_reason(v1::ErrorInfo::PREFLIGHT_EXCLUDED);
  // It asks again well before a round that may need it gives up.
  const absl::Duration ask_again =
      std::min(left, std::max(absl::Seconds(1), options_.min_nodes_timeout / 4));
  info.set_retry_after_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(ask_again)));
  return WithErrorInfo(
      absl::FailedPreconditionError(absl::StrCat(
          "slow node: node ", SafeForLog(node_id, 64),
          " is left out of the job (--slow-nodes=exclude, --quarantine): ", q->second.why,
          "; it may join again in ", absl::FormatDuration(absl::Ceil(left, absl::Seconds(1))))),
      info);
}

// ---- Stream loss ("Stream loss" in coordinator.h).

bool Coordinator::MayProbeLocked(const Member& m) const {
  const Slot& slot = slots_[m.slot];
  return datagram_sender_ != nullptr && !shut_down_ && udp_port_ != 0 && m.join.udp_liveness() &&
         slot.socket >= 0 && !slot.acks_lost &&
         clock_->Now() - slot.last_datagram <= UdpHeardWithin(options_.heartbeat_timeout);
}

void Coordinator::StartProbeLocked(Slot& slot, Actions* actions) {
  // From the close (the caller set stream_lost_at just now); a random,
  // non-zero nonce, so that an answer cannot be guessed.
  const absl::Time now = slot.stream_lost_at;
  slot.probe_nonce = NewIncarnation();
  slot.probe_next = now + kStreamProbeEvery;
  // A member that said its acks arrive answers within the window; one
  // not known yet has the grace it had before probes (a refusal, an
  // answer still decide at once).
  slot.probe_until = now + (slot.acks_reach ? options_.stream_probe_window : kStreamLossGrace);
  probing_.insert(slot.member->slot);
  SendLocked({ProbeDatagramLocked(slot)}, actions);
}

void Coordinator::ClearStreamLossLocked(Slot& slot) {
  slot.stream_lost_at = absl::InfiniteFuture();
  if (slot.probe_nonce == 0) return;
  slot.probe_nonce = 0;
  slot.probe_next = slot.probe_until = absl::InfiniteFuture();
  if (slot.member != nullptr) probing_.erase(slot.member->slot);
}

bool Coordinator::ProbeStillDueLocked(const Slot& slot) const {
  const Member* m = slot.member;
  return m != nullptr && slot.probe_nonce != 0 && phase_ == Phase::kRunning && !shut_down_ &&
         m->in_round && m->state != v1::ReportRequest::SUCCEEDED && m->sink == nullptr;
}

OutgoingDatagram Coordinator::ProbeDatagramLocked(const Slot& slot) const {
  const LivenessBytes b = EncodeLivenessDatagram(slot.member->slot, slot.incarnation, round_,
                                                 slot.probe_nonce, slot.key, LivenessKind::kProbe);
  OutgoingDatagram d{slot.socket, slot.from, std::string(b.begin(), b.end())};
  d.probe = true;
  return d;
}

void Coordinator::LoseProbedLocked(const Slot& slot, absl::string_view how, Actions* actions) {
  const std::string node = slot.member->join.member().node_id();
  HandleFailureLocked(
      node,
      absl::StrCat(NodeLabel(*slot.member), " lost: its agent disconnected (watch stream closed; ",
                   how, ")"),
      0, true, actions);
}

int Coordinator::NoteProbesRefused(absl::Span<const LivenessDatagram> refused) {
  Actions actions;
  int matched = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const LivenessDatagram& d : refused) {
      // Only a probe out now, of ours (its nonce and MAC: a forged ICMP
      // message cannot name one), for its member's incarnation.
      if (d.kind != LivenessKind::kProbe || d.slot >= slots_.size()) continue;
      const Slot& slot = slots_[d.slot];
      if (!ProbeStillDueLocked(slot) || d.seq != slot.probe_nonce ||
          d.incarnation != slot.incarnation || !d.MacValid(slot.key)) {
        continue;
      }
      ++matched;
      // One loss per call, as Tick does: it re-opens the round (or ends
      // the job), and a probe of another member then has nothing to judge.
      LoseProbedLocked(slot, "its liveness port refused a probe", &actions);
      break;
    }
  }
  RunActions(&actions);
  return matched;
}

absl::Time Coordinator::CheckProbes(absl::Time drained_at) {
  Actions actions;
  absl::Time next = absl::InfiniteFuture();
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    std::vector<OutgoingDatagram> again;
    const Slot* lost = nullptr;
    for (auto it = probing_.begin(); it != probing_.end();) {
      Slot& slot = slots_[*it];
      if (!ProbeStillDueLocked(slot)) {
        // Its round ended, it succeeded or re-opened its stream: nothing to judge.
        ++it;
        ClearStreamLossLocked(slot);
        continue;
      }
      ++it;
      if (drained_at >= slot.probe_until) {
        lost = &slot;
        break;
      }
      if (now >= slot.probe_next && slot.probe_next < slot.probe_until) {
        again.push_back(ProbeDatagramLocked(slot));
        // (After a stall, the next one a whole interval from now.)
        slot.probe_next = std::max(slot.probe_next + kStreamProbeEvery, now + kStreamProbeEvery);
      }
      next =
          std::min({next, slot.probe_until,
                    slot.probe_next < slot.probe_until ? slot.probe_next : absl::InfiniteFuture()});
    }
    if (lost != nullptr) {
      LoseProbedLocked(*lost,
                       absl::StrCat("no answer to a probe within ",
                                    absl::FormatDuration(lost->probe_until - lost->stream_lost_at)),
                       &actions);
      // Whatever else is out is looked at again at once.
      if (!probing_.empty()) next = now;
    }
    SendLocked(std::move(again), &actions);
  }
  RunActions(&actions);
  return next;
}

void Coordinator::EnableUdpLiveness(int udp_port, DatagramSender* sender) {
  absl::MutexLock lock(&mu_);
  udp_port_ = udp_port;
  datagram_sender_ = sender;
}

void Coordinator::SetAnswerObserver(std::function<void(uint64_t round, int nnodes)> observer) {
  absl::MutexLock lock(&mu_);
  answer_observer_ = std::move(observer);
}

void Coordinator::NotifyAnswerSent(uint64_t round, int nnodes) {
  std::function<void(uint64_t, int)> observer;
  {
    absl::MutexLock lock(&mu_);
    observer = answer_observer_;
  }
  if (observer) observer(round, nnodes);
}

void RunActions(std::vector<std::function<void()>>* actions) {
  // A round's answers at scale: thousands of gRPC writes, each with its
  // sendmsg. They are independent (one member each), so a second thread
  // on a second CPU halves the time to the last one.
  const size_t n = actions->size();
  std::thread other;
  size_t mine = n;
  if (n >= kSplitActionsFrom && std::thread::hardware_concurrency() >= 2) {
    try {
      other = std::thread([actions, n] {
        for (size_t k = n / 2; k < n; ++k) (*actions)[k]();
      });
      mine = n / 2;
    } catch (const std::system_error&) {
      // No thread to be had (a process or memory limit): all of them here.
    }
  }
  for (size_t k = 0; k < mine; ++k) (*actions)[k]();
  if (other.joinable()) other.join();
  actions->clear();
}

bool Coordinator::RejoinUnconfirmedLocked(const Slot& s) const {
  if (s.member == nullptr || s.rejoin_round == 0 || s.rejoin_round != round_ + 1 ||
      phase_ != Phase::kGathering || shut_down_) {
    return false;
  }
  const Member& m = *s.member;
  return m.ticket == 0 && !m.in_round && (m.sink != nullptr || m.released);
}

void Coordinator::ExpectRejoinConfirmedLocked(Slot& s) {
  const uint32_t slot = s.member->slot;
  const int64_t spread_ms = absl::ToInt64Milliseconds(kRejoinRepeatSpread);
  s.rejoin_due = clock_->Now() + kRejoinConfirmWithin +
                 absl::Milliseconds((uint64_t{slot} * 7919) % static_cast<uint64_t>(spread_ms));
  rejoin_checks_.push({s.rejoin_due, slot, s.rejoin_round});
}

bool Coordinator::RepeatRejoinLocked(Slot& s) {
  if (s.rejoin_repeats < kRejoinDatagramTries) {
    ++s.rejoin_repeats;
    ExpectRejoinConfirmedLocked(s);
    return true;
  }
  Member& m = *s.member;
  if (m.released) {
    // No stream to fall back on: again for every alive datagram of the old
    // round (NoteLivenessBatch), no more on the timer.
    ++s.rejoin_repeats;
    s.rejoin_due = absl::InfiniteFuture();
    return true;
  }
  TLOG(kDebug) << Who(m.join.member()) << " did not confirm the REJOIN datagram for round "
               << s.rejoin_round << "; sending the Rejoin down its stream";
  s.rejoin_round = 0;
  s.rejoin_due = absl::InfiniteFuture();
  m.sink->Send(rejoin_by_datagram_, /*last=*/false);
  return false;
}

LivenessBytes Coordinator::RejoinBytesLocked(const Slot& s) const {
  return EncodeLivenessDatagram(s.member->slot, s.incarnation, s.rejoin_round, 0, s.key,
                                LivenessKind::kRejoin);
}

OutgoingDatagram Coordinator::RejoinDatagramLocked(const Slot& s) const {
  if (s.member->accepts_rejoin_directive && rejoin_by_datagram_.has_rejoin() &&
      rejoin_by_datagram_.rejoin().next_round() == s.rejoin_round) {
    // The Rejoin itself, reason and all (cut to fit the datagram).
    if (std::optional<OutgoingDatagram> d =
            DirectiveDatagramLocked(*s.member, FitForDatagram(rejoin_by_datagram_));
        d.has_value()) {
      return *std::move(d);
    }
  }
  const LivenessBytes b = RejoinBytesLocked(s);
  return {s.socket, s.from, std::string(reinterpret_cast<const char*>(b.data()), b.size())};
}

std::string Coordinator::NodeLabel(const Member& m) {
  std::string label = absl::StrCat("node ", SafeForLog(m.join.member().node_id(), kMaxIdLength));
  const v1::NodeAssignment& self = m.assignment.self();
  // Only a node's ranks are global ranks (an MPI member's slots are not).
  if (!m.in_round || m.join.role() != v1::ROLE_NODE || self.local_world_size() < 1) return label;
  const int first = self.first_global_rank();
  if (self.local_world_size() == 1) return absl::StrCat(label, " (rank ", first, ")");
  return absl::StrCat(label, " (ranks ", first, "-", first + self.local_world_size() - 1, ")");
}

bool Coordinator::MayReleaseLocked(const Member& m) const {
  if (options_.release_streams_from <= 0 || in_round_ < options_.release_streams_from ||
      phase_ != Phase::kRunning || shut_down_ || !m.in_round || m.sink == nullptr || m.released ||
      !m.accepts_release || datagram_sender_ == nullptr || m.join.want_nodes()) {
    return false;
  }
  // Its next assignment must fit a datagram (the member list is not sent:
  // want_nodes members keep their stream).
  return slots_[m.slot].socket >= 0 &&
         AssignmentDirective(options_.incarnation, m.assignment).ByteSizeLong() <=
             kMaxReleasedAssignmentBytes;
}

void Coordinator::ReleaseLocked(Member& m, Actions* actions) {
  v1::Directive d = NewDirectiveLocked();
  d.mutable_release();
  actions->push_back([sink = m.sink, d = std::move(d)] { sink->Send(d, /*last=*/true); });
  SetSinkLocked(m, nullptr, 0);
  SetReleasedLocked(m, true);
}

std::optional<OutgoingDatagram> Coordinator::DirectiveDatagramLocked(const Member& m,
                                                                     const v1::Directive& d) const {
  const Slot& s = slots_[m.slot];
  if (s.socket < 0) return std::nullopt;
  std::optional<std::string> bytes =
      EncodeDirectiveDatagram(m.slot, s.incarnation, d.round(), d.SerializeAsString(), s.key);
  if (!bytes.has_value()) return std::nullopt;
  return OutgoingDatagram{s.socket, s.from, *std::move(bytes)};
}

std::optional<OutgoingDatagram> Coordinator::VerdictDatagramLocked(const Member& m) const {
  if (!m.verdict_pending) return std::nullopt;
  return DirectiveDatagramLocked(m, FitForDatagram(verdict_directive_));
}

bool Coordinator::MayRejoinByDatagramLocked(const Member& m) const {
  // Only for a member whose datagrams get here: one living on Reports (UDP
  // blocked on its way) would send READYs nobody hears.
  return m.accepts_assignment && udp_port_ != 0 && m.join.udp_liveness() &&
         clock_->Now() - slots_[m.slot].last_datagram <= UdpHeardWithin(options_.heartbeat_timeout);
}

bool Coordinator::ReadyJoinLocked(Member& m, uint64_t round, Actions* actions) {
  if (phase_ == Phase::kGathering && m.ready_join && m.ticket != 0 && round == round_ + 1) {
    return true;  // a repeat: held already
  }
  if (phase_ == Phase::kRunning && m.in_round && round == round_) {
    return true;  // the round closed with it: its assignment is on the way
  }
  // Anything else (a stale round, a member that was not told it may) is a
  // plain liveness datagram.
  if (phase_ != Phase::kGathering || shut_down_ || m.ticket != 0 || m.in_round ||
      (m.sink == nullptr && !m.released) || !m.accepts_assignment || udp_port_ == 0 ||
      round != round_ + 1 || expected_.count(m.join.member().node_id()) == 0 ||
      GatheringCountLocked() >= options_.max_nodes) {
    return false;
  }
  // Its last checks failed (--preflight=exclude): only a Join call, with a
  // fresh report, may bring it back (a READY carries none).
  if (ExcludableLocked(m)) return false;
  // Left out as a slow node (and no longer expected): its Join call is told
  // for how long.
  if (!SlowQuarantineLocked(m.join.member().node_id()).ok()) return false;
  const Slot& slot = SlotOf(m);
  if (m.released && (datagram_sender_ == nullptr || slot.socket < 0 ||
                     AssignmentDirective(options_.incarnation, m.assignment).ByteSizeLong() >
                         kMaxReleasedAssignmentBytes)) {
    return false;  // no way to answer by datagram: not held, the agent makes a Join call
  }
  SetTicketLocked(m, next_id_++);
  m.ready_join = true;
  SlotOf(m).rejoin_round = 0;  // the READY confirms a REJOIN too
  SlotOf(m).rejoin_due = absl::InfiniteFuture();
  m.answer_by = absl::InfiniteFuture();
  if (m.released) {
    // The answer as a DIRECTIVE datagram (again for each READY of the closed
    // round: NoteLivenessBatch), to where the READY came from.
    m.done = [this, sender = datagram_sender_, socket = slot.socket, to = slot.from,
              slot_index = m.slot, member_incarnation = slot.incarnation, key = slot.key,
              incarnation = options_.incarnation,
              node = m.join.member().node_id()](absl::StatusOr<v1::Assignment> a) {
      if (!a.ok()) return;
      const uint64_t round = a->round();
      const int nnodes = a->nnodes();
      const v1::Directive d = AssignmentDirective(incarnation, *std::move(a));
      std::optional<std::string> bytes = EncodeDirectiveDatagram(slot_index, member_incarnation,
                                                                 round, d.SerializeAsString(), key);
      if (bytes.has_value()) {
        sender->Send({OutgoingDatagram{socket, to, *std::move(bytes)}});
      } else {
        // (Checked when its READY was held; a much longer master address
        // since.) Its READYs go unacked from now on: it makes a Join call.
        TLOG(kWarning) << "the assignment of node " << SafeForLog(node)
                       << " does not fit a datagram; it re-joins with a Join call";
      }
      NotifyAnswerSent(round, nnodes);
    };
  } else {
    m.done = [sink = m.sink, incarnation = options_.incarnation](absl::StatusOr<v1::Assignment> a) {
      // Errors need no answer here: a verdict goes down the stream anyway,
      // and a superseding Join or a Leave answers for itself.
      if (!a.ok()) return;
      v1::Directive d;
      d.set_coordinator_incarnation(incarnation);
      d.set_round(a->round());
      *d.mutable_assignment() = *std::move(a);
      sink->Send(d, /*last=*/false);
    };
  }
  TLOG(kDebug) << "re-join of " << Who(m.join.member()) << " by datagram ("
               << GatheringCountLocked() << "/" << options_.min_nodes << ".." << options_.max_nodes
               << ")";
  MaybeCloseRoundLocked(actions);
  return true;
}

LivenessBatchStats Coordinator::NoteLivenessBatch(absl::Span<const LivenessDatagram> batch,
                                                  std::vector<LivenessAck>* acks,
                                                  std::vector<std::function<void()>>* deferred,
                                                  const LivenessOrigin* origin) {
  LivenessBatchStats stats;
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    const absl::Duration ack_every = AckInterval(options_.heartbeat_timeout);
    // An ack says the coordinator lives and the member belongs: none outside
    // a running round (the member's Reports then get ABORTED or the verdict),
    // and none while the ticker, which applies every timeout and restart, has
    // stalled (the liveness thread alone is no proof of that).
    const bool may_ack =
        acks != nullptr && phase_ == Phase::kRunning && now - last_tick_ <= 2 * ack_every;
    // DIRECTIVE datagrams to released members (a lost assignment or
    // verdict, again), sent after the acks.
    std::vector<OutgoingDatagram> replies;
    for (size_t i = 0; i < batch.size(); ++i) {
      const LivenessDatagram& d = batch[i];
      if (udp_port_ == 0 || d.slot >= slots_.size() || slots_[d.slot].member == nullptr ||
          !slots_[d.slot].member->join.udp_liveness()) {
        ++stats.unknown_slot;
        continue;
      }
      Slot& slot = slots_[d.slot];
      if (!d.MacValid(slot.key)) {
        ++stats.bad_mac;
        continue;
      }
      if (d.incarnation != slot.incarnation) {
        ++stats.wrong_incarnation;
        continue;
      }
      if (d.kind == LivenessKind::kProbeAnswer) {
        // Its seq is the probe's nonce, not the agent's counter: only the
        // answer to the probe out now counts (a late, replayed or forged
        // one is nothing), and it keeps the member ("Stream loss").
        if (slot.probe_nonce == 0 || d.seq != slot.probe_nonce) {
          ++stats.stale_seq;
          continue;
        }
        slot.last_heard = now;
        slot.last_datagram = now;
        if (origin != nullptr && i < origin->from.size()) {
          slot.socket = origin->socket;
          slot.from = origin->from[i];
        }
        TLOG(kDebug) << "node " << SafeForLog(slot.member->join.member().node_id())
                     << " answered the probe after its stream closed: its agent lives";
        ClearStreamLossLocked(slot);
        ++stats.accepted;
        ++stats.probe_answers;
        continue;
      }
      if (d.seq <= slot.last_seq) {
        ++stats.stale_seq;
        continue;
      }
      slot.last_seq = d.seq;
      slot.last_heard = now;
      slot.last_datagram = now;
      if (d.kind == LivenessKind::kAliveAcked) {
        slot.acks_reach = true;
        slot.acks_lost = false;
      } else if (d.kind == LivenessKind::kAlive) {
        // Sent after one of its datagrams was acked, yet not ALIVE_ACKED:
        // the acks do not get back to it (or it is older than probes).
        slot.acks_reach = false;
        if (slot.acked_seq != 0 && d.seq > slot.acked_seq) slot.acks_lost = true;
      }
      if (origin != nullptr && i < origin->from.size()) {
        slot.socket = origin->socket;
        slot.from = origin->from[i];
      }
      ++stats.accepted;
      // The ack of this datagram: its slot, incarnation, round and seq.
      auto ack = [&] {
        acks->push_back({i, EncodeLivenessDatagram(d.slot, d.incarnation, d.round, d.seq, slot.key,
                                                   LivenessKind::kAck)});
        slot.acked_seq = std::max(slot.acked_seq, d.seq);
        ++stats.acks;
      };
      Member& member = *slot.member;
      if (member.verdict_pending && d.kind != LivenessKind::kTaken) {
        // Still alive after the verdict (stopping, or re-joining by READY),
        // no TAKEN: the datagram was lost.
        if (std::optional<OutgoingDatagram> v = VerdictDatagramLocked(member); v.has_value()) {
          replies.push_back(*std::move(v));
          ++stats.directives;
        }
        continue;
      }
      if (d.kind == LivenessKind::kReady) {
        ++stats.ready;
        // (Before: a READY that closes the round is answered by the close.)
        const bool closed_with_it =
            phase_ == Phase::kRunning && member.in_round && d.round == round_;
        const bool held = ReadyJoinLocked(member, d.round, &actions);
        // `member` may be gone: the close its READY caused can leave it out
        // (its network was blamed) and erase it (the slot is then empty).
        if (slot.member != &member) continue;
        if (held && member.released && closed_with_it) {
          // The round closed with it and the datagram with its assignment
          // was lost: again (unacked if it does not fit: a Join call then).
          std::optional<OutgoingDatagram> again = DirectiveDatagramLocked(
              member, AssignmentDirective(options_.incarnation, member.assignment));
          if (!again.has_value()) continue;
          replies.push_back(*std::move(again));
          ++stats.directives;
        }
        // Acked when held (each one: they come every interval at most), so
        // that an agent whose READYs do not get here falls back to a Join.
        if (held && acks != nullptr) ack();
        continue;
      }
      if (d.kind == LivenessKind::kTaken) {
        // A released member has the verdict: nothing more to send it.
        ++stats.taken;
        SetVerdictPendingLocked(member, false);
        continue;
      }
      if (slot.rejoin_round != 0 && d.round >= slot.rejoin_round) {
        // The agent took its REJOIN: this confirms it.
        slot.rejoin_round = 0;
        slot.rejoin_due = absl::InfiniteFuture();
        continue;
      }
      if (acks != nullptr && RejoinUnconfirmedLocked(slot)) {
        // Told to re-join by datagram, and still in the old round: the
        // REJOIN was lost (again), or UDP from here does not reach it.
        if (RepeatRejoinLocked(slot)) {
          if (member.accepts_rejoin_directive) {
            replies.push_back(RejoinDatagramLocked(slot));  // (longer than an ack)
          } else {
            acks->push_back({i, RejoinBytesLocked(slot)});
          }
          ++stats.rejoins;
        }
        continue;
      }
      if (may_ack && member.in_round && now - slot.last_ack >= ack_every) {
        // Acked before, so the agent has seen an ack: it may go without its
        // stream now (it refuses the release if its acks do not arrive).
        const bool acked_before = slot.last_ack != absl::InfinitePast();
        slot.last_ack = now;
        ack();
        if (acked_before && MayReleaseLocked(member)) ReleaseLocked(member, &actions);
      }
    }
    if (!replies.empty() && datagram_sender_ != nullptr) {
      actions.push_back([sender = datagram_sender_, r = std::move(replies)]() mutable {
        sender->Send(std::move(r));
      });
    }
  }
  // (A READY that completed the round: its answers, unlocked.)
  if (deferred != nullptr) {
    for (auto& a : actions) deferred->push_back(std::move(a));
  } else {
    RunActions(&actions);
  }
  return stats;
}

void Coordinator::Shutdown(absl::string_view reason) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    datagram_sender_ = nullptr;  // the host destroys it after this
    rejoin_checks_ = {};
    std::string why(reason);
    ++member_walks_;
    for (auto& [id, m] : members_) {
      if (m.ticket != 0) {
        actions.push_back([d = std::move(m.done), why] {
          d(absl::UnavailableError(absl::StrCat("coordinator shutting down: ", why)));
        });
        SetTicketLocked(m, 0);
      }
      if (m.sink) {
        actions.push_back([s = m.sink, why] {
          s->Close(absl::UnavailableError(absl::StrCat("coordinator shutting down: ", why)));
        });
        SetSinkLocked(m, nullptr, 0);
      }
    }
  }
  RunActions(&actions);
}

Coordinator::Snapshot Coordinator::GetSnapshot() const {
  absl::MutexLock lock(&mu_);
  Snapshot s;
  s.phase = phase_;
  s.round = round_;
  s.gathering = gathering_;
  s.members = in_round_;
  s.watching = watching_;
  s.released = released_;
  s.restart_count = restart_count_;
  s.verdict = verdict_;
  s.restarts_exhausted = verdict_exhausted_;
  for (const std::string& node : recent_lost_) {
    if (members_.find(node) == members_.end()) s.lost_nodes.push_back(node);
  }
  s.restarts.assign(recent_restarts_.begin(), recent_restarts_.end());
  s.min_nodes = options_.min_nodes;
  s.max_nodes = options_.max_nodes;
  if (phase_ == Phase::kGathering && round_ > 0) {
    s.gives_up_in = gathering_since_ + options_.min_nodes_timeout - clock_->Now();
  }
  for (const auto& [id, node] : slow_judge_.named()) s.slow_nodes.push_back(node);
  return s;
}

bool Coordinator::DrainedLocked() const {
  if (phase_ != Phase::kSucceeded && phase_ != Phase::kFailed) return false;
  return watching_ == 0 && gathering_ == 0 && verdict_pending_ == 0;
}

void Coordinator::UnplacedWorkersLocked(v1::ReportResponse* response) const {
  std::vector<std::pair<int, const std::string*>> unplaced;
  ++member_walks_;
  for (const auto& [id, m] : members_) {
    if (m.in_round && m.join.role() == v1::ROLE_MPI_WORKER && m.join.local_world_size() > 0 &&
        m.mpi_sessions == 0) {
      unplaced.emplace_back(m.assignment.node_rank(), &id);
    }
  }
  std::sort(unplaced.begin(), unplaced.end());
  for (const auto& [rank, id] : unplaced) response->add_mpi_unplaced_nodes(*id);
}

bool Coordinator::Drained() const {
  absl::MutexLock lock(&mu_);
  return DrainedLocked();
}

bool Coordinator::AwaitDrained(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &Coordinator::DrainedLocked), timeout);
}

}  // namespace trainlet::rendezvous
