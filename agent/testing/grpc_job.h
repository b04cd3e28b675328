// A job of real agents in one process, as TSL's client_server_test runs real
// tasks: a coordinator (the core, its gRPC service, a server on 127.0.0.1)
// and N agents, each the real RoundMachine and executor (agent.h) on a
// thread of its own, talking to the coordinator through the real
// GrpcRendezvousClient, with a FakeWorkerGroup for workers. The protocol is
// the agent's own, so these tests check what a real agent does, not what a
// test's copy of it would.
//
// Time: the coordinator and every agent read one SimulatedClock, which only
// the test moves (GrpcJob::AdvanceAndTick). An agent's loop waits in real
// time until something happens to it (a directive, an answer, the clock
// moving, a test control), so heartbeats, timeouts and last calls are
// exercised by advancing the clock, never by sleeping; real events (a
// directive arriving, a join answered) are awaited with a deadline.
//
// Failures a test injects: a worker exits (ExitWorker), the agent gets a
// signal, freezes (SIGSTOP: its loop stops, its connection stays open), or
// vanishes (kill -9: frozen, its streams cancelled, nothing more sent).
//
// Threading: every method may be called from the test thread; JobAgent's
// observations (AwaitJoin, AwaitDirective, status) from any.
#ifndef TRAINLET_AGENT_TESTING_GRPC_JOB_H_
#define TRAINLET_AGENT_TESTING_GRPC_JOB_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/agent.h"
#include "common/clock.h"
#include "config/run_config.h"
#include "launcher/testing/fake_worker_group.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_memory.h"
#include "rendezvous/grpc_server.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent::testing {

namespace v1 = ::trainlet::v1;

inline constexpr char kJobToken[] = "tok";
// How long a test waits for a real event (a directive, an answer, an exit).
inline constexpr absl::Duration kJobWait = absl::Seconds(10);

// The real client, with what a test needs to see and do around it: every
// Join answer, directive and stream end the agent got, and a cut of the
// network (after which every call fails at once and nothing goes out).
class TappedClient : public rendezvous::RendezvousClient {
 public:
  explicit TappedClient(rendezvous::ClientOptions options);
  ~TappedClient() override;

  // RendezvousClient: the real client's, recorded.
  void Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) override;
  void CancelJoin() override;
  std::unique_ptr<rendezvous::WatchStream> Watch(const v1::WatchRequest& request,
                                                 OnDirective on_directive,
                                                 OnStreamEnd on_end) override;
  void Report(const v1::ReportRequest& request, Done done) override;
  void SetReportResponseHandler(ReportResponseHandler handler) override;
  void Leave(const v1::LeaveRequest& request, Done done) override;
  void SendLivenessDatagram(const rendezvous::LivenessBytes& datagram) override;
  void TakeLivenessDatagrams(std::vector<rendezvous::LivenessBytes>* acks,
                             std::vector<std::string>* directives) override;
  int liveness_fd() const override;
  bool Flush(absl::Duration timeout) override;

  // The next Join answer not taken yet (waits for it); the one after on the
  // next call. nullopt: none within `timeout`.
  std::optional<absl::StatusOr<v1::Assignment>> AwaitJoin(absl::Duration timeout);
  bool HasJoinAnswer();
  v1::Assignment assignment();  // the last successful answer's.
  // Likewise the next directive (of any stream).
  std::optional<v1::Directive> AwaitDirective(absl::Duration timeout);
  bool HasDirective();
  // How the latest stream opened so far ended (waits for it).
  std::optional<absl::Status> AwaitStreamEnd(absl::Duration timeout);

  // kill -9: the open streams are cancelled (the coordinator sees them
  // close), a Join in flight ends, and from now on every call fails at once.
  void Cut();

 private:
  class TapStream;
  void Forget(TapStream* stream);

  rendezvous::GrpcRendezvousClient real_;

  absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  std::set<TapStream*> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::StatusOr<v1::Assignment>> joins_ ABSL_GUARDED_BY(mu_);
  size_t joins_taken_ ABSL_GUARDED_BY(mu_) = 0;
  v1::Assignment assignment_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Directive> directives_ ABSL_GUARDED_BY(mu_);
  size_t directives_taken_ ABSL_GUARDED_BY(mu_) = 0;
  // How each stream opened ended, in the order they were opened.
  std::vector<std::optional<absl::Status>> ends_ ABSL_GUARDED_BY(mu_);
};

// The worker group of an agent on its own thread: a FakeWorkerGroup (no
// processes) whose idle waits block in real time until something happens to
// the agent (a wake from the client's threads, the job's clock reaching the
// wait's end, a test control, a thaw) instead of advancing a clock.
class PacedWorkerGroup : public launcher::WorkerGroup {
 public:
  explicit PacedWorkerGroup(SimulatedClock* job_clock);

  // WorkerGroup: the fake's.
  absl::Status Start(const std::vector<launcher::ProcessSpec>& workers) override;
  absl::Status StartHelper(const launcher::ProcessSpec& helper) override;
  Event Wait(absl::Duration timeout) override;
  void Wake() override;
  void WatchFd(int fd, int slot) override;
  void SignalWorkers(int sig) override;
  int running_workers() const override;
  pid_t worker_pid(int local_rank) const override;
  std::vector<std::string> OutputTail(int local_rank) const override;

  // Runs `control` on the agent's thread at its next wait (the fake is the
  // agent thread's alone).
  void Do(std::function<void(launcher::testing::FakeWorkerGroup&)> control);
  // The loop stops at its next wait until Thaw(); Freeze() returns once it
  // has stopped (or the agent finished).
  void Freeze();
  void Thaw();
  // The job's clock moved: waits that end by then are over.
  void ClockMoved();
  // The agent's Run() returned.
  void Finished();

