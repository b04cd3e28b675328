// UDP liveness over real sockets on 127.0.0.1 (liveness_receiver.h,
// liveness_sender.h): members that join over gRPC get a slot and key on the
// coordinator's UDP port (the same number as its gRPC port); their
// datagrams keep them alive without Reports; one that falls silent is lost
// at --heartbeat-timeout; garbage on the port is counted and ignored; and a
// member whose datagrams never arrive lives on Reports.
//
// The +-5% budget itself is exact arithmetic on the coordinator's clock and
// ticks, and is proven on a fake clock
// (UdpLivenessTest.SilentMember_LostWithinFivePercentOfTheTimeoutAfterFallingSilent
// in coordinator_test.cc); the end-to-end figure for real agents is measured
// by bench/elastic_restart (docs/benchmarks.md). Here the clocks are real and
// the test runs beside others on a shared CI host, where the coordinator's
// ticker, its liveness thread and this test's polling thread can each wake
// late. The upper bounds below therefore allow kSchedulingSlack on top of
// the budget (the budget itself has no slack: at T = 2 s the worst case is
// exactly 1.05 T). The lower bounds need none: lateness only adds.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_host.h"
#include "rendezvous/liveness_receiver.h"
#include "rendezvous/liveness_sender.h"
#include "rendezvous/protocol_version.h"

