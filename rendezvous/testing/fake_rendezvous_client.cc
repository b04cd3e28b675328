#include "rendezvous/testing/fake_rendezvous_client.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainlet::rendezvous::testing {
namespace {

constexpr uint64_t kCoordinatorIncarnation = 0xc0c0;

class FakeStream : public WatchStream {
 public:
  explicit FakeStream(std::shared_ptr<FakeRendezvousClient::Stream> stream)
      : stream_(std::move(stream)) {}
  ~FakeStream() override { Cancel(); }
  void Cancel() override {
    if (stream_->ended) return;
    stream_->ended = true;
    stream_->on_end(absl::CancelledError("stream cancelled by the caller"));
  }

 private:
  std::shared_ptr<FakeRendezvousClient::Stream> stream_;
};

}  // namespace

FakeRendezvousClient::FakeRendezvousClient() = default;
FakeRendezvousClient::~FakeRendezvousClient() = default;

void FakeRendezvousClient::Join(const v1::JoinRequest& request, absl::Duration timeout,
                                JoinDone done) {
  {
    absl::MutexLock lock(&mu_);
    joins_.push_back(request);
    join_timeouts_.push_back(timeout);
  }
  if (on_join) {
    if (std::optional<absl::StatusOr<v1::Assignment>> answer = on_join(request)) {
      done(*std::move(answer));
      return;
    }
  }
  absl::MutexLock lock(&mu_);
  pending_join_ = std::move(done);
}

void FakeRendezvousClient::CancelJoin() {
  JoinDone done;
  {
    absl::MutexLock lock(&mu_);
    ++cancel_joins_;
    done = std::move(pending_join_);
    pending_join_ = nullptr;
  }
  if (done) done(absl::CancelledError("join cancelled"));
}

bool FakeRendezvousClient::join_pending() const {
  absl::MutexLock lock(&mu_);
  return pending_join_ != nullptr;
}

void FakeRendezvousClient::AnswerJoin(absl::StatusOr<v1::Assignment> result) {
  JoinDone done;
  {
    absl::MutexLock lock(&mu_);
    done = std::move(pending_join_);
    pending_join_ = nullptr;
  }
  if (done) done(std::move(result));
}

std::unique_ptr<WatchStream> FakeRendezvousClient::Watch(const v1::WatchRequest& request,
                                                         OnDirective on_directive,
                                                         OnStreamEnd on_end) {
  auto stream = std::make_shared<Stream>();
  stream->on_directive = std::move(on_directive);
  stream->on_end = std::move(on_end);
  absl::MutexLock lock(&mu_);
  watches_.push_back(request);
  current_ = stream;
  return std::make_unique<FakeStream>(stream);
}

bool FakeRendezvousClient::SendDirective(const v1::Directive& directive) {
  std::shared_ptr<Stream> s;
  {
    absl::MutexLock lock(&mu_);
    s = current_;
  }
  if (!s || s->ended) return false;
  s->on_directive(directive);
  return true;
}

bool FakeRendezvousClient::EndStream(const absl::Status& status) {
  std::shared_ptr<Stream> s;
  {
    absl::MutexLock lock(&mu_);
    s = current_;
  }
  if (!s || s->ended) return false;
  s->ended = true;
  s->on_end(status);
  return true;
}

bool FakeRendezvousClient::stream_open() const {
  absl::MutexLock lock(&mu_);
  return current_ && !current_->ended;
}

void FakeRendezvousClient::Report(const v1::ReportRequest& request, Done done) {
  {
    absl::MutexLock lock(&mu_);
    reports_.push_back(request);
  }
  if (on_report) on_report(request);
  absl::Status s = report_status ? report_status(request) : absl::OkStatus();
  ReportResponseHandler handler;
  {
    absl::MutexLock lock(&mu_);
    handler = response_handler_;
  }
  if (s.ok() && handler) {
    handler(report_response ? report_response(request) : v1::ReportResponse());
  }
  if (done) done(s);
}

