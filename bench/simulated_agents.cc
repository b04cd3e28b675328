// The simulated agents (simulated_agents.h says what they mirror and why).
#include "bench/simulated_agents.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/coordinator_contact.h"
#include "agent/round.h"
#include "bench/load_harness.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/liveness_datagram.h"
#include "rendezvous/protocol_version.h"
#include "trainlet/v1/rendezvous_service.grpc.pb.h"

namespace trainlet::bench {
namespace {

namespace v1 = ::trainlet::v1;

// As the agent: the full member list only for small jobs.
constexpr int kMaxNodesForMemberList = 256;

class Generator;

// A completion-queue tag.
struct Op {
  virtual ~Op() = default;
  virtual void Done(bool ok) = 0;
};

struct Agent {
  int index = 0;
  std::string node_id;
  uint64_t incarnation = 0;
  grpc::CompletionQueue* cq = nullptr;
  Generator* gen = nullptr;

  absl::Mutex mu;
  std::shared_ptr<grpc::Channel> channel ABSL_GUARDED_BY(mu);
  std::shared_ptr<v1::Rendezvous::Stub> stub ABSL_GUARDED_BY(mu);
  bool killed ABSL_GUARDED_BY(mu) = false;
  bool joining ABSL_GUARDED_BY(mu) = false;
  bool heartbeating ABSL_GUARDED_BY(mu) = false;
  uint64_t round ABSL_GUARDED_BY(mu) = 0;
  int restart_count ABSL_GUARDED_BY(mu) = 0;
  int nnodes ABSL_GUARDED_BY(mu) = 0;
  int64_t join_deadline_ns ABSL_GUARDED_BY(mu) = 0;
  int64_t join_sent_ns ABSL_GUARDED_BY(mu) = 0;  // first attempt of this join.
  int64_t join_recv_ns ABSL_GUARDED_BY(mu) = 0;  // its successful answer.
  absl::Duration backoff ABSL_GUARDED_BY(mu);
  std::string join_error ABSL_GUARDED_BY(mu);  // last failed join; empty after success.
  int64_t rejoin_ns ABSL_GUARDED_BY(mu) = 0;   // told to re-join (since the last mark).
  int64_t interval_ns ABSL_GUARDED_BY(mu) = 0;
  int64_t next_beat_ns ABSL_GUARDED_BY(mu) = 0;
  // UDP liveness (Assignment.liveness_*; udp_port 0: none).
  int udp_port ABSL_GUARDED_BY(mu) = 0;
  uint32_t slot ABSL_GUARDED_BY(mu) = 0;
  trainlet::rendezvous::LivenessKey key ABSL_GUARDED_BY(mu){};
  uint64_t seq ABSL_GUARDED_BY(mu) = 0;
  int64_t next_dgram_ns ABSL_GUARDED_BY(mu) = 0;
  bool udp_heard ABSL_GUARDED_BY(mu) = false;
  bool acked ABSL_GUARDED_BY(mu) = false;  // the coordinator's acks flow.
  int64_t last_ack_ns ABSL_GUARDED_BY(mu) = 0;
  uint64_t last_acked_seq ABSL_GUARDED_BY(mu) = 0;
  int64_t timeout_ns ABSL_GUARDED_BY(mu) = 0;
  int64_t heard_report_ns ABSL_GUARDED_BY(mu) =
      0;  // Assignment.report_interval_ms (0: T - interval)
  grpc::ClientContext* watch_ctx ABSL_GUARDED_BY(mu) = nullptr;
  bool connected ABSL_GUARDED_BY(mu) = false;
  // Re-joining round ready_round by datagram (joining is set too).
  bool ready ABSL_GUARDED_BY(mu) = false;
  uint64_t ready_round ABSL_GUARDED_BY(mu) = 0;
  int64_t next_ready_ns ABSL_GUARDED_BY(mu) = 0;
  int readies_sent ABSL_GUARDED_BY(mu) = 0;
  bool ready_acked ABSL_GUARDED_BY(mu) = false;
  // The coordinator released its stream (directives by datagram).
  bool released ABSL_GUARDED_BY(mu) = false;
  bool release_refused ABSL_GUARDED_BY(mu) = false;
};

class Generator {
 public:
  Generator(const SimulatedAgentsOptions& c, int proc, int procs) : config_(c) {
    for (int i = 0; i < c.cqs; ++i) cqs_.push_back(std::make_unique<grpc::CompletionQueue>());
    for (int i = proc; i < c.agents; i += procs) {
      auto a = std::make_unique<Agent>();
      a->index = i;
      a->node_id = absl::StrFormat("node-%05d", i);
      a->incarnation = NewRandom();
      a->cq = cqs_[agents_.size() % cqs_.size()].get();
      a->gen = this;
      {
        absl::MutexLock lock(&a->mu);
        a->channel = NewChannel();
        a->stub = v1::Rendezvous::NewStub(a->channel);
      }
      agents_.push_back(std::move(a));
    }
    for (auto& cq : cqs_) {
      threads_.emplace_back([q = cq.get()] {
        void* tag;
        bool ok;
        while (q->Next(&tag, &ok)) static_cast<Op*>(tag)->Done(ok);
      });
    }
    threads_.emplace_back([this] { HeartbeatLoop(); });
  }

  // Serves commands from `in` until "quit"; answers on `out`.
  void Serve(FILE* in, FILE* out);

