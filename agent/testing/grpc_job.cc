#include "agent/testing/grpc_job.h"

#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainlet::agent::testing {
namespace {

// The safety net of an idle wait: a wait nothing ended comes back after
// this much real time (a spare turn of the agent's loop, nothing more).
constexpr absl::Duration kIdleRealLimit = absl::Seconds(1);

RunConfig ConfigFor(const JobAgentOptions& o) {
  RunConfig c;
  c.node_id = o.node;
  c.job_id = "job";
  c.command = {"train"};
  c.nproc_per_node = o.nproc_per_node;
  c.nnodes = {o.min_nodes, o.max_nodes};
  c.node_rank_hint = o.rank_hint;
  c.policy.max_restarts = o.max_restarts;
  c.join_timeout = o.join_timeout;
  c.grace_period = absl::Seconds(30);
  return c;
}

AgentSeams SeamsFor(PacedWorkerGroup* workers, TappedClient* client, Clock* clock) {
  AgentSeams s;
  s.workers = workers;
  s.client = client;
  s.clock = clock;
  s.proc_root = "/nonexistent/proc";  // the fake's pids are not this host's
  return s;
}

absl::Status CutError() {
  return absl::UnavailableError("the network to the coordinator is cut (the test's kill -9)");
}

// The stream a cut node opens: it ends at once.
class DeadStream : public rendezvous::WatchStream {
 public:
  void Cancel() override {}
};

}  // namespace

bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return pred();
}

// ---- TappedClient.

class TappedClient::TapStream : public rendezvous::WatchStream {
 public:
  TapStream(TappedClient* owner, std::unique_ptr<rendezvous::WatchStream> inner)
      : owner_(owner), inner_(std::move(inner)) {}
  // Waits for the real stream's callbacks (they record into the owner).
  ~TapStream() override {
    owner_->Forget(this);
    inner_.reset();
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  TappedClient* const owner_;
  std::unique_ptr<rendezvous::WatchStream> inner_;
};

TappedClient::TappedClient(rendezvous::ClientOptions options) : real_(std::move(options)) {}

TappedClient::~TappedClient() = default;

void TappedClient::Join(const v1::JoinRequest& request, absl::Duration timeout, JoinDone done) {
  auto record = [this, done = std::move(done)](absl::StatusOr<v1::Assignment> r) {
    {
      absl::MutexLock lock(&mu_);
      joins_.push_back(r);
      if (r.ok()) assignment_ = *r;
    }
    done(std::move(r));
  };
  {
    absl::MutexLock lock(&mu_);
    if (!cut_) {
      real_.Join(request, timeout, std::move(record));
      return;
    }
  }
  record(CutError());
}

void TappedClient::CancelJoin() { real_.CancelJoin(); }

std::unique_ptr<rendezvous::WatchStream> TappedClient::Watch(const v1::WatchRequest& request,
                                                             OnDirective on_directive,
                                                             OnStreamEnd on_end) {
  {
    absl::MutexLock lock(&mu_);
    if (cut_) {
      on_end(CutError());
      return std::make_unique<DeadStream>();
    }
  }
  size_t index = 0;
  {
    absl::MutexLock lock(&mu_);
    index = ends_.size();
    ends_.emplace_back();
  }
  auto stream = std::make_unique<TapStream>(
      this, real_.Watch(
                request,
                [this, on_directive = std::move(on_directive)](const v1::Directive& d) {
                  {
                    absl::MutexLock lock(&mu_);
                    directives_.push_back(d);
                  }
                  on_directive(d);
                },
                [this, index, on_end = std::move(on_end)](const absl::Status& s) {
                  {
                    absl::MutexLock lock(&mu_);
                    ends_[index] = s;
                  }
                  on_end(s);
                }));
  absl::MutexLock lock(&mu_);
  streams_.insert(stream.get());
  return stream;
}

void TappedClient::Forget(TapStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

void TappedClient::Report(const v1::ReportRequest& request, Done done) {
  {
    absl::MutexLock lock(&mu_);
    if (!cut_) {
      real_.Report(request, std::move(done));
      return;
    }
  }
  if (done) done(CutError());
}

void TappedClient::SetReportResponseHandler(ReportResponseHandler handler) {
  real_.SetReportResponseHandler(std::move(handler));
}

void TappedClient::Leave(const v1::LeaveRequest& request, Done done) {
  {
    absl::MutexLock lock(&mu_);
    if (!cut_) {
      real_.Leave(request, std::move(done));
      return;
    }
  }
  if (done) done(CutError());
}

void TappedClient::SendLivenessDatagram(const rendezvous::LivenessBytes& datagram) {
  absl::MutexLock lock(&mu_);
  if (!cut_) real_.SendLivenessDatagram(datagram);
}

void TappedClient::TakeLivenessDatagrams(std::vector<rendezvous::LivenessBytes>* acks,
                                         std::vector<std::string>* directives) {
  real_.TakeLivenessDatagrams(acks, directives);
}

int TappedClient::liveness_fd() const { return real_.liveness_fd(); }

bool TappedClient::Flush(absl::Duration timeout) { return real_.Flush(timeout); }

void TappedClient::Cut() {
  {
    absl::MutexLock lock(&mu_);
    cut_ = true;
    for (TapStream* s : streams_) s->Cancel();
  }
  real_.CancelJoin();
}

std::optional<absl::StatusOr<v1::Assignment>> TappedClient::AwaitJoin(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return joins_.size() > joins_taken_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has), timeout)) return std::nullopt;
  return joins_[joins_taken_++];
}