void FakeRendezvousClient::SendLivenessDatagram(const LivenessBytes& datagram) {
  std::optional<LivenessBytes> ack = on_datagram ? on_datagram(datagram) : std::nullopt;
  absl::MutexLock lock(&mu_);
  datagrams_.push_back(datagram);
  if (ack.has_value()) acks_.push_back(*ack);
}

void FakeRendezvousClient::DeliverDatagram(const LivenessBytes& datagram) {
  absl::MutexLock lock(&mu_);
  acks_.push_back(datagram);
}

void FakeRendezvousClient::DeliverDirectiveDatagram(const std::string& datagram) {
  absl::MutexLock lock(&mu_);
  directive_datagrams_.push_back(datagram);
}

void FakeRendezvousClient::TakeLivenessDatagrams(std::vector<LivenessBytes>* acks,
                                                 std::vector<std::string>* directives) {
  absl::MutexLock lock(&mu_);
  for (const LivenessBytes& a : acks_) acks->push_back(a);
  acks_.clear();
  if (directives != nullptr) {
    for (std::string& d : directive_datagrams_) directives->push_back(std::move(d));
  }
  directive_datagrams_.clear();
}

std::vector<LivenessBytes> FakeRendezvousClient::datagrams() const {
  absl::MutexLock lock(&mu_);
  return datagrams_;
}

void FakeRendezvousClient::SetReportResponseHandler(ReportResponseHandler handler) {
  absl::MutexLock lock(&mu_);
  response_handler_ = std::move(handler);
}

void FakeRendezvousClient::Leave(const v1::LeaveRequest& request, Done done) {
  {
    absl::MutexLock lock(&mu_);
    leaves_.push_back(request);
  }
  if (done) done(absl::OkStatus());
}

std::vector<v1::JoinRequest> FakeRendezvousClient::joins() const {
  absl::MutexLock lock(&mu_);
  return joins_;
}
std::vector<absl::Duration> FakeRendezvousClient::join_timeouts() const {
  absl::MutexLock lock(&mu_);
  return join_timeouts_;
}
std::vector<v1::WatchRequest> FakeRendezvousClient::watches() const {
  absl::MutexLock lock(&mu_);
  return watches_;
}
std::vector<v1::ReportRequest> FakeRendezvousClient::reports() const {
  absl::MutexLock lock(&mu_);
  return reports_;
}
std::vector<v1::LeaveRequest> FakeRendezvousClient::leaves() const {
  absl::MutexLock lock(&mu_);
  return leaves_;
}
int FakeRendezvousClient::cancel_joins() const {
  absl::MutexLock lock(&mu_);
  return cancel_joins_;
}
int FakeRendezvousClient::CountReports(v1::ReportRequest::State state) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& r : reports_) n += r.state() == state;
  return n;
}

v1::Assignment MakeAssignment(uint64_t round, int node_rank, int nnodes, int local_world_size,
                              absl::Duration heartbeat_interval, int restart_count) {
  v1::Assignment a;
  a.set_coordinator_incarnation(kCoordinatorIncarnation);
  a.set_round(round);
  a.set_node_rank(node_rank);
  a.set_nnodes(nnodes);
  a.set_world_size(nnodes * local_world_size);
  a.set_master_addr("node-0.example");
  a.set_master_port(29500);
  a.set_restart_count(restart_count);
  a.set_job_id("job");
  a.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval));
  for (int r = 0; r < nnodes; ++r) {
    v1::NodeAssignment* n = a.add_nodes();
    n->mutable_member()->set_node_id(absl::StrCat("node-", r));
    n->mutable_member()->set_incarnation(100 + r);
    n->set_node_rank(r);
    n->set_addr(absl::StrCat("node-", r, ".example"));
    n->set_local_world_size(local_world_size);
    n->set_first_global_rank(r * local_world_size);
  }
  *a.mutable_self() = a.nodes(node_rank);
  return a;
}

v1::Directive MakeDirective(uint64_t round) {
  v1::Directive d;
  d.set_coordinator_incarnation(kCoordinatorIncarnation);
  d.set_round(round);
  return d;
}

}  // namespace trainlet::rendezvous::testing