  // Completion handlers (CQ threads).
  void OnJoinDone(Agent* a, const v1::JoinRequest& req, const grpc::Status& status,
                  const v1::JoinResponse& resp);
  // `watch_round`: the round the stream serves (a re-join by datagram moves
  // it to the new round).
  void OnDirective(Agent* a, const v1::Directive& d, uint64_t* watch_round);
  void OnWatchEnd(Agent* a, const grpc::Status& status);
  void OnReportDone(Agent* a, uint64_t round, const grpc::Status& status, bool udp_heard);
  void RetryJoin(Agent* a);

  std::atomic<int64_t> hb_sent{0}, hb_ok{0}, hb_err{0}, watch_err{0}, leaves_ok{0}, leaves_err{0},
      leaves_pending{0}, connects_pending{0}, dgram_sent{0}, dgram_err{0}, hb_heard{0},
      acks_received{0}, ready_fallbacks{0}, rejoins_received{0}, stream_rejoins{0}, released{0},
      directive_datagrams{0};

 private:
  uint64_t NewRandom() {
    uint64_t v = 0;
    while (v == 0) v = rng_();
    return v;
  }
  std::shared_ptr<grpc::Channel> NewChannel() const;
  void StartJoinLocked(Agent* a, bool first_attempt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu);
  // A join's answer (a Join call's, or one pushed down the stream).
  void ApplyAssignmentLocked(Agent* a, const v1::Assignment& as, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu);
  void OpenWatchLocked(Agent* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu);
  // Told to re-join `round` by datagram (a Rejoin on the stream that allows
  // it, or a REJOIN datagram): READYs from now on.
  void BeginReadyLocked(Agent* a, uint64_t round, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu);
  void HeartbeatLoop();
  void SendHeartbeat(Agent* a, uint64_t round);
  // One sendmmsg per batch of due datagrams, on one unconnected socket.
  void SendDatagrams(const std::vector<std::pair<int, trainlet::rendezvous::LivenessBytes>>& batch);
  // Reads the acks and REJOINs queued on the liveness socket and applies
  // them as the agent does (RoundMachine::OnDatagram); a REJOIN's first
  // READY goes at once.
  void TakeAcks();
  // A DIRECTIVE datagram (a released agent's assignment or verdict), taken
  // as the agent does; a verdict's TAKEN is appended to `out`.
  void TakeDirectiveDatagram(const uint8_t* data, size_t size, int64_t now,
                             std::vector<std::pair<int, trainlet::rendezvous::LivenessBytes>>* out);
  std::string WaitJoins(uint64_t min_round, int timeout_s);