bool TappedClient::HasJoinAnswer() {
  absl::MutexLock lock(&mu_);
  return joins_.size() > joins_taken_;
}

v1::Assignment TappedClient::assignment() {
  absl::MutexLock lock(&mu_);
  return assignment_;
}

std::optional<v1::Directive> TappedClient::AwaitDirective(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return directives_.size() > directives_taken_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&has), timeout)) return std::nullopt;
  return directives_[directives_taken_++];
}

bool TappedClient::HasDirective() {
  absl::MutexLock lock(&mu_);
  return directives_.size() > directives_taken_;
}

std::optional<absl::Status> TappedClient::AwaitStreamEnd(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (ends_.empty()) return std::nullopt;
  const size_t latest = ends_.size() - 1;
  auto ended = [this, latest]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ends_[latest].has_value(); };
  mu_.AwaitWithTimeout(absl::Condition(&ended), timeout);
  return ends_[latest];
}

// ---- PacedWorkerGroup.

PacedWorkerGroup::PacedWorkerGroup(SimulatedClock* job_clock)
    : job_clock_(job_clock), fake_(&own_clock_) {
  fake_.on_idle = [this] { Idle(); };
}

absl::Status PacedWorkerGroup::Start(const std::vector<launcher::ProcessSpec>& workers) {
  return fake_.Start(workers);
}
absl::Status PacedWorkerGroup::StartHelper(const launcher::ProcessSpec& helper) {
  return fake_.StartHelper(helper);
}
void PacedWorkerGroup::WatchFd(int fd, int slot) { fake_.WatchFd(fd, slot); }
void PacedWorkerGroup::SignalWorkers(int sig) { fake_.SignalWorkers(sig); }
int PacedWorkerGroup::running_workers() const { return fake_.running_workers(); }
pid_t PacedWorkerGroup::worker_pid(int local_rank) const { return fake_.worker_pid(local_rank); }
std::vector<std::string> PacedWorkerGroup::OutputTail(int local_rank) const {
  return fake_.OutputTail(local_rank);
}

