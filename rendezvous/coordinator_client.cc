#include "rendezvous/coordinator_client.h"

#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/logging.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_status.h"

namespace trainlet::rendezvous {
namespace {

class ReadReactor : public grpc::ClientReadReactor<v1::Directive>, public WatchStream {
 public:
  ReadReactor(std::shared_ptr<v1::Rendezvous::Stub> stub, const v1::WatchRequest& request,
              const std::string& token, CoordinatorClient::OnDirective on_directive,
              CoordinatorClient::OnStreamEnd on_end)
      : stub_(std::move(stub)),
        request_(request),
        on_directive_(std::move(on_directive)),
        on_end_(std::move(on_end)) {
    if (!token.empty()) ctx_.AddMetadata(kTokenMetadataKey, token);
    stub_->async()->Watch(&ctx_, &request_, this);
    StartRead(&directive_);
    StartCall();
  }
  ~ReadReactor() override {
    Cancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

  void Cancel() override { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status.
    on_directive_(directive_);
    StartRead(&directive_);
  }
  void OnDone(const grpc::Status& status) override {
    on_end_(FromGrpcStatus(status));
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

 private:
  std::shared_ptr<v1::Rendezvous::Stub> stub_;
  grpc::ClientContext ctx_;
  v1::WatchRequest request_;
  v1::Directive directive_;
  CoordinatorClient::OnDirective on_directive_;
  CoordinatorClient::OnStreamEnd on_end_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

// How long Join waits for a connection before starting over with a fresh
// channel (and a fresh DNS lookup).
constexpr absl::Duration kRedialPeriod = absl::Seconds(1);
// How long a waiting Join's PortWatch connects to the coordinator's port
// (every ClientOptions::port_watch_every): pods of one job start together,
// so the coordinator usually comes up within it; later, gRPC's own 80-120
// ms dials find it.
constexpr absl::Duration kPortWatchWindow = absl::Seconds(10);

// True when a TCP connection to `address` completes within `timeout`.
bool PortOpen(const sockaddr_storage& address, socklen_t length, absl::Duration timeout) {
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool open = connect(fd, reinterpret_cast<const sockaddr*>(&address), length) == 0;
  if (!open && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t size = sizeof(error);
    open = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1 &&
           getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
  }
  close(fd);
  return open;
}

bool IsTlsHandshakeError(const absl::Status& status) {
  if (!absl::IsUnavailable(status)) return false;
  const absl::string_view m = status.message();
  // "Ssl handshake failed: SSL_ERROR_SSL: ... certificate verify failed",
  // "Peer name 10.0.0.1 is not in peer certificate".
  return absl::StrContains(m, "andshake") || absl::StrContains(m, "SSL_ERROR") ||
         absl::StrContains(m, "peer certificate");
}

absl::Duration PortWatchInterval(int max_nodes) {
  // 3,200 connects a second in all: 312.5 us per node.
  return std::clamp(absl::Microseconds(312.5 * std::max(max_nodes, 1)), absl::Milliseconds(5),
                    absl::Milliseconds(20));
}

bool IsRetryableJoinError(const absl::Status& status) {
  // UNAVAILABLE: not resolvable / refused / restarting. ABORTED: our own
  // earlier attempt was superseded or the round moved on.
  return absl::IsUnavailable(status) || absl::IsAborted(status);
}

struct PortWatch::Shared {
  absl::Mutex mu;
  bool stopped ABSL_GUARDED_BY(mu) = false;
};

PortWatch::PortWatch(std::string target, absl::Duration every, std::function<void()> on_open)
    : shared_(std::make_shared<Shared>()) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0) return;  // not host:port (unix:, ...)
  std::string host = target.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [v6]:port
  }
  auto run = [shared = shared_, host, port = target.substr(colon + 1), every,
              on_open = std::move(on_open)] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return;
    std::vector<std::pair<sockaddr_storage, socklen_t>> addresses;
    for (const addrinfo* ai = found; ai != nullptr && addresses.size() < 4; ai = ai->ai_next) {
      if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
      sockaddr_storage a{};
      std::memcpy(&a, ai->ai_addr, ai->ai_addrlen);
      addresses.emplace_back(a, ai->ai_addrlen);
    }
    freeaddrinfo(found);
    while (true) {
      for (const auto& [address, length] : addresses) {
        if (!PortOpen(address, length, every)) continue;
        absl::MutexLock lock(&shared->mu);
        if (!shared->stopped) on_open();
        return;
      }
      absl::MutexLock lock(&shared->mu);
      if (shared->mu.AwaitWithTimeout(absl::Condition(&shared->stopped), every)) return;
    }
  };
  try {
    std::thread(std::move(run)).detach();
  } catch (const std::system_error&) {
    // No thread: gRPC's own dials find the coordinator.
  }
}

PortWatch::~PortWatch() {
  // on_open runs under the lock: after this, it never runs again.
  absl::MutexLock lock(&shared_->mu);
  shared_->stopped = true;
}

CoordinatorClient::CoordinatorClient(ClientOptions options) : options_(std::move(options)) {
  NewChannel();
}

void CoordinatorClient::NewChannel() {
  grpc::ChannelArguments args;
  // While the coordinator is not up, the channel re-dials every 100 ms
  // (+-20%): gRPC floors both values at 100 ms (ClientOptions), and its
  // default backoff grows to two minutes. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS
  // is left alone: it is really the connect timeout.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.min_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.max_backoff)));
  // Re-resolve a name that does not exist yet quickly (pod DNS records
  // appear late); gRPC's default waits 30 s between resolutions.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 200);
  // Notice a coordinator host that froze or vanished from the network.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC otherwise holds back pings sent without data for 5 minutes.
  args.SetInt(GRPC_ARG_HTTP2_MIN_SENT_PING_INTERVAL_WITHOUT_DATA_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Member lists of large jobs (kMaxResponseBytes).
  args.SetMaxReceiveMessageSize(kMaxResponseBytes);
  // One connection per client, even when several share a process (the
  // benchmarks simulate many agents in one process).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = ClientCredentials(options_.tls, &args);
  auto channel = grpc::CreateCustomChannel(options_.target, credentials, args);
  std::shared_ptr<v1::Rendezvous::Stub> stub = v1::Rendezvous::NewStub(channel);
  absl::MutexLock lock(&mu_);
  channel_ = std::move(channel);
  stub_ = std::move(stub);
}

std::shared_ptr<grpc::Channel> CoordinatorClient::Channel() {
  absl::MutexLock lock(&mu_);
  return channel_;
}

std::shared_ptr<v1::Rendezvous::Stub> CoordinatorClient::Stub() {
  absl::MutexLock lock(&mu_);
  return stub_;
}

CoordinatorClient::~CoordinatorClient() = default;

void CoordinatorClient::Prepare(grpc::ClientContext* ctx) const {
  if (!options_.token.empty()) ctx->AddMetadata(kTokenMetadataKey, options_.token);
}

absl::StatusOr<v1::Assignment> CoordinatorClient::Join(const v1::JoinRequest& request,
                                                       absl::Time wall_deadline) {
  // The budget runs on the monotonic clock (a wall-clock step must not
  // stretch or cut the join timeout); each gRPC deadline is derived from it.
  Clock* const mono = Clock::Monotonic();
  const absl::Time start = mono->Now();
  const absl::Time deadline = start + (wall_deadline - absl::Now());
  auto wall = [&](absl::Time mono_time) { return absl::Now() + (mono_time - mono->Now()); };
  std::mt19937 rng(std::random_device{}());
  absl::Duration backoff = options_.min_backoff;
  absl::Status last_error;
  absl::Time next_log = absl::InfinitePast();
  int tls_failures = 0;
  while (mono->Now() < deadline) {
    // Fail fast: a coordinator that is not reachable answers UNAVAILABLE at
    // once (with why), and a reachable one parks the join until the round
    // closes, up to the deadline.
    grpc::ClientContext ctx;
    Prepare(&ctx);
    ctx.set_deadline(absl::ToChronoTime(wall(deadline)));
    {
      absl::MutexLock lock(&mu_);
      if (join_cancelled_) return absl::CancelledError("join cancelled");
      join_ctx_ = &ctx;
    }
    v1::JoinResponse response;
    grpc::Status status = Stub()->Join(&ctx, request, &response);
    {
      absl::MutexLock lock(&mu_);
      join_ctx_ = nullptr;
      // An answer that beat the cancel is returned: the round counted this
      // member in, and the caller must tell it that it leaves.
      if (join_cancelled_ && !status.ok()) return absl::CancelledError("join cancelled");
    }
    if (status.ok()) return std::move(*response.mutable_assignment());
    absl::Status s = FromGrpcStatus(status);
    if (absl::IsDeadlineExceeded(s)) {
      // The coordinator answers a parked join shortly before its deadline,
      // naming what the round still waits for: pass that on. gRPC's own
      // "Deadline Exceeded" (nothing answered) is explained below.
      if (Channel()->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY &&
          s.message() != "Deadline Exceeded") {
        return absl::DeadlineExceededError(
            absl::StrFormat("no rendezvous with the coordinator at %s before the join timeout: %s",
                            options_.target, s.message()));
      }
      break;
    }
    if (!IsRetryableJoinError(s)) return s;
    last_error = s;
    tls_failures = IsTlsHandshakeError(s) ? tls_failures + 1 : 0;
    if (tls_failures >= kTlsFailuresBeforeGivingUp) return TlsRefusal(s);
    const absl::Time now = mono->Now();
    // Not connected (the name does not resolve, or nothing listens yet):
    // wait for the channel to connect, then join at once. UNAVAILABLE over a
    // live connection came from the coordinator itself (shutting down, or
    // this node's previous incarnation still holds its place): back off like
    // any other "try again".
    const bool connected = Channel()->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY;
    if (absl::IsUnavailable(s) && now >= next_log) {
      TLOG(kInfo) << "coordinator " << options_.target
                  << (connected ? " asks to try again (" : " not reachable yet (")
                  << SafeForLog(s.message(), 512) << "); "
                  << (connected ? "retrying" : "waiting for it") << " until "
                  << absl::FormatTime(wall(deadline));
      next_log = now + absl::Seconds(30);
    }
    if (absl::IsUnavailable(s) && !connected) {
      std::unique_ptr<PortWatch> watch;
      if (options_.port_watch && now - start < kPortWatchWindow) {
        watch = std::make_unique<PortWatch>(
            options_.target, options_.port_watch_every, [channel = Channel()] {
              grpc::experimental::ChannelResetConnectionBackoff(channel.get());
            });
      }
      if (!Channel()->WaitForConnected(
              absl::ToChronoTime(wall(std::min(deadline, mono->Now() + kRedialPeriod))))) {
        // Still not connected: a fresh channel resolves the name again at
        // once. gRPC's resolver backs off to two minutes between failed DNS
        // lookups, and pod DNS records often appear late; one new channel a
        // period cannot pile up connections.
        NewChannel();
      }
      continue;
    }
    // The coordinator answered "try again" (restarting, or our round moved
    // on): jittered exponential backoff, cut short by the deadline.
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    absl::Duration sleep = std::min(backoff * jitter(rng), deadline - mono->Now());
    if (sleep > absl::ZeroDuration()) absl::SleepFor(sleep);
    backoff = std::min(backoff * 3 / 2, options_.max_backoff);
  }
  // Say why: never connected (with the last connection error), or connected
  // but the round did not close.
  const grpc_connectivity_state state = Channel()->GetState(/*try_to_connect=*/false);
  std::string why = state == GRPC_CHANNEL_READY
                        ? absl::StrCat(
                              "the coordinator answered, but the round did not close (are all "
                              "--nnodes agents running?)",
                              last_error.ok() ? ""
                                              : absl::StrCat("; its last answer: ",
                                                             SafeForLog(last_error.message())))
                        : absl::StrCat("the coordinator never answered; last error: ",
                                       last_error.ok() ? "none (still connecting)"
                                                       : std::string(last_error.message()));
  // A coordinator with TLS closes a plaintext connection at once.
  if (!options_.tls.enabled() && state != GRPC_CHANNEL_READY &&
      absl::StrContains(last_error.message(), "Socket closed")) {
    absl::StrAppend(&why,
                    " (a coordinator that uses TLS closes plaintext connections: if it does, give "
                    "this node --tls-cert, --tls-key and --tls-ca)");
  }
  return absl::DeadlineExceededError(
      absl::StrFormat("no rendezvous with the coordinator at %s before the join timeout: %s. Check "
                      "--coordinator, that node rank 0 runs, and --join-timeout",
                      options_.target, why));
}

absl::Status CoordinatorClient::TlsRefusal(const absl::Status& last) const {
  const std::string name =
      options_.tls.server_name.empty() ? options_.target : options_.tls.server_name;
  return absl::UnauthenticatedError(absl::StrFormat(
      "TLS with the coordinator at %s failed %d times in a row: %s. Check that the "
      "coordinator's certificate is signed by a CA in this node's --tls-ca and names %s (a DNS "
      "or IP subject alternative name; --tls-server-name sets another name), and that the "
      "coordinator uses TLS",
      options_.target, kTlsFailuresBeforeGivingUp, last.message(), SafeForLog(name, 256)));
}

void CoordinatorClient::CancelJoin() {
  absl::MutexLock lock(&mu_);
  join_cancelled_ = true;
  if (join_ctx_ != nullptr) join_ctx_->TryCancel();
}

void CoordinatorClient::ResetJoinCancel() {
  absl::MutexLock lock(&mu_);
  join_cancelled_ = false;
}

void CoordinatorClient::CancelCalls() {
  absl::MutexLock lock(&mu_);
  calls_cancelled_ = true;
  for (grpc::ClientContext* ctx : calls_) ctx->TryCancel();
}

std::unique_ptr<WatchStream> CoordinatorClient::Watch(const v1::WatchRequest& request,
                                                      OnDirective on_directive,
                                                      OnStreamEnd on_end) {
  return std::make_unique<ReadReactor>(Stub(), request, options_.token, std::move(on_directive),
                                       std::move(on_end));
}

namespace {

// Runs one unary call with `ctx` registered for CancelCalls().
template <typename Call>
absl::Status TrackedCall(absl::Mutex* mu, std::set<grpc::ClientContext*>* calls,
                         const bool* cancelled, grpc::ClientContext* ctx, Call call) {
  {
    absl::MutexLock lock(mu);
    if (*cancelled) return absl::CancelledError("client shutting down");
    calls->insert(ctx);
  }
  grpc::Status status = call();
  absl::MutexLock lock(mu);
  calls->erase(ctx);
  return FromGrpcStatus(status);
}

}  // namespace

absl::Status CoordinatorClient::Report(const v1::ReportRequest& request, absl::Duration timeout,
                                       v1::ReportResponse* response) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::ReportResponse unused;
  if (response == nullptr) response = &unused;
  auto stub = Stub();
  return TrackedCall(&mu_, &calls_, &calls_cancelled_, &ctx,
                     [&] { return stub->Report(&ctx, request, response); });
}

absl::Status CoordinatorClient::Leave(const v1::LeaveRequest& request, absl::Duration timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::LeaveResponse response;
  auto stub = Stub();
  return TrackedCall(&mu_, &calls_, &calls_cancelled_, &ctx,
                     [&] { return stub->Leave(&ctx, request, &response); });
}

// ---- GrpcRendezvousClient.

GrpcRendezvousClient::GrpcRendezvousClient(ClientOptions options)
    : options_(options), client_(std::move(options)), sender_([this] { SenderLoop(); }) {}

GrpcRendezvousClient::~GrpcRendezvousClient() {
  client_.CancelJoin();
  client_.CancelCalls();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  sender_.join();
  if (join_thread_.joinable()) join_thread_.join();
}

void GrpcRendezvousClient::Join(const v1::JoinRequest& request, absl::Duration timeout,
                                JoinDone done) {
  // The previous join has delivered its answer (one join at a time).
  if (join_thread_.joinable()) join_thread_.join();
  client_.ResetJoinCancel();
  join_thread_ = std::thread([this, request, timeout, done = std::move(done)] {
    absl::StatusOr<v1::Assignment> result = client_.Join(request, absl::Now() + timeout);
    if (result.ok()) ConnectLiveness(*result, request.member().incarnation());
    done(std::move(result));
  });
}

void GrpcRendezvousClient::CancelJoin() { client_.CancelJoin(); }

void GrpcRendezvousClient::ConnectLiveness(const v1::Assignment& assignment, uint64_t incarnation) {
  // Not an assignment yet (a plan to measure first, docs/protocol.md):
  // the socket stays, as the coordinator's probes know it.
  if (assignment.has_measure_first()) return;
  const uint32_t udp_port = assignment.liveness_udp_port();
  // Who the coordinator's probes ask for: this answer's slot and key (a
  // re-join by READY keeps both; docs/protocol.md, "Stream loss").
  auto identify = [&](LivenessSender& sender) {
    if (std::optional<LivenessKey> key = LivenessKeyFromBytes(assignment.liveness_key())) {
      sender.SetIdentity(assignment.liveness_slot(), incarnation, *key);
    }
  };
  std::shared_ptr<LivenessSender> kept;
  {
    absl::MutexLock lock(&mu_);
    if (udp_port == 0) {
      liveness_ = nullptr;
      return;
    }
    if (liveness_ != nullptr && liveness_->udp_port() == static_cast<int>(udp_port)) {
      kept = liveness_;
    }
  }
  if (kept != nullptr) {
    identify(*kept);
    return;
  }
  absl::StatusOr<std::unique_ptr<LivenessSender>> sender =
      LivenessSender::Connect(options_.target, static_cast<int>(udp_port));
  if (!sender.ok()) {
    TLOG(kWarning) << sender.status().message() << "; sending Report heartbeats instead";
  } else {
    identify(**sender);
  }
  absl::MutexLock lock(&mu_);
  liveness_ = sender.ok() ? std::shared_ptr<LivenessSender>(std::move(*sender)) : nullptr;
}

void GrpcRendezvousClient::SendLivenessDatagram(const LivenessBytes& datagram) {
  std::shared_ptr<LivenessSender> sender;
  {
    absl::MutexLock lock(&mu_);
    sender = liveness_;
  }
  if (sender != nullptr) sender->Send(datagram);
}

void GrpcRendezvousClient::TakeLivenessDatagrams(std::vector<LivenessBytes>* acks,
                                                 std::vector<std::string>* directives) {
  std::shared_ptr<LivenessSender> sender;
  {
    absl::MutexLock lock(&mu_);
    sender = liveness_;
  }
  if (sender != nullptr) sender->Receive(acks, kMaxAcksPerTake, directives);
}

int GrpcRendezvousClient::liveness_fd() const {
  absl::MutexLock lock(&mu_);
  return liveness_ != nullptr ? liveness_->fd() : -1;
}

std::unique_ptr<WatchStream> GrpcRendezvousClient::Watch(const v1::WatchRequest& request,
                                                         OnDirective on_directive,
                                                         OnStreamEnd on_end) {
  return client_.Watch(request, std::move(on_directive), std::move(on_end));
}

void GrpcRendezvousClient::Report(const v1::ReportRequest& request, Done done) {
  Call call;
  call.report = request;
  if (done) call.done.push_back(std::move(done));
  Enqueue(std::move(call));
}

void GrpcRendezvousClient::Leave(const v1::LeaveRequest& request, Done done) {
  Call call;
  call.leave = request;
  if (done) call.done.push_back(std::move(done));
  Enqueue(std::move(call));
}

void GrpcRendezvousClient::Enqueue(Call call) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  if (call.report.has_value()) {
    // A report still waiting behind a slow call says nothing a newer one of
    // the same round and state does not (heartbeats repeat the node's
    // state): send only the newest, and answer both callbacks with it. What
    // only the older one carries, once (a preflight report, an interval's
    // slow-node signals), goes with the newest.
    for (Call& queued : queue_) {
      if (queued.report.has_value() && queued.report->state() == call.report->state() &&
          queued.report->round() == call.report->round()) {
        if (queued.report->has_preflight() && !call.report->has_preflight()) {
          *call.report->mutable_preflight() = std::move(*queued.report->mutable_preflight());
        }
        if (queued.report->has_slow() && !call.report->has_slow()) {
          *call.report->mutable_slow() = std::move(*queued.report->mutable_slow());
        }
        queued.report = call.report;
        for (Done& d : call.done) queued.done.push_back(std::move(d));
        return;
      }
    }
  }
  queue_.push_back(std::move(call));
}

void GrpcRendezvousClient::SenderLoop() {
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
  while (true) {
    Call call;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      call = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    v1::ReportResponse response;
    absl::Status status = call.report.has_value()
                              ? client_.Report(*call.report, options_.report_timeout, &response)
                              : client_.Leave(*call.leave, options_.leave_timeout);
    if (call.report.has_value() && status.ok()) {
      ReportResponseHandler handler;
      {
        absl::MutexLock lock(&mu_);
        handler = response_handler_;
      }
      if (handler) handler(response);
    }
    for (Done& d : call.done) d(status);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

bool GrpcRendezvousClient::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &GrpcRendezvousClient::IdleLocked), timeout);
}

}  // namespace trainlet::rendezvous