  const SimulatedAgentsOptions config_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  int udp_fd_ = -1;  // the generator's liveness socket (heartbeat thread only).
  absl::Mutex slots_mu_;
  std::unordered_map<uint32_t, Agent*> by_slot_ ABSL_GUARDED_BY(slots_mu_);
};

std::shared_ptr<grpc::Channel> Generator::NewChannel() const {
  // The product client's settings (rendezvous/coordinator_client.cc).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  const int keepalive_ms = static_cast<int>(std::max(1.0, config_.heartbeat_timeout_s) * 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2 * keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS, keepalive_ms);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // One HTTP/2 connection per agent, as one per pod.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(config_.target, grpc::InsecureChannelCredentials(), args);
}

struct JoinCall : Op {
  Agent* agent;
  grpc::ClientContext ctx;
  v1::JoinRequest req;
  v1::JoinResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::JoinResponse>> rpc;
  void Done(bool) override {
    agent->gen->OnJoinDone(agent, req, status, resp);
    delete this;
  }
};

struct RetryAlarm : Op {
  Agent* agent;
  grpc::Alarm alarm;
  void Done(bool) override {
    agent->gen->RetryJoin(agent);
    delete this;
  }
};

struct WatchCall : Op {
  enum class Step { kStart, kRead, kFinish } step = Step::kStart;
  Agent* agent;
  uint64_t round = 0;
  grpc::ClientContext ctx;
  v1::WatchRequest req;
  v1::Directive directive;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncReader<v1::Directive>> reader;
  void Done(bool ok) override {
    switch (step) {
      case Step::kStart:
      case Step::kRead:
        if (step == Step::kRead && ok) agent->gen->OnDirective(agent, directive, &round);
        if (ok) {
          step = Step::kRead;
          reader->Read(&directive, this);
        } else {
          step = Step::kFinish;
          reader->Finish(&status, this);
        }
        return;
      case Step::kFinish:
        agent->gen->OnWatchEnd(agent, status);
        {
          absl::MutexLock lock(&agent->mu);
          if (agent->watch_ctx == &ctx) agent->watch_ctx = nullptr;
        }
        delete this;
        return;
    }
  }
};

struct ReportCall : Op {
  Agent* agent;
  uint64_t round = 0;
  grpc::ClientContext ctx;
  v1::ReportRequest req;
  v1::ReportResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReportResponse>> rpc;
  void Done(bool) override {
    agent->gen->OnReportDone(agent, round, status, resp.udp_heard());
    delete this;
  }
};

struct LeaveCall : Op {
  Agent* agent;
  grpc::ClientContext ctx;
  v1::LeaveRequest req;
  v1::LeaveResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::LeaveResponse>> rpc;
  void Done(bool) override {
    (status.ok() ? agent->gen->leaves_ok : agent->gen->leaves_err).fetch_add(1);
    agent->gen->leaves_pending.fetch_sub(1);
    delete this;
  }
};

struct ConnectOp : Op {
  Agent* agent;
  std::shared_ptr<grpc::Channel> channel;
  int64_t deadline_ns = 0;
  void Watch() {
    grpc_connectivity_state s = channel->GetState(/*try_to_connect=*/true);
    if (s == GRPC_CHANNEL_READY || MonoNs() > deadline_ns) {
      Finish(s == GRPC_CHANNEL_READY);
      return;
    }
    channel->NotifyOnStateChange(s, std::chrono::system_clock::now() + std::chrono::seconds(1),
                                 agent->cq, this);
  }
  void Finish(bool ready) {
    if (ready) {
      absl::MutexLock lock(&agent->mu);
      agent->connected = true;
    }
    agent->gen->connects_pending.fetch_sub(1);
    delete this;
  }
  void Done(bool) override { Watch(); }
};

void Generator::StartJoinLocked(Agent* a, bool first_attempt) {
  if (first_attempt) {
    a->joining = true;
    a->join_sent_ns = MonoNs();
    a->join_deadline_ns = a->join_sent_ns + int64_t{config_.join_timeout_s} * 1000000000;
    a->backoff = absl::Milliseconds(10);
  }
  auto* call = new JoinCall;
  call->agent = a;
  call->ctx.AddMetadata(trainlet::rendezvous::kTokenMetadataKey, config_.token);
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::nanoseconds(a->join_deadline_ns - MonoNs()));
  v1::JoinRequest& r = call->req;
  r.mutable_member()->set_node_id(a->node_id);
  r.mutable_member()->set_incarnation(a->incarnation);
  r.set_job_id(config_.job_id);
  r.set_protocol_version(trainlet::rendezvous::kProtocolVersion);
  r.set_udp_liveness(config_.udp_liveness);
  r.set_rank_hint(-1);
  r.set_local_world_size(8);
  r.set_master_port(29500);
  r.set_last_round(a->round);
  r.set_restart_count(a->restart_count);
  r.set_want_nodes(config_.agents <= kMaxNodesForMemberList);
  // What a node with 8 GPUs sends (agent/node_probe.cc's summary).
  v1::Topology* t = r.mutable_topology();
  t->set_gpu_count(8);
  for (int g = 0; g < 8; ++g) {
    t->add_gpu_uuids(absl::StrFormat("GPU-%08x-0000-4000-8000-%012d", a->index, g));
  }
  t->set_nccl_version("2.21.5");
  t->set_boot_id(absl::StrFormat("%08x-0000-4000-8000-%012x", a->index, a->incarnation >> 16));
  t->set_ipc_namespace(absl::StrCat("ipc:[", 4026531839u + a->index, "]"));
  t->set_numa_nodes(2);
  call->rpc = a->stub->PrepareAsyncJoin(&call->ctx, call->req, a->cq);
  call->rpc->StartCall();
  call->rpc->Finish(&call->resp, &call->status, call);
}

void Generator::RetryJoin(Agent* a) {
  absl::MutexLock lock(&a->mu);
  if (a->killed || !a->joining) return;
  StartJoinLocked(a, /*first_attempt=*/false);
}

void Generator::OnJoinDone(Agent* a, const v1::JoinRequest& req, const grpc::Status& status,
                           const v1::JoinResponse& resp) {
  const int64_t now = MonoNs();
  absl::MutexLock lock(&a->mu);
  if (a->killed) {
    a->joining = false;
    return;
  }
  if (status.ok()) {
    ApplyAssignmentLocked(a, resp.assignment(), now);
    a->released = false;
    OpenWatchLocked(a);
    return;
  }
  // The client's rule (CoordinatorClient::Join): UNAVAILABLE and ABORTED are
  // retried until the deadline; the coordinator's DEADLINE_EXCEEDED and every
  // other error end the join.
  const grpc::StatusCode code = status.error_code();
  if ((code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::ABORTED) &&
      now < a->join_deadline_ns) {
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    absl::Duration sleep = a->backoff * jitter(rng_);
    a->backoff = std::min(a->backoff * 3 / 2, absl::Milliseconds(100));
    auto* alarm = new RetryAlarm;
    alarm->agent = a;
    alarm->alarm.Set(a->cq, std::chrono::system_clock::now() + absl::ToChronoNanoseconds(sleep),
                     alarm);
    return;
  }
  a->joining = false;
  a->join_error = absl::StrFormat("%s: %d %s", a->node_id, static_cast<int>(code),
                                  status.error_message().substr(0, 200));
  (void)req;
}

void Generator::ApplyAssignmentLocked(Agent* a, const v1::Assignment& as, int64_t now) {
  a->joining = false;
  a->ready = false;
  a->join_recv_ns = now;
  a->join_error.clear();
  a->round = as.round();
  a->restart_count = as.restart_count();
  a->nnodes = as.nnodes();
  a->interval_ns = config_.heartbeat_interval_s > 0
                       ? static_cast<int64_t>(config_.heartbeat_interval_s * 1e9)
                       : as.heartbeat_interval_ms() * 1000000;
  a->next_beat_ns = now + a->interval_ns;
  a->heartbeating = a->interval_ns > 0;
  a->timeout_ns = as.heartbeat_timeout_ms() * 1000000;
  a->udp_heard = false;
  a->acked = false;
  a->last_acked_seq = 0;
  a->heard_report_ns = as.report_interval_ms() * 1000000;
  a->udp_port = 0;
  std::optional<trainlet::rendezvous::LivenessKey> key =
      trainlet::rendezvous::LivenessKeyFromBytes(as.liveness_key());
  if (config_.udp_liveness && as.liveness_udp_port() != 0 && key.has_value()) {
    a->udp_port = static_cast<int>(as.liveness_udp_port());
    a->slot = as.liveness_slot();
    a->key = *key;
    {
      absl::MutexLock slots(&slots_mu_);
      by_slot_[a->slot] = a;
    }
    a->next_dgram_ns = now;  // the first one at once, as the agent
    // As the agent: the first Report when the coordinator says.
    if (as.first_report_delay_ms() > 0 && a->timeout_ns > 0) {
      a->next_beat_ns =
          now + std::min<int64_t>(as.first_report_delay_ms() * 1000000, a->timeout_ns / 2);
    }
  }
}

void Generator::OpenWatchLocked(Agent* a) {
  auto* w = new WatchCall;
  w->agent = a;
  w->round = a->round;
  w->ctx.AddMetadata(trainlet::rendezvous::kTokenMetadataKey, config_.token);
  *w->req.mutable_member()->mutable_node_id() = a->node_id;
  w->req.mutable_member()->set_incarnation(a->incarnation);
  w->req.set_job_id(config_.job_id);
  w->req.set_round(a->round);
  w->req.set_accepts_assignment(config_.rejoin_by_datagram && config_.udp_liveness);
  w->req.set_accepts_rejoin_datagram(config_.rejoin_by_datagram && config_.udp_liveness &&
                                     config_.rejoin_datagram);
  w->req.set_accepts_release(config_.release && config_.rejoin_by_datagram &&
                             config_.udp_liveness && config_.rejoin_datagram && config_.acks &&
                             !a->release_refused);
  a->watch_ctx = &w->ctx;
  w->reader = a->stub->PrepareAsyncWatch(&w->ctx, w->req, a->cq);
  w->reader->StartCall(w);
}

void Generator::OnDirective(Agent* a, const v1::Directive& d, uint64_t* watch_round) {
  absl::MutexLock lock(&a->mu);
  if (a->killed) return;
  if (d.has_rejoin()) stream_rejoins.fetch_add(1);
  if (d.has_release()) {
    // As the agent: taken while acked (the stream then ends; not re-opened),
    // else refused (the stream re-opened, never released again).
    if (a->acked && !a->ready) {
      a->released = true;
      released.fetch_add(1);
    } else {
      a->release_refused = true;
    }
    return;
  }
  if (a->ready) {
    // As the agent (RoundMachine::OnDirectiveWhileReady): the assignment of
    // the round it is ready for; anything else sends it to the Join call.
    if (d.has_assignment() && d.round() == a->ready_round && d.assignment().round() == d.round()) {
      ApplyAssignmentLocked(a, d.assignment(), MonoNs());
      *watch_round = a->round;
    } else if (d.has_rejoin() && d.rejoin().ready_by_datagram()) {
      // A newer restart re-targets the READYs; the stream's copy of the
      // Rejoin taken by datagram (or an older one) changes nothing.
      if (d.rejoin().next_round() > a->ready_round) {
        a->ready_round = d.rejoin().next_round();
        a->readies_sent = 0;
        a->ready_acked = false;
        a->next_ready_ns = MonoNs();
      }
    } else if (d.has_assignment() && d.round() < a->ready_round) {
      // The late assignment of a round restarted since: ignored.
    } else {
      a->ready = false;
      StartJoinLocked(a, /*first_attempt=*/true);
    }
    return;
  }
  if (d.round() != a->round || *watch_round != a->round || a->joining) return;
  if (d.has_rejoin()) {
    const int64_t now = MonoNs();
    if (a->rejoin_ns == 0) a->rejoin_ns = now;
    a->heartbeating = false;
    if (config_.rejoin_by_datagram && d.rejoin().ready_by_datagram() && a->udp_port != 0) {
      // Nothing to stop here: READY at once, from the heartbeat thread.
      BeginReadyLocked(a, d.rejoin().next_round(), now);
      return;
    }
    StartJoinLocked(a, /*first_attempt=*/true);
  } else if (d.has_job_failed() || d.has_job_finished()) {
    a->heartbeating = false;
  }
}

void Generator::BeginReadyLocked(Agent* a, uint64_t round, int64_t now) {
  a->heartbeating = false;
  a->ready = true;
  a->ready_round = round;
  a->readies_sent = 0;
  a->ready_acked = false;
  a->joining = true;
  a->join_sent_ns = now;
  a->join_deadline_ns = now + int64_t{config_.join_timeout_s} * 1000000000;
  a->next_ready_ns = now;
}

void Generator::OnWatchEnd(Agent* a, const grpc::Status& status) {
  absl::MutexLock lock(&a->mu);
  if (a->killed) {
    // A killed pod's connection goes away with it.
    a->stub.reset();
    a->channel.reset();
    return;
  }
  if (a->released && status.ok()) return;  // the release's end
  if (a->release_refused && status.ok() && a->heartbeating && !a->ready) {
    OpenWatchLocked(a);  // as the agent: the stream again, refusing releases
    return;
  }
  if (a->ready) {
    // As the agent: the stream that was to bring the assignment ended.
    a->ready = false;
    StartJoinLocked(a, /*first_attempt=*/true);
    return;
  }
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED && a->heartbeating) {
    watch_err.fetch_add(1);
  }
}