  // Waits until the agent has nothing to do at the clock's time (it waits
  // with no wake, control or due deadline), is frozen, or finished.
  bool AwaitQuiet(absl::Duration timeout);
  // Quiet now, and how many waits its loop began so far (any activity adds).
  bool Quiet(uint64_t* turns);

 private:
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool QuietLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Idle();

  SimulatedClock* const job_clock_;
  SimulatedClock own_clock_;  // the fake advances it on idle waits; nobody reads it.
  launcher::testing::FakeWorkerGroup fake_;

  mutable absl::Mutex mu_;
  std::deque<std::function<void(launcher::testing::FakeWorkerGroup&)>> controls_
      ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool frozen_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // frozen and parked.
  bool parked_ ABSL_GUARDED_BY(mu_) = false;   // in an idle wait.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t clock_moves_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time wait_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t turns_ ABSL_GUARDED_BY(mu_) = 0;
};

struct JobAgentOptions {
  std::string node;
  uint64_t incarnation = 1;
  int rank_hint = -1;  // --node-rank; -1: none.
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  int nproc_per_node = 2;
  absl::Duration join_timeout = absl::Minutes(10);
};

// One real agent (RoundMachine + Agent) on a thread of its own, started at
// construction.
class JobAgent {
 public:
  JobAgent(const std::string& target, SimulatedClock* job_clock, JobAgentOptions options);
  // Stops it and waits for its thread.
  ~JobAgent();
  // Unless it finished: a thaw and a SIGTERM (once).
  void Stop();

  const std::string& node() const { return options_.node; }
  v1::Member member() const;

  // What the agent got from the coordinator, in order (TappedClient).
  absl::StatusOr<v1::Assignment> AwaitJoin(absl::Duration timeout = kJobWait);
  bool JoinDone() { return client_.HasJoinAnswer(); }
  v1::Assignment assignment() { return client_.assignment(); }
  std::optional<v1::Directive> AwaitDirective(absl::Duration timeout = kJobWait) {
    return client_.AwaitDirective(timeout);
  }
  bool HasDirective() { return client_.HasDirective(); }
  std::optional<absl::Status> AwaitStreamEnd(absl::Duration timeout = kJobWait) {
    return client_.AwaitStreamEnd(timeout);
  }

  // The agent itself.
  AgentStatus status() const { return agent_.status(); }
  // Its exit code once Run() returned; nullopt: still running after `timeout`.
  std::optional<int> AwaitExit(absl::Duration timeout = kJobWait);

  // Faults and controls.
  void ExitWorker(int local_rank, int code);
  void ExitWorkers(int code);
  void Signal(int sig);
  void Freeze() { workers_.Freeze(); }
  void Thaw() { workers_.Thaw(); }
  // kill -9: frozen, its network cut (TappedClient::Cut).
  void Vanish();

  // For GrpcJob: the clock moved; quiet; its client's queue sent.
  PacedWorkerGroup& workers() { return workers_; }
  bool FlushClient() { return client_.Flush(kJobWait); }

 private:
  const JobAgentOptions options_;
  RunConfig config_;
  TappedClient client_;
  PacedWorkerGroup workers_;
  Agent agent_;

  absl::Mutex mu_;
  std::optional<int> exit_code_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The coordinator of the job and its agents, on one simulated clock.
class GrpcJob {
 public:
  GrpcJob() = default;
  ~GrpcJob();

  // The coordinator (`options.clock` is set to the job's) with its service
  // on a server on 127.0.0.1:`port` (0: any free one).
  absl::Status StartCoordinator(rendezvous::CoordinatorOptions options, int port = 0);
  // Node 0's process dies: every stream and parked join breaks.
  void KillCoordinator();
  rendezvous::Coordinator* core() { return core_.get(); }
  const std::string& target() const { return target_; }
  int port() const { return port_; }
  SimulatedClock* clock() { return &clock_; }

  // A new agent, started at once; the job owns it.
  JobAgent* AddAgent(JobAgentOptions options);
  // Signals every agent still running and waits for them all.
  void StopAgents();

  // Moves the clock, lets every running agent do what is due by then (its
  // Reports answered: Settle) and ticks the coordinator (if it lives).
  void AdvanceAndTick(absl::Duration d);
  // Waits until every running agent is quiet at the clock's time and its
  // queued calls were answered. False when they never settle.
  bool Settle();

  // Waits until `n` joiners are parked / `n` members watch their stream.
  bool AwaitGathering(int n);
  bool AwaitWatching(int n);
  // Waits until the server has sent every answer of a round closed since
  // the last such wait. The coordinator counts a member's silence from when
  // its answer left (Coordinator::AnswerSent, after the client may already
  // have it): a test that times a silence waits for this first.
  bool AwaitRoundAnswersSent();

 private:
  SimulatedClock clock_;
  std::unique_ptr<rendezvous::Coordinator> core_;
  // Told by the service when a round's answers are all sent; on a clock of
  // its own, so that asking (MaybeTrim) says whether it was told.
  SimulatedClock answers_clock_;
  rendezvous::MemoryTrimmer answers_{&answers_clock_, [] {}};
  std::unique_ptr<rendezvous::CoordinatorService> service_;
  std::unique_ptr<rendezvous::GrpcServer> server_;
  int port_ = 0;
  std::string target_;
  std::vector<std::unique_ptr<JobAgent>> agents_;
};

// Waits for `pred` in real time, up to `timeout`.
bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = kJobWait);

}  // namespace trainlet::agent::testing

#endif  // TRAINLET_AGENT_TESTING_GRPC_JOB_H_