namespace trainlet::rendezvous {
namespace {

using ::testing::HasSubstr;

// How late, at most, the threads on this path may wake on a loaded host.
constexpr absl::Duration kSchedulingSlack = absl::Milliseconds(100);

v1::JoinRequest Req(const std::string& node, int hint) {
  v1::JoinRequest r;
  r.mutable_member()->set_node_id(node);
  r.mutable_member()->set_incarnation(NewIncarnation());
  r.set_job_id("job");
  r.set_protocol_version(kProtocolVersion);
  r.set_rank_hint(hint);
  r.set_local_world_size(1);
  r.set_master_port(29500);
  r.set_udp_liveness(true);
  return r;
}

// A member sending datagrams every interval from its own thread, as an
// agent's loop does, until Stop(); LastSent() is when the last one was about
// to leave.
class DatagramLoop {
 public:
  DatagramLoop(const std::string& target, const v1::JoinRequest& r, const v1::Assignment& a)
      : incarnation_(r.member().incarnation()), a_(a) {
    absl::StatusOr<std::unique_ptr<LivenessSender>> s =
        LivenessSender::Connect(target, static_cast<int>(a.liveness_udp_port()));
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) sender_ = std::move(*s);
    thread_ = std::thread([this] {
      const LivenessKey key = *LivenessKeyFromBytes(a_.liveness_key());
      const absl::Duration interval = absl::Milliseconds(a_.heartbeat_interval_ms());
      uint64_t seq = 0;
      absl::Time next = absl::Now();
      while (!stop_) {
        // Taken before the send: the datagram reaches the coordinator after
        // this, however late this thread runs next, so a loss measured from
        // it is never short (the lower bounds stay exact).
        const int64_t sending_ns = absl::ToUnixNanos(absl::Now());
        if (sender_) {
          sender_->Send(
              EncodeLivenessDatagram(a_.liveness_slot(), incarnation_, a_.round(), ++seq, key));
          std::vector<LivenessBytes> acks;
          sender_->Receive(&acks, 16);
          absl::MutexLock lock(&mu_);
          for (const LivenessBytes& b : acks) acks_.push_back({absl::Now(), b});
        }
        last_sent_ns_ = sending_ns;
        next += interval;
        absl::SleepFor(next - absl::Now());
      }
    });
  }
  ~DatagramLoop() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  absl::Time LastSent() const { return absl::FromUnixNanos(last_sent_ns_.load()); }
  // What came back (the coordinator's acks), with when it was read.
  std::vector<std::pair<absl::Time, LivenessBytes>> Acks() const {
    absl::MutexLock lock(&mu_);
    return acks_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<absl::Time, LivenessBytes>> acks_ ABSL_GUARDED_BY(mu_);
  const uint64_t incarnation_;
  const v1::Assignment a_;
  std::unique_ptr<LivenessSender> sender_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> last_sent_ns_{0};
  std::thread thread_;
};

// A static 2-node job on 127.0.0.1 (an ephemeral port, token "tok").
CoordinatorHostOptions PairHostOptions(absl::Duration timeout, int max_restarts = 0) {
  CoordinatorHostOptions o;
  o.core.job_id = "job";
  o.core.min_nodes = o.core.max_nodes = 2;
  o.core.max_restarts = max_restarts;
  o.core.last_call = absl::Milliseconds(500);
  o.core.heartbeat_timeout = timeout;
  o.core.min_nodes_timeout = absl::Minutes(5);
  o.core.incarnation = NewIncarnation();
  o.token = "tok";
  o.bind_addr = "127.0.0.1";
  o.port = 0;
  return o;
}

// Starts a coordinator host for `o`: *target is what its clients dial,
// *client their options (the target and the token).
void StartPairHost(const CoordinatorHostOptions& o, std::unique_ptr<CoordinatorHost>* host,
                   std::string* target, ClientOptions* client) {
  absl::StatusOr<std::unique_ptr<CoordinatorHost>> started = CoordinatorHost::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  *host = std::move(*started);
  *target = absl::StrCat("127.0.0.1:", (*host)->port());
  client->target = *target;
  client->token = "tok";
}

class UdpLivenessGrpcTest : public ::testing::Test {
 protected:
  void Start(absl::Duration timeout) {
    timeout_ = timeout;
    ClientOptions c;
    ASSERT_NO_FATAL_FAILURE(StartPairHost(PairHostOptions(timeout), &host_, &target_, &c));
    ASSERT_EQ(host_->liveness_port(), host_->port()) << "the same number as the gRPC port";
    client_ = std::make_unique<CoordinatorClient>(c);
    a_ = Req("node-a", 0);
    b_ = Req("node-b", 1);
    absl::StatusOr<v1::Assignment> assigned_b;
    std::thread join_b([&] { assigned_b = client_->Join(b_, absl::Now() + absl::Seconds(10)); });
    absl::StatusOr<v1::Assignment> assigned_a = client_->Join(a_, absl::Now() + absl::Seconds(10));
    join_b.join();
    ASSERT_TRUE(assigned_a.ok()) << assigned_a.status();
    ASSERT_TRUE(assigned_b.ok()) << assigned_b.status();
    assigned_a_ = *assigned_a;
    assigned_b_ = *assigned_b;
    wa_ = Watch(a_);
    wb_ = Watch(b_);
    const absl::Time opened = absl::Now();
    while (host_->core().GetSnapshot().watching < 2 && absl::Now() < opened + absl::Seconds(5)) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(host_->core().GetSnapshot().watching, 2);
  }
  void TearDown() override {
    wa_.reset();
    wb_.reset();
    if (host_) host_->Shutdown(absl::ZeroDuration());
  }
  std::unique_ptr<WatchStream> Watch(const v1::JoinRequest& r) {
    v1::WatchRequest w;
    *w.mutable_member() = r.member();
    w.set_job_id("job");
    w.set_round(assigned_a_.round());
    return client_->Watch(
        w, [](const v1::Directive&) {}, [](const absl::Status&) {});
  }
  absl::StatusOr<bool> Report(const v1::JoinRequest& r) {
    v1::ReportRequest rep;
    *rep.mutable_member() = r.member();
    rep.set_job_id("job");
    rep.set_round(assigned_a_.round());
    rep.set_state(v1::ReportRequest::RUNNING);
    v1::ReportResponse resp;
    absl::Status s = client_->Report(rep, absl::Seconds(2), &resp);
    if (!s.ok()) return s;
    return resp.udp_heard();
  }