// ---- Heartbeats: the only place that sends them (see the file comment).

void Generator::SendHeartbeat(Agent* a, uint64_t round) {
  auto* call = new ReportCall;
  call->agent = a;
  call->round = round;
  call->ctx.AddMetadata(trainlet::rendezvous::kTokenMetadataKey, config_.token);
  call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  call->req.mutable_member()->set_node_id(a->node_id);
  call->req.mutable_member()->set_incarnation(a->incarnation);
  call->req.set_job_id(config_.job_id);
  call->req.set_round(round);
  call->req.set_state(v1::ReportRequest::RUNNING);
  {
    absl::MutexLock lock(&a->mu);
    if (!a->stub) return;
    call->rpc = a->stub->PrepareAsyncReport(&call->ctx, call->req, a->cq);
  }
  hb_sent.fetch_add(1);
  call->rpc->StartCall();
  call->rpc->Finish(&call->resp, &call->status, call);
}

void Generator::SendDatagrams(
    const std::vector<std::pair<int, trainlet::rendezvous::LivenessBytes>>& batch) {
  if (batch.empty()) return;
  if (udp_fd_ < 0) {
    udp_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    // One socket takes the acks of thousands of agents (each real agent has
    // its own): room for a whole interval's worth, beyond net.core.rmem_max
    // when run as root, so that the kernel does not drop them.
    const int rcvbuf = 32 << 20;
    if (setsockopt(udp_fd_, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) != 0) {
      setsockopt(udp_fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    }
  }
  constexpr size_t kChunk = 256;
  std::vector<mmsghdr> msgs(std::min(batch.size(), kChunk));
  std::vector<iovec> iov(msgs.size());
  std::vector<sockaddr_in> to(msgs.size());
  for (size_t off = 0; off < batch.size(); off += kChunk) {
    const size_t n = std::min(kChunk, batch.size() - off);
    for (size_t i = 0; i < n; ++i) {
      const auto& [port, bytes] = batch[off + i];
      to[i] = {};
      to[i].sin_family = AF_INET;
      to[i].sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      to[i].sin_port = htons(port);
      iov[i] = {const_cast<uint8_t*>(bytes.data()), bytes.size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_name = &to[i];
      msgs[i].msg_hdr.msg_namelen = sizeof(to[i]);
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    size_t sent = 0;
    while (sent < n) {
      const int k = sendmmsg(udp_fd_, msgs.data() + sent, n - sent, 0);
      if (k <= 0) {
        dgram_err.fetch_add(static_cast<int64_t>(n - sent));
        break;
      }
      sent += k;
    }
    dgram_sent.fetch_add(static_cast<int64_t>(sent));
  }
}

int64_t HeardOrNotReportNs(const Agent& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a.mu);

void Generator::TakeAcks() {
  if (udp_fd_ < 0) return;
  constexpr int kBatch = 64;
  static thread_local uint8_t bufs[kBatch][trainlet::rendezvous::kMaxDirectiveDatagramBytes + 1];
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  std::vector<std::pair<int, trainlet::rendezvous::LivenessBytes>> readies;
  auto send_readies = [&] {
    SendDatagrams(readies);
    readies.clear();
  };
  while (true) {
    for (int i = 0; i < kBatch; ++i) {
      iov[i] = {bufs[i], sizeof(bufs[i])};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int n = recvmmsg(udp_fd_, msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return send_readies();
    const int64_t now = MonoNs();
    for (int i = 0; i < n; ++i) {
      if (msgs[i].msg_len > trainlet::rendezvous::kLivenessDatagramBytes) {
        TakeDirectiveDatagram(bufs[i], msgs[i].msg_len, now, &readies);
        continue;
      }
      std::optional<trainlet::rendezvous::LivenessDatagram> d =
          trainlet::rendezvous::ParseCoordinatorDatagram(bufs[i], msgs[i].msg_len);
      const bool rejoin = d.has_value() && d->kind == trainlet::rendezvous::LivenessKind::kRejoin;
      (rejoin ? rejoins_received : acks_received).fetch_add(1);
      if (!d.has_value() || (!rejoin && !config_.acks)) continue;
      Agent* a = nullptr;
      {
        absl::MutexLock slots(&slots_mu_);
        auto it = by_slot_.find(d->slot);
        if (it != by_slot_.end()) a = it->second;
      }
      if (a == nullptr) continue;
      absl::MutexLock lock(&a->mu);
      if (a->udp_port == 0 || a->interval_ns <= 0) continue;
      if (rejoin) {
        // As the agent (RoundMachine::OnRejoinDatagram): the Rejoin of the
        // stream, for a round above its own; while READY, a newer round
        // re-targets the READYs.
        if (a->killed || !config_.rejoin_by_datagram || !config_.rejoin_datagram) continue;
        if (a->ready) {
          if (trainlet::rendezvous::IsOwnNewerRejoin(*d, a->slot, a->incarnation, a->ready_round,
                                                     a->key)) {
            a->ready_round = d->round;
            a->readies_sent = 0;
            a->ready_acked = false;
            a->next_ready_ns = now;
          }
          continue;
        }
        if (a->joining || !a->heartbeating ||
            !trainlet::rendezvous::IsOwnNewerRejoin(*d, a->slot, a->incarnation, a->round,
                                                    a->key)) {
          continue;
        }
        if (a->rejoin_ns == 0) a->rejoin_ns = now;
        BeginReadyLocked(a, d->round, now);
        // Nothing to stop here: the first READY at once.
        ++a->readies_sent;
        readies.emplace_back(a->udp_port, trainlet::rendezvous::EncodeLivenessDatagram(
                                              a->slot, a->incarnation, a->ready_round, ++a->seq,
                                              a->key, trainlet::rendezvous::LivenessKind::kReady));
        a->next_ready_ns = now + a->interval_ns;
        continue;
      }
      // As the agent (RoundMachine::OnDatagram): the same check.
      trainlet::rendezvous::AckExpectation expected;
      expected.slot = a->slot;
      expected.incarnation = a->incarnation;
      expected.round = a->ready ? a->ready_round : a->round;
      expected.last_acked_seq = a->last_acked_seq;
      expected.last_sent_seq = a->seq;
      expected.window = static_cast<uint64_t>(std::max<int64_t>(
          1, static_cast<int64_t>(a->timeout_ns * trainlet::agent::kAckSilenceFraction) /
                 a->interval_ns));
      expected.key = a->key;
      if (!trainlet::rendezvous::IsOwnRecentAck(*d, expected)) continue;
      a->last_acked_seq = d->seq;
      if (a->ready) {
        a->ready_acked = true;  // the coordinator holds the re-join
        continue;
      }
      a->last_ack_ns = now;
      if (!a->acked) {
        a->acked = true;
        a->next_beat_ns = std::max(a->next_beat_ns, now + HeardOrNotReportNs(*a));
      }
    }
    if (n < kBatch) return send_readies();
  }
}

void Generator::TakeDirectiveDatagram(
    const uint8_t* data, size_t size, int64_t now,
    std::vector<std::pair<int, trainlet::rendezvous::LivenessBytes>>* out) {
  std::optional<trainlet::rendezvous::DirectiveDatagram> dd =
      trainlet::rendezvous::ParseDirectiveDatagram(data, size);
  if (!dd.has_value()) return;
  directive_datagrams.fetch_add(1);
  Agent* a = nullptr;
  {
    absl::MutexLock slots(&slots_mu_);
    auto it = by_slot_.find(dd->header.slot);
    if (it != by_slot_.end()) a = it->second;
  }
  if (a == nullptr) return;
  absl::MutexLock lock(&a->mu);
  v1::Directive d;
  if (a->killed || a->udp_port == 0 ||
      !trainlet::rendezvous::IsOwnDirective(*dd, a->slot, a->incarnation, a->key) ||
      !d.ParseFromString(dd->payload) || d.round() != dd->header.round) {
    return;
  }
  // As the agent (RoundMachine::OnDirectiveDatagram).
  if (d.has_assignment()) {
    if (!a->ready || d.round() != a->ready_round || d.assignment().round() != d.round()) return;
    v1::Assignment as = d.assignment();
    as.set_liveness_key(std::string(reinterpret_cast<const char*>(a->key.data()), a->key.size()));
    ApplyAssignmentLocked(a, as, now);  // still released: no stream for the new round
  } else if (d.has_job_failed() || d.has_job_finished()) {
    a->heartbeating = false;
    out->emplace_back(a->udp_port, trainlet::rendezvous::EncodeLivenessDatagram(
                                       a->slot, a->incarnation, d.round(), ++a->seq, a->key,
                                       trainlet::rendezvous::LivenessKind::kTaken));
  }
}

// The agent's Report interval (agent/round.cc ReportInterval): every
// interval until heard, then the Assignment's report_interval_ms (or timeout -
// interval from an older coordinator).
int64_t HeardOrNotReportNs(const Agent& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a.mu) {
  if (a.acked) {
    return std::max(a.interval_ns, absl::ToInt64Nanoseconds(trainlet::agent::kAckedReportInterval));
  }
  if (!a.udp_heard) return a.interval_ns;
  if (a.heard_report_ns > 0) return std::max(a.interval_ns, a.heard_report_ns);
  return a.timeout_ns > 2 * a.interval_ns ? a.timeout_ns - a.interval_ns : a.interval_ns;
}

void Generator::HeartbeatLoop() {
  std::vector<std::pair<int, trainlet::rendezvous::LivenessBytes>> datagrams;
  while (!stop_.load()) {
    int64_t now = MonoNs();
    int64_t next = now + 50000000;  // rescan at least every 50 ms
    datagrams.clear();
    for (auto& a : agents_) {
      uint64_t round = 0;
      {
        absl::MutexLock lock(&a->mu);
        if (a->ready && !a->killed && a->next_ready_ns <= now && !a->ready_acked &&
            a->readies_sent >= trainlet::agent::kReadiesBeforeJoin) {
          // As the agent: READYs nobody acked, the Join call instead.
          // (Its stream stays open until the answer's new one replaces it.)
          a->ready = false;
          ready_fallbacks.fetch_add(1);
          StartJoinLocked(a.get(), /*first_attempt=*/true);
          continue;
        }
        if (a->ready && !a->killed) {
          // As the agent: READY every interval until the assignment comes.
          if (a->next_ready_ns <= now) {
            ++a->readies_sent;
            datagrams.emplace_back(a->udp_port,
                                   trainlet::rendezvous::EncodeLivenessDatagram(
                                       a->slot, a->incarnation, a->ready_round, ++a->seq, a->key,
                                       trainlet::rendezvous::LivenessKind::kReady));
            a->next_ready_ns = now + a->interval_ns;
          }
          next = std::min(next, a->next_ready_ns);
          continue;
        }
        if (!a->heartbeating || a->killed) continue;
        if (a->udp_port != 0) {
          // As the agent: acks that stop for 0.6 T put it back on Reports.
          if (a->acked &&
              now - a->last_ack_ns >=
                  static_cast<int64_t>(a->timeout_ns * trainlet::agent::kAckSilenceFraction)) {
            a->acked = false;
            a->udp_heard = false;
            a->next_beat_ns = std::min(a->next_beat_ns, now);
            if (a->released) {
              // As the agent: the stream again, refusing releases from now on.
              a->released = false;
              a->release_refused = true;
              OpenWatchLocked(a.get());
            }
          }
          if (a->next_dgram_ns <= now) {
            datagrams.emplace_back(a->udp_port,
                                   trainlet::rendezvous::EncodeLivenessDatagram(
                                       a->slot, a->incarnation, a->round, ++a->seq, a->key));
            a->next_dgram_ns += a->interval_ns;
            if (a->next_dgram_ns <= now) a->next_dgram_ns = now + a->interval_ns;
          }
          next = std::min(next, a->next_dgram_ns);
        }
        if (a->next_beat_ns > now) {
          next = std::min(next, a->next_beat_ns);
          continue;
        }
        // As the agent: every interval until the coordinator hears the
        // datagrams, then every timeout - interval.
        const int64_t report_every = HeardOrNotReportNs(*a);
        a->next_beat_ns += report_every;
        if (a->next_beat_ns <= now) a->next_beat_ns = now + report_every;
        next = std::min(next, a->next_beat_ns);
        round = a->round;
      }
      SendHeartbeat(a.get(), round);
    }
    SendDatagrams(datagrams);
    // Until the next one is due, take what comes on the liveness socket as
    // it comes (a real agent's loop wakes for it: a REJOIN must not wait).
    while (!stop_.load()) {
      TakeAcks();
      now = MonoNs();
      if (next <= now) break;
      pollfd p = {udp_fd_, POLLIN, 0};
      if (poll(&p, udp_fd_ >= 0 ? 1 : 0,
               static_cast<int>(std::min<int64_t>((next - now + 999999) / 1000000, 50))) > 0) {
        // One thread stands for thousands of agents: let a moment's
        // datagrams gather, as the coordinator's liveness thread does (a
        // REJOIN waits at most this long).
        absl::SleepFor(trainlet::rendezvous::kLivenessCoalesce);
      }
    }
  }
}

void Generator::OnReportDone(Agent* a, uint64_t round, const grpc::Status& status, bool udp_heard) {
  if (status.ok()) {
    hb_ok.fetch_add(1);
    hb_heard.fetch_add(udp_heard ? 1 : 0);
    absl::MutexLock lock(&a->mu);
    if (a->round == round && a->udp_port != 0 && a->udp_heard != udp_heard) {
      a->udp_heard = udp_heard;
      if (!udp_heard) a->next_beat_ns = std::min(a->next_beat_ns, MonoNs() + a->interval_ns);
      // As the agent: once heard, the next Report a whole heard interval on.
      if (udp_heard) a->next_beat_ns = std::max(a->next_beat_ns, MonoNs() + HeardOrNotReportNs(*a));
    }
    return;
  }
  hb_err.fetch_add(1);
  // As the agent: a heartbeat answered ABORTED (stale round) means re-join.
  if (status.error_code() != grpc::StatusCode::ABORTED) return;
  absl::MutexLock lock(&a->mu);
  if (a->killed || a->joining || a->round != round || !a->heartbeating) return;
  if (a->rejoin_ns == 0) a->rejoin_ns = MonoNs();
  a->heartbeating = false;
  StartJoinLocked(a, /*first_attempt=*/true);
}

// ---- Commands from the parent.

std::string Generator::WaitJoins(uint64_t min_round, int timeout_s) {
  const int64_t until = MonoNs() + int64_t{timeout_s} * 1000000000;
  while (true) {
    bool done = true;
    for (auto& a : agents_) {
      absl::MutexLock lock(&a->mu);
      if (a->killed) continue;
      if (a->joining || (a->join_error.empty() && a->round < min_round && a->join_sent_ns != 0)) {
        done = false;
        break;
      }
    }
    if (done || MonoNs() > until) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  // ok err min_nnodes max_nnodes max_round first_error | sent:recv:rejoin ...
  int ok = 0, err = 0, min_nnodes = 1 << 30, max_nnodes = 0;
  uint64_t max_round = 0;
  std::string first_error = "-", samples;
  for (auto& a : agents_) {
    absl::MutexLock lock(&a->mu);
    if (a->killed || a->join_sent_ns == 0) continue;
    if (a->joining || !a->join_error.empty() || a->round < min_round) {
      if (err++ == 0) {
        first_error = a->joining ? absl::StrCat(a->node_id, ": still joining")
                      : a->join_error.empty()
                          ? absl::StrCat(a->node_id, ": round ", a->round, " < ", min_round)
                          : a->join_error;
      }
      continue;
    }
    ++ok;
    min_nnodes = std::min(min_nnodes, a->nnodes);
    max_nnodes = std::max(max_nnodes, a->nnodes);
    max_round = std::max(max_round, a->round);
    absl::StrAppend(&samples, " ", a->join_sent_ns, ":", a->join_recv_ns, ":", a->rejoin_ns);
  }
  std::replace(first_error.begin(), first_error.end(), ' ', '_');
  std::replace(first_error.begin(), first_error.end(), '\n', '_');
  return absl::StrCat(ok, " ", err, " ", ok ? min_nnodes : 0, " ", max_nnodes, " ", max_round, " ",
                      first_error, samples);
}

void Generator::Serve(FILE* in, FILE* out) {
  ServeCommands(in, out, [&](const std::vector<std::string>& w) -> std::optional<std::string> {
    std::string answer;
    const std::string& cmd = w[0];
    auto arg = [&](size_t i) {
      int64_t v = 0;
      if (i < w.size()) (void)absl::SimpleAtoi(w[i], &v);
      return v;
    };
    if (cmd == "connect") {
      const int64_t start = MonoNs();
      connects_pending.store(static_cast<int64_t>(agents_.size()));
      for (auto& a : agents_) {
        auto* op = new ConnectOp;
        op->agent = a.get();
        {
          absl::MutexLock lock(&a->mu);
          op->channel = a->channel;
        }
        op->deadline_ns = MonoNs() + arg(1) * 1000000000;
        op->Watch();
      }
      while (connects_pending.load() > 0) absl::SleepFor(absl::Milliseconds(5));
      int connected = 0;
      for (auto& a : agents_) {
        absl::MutexLock lock(&a->mu);
        connected += a->connected;
      }
      answer = absl::StrCat(connected, " ", agents_.size() - connected, " ", MonoNs() - start);
    } else if (cmd == "join") {  // join LO HI: the owned agents in [LO, HI)
      int count = 0;
      int64_t first = 0, last = 0;
      for (auto& a : agents_) {
        if (a->index < arg(1) || a->index >= arg(2)) continue;
        absl::MutexLock lock(&a->mu);
        StartJoinLocked(a.get(), /*first_attempt=*/true);
        if (count++ == 0) first = a->join_sent_ns;
        last = a->join_sent_ns;
      }
      answer = absl::StrCat(count, " ", first, " ", last);
    } else if (cmd == "wait") {  // wait MIN_ROUND TIMEOUT_S
      answer = WaitJoins(static_cast<uint64_t>(arg(1)), static_cast<int>(arg(2)));
    } else if (cmd == "kill") {  // kill LO HI SILENT: marks rejoin times, loses [LO, HI)
      int count = 0;
      int64_t at = 0;
      std::vector<grpc::ClientContext*> cancel;
      for (auto& a : agents_) {
        absl::MutexLock lock(&a->mu);
        a->rejoin_ns = 0;
      }
      for (auto& a : agents_) {
        if (a->index < arg(1) || a->index >= arg(2)) continue;
        absl::MutexLock lock(&a->mu);
        a->killed = true;
        a->heartbeating = false;
        if (at == 0) at = MonoNs();
        ++count;
        if (arg(3) == 0 && a->watch_ctx != nullptr) a->watch_ctx->TryCancel();
      }
      answer = absl::StrCat(count, " ", at);
    } else if (cmd == "stats") {
      rusage ru{};
      getrusage(RUSAGE_SELF, &ru);
      const int64_t cpu_us = int64_t{ru.ru_utime.tv_sec} * 1000000 + ru.ru_utime.tv_usec +
                             int64_t{ru.ru_stime.tv_sec} * 1000000 + ru.ru_stime.tv_usec;
      answer = absl::StrCat(
          cpu_us, " ", hb_sent.load(), " ", hb_ok.load(), " ", hb_err.load(), " ", watch_err.load(),
          " ", ru.ru_maxrss, " ", dgram_sent.load(), " ", dgram_err.load(), " ", hb_heard.load(),
          " ", acks_received.load(), " ", ready_fallbacks.load(), " ", rejoins_received.load(), " ",
          stream_rejoins.load(), " ", released.load(), " ", directive_datagrams.load());
    } else if (cmd == "leave") {
      int count = 0;
      for (auto& a : agents_) {
        absl::MutexLock lock(&a->mu);
        if (a->killed || !a->stub) continue;
        a->heartbeating = false;
        auto* call = new LeaveCall;
        call->agent = a.get();
        call->ctx.AddMetadata(trainlet::rendezvous::kTokenMetadataKey, config_.token);
        call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        call->req.mutable_member()->set_node_id(a->node_id);
        call->req.mutable_member()->set_incarnation(a->incarnation);
        call->req.set_job_id(config_.job_id);
        call->req.set_reason("bench done");
        leaves_pending.fetch_add(1);
        ++count;
        call->rpc = a->stub->PrepareAsyncLeave(&call->ctx, call->req, a->cq);
        call->rpc->StartCall();
        call->rpc->Finish(&call->resp, &call->status, call);
      }
      while (leaves_pending.load() > 0) absl::SleepFor(absl::Milliseconds(5));
      answer = absl::StrCat(count, " ", leaves_ok.load(), " ", leaves_err.load(), " ", MonoNs());
    } else {
      return std::nullopt;
    }
    return answer;
  });
}

}  // namespace

void ServeSimulatedAgents(const SimulatedAgentsOptions& options, int proc, int procs, FILE* in,
                          FILE* out) {
  Generator gen(options, proc, procs);
  gen.Serve(in, out);
  _exit(0);  // Serve ends the process; never reached
}

}  // namespace trainlet::bench