void PacedWorkerGroup::Wake() {
  fake_.Wake();  // first: the fake's Wait returns at once for it.
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

launcher::WorkerGroup::Event PacedWorkerGroup::Wait(absl::Duration timeout) {
  std::deque<std::function<void(launcher::testing::FakeWorkerGroup&)>> controls;
  {
    absl::MutexLock lock(&mu_);
    ++turns_;
    woken_ = false;  // a wake from now on is news (the fake keeps its own).
    if (frozen_) {
      stopped_ = true;
      auto thawed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !frozen_; };
      mu_.Await(absl::Condition(&thawed));
      stopped_ = false;
    }
    controls.swap(controls_);
    wait_until_ = job_clock_->Now() + timeout;
  }
  for (auto& control : controls) control(fake_);
  return fake_.Wait(timeout);
}

bool PacedWorkerGroup::ReadyLocked() const {
  return !frozen_ &&
         (woken_ || !controls_.empty() || finished_ || job_clock_->Now() >= wait_until_);
}

bool PacedWorkerGroup::QuietLocked() const {
  return finished_ || stopped_ || (parked_ && frozen_) || (parked_ && !ReadyLocked());
}

void PacedWorkerGroup::Idle() {
  absl::MutexLock lock(&mu_);
  parked_ = true;
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ReadyLocked(); };
  while (!mu_.AwaitWithTimeout(absl::Condition(&ready), kIdleRealLimit) && frozen_) {
  }
  parked_ = false;
}

void PacedWorkerGroup::Do(std::function<void(launcher::testing::FakeWorkerGroup&)> control) {
  absl::MutexLock lock(&mu_);
  controls_.push_back(std::move(control));
}

void PacedWorkerGroup::Freeze() {
  absl::MutexLock lock(&mu_);
  frozen_ = true;
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_ || stopped_ || parked_;
  };
  mu_.Await(absl::Condition(&stopped));
}

void PacedWorkerGroup::Thaw() {
  absl::MutexLock lock(&mu_);
  frozen_ = false;
}

void PacedWorkerGroup::ClockMoved() {
  absl::MutexLock lock(&mu_);
  ++clock_moves_;  // (releasing the lock re-evaluates the idle wait's condition)
}

void PacedWorkerGroup::Finished() {
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

bool PacedWorkerGroup::AwaitQuiet(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto quiet = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return QuietLocked(); };
  return mu_.AwaitWithTimeout(absl::Condition(&quiet), timeout);
}

bool PacedWorkerGroup::Quiet(uint64_t* turns) {
  absl::MutexLock lock(&mu_);
  *turns = turns_;
  return QuietLocked();
}

// ---- JobAgent.

JobAgent::JobAgent(const std::string& target, SimulatedClock* job_clock, JobAgentOptions options)
    : options_(std::move(options)),
      config_(ConfigFor(options_)),
      client_(rendezvous::ClientOptions{target, kJobToken}),
      workers_(job_clock),
      agent_(config_, {{"PATH", "/bin"}},
             RoundOptionsFrom(config_, options_.incarnation, /*master_port=*/29500),
             SeamsFor(&workers_, &client_, job_clock)) {
  thread_ = std::thread([this] {
    const int code = agent_.Run();
    {
      absl::MutexLock lock(&mu_);
      exit_code_ = code;
    }
    workers_.Finished();
  });
}

JobAgent::~JobAgent() {
  Stop();
  thread_.join();
}

void JobAgent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (exit_code_.has_value() || stopping_) return;
    stopping_ = true;
  }
  workers_.Thaw();
  Signal(SIGTERM);
}

v1::Member JobAgent::member() const {
  v1::Member m;
  m.set_node_id(options_.node);
  m.set_incarnation(options_.incarnation);
  return m;
}

absl::StatusOr<v1::Assignment> JobAgent::AwaitJoin(absl::Duration timeout) {
  std::optional<absl::StatusOr<v1::Assignment>> r = client_.AwaitJoin(timeout);
  if (!r.has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat(options_.node, " got no join answer within ", absl::FormatDuration(timeout)));
  }
  return *std::move(r);
}

std::optional<int> JobAgent::AwaitExit(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto exited = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return exit_code_.has_value(); };
  mu_.AwaitWithTimeout(absl::Condition(&exited), timeout);
  return exit_code_;
}