  absl::Duration timeout_;
  std::unique_ptr<CoordinatorHost> host_;
  std::string target_;
  std::unique_ptr<CoordinatorClient> client_;
  v1::JoinRequest a_, b_;
  v1::Assignment assigned_a_, assigned_b_;
  std::unique_ptr<WatchStream> wa_, wb_;
};

TEST_F(UdpLivenessGrpcTest, SilentMember_LostAtTheTimeout_DatagramsAlone) {
  Start(absl::Seconds(2));
  EXPECT_EQ(assigned_a_.liveness_udp_port(), static_cast<uint32_t>(host_->port()));
  EXPECT_EQ(assigned_a_.liveness_key().size(), 16u);
  EXPECT_EQ(assigned_a_.heartbeat_interval_ms(),
            absl::ToInt64Milliseconds(HeartbeatInterval(timeout_)));
  DatagramLoop la(target_, a_, assigned_a_), lb(target_, b_, assigned_b_);
  // Two timeouts on datagrams alone: no loss; the Report answers say heard.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(Report(b_).value_or(false), true);
  absl::SleepFor(2 * timeout_);
  ASSERT_EQ(host_->core().GetSnapshot().phase, Phase::kRunning)
      << host_->core().GetSnapshot().verdict;

  lb.Stop();  // b falls silent right after its last datagram
  const absl::Time last = lb.LastSent();
  while (host_->core().GetSnapshot().phase == Phase::kRunning &&
         absl::Now() < last + 3 * timeout_) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Duration took = absl::Now() - last;
  const Coordinator::Snapshot s = host_->core().GetSnapshot();
  ASSERT_EQ(s.phase, Phase::kFailed);
  EXPECT_THAT(s.verdict, HasSubstr("node node-b (rank 1) lost"));
  std::cerr << "[measure] last datagram -> node lost: " << took << " (heartbeat timeout "
            << timeout_ << ", interval " << HeartbeatInterval(timeout_) << ")\n";
  // Fell silent right after the last datagram: at most 1.05 timeouts (plus
  // the threads' wake-ups, above); just before the next one: at least 0.95.
  EXPECT_LE(took, timeout_ * 1.05 + kSchedulingSlack);
  EXPECT_GE(took - HeartbeatInterval(timeout_), timeout_ * 0.95);
}

TEST_F(UdpLivenessGrpcTest, Acks_ComeBackOverUdp_AtMostOnePerQuarterTimeout_SignedForTheMember) {
  Start(absl::Seconds(2));
  DatagramLoop la(target_, a_, assigned_a_), lb(target_, b_, assigned_b_);
  absl::SleepFor(absl::Seconds(3));
  la.Stop();
  const std::vector<std::pair<absl::Time, LivenessBytes>> acks = la.Acks();
  // 3 s of datagrams every ~170 ms, acked at most every 500 ms: 5-7 acks.
  EXPECT_GE(acks.size(), 4u);
  EXPECT_LE(acks.size(), 7u);
  const LivenessKey key = *LivenessKeyFromBytes(assigned_a_.liveness_key());
  uint64_t last_seq = 0;
  for (const auto& [at, bytes] : acks) {
    std::optional<LivenessDatagram> d =
        ParseLivenessDatagram(bytes.data(), bytes.size(), LivenessKind::kAck);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->slot, assigned_a_.liveness_slot());
    EXPECT_EQ(d->incarnation, a_.member().incarnation());
    EXPECT_EQ(d->round, assigned_a_.round());
    EXPECT_GT(d->seq, last_seq);
    last_seq = d->seq;
    EXPECT_TRUE(d->MacValid(key));
    // b's key does not sign a's acks.
    EXPECT_FALSE(d->MacValid(*LivenessKeyFromBytes(assigned_b_.liveness_key())));
  }
  EXPECT_GE(host_->liveness_stats().acks_sent, static_cast<int64_t>(acks.size()));
}

TEST_F(UdpLivenessGrpcTest, UdpDropped_ReportsEveryIntervalKeepTheMemberAlive) {
  Start(absl::Seconds(1));
  // b's datagrams never arrive (none sent): its Report answers say so, and
  // Reports every interval keep it alive; a lives on datagrams.
  DatagramLoop la(target_, a_, assigned_a_);
  const absl::Duration interval = absl::Milliseconds(assigned_b_.heartbeat_interval_ms());
  const absl::Time start = absl::Now();
  while (absl::Now() < start + 3 * timeout_) {
    absl::StatusOr<bool> heard = Report(b_);
    ASSERT_TRUE(heard.ok()) << heard.status();
    EXPECT_FALSE(*heard);
    absl::SleepFor(interval);
  }
  EXPECT_EQ(host_->core().GetSnapshot().phase, Phase::kRunning)
      << host_->core().GetSnapshot().verdict;
  // Reports stop: lost at the same limit.
  const absl::Time last = absl::Now();
  while (host_->core().GetSnapshot().phase == Phase::kRunning &&
         absl::Now() < last + 3 * timeout_) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(host_->core().GetSnapshot().phase, Phase::kFailed);
  EXPECT_THAT(host_->core().GetSnapshot().verdict, HasSubstr("node node-b (rank 1) lost"));
  EXPECT_LE(absl::Now() - last, timeout_ * 1.05 + kSchedulingSlack);
}

TEST_F(UdpLivenessGrpcTest, GarbageAndForgeriesOnThePort_AreIgnored) {
  Start(absl::Seconds(1));
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(host_->port());
  auto send = [&](const void* p, size_t n) {
    sendto(fd, p, n, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  };
  const std::string big(9000, 'x');
  send(big.data(), big.size());
  send("", 0);
  LivenessKey guess{};
  const absl::Time start = absl::Now();
  uint64_t seq = 1000;
  while (absl::Now() < start + 2 * timeout_) {
    // Forged datagrams for b's slot: b must still be lost on time.
    const LivenessBytes forged = EncodeLivenessDatagram(assigned_b_.liveness_slot(),
                                                        b_.member().incarnation(), 1, ++seq, guess);
    send(forged.data(), forged.size());
    send(forged.data(), 47);
    absl::SleepFor(absl::Milliseconds(20));
  }
  close(fd);
  const Coordinator::Snapshot s = host_->core().GetSnapshot();
  EXPECT_EQ(s.phase, Phase::kFailed) << "forgeries did not keep anyone alive";
  EXPECT_THAT(s.verdict, HasSubstr("lost"));
}

// The receiver binds a host as the gRPC listener does (tcp_listener.h
// ResolveBindAddresses): a wildcard is one dual-stack socket, a name its
// addresses, and an error names the address.
TEST(LivenessReceiverBind, WildcardTakesIpv4_NamesBind_BadNamesAreNamed) {
  CoordinatorOptions o;
  o.job_id = "job";
  o.heartbeat_timeout = absl::Seconds(5);
  o.incarnation = NewIncarnation();
  Coordinator core(o);
  auto bad = LivenessReceiver::Start("no-such-host.invalid", 0, &core);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("cannot bind UDP no-such-host.invalid:0"));
  auto named = LivenessReceiver::Start("localhost", 0, &core);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_GT((*named)->port(), 0);
  auto any = LivenessReceiver::Start("*", 0, &core);
  ASSERT_TRUE(any.ok()) << any.status();
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons((*any)->port());
  ASSERT_EQ(sendto(fd, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 1);
  close(fd);
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while ((*any)->stats().received == 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ((*any)->stats().received, 1) << "an IPv4 datagram reaches the wildcard socket";
  EXPECT_EQ((*any)->stats().malformed, 1);
}

// Re-join by datagram over real gRPC and real UDP (docs/protocol.md,
// "Re-join on the stream"): after a restart, each survivor's READY datagram
// is its re-join, and its next assignment comes down the stream it kept.
class ReadyRejoinGrpcTest : public ::testing::Test {
 protected:
  // Two members run round 1, watching with accepts_assignment (and
  // accepts_rejoin_datagram = `rejoin_datagram`), heard over UDP; then b's
  // worker fails and the round re-opens as round 2.
  void StartAndFail(bool rejoin_datagram) {
    ClientOptions c;
    ASSERT_NO_FATAL_FAILURE(
        StartPairHost(PairHostOptions(absl::Seconds(5), /*max_restarts=*/1), &host_, &target_, &c));
    client_ = std::make_unique<CoordinatorClient>(c);
    std::thread join_b(
        [&] { assigned_[1] = client_->Join(reqs_[1], absl::Now() + absl::Seconds(10)); });
    assigned_[0] = client_->Join(reqs_[0], absl::Now() + absl::Seconds(10));
    join_b.join();
    ASSERT_TRUE(assigned_[0].ok() && assigned_[1].ok());
    for (int i = 0; i < 2; ++i) {
      v1::WatchRequest w;
      *w.mutable_member() = reqs_[i].member();
      w.set_job_id("job");
      w.set_round(1);
      w.set_accepts_assignment(true);
      w.set_accepts_rejoin_datagram(rejoin_datagram);
      streams_[i] = client_->Watch(
          w,
          [this, i](const v1::Directive& d) {
            absl::MutexLock lock(&mu_);
            got_[i].push_back(d);
          },
          [](const absl::Status&) {});
    }
    ASSERT_TRUE(WaitFor([&] { return host_->core().GetSnapshot().watching == 2; }));
    // Both heard over UDP (a READY can get there), then b's worker fails.
    ++seq_;
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::unique_ptr<LivenessSender>> s =
          LivenessSender::Connect(target_, static_cast<int>(assigned_[i]->liveness_udp_port()));
      ASSERT_TRUE(s.ok()) << s.status();
      senders_[i] = std::move(*s);
      senders_[i]->Send(EncodeLivenessDatagram(assigned_[i]->liveness_slot(),
                                               reqs_[i].member().incarnation(), 1, seq_, Key(i)));
    }
    ASSERT_TRUE(WaitFor([&] { return host_->liveness_stats().accepted >= 2; }));
    failed_ = v1::ReportRequest();
    *failed_.mutable_member() = reqs_[1].member();
    failed_.set_job_id("job");
    failed_.set_round(1);
    failed_.set_state(v1::ReportRequest::FAILED);
    failed_.set_exit_code(3);
    ASSERT_TRUE(client_->Report(failed_, absl::Seconds(2)).ok());
  }
  void TearDown() override {
    streams_[0].reset();
    streams_[1].reset();
    if (host_) host_->Shutdown(absl::ZeroDuration());
  }
  LivenessKey Key(int i) const { return *LivenessKeyFromBytes(assigned_[i]->liveness_key()); }
  bool WaitFor(const std::function<bool()>& pred) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (absl::Now() < until) {
      {
        absl::MutexLock lock(&mu_);
        if (pred()) return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }
  bool Pushed(int i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const v1::Directive& d : got_[i]) {
      if (d.has_assignment()) return true;
    }
    return false;
  }
  // READY from both, repeated until the assignment is there (as the
  // agent); then checks each READY held was acked over UDP, back to its
  // sender, and that the kept streams serve round 2.
  void ReadyUntilAssigned() {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    bool both = false;
    while (!both && absl::Now() < until) {
      ++seq_;
      for (int i = 0; i < 2; ++i) {
        senders_[i]->Send(EncodeLivenessDatagram(assigned_[i]->liveness_slot(),
                                                 reqs_[i].member().incarnation(), 2, seq_, Key(i),
                                                 LivenessKind::kReady));
      }
      absl::SleepFor(absl::Milliseconds(50));
      absl::MutexLock lock(&mu_);
      both = Pushed(0) && Pushed(1);
    }
    ASSERT_TRUE(both);
    for (int i = 0; i < 2; ++i) {
      bool ready_acked = false;
      for (int tries = 0; tries < 100 && !ready_acked; ++tries) {
        std::vector<LivenessBytes> acks;
        senders_[i]->Receive(&acks, 16);
        for (const LivenessBytes& b : acks) {
          std::optional<LivenessDatagram> ack =
              ParseLivenessDatagram(b.data(), b.size(), LivenessKind::kAck);
          if (!ack.has_value()) continue;  // a REJOIN repeated for a datagram of round 1
          EXPECT_TRUE(ack->MacValid(Key(i)));
          ready_acked |= ack->round == 2;
        }
        if (!ready_acked) absl::SleepFor(absl::Milliseconds(10));
      }
      EXPECT_TRUE(ready_acked) << "member " << i;
    }
    {
      absl::MutexLock lock(&mu_);
      std::set<int> ranks;
      for (int i = 0; i < 2; ++i) {
        const v1::Directive& d = got_[i].back();
        ASSERT_TRUE(d.has_assignment());
        EXPECT_EQ(d.round(), 2u);
        EXPECT_EQ(d.assignment().round(), 2u);
        EXPECT_EQ(d.assignment().restart_count(), 1);
        EXPECT_EQ(d.assignment().liveness_key(), assigned_[i]->liveness_key());
        ranks.insert(d.assignment().node_rank());
      }
      EXPECT_EQ(ranks, (std::set<int>{0, 1}));
    }
    const Coordinator::Snapshot snap = host_->core().GetSnapshot();
    EXPECT_EQ(snap.phase, Phase::kRunning);
    EXPECT_EQ(snap.round, 2u);
    EXPECT_EQ(snap.watching, 2) << "both streams serve round 2";
    // The kept stream is round 2's: a Report of round 2 is in the round.
    v1::ReportRequest running = failed_;
    running.set_round(2);
    running.set_state(v1::ReportRequest::RUNNING);
    EXPECT_TRUE(client_->Report(running, absl::Seconds(2)).ok());
  }

  const v1::JoinRequest reqs_[2] = {Req("node-a", 0), Req("node-b", 1)};
  std::unique_ptr<CoordinatorHost> host_;
  std::string target_;
  std::unique_ptr<CoordinatorClient> client_;
  absl::StatusOr<v1::Assignment> assigned_[2];
  std::unique_ptr<LivenessSender> senders_[2];
  std::unique_ptr<WatchStream> streams_[2];
  uint64_t seq_ = 0;
  v1::ReportRequest failed_;
  absl::Mutex mu_;
  std::vector<v1::Directive> got_[2] ABSL_GUARDED_BY(mu_);
};

TEST_F(ReadyRejoinGrpcTest, ReadyDatagramsRejoin_TheAssignmentComesDownTheKeptStream) {
  StartAndFail(/*rejoin_datagram=*/false);
  ASSERT_TRUE(WaitFor([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !got_[0].empty() && !got_[1].empty() && got_[0].back().rejoin().ready_by_datagram() &&
           got_[1].back().rejoin().ready_by_datagram();
  }));
  ReadyUntilAssigned();
}

// The Rejoin itself by datagram: each member's REJOIN comes over UDP, from
// the coordinator's liveness port to the member's connected socket, and
// nothing comes down the streams until the assignments.
TEST_F(ReadyRejoinGrpcTest, RejoinDatagrams_ReachEachMembersSocket_NoStreamWrite) {
  StartAndFail(/*rejoin_datagram=*/true);
  for (int i = 0; i < 2; ++i) {
    bool rejoin = false;
    for (int tries = 0; tries < 500 && !rejoin; ++tries) {
      std::vector<LivenessBytes> in;
      senders_[i]->Receive(&in, 16);
      for (const LivenessBytes& b : in) {
        std::optional<LivenessDatagram> d = ParseCoordinatorDatagram(b.data(), b.size());
        ASSERT_TRUE(d.has_value());
        if (d->kind != LivenessKind::kRejoin) continue;
        EXPECT_TRUE(IsOwnNewerRejoin(*d, assigned_[i]->liveness_slot(),
                                     reqs_[i].member().incarnation(), 1, Key(i)));
        EXPECT_EQ(d->round, 2u);
        rejoin = true;
      }
      if (!rejoin) absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(rejoin) << "member " << i;
  }
  EXPECT_GE(host_->liveness_stats().sent, 2);
  {
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(got_[0].empty() && got_[1].empty()) << "no Rejoin down the streams";
  }
  ReadyUntilAssigned();
}

// Stream loss over real gRPC and real UDP (coordinator.h, "Stream loss"):
// agents are the real GrpcRendezvousClient, whose LivenessSender answers
// the coordinator's probes on a thread of its own. A live agent whose
// stream breaks answers and is kept (D4); a killed one (its sockets
// closed) is lost at once by the ICMP port unreachable its probe gets; one
// that cannot answer and gives no ICMP (a pod deleted with its address) is
// lost when the probe window ends. Nothing here is found by silence (a 60 s
// heartbeat timeout), and only the window's test depends on it being short.
class StreamLossGrpcTest : public ::testing::Test {
 protected:
  // A static pair running round 1 with the probe window `window`, both
  // watching, both having said that the coordinator's acks reach them.
  void Start(absl::Duration window) {
    CoordinatorHostOptions o = PairHostOptions(absl::Seconds(60));
    o.core.stream_probe_window = window;
    ClientOptions c;
    ASSERT_NO_FATAL_FAILURE(StartPairHost(o, &host_, &target_, &c));
    absl::Notification joined[2];
    for (int i = 0; i < 2; ++i) {
      clients_[i] = std::make_unique<GrpcRendezvousClient>(c);
      clients_[i]->Join(reqs_[i], absl::Seconds(10),
                        [this, i, &joined](absl::StatusOr<v1::Assignment> a) {
                          assigned_[i] = std::move(a);
                          joined[i].Notify();
                        });
    }
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(joined[i].WaitForNotificationWithTimeout(absl::Seconds(20)));
      ASSERT_TRUE(assigned_[i].ok()) << assigned_[i].status();
      ASSERT_TRUE(assigned_[i]->stream_loss_probes());
      v1::WatchRequest w;
      *w.mutable_member() = reqs_[i].member();
      w.set_job_id("job");
      w.set_round(1);
      watches_[i] = clients_[i]->Watch(
          w, [](const v1::Directive&) {}, [](const absl::Status&) {});
      // What an agent sends once an ack came (CoordinatorContact).
      clients_[i]->SendLivenessDatagram(AliveAcked(i));
    }
    ASSERT_TRUE(WaitFor([&] {
      return host_->core().GetSnapshot().watching == 2 && host_->liveness_stats().accepted >= 2;
    }));
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) watches_[i].reset();
    if (host_) host_->Shutdown(absl::ZeroDuration());
  }
  LivenessBytes AliveAcked(int i) {
    return EncodeLivenessDatagram(assigned_[i]->liveness_slot(), reqs_[i].member().incarnation(), 1,
                                  ++seq_[i], *LivenessKeyFromBytes(assigned_[i]->liveness_key()),
                                  LivenessKind::kAliveAcked);
  }
  static bool WaitFor(const std::function<bool()>& pred,
                      absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time until = absl::Now() + timeout;
    while (!pred()) {
      if (absl::Now() > until) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }
  bool Running() const { return host_->core().GetSnapshot().phase == Phase::kRunning; }

  const v1::JoinRequest reqs_[2] = {Req("node-a", 0), Req("node-b", 1)};
  std::unique_ptr<CoordinatorHost> host_;
  std::string target_;
  std::unique_ptr<GrpcRendezvousClient> clients_[2];
  absl::StatusOr<v1::Assignment> assigned_[2];
  std::unique_ptr<WatchStream> watches_[2];
  uint64_t seq_[2] = {0, 0};
};

TEST_F(StreamLossGrpcTest, LiveAgent_StreamBreaks_ItAnswersTheProbe_AndIsNotLost) {
  // (A roomy window: what this proves is that the agent answers, not how
  // fast a loaded host lets it.)
  Start(absl::Seconds(30));
  watches_[1].reset();  // the stream breaks; the agent and its socket live
  ASSERT_TRUE(WaitFor([&] { return host_->liveness_stats().probes_answered >= 1; }));
  // Well past the grace a stream without probes has: still a member.
  absl::SleepFor(3 * kStreamLossGrace);
  const Coordinator::Snapshot s = host_->core().GetSnapshot();
  EXPECT_EQ(s.phase, Phase::kRunning) << s.verdict;
  EXPECT_TRUE(s.lost_nodes.empty());
  EXPECT_EQ(s.watching, 1);
  EXPECT_EQ(host_->liveness_stats().probes_refused, 0);
}

TEST_F(StreamLossGrpcTest, KilledAgent_ItsPortRefusesTheProbe_LostAtOnce) {
  // A window no test waits for: only the refusal can find it lost.
  Start(absl::Seconds(30));
  // kill -9 closes every socket of the agent: its liveness socket (the
  // client and its sender), then its stream.
  clients_[1].reset();
  const absl::Time killed = absl::Now();
  watches_[1].reset();
  ASSERT_TRUE(WaitFor([&] { return !Running(); }));
  const absl::Duration took = absl::Now() - killed;
  const Coordinator::Snapshot s = host_->core().GetSnapshot();
  EXPECT_EQ(s.phase, Phase::kFailed);
  EXPECT_THAT(s.verdict, HasSubstr("node node-b (rank 1) lost: its agent disconnected (watch "
                                   "stream closed; its liveness port refused a probe)"));
  // The receiver counts the refusal once the core has taken it (after the
  // loss the wait above saw): wait for the count too.
  EXPECT_TRUE(WaitFor([&] { return host_->liveness_stats().probes_refused == 1; }))
      << host_->liveness_stats().probes_refused;
  EXPECT_GE(host_->liveness_stats().icmp_errors, 1);
  std::cerr << "[measure] stream closed, port closed -> node lost: " << took
            << " (kStreamLossGrace was " << kStreamLossGrace << ")\n";
}

TEST_F(StreamLossGrpcTest, AgentThatCannotAnswer_NoIcmp_LostWhenTheWindowEnds) {
  Start(kStreamProbeWindow);
  // b's datagrams now come from a socket that lives but answers nothing (no
  // identity: its thread drops every probe), as a pod deleted with its
  // address does (no ICMP comes back either): the probes go there.
  absl::StatusOr<std::unique_ptr<LivenessSender>> mute =
      LivenessSender::Connect(target_, static_cast<int>(assigned_[1]->liveness_udp_port()));
  ASSERT_TRUE(mute.ok()) << mute.status();
  const int64_t accepted = host_->liveness_stats().accepted;
  ASSERT_TRUE((*mute)->Send(AliveAcked(1)));
  ASSERT_TRUE(WaitFor([&] { return host_->liveness_stats().accepted > accepted; }));
  const absl::Time closed = absl::Now();
  watches_[1].reset();
  ASSERT_TRUE(WaitFor([&] { return !Running(); }));
  const absl::Duration took = absl::Now() - closed;
  const Coordinator::Snapshot s = host_->core().GetSnapshot();
  EXPECT_EQ(s.phase, Phase::kFailed);
  EXPECT_THAT(s.verdict,
              HasSubstr("node node-b (rank 1) lost: its agent disconnected (watch stream closed; "
                        "no answer to a probe within 50ms)"));
  EXPECT_GE(took, kStreamProbeWindow) << "never before the window ends";
  EXPECT_EQ(host_->liveness_stats().probes_answered, 0);
  EXPECT_EQ(host_->liveness_stats().probes_refused, 0);
  std::cerr << "[measure] stream closed, no answer, no ICMP -> node lost: " << took << "\n";
}

}  // namespace
}  // namespace trainlet::rendezvous