void JobAgent::ExitWorker(int local_rank, int code) {
  workers_.Do([=](launcher::testing::FakeWorkerGroup& f) { f.Exit(local_rank, code); });
}

void JobAgent::ExitWorkers(int code) {
  workers_.Do([=](launcher::testing::FakeWorkerGroup& f) { f.ExitAll(code); });
}

void JobAgent::Signal(int sig) {
  workers_.Do([=](launcher::testing::FakeWorkerGroup& f) { f.Signal(sig); });
}

void JobAgent::Vanish() {
  workers_.Freeze();
  client_.Cut();
}

// ---- GrpcJob.

GrpcJob::~GrpcJob() {
  StopAgents();
  agents_.clear();
  if (core_) core_->Shutdown("test over");
  if (server_) server_->Shutdown(absl::ZeroDuration());
}

absl::Status GrpcJob::StartCoordinator(rendezvous::CoordinatorOptions options, int port) {
  options.clock = &clock_;
  core_ = std::make_unique<rendezvous::Coordinator>(options);
  service_ = std::make_unique<rendezvous::CoordinatorService>(core_.get(), kJobToken,
                                                              /*peers=*/nullptr, &answers_);
  absl::StatusOr<std::unique_ptr<rendezvous::GrpcServer>> server =
      rendezvous::GrpcServer::Start({absl::StrCat("127.0.0.1:", port)}, {service_.get()});
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  port_ = server_->port(0);
  target_ = absl::StrCat("127.0.0.1:", port_);
  return absl::OkStatus();
}

void GrpcJob::KillCoordinator() {
  server_->Shutdown(absl::ZeroDuration());
  core_->Shutdown("killed");
  server_.reset();
  service_.reset();
  core_.reset();
}

JobAgent* GrpcJob::AddAgent(JobAgentOptions options) {
  agents_.push_back(std::make_unique<JobAgent>(target_, &clock_, std::move(options)));
  return agents_.back().get();
}

void GrpcJob::StopAgents() {
  for (auto& a : agents_) a->Stop();
  for (auto& a : agents_) {
    if (!a->AwaitExit(absl::Seconds(60)).has_value()) {
      ADD_FAILURE() << a->node() << " did not stop within 60 s of SIGTERM";
    }
  }
}

void GrpcJob::AdvanceAndTick(absl::Duration d) {
  clock_.Advance(d);
  for (auto& a : agents_) a->workers().ClockMoved();
  EXPECT_TRUE(Settle()) << "the agents never settled";
  if (core_) core_->Tick();
}

bool GrpcJob::Settle() {
  for (int pass = 0; pass < 50; ++pass) {
    std::vector<uint64_t> turns(agents_.size());
    bool quiet = true;
    for (size_t i = 0; i < agents_.size(); ++i) {
      quiet = agents_[i]->workers().AwaitQuiet(kJobWait) && quiet;
      agents_[i]->workers().Quiet(&turns[i]);
    }
    if (!quiet) return false;
    // What they sent is answered (and the answers are in their inboxes).
    for (auto& a : agents_) a->FlushClient();
    bool settled = true;
    for (size_t i = 0; i < agents_.size(); ++i) {
      uint64_t now = 0;
      if (!agents_[i]->workers().Quiet(&now) || now != turns[i]) settled = false;
    }
    if (settled) return true;
  }
  return false;
}

bool GrpcJob::AwaitGathering(int n) {
  return WaitFor([&] { return core_->GetSnapshot().gathering == n; });
}

bool GrpcJob::AwaitWatching(int n) {
  return WaitFor([&] { return core_->GetSnapshot().watching == n; });
}

bool GrpcJob::AwaitRoundAnswersSent() {
  return WaitFor([&] {
    answers_clock_.Advance(rendezvous::MemoryTrimmer::kMinInterval +
                           rendezvous::MemoryTrimmer::kSettle);
    return answers_.MaybeTrim();
  });
}

}  // namespace trainlet::agent::testing
