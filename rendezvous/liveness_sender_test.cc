// The agent's end of the liveness plane (liveness_sender.h) over real
// loopback sockets, with a plain UDP socket as the coordinator: its thread
// answers the coordinator's probes for this agent at once (whatever the
// agent's loop does: nobody calls Receive here), drops every other probe,
// and queues the rest for Receive, bounded, with fd() readable while it
// holds some. No timing bound: every wait is for an event, with a deadline
// only against a hang.
#include "rendezvous/liveness_sender.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rendezvous/liveness_datagram.h"

namespace trainlet::rendezvous {
namespace liveness_sender_test {
namespace {

constexpr uint32_t kSlot = 3;
constexpr uint64_t kIncarnation = 0x1234;

LivenessKey KeyOf(uint8_t fill) {
  LivenessKey k;
  k.fill(fill);
  return k;
}

class LivenessSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(coordinator_, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(coordinator_, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
    socklen_t len = sizeof(at);
    ASSERT_EQ(getsockname(coordinator_, reinterpret_cast<sockaddr*>(&at), &len), 0);
    // Waits for what the agent sends end after 10 s at most (a hang, not a
    // timing bound).
    timeval tv{10, 0};
    setsockopt(coordinator_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const int port = ntohs(at.sin_port);
    absl::StatusOr<std::unique_ptr<LivenessSender>> s =
        LivenessSender::Connect(absl::StrCat("127.0.0.1:", port), port);
    ASSERT_TRUE(s.ok()) << s.status();
    sender_ = std::move(*s);
    // Its first datagram says where the agent is.
    ASSERT_TRUE(sender_->Send(EncodeLivenessDatagram(kSlot, kIncarnation, 1, 1, KeyOf(7))));
    uint8_t buf[64];
    socklen_t from_len = sizeof(agent_);
    ASSERT_EQ(recvfrom(coordinator_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&agent_),
                       &from_len),
              static_cast<ssize_t>(kLivenessDatagramBytes));
  }
  void TearDown() override {
    sender_.reset();
    if (coordinator_ >= 0) close(coordinator_);
  }
  void ToAgent(const void* data, size_t size) {
    ASSERT_EQ(
        sendto(coordinator_, data, size, 0, reinterpret_cast<sockaddr*>(&agent_), sizeof(agent_)),
        static_cast<ssize_t>(size));
  }
  void ToAgent(const LivenessBytes& b) { ToAgent(b.data(), b.size()); }
  static LivenessBytes Probe(uint64_t nonce, const LivenessKey& key = KeyOf(7),
                             uint32_t slot = kSlot, uint64_t incarnation = kIncarnation) {
    return EncodeLivenessDatagram(slot, incarnation, 4, nonce, key, LivenessKind::kProbe);
  }
  // The next datagram the agent sent, parsed as the coordinator does.
  std::optional<LivenessDatagram> FromAgent() {
    uint8_t buf[kLivenessDatagramBytes + 1];
    const ssize_t n = recv(coordinator_, buf, sizeof(buf), 0);
    if (n < 0) return std::nullopt;
    return ParseAgentDatagram(buf, static_cast<size_t>(n));
  }
  bool Readable(int timeout_ms) {
    pollfd p = {sender_->fd(), POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1;
  }

  int coordinator_ = -1;
  sockaddr_in agent_{};
  std::unique_ptr<LivenessSender> sender_;
};

TEST_F(LivenessSenderTest, OwnProbe_AnsweredAtOnce_WithItsNonce_UnderTheKey) {
  sender_->SetIdentity(kSlot, kIncarnation, KeyOf(7));
  ToAgent(Probe(0xABCDEF));
  std::optional<LivenessDatagram> a = FromAgent();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, LivenessKind::kProbeAnswer);
  EXPECT_EQ(a->slot, kSlot);
  EXPECT_EQ(a->incarnation, kIncarnation);
  EXPECT_EQ(a->round, 4u) << "the probe's round";
  EXPECT_EQ(a->seq, 0xABCDEFu) << "the probe's nonce";
  EXPECT_TRUE(a->MacValid(KeyOf(7)));
  EXPECT_EQ(sender_->probes_answered(), 1);
  // A probe is the thread's: nothing for the agent's loop.
  std::vector<LivenessBytes> out;
  sender_->Receive(&out, 16);
  EXPECT_TRUE(out.empty());
}

TEST_F(LivenessSenderTest, ProbesNotForThisAgent_AreDropped_Unanswered) {
  // Before its identity is known, nothing is answered (the ack after the
  // probe, once queued, says that the thread has read the probe).
  ToAgent(Probe(1));
  ToAgent(EncodeLivenessDatagram(kSlot, kIncarnation, 1, 1, KeyOf(7), LivenessKind::kAck));
  ASSERT_TRUE(Readable(10000));
  std::vector<LivenessBytes> acks;
  sender_->Receive(&acks, 16);
  ASSERT_EQ(acks.size(), 1u);
  sender_->SetIdentity(kSlot, kIncarnation, KeyOf(7));
  ToAgent(Probe(2, KeyOf(8)));                           // another key
  ToAgent(Probe(3, KeyOf(7), kSlot + 1));                // another slot
  ToAgent(Probe(4, KeyOf(7), kSlot, kIncarnation + 1));  // another incarnation
  LivenessBytes truncated = Probe(5);
  ToAgent(truncated.data(), truncated.size() - 1);
  // Its own comes after them (loopback keeps the order): the first answer
  // is for it.
  ToAgent(Probe(6));
  std::optional<LivenessDatagram> a = FromAgent();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->seq, 6u);
  EXPECT_EQ(sender_->probes_answered(), 1);
  // A new identity (a new assignment) is the one answered for.
  sender_->SetIdentity(kSlot + 1, kIncarnation, KeyOf(9));
  ToAgent(Probe(7));
  ToAgent(Probe(8, KeyOf(9), kSlot + 1));
  a = FromAgent();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->seq, 8u);
  EXPECT_TRUE(a->MacValid(KeyOf(9)));
  std::vector<LivenessBytes> out;
  sender_->Receive(&out, 16);
  EXPECT_TRUE(out.empty()) << "no probe is queued";
}

TEST_F(LivenessSenderTest, OtherDatagrams_QueuedForReceive_InOrder_FdReadableWhileAnyAreLeft) {
  sender_->SetIdentity(kSlot, kIncarnation, KeyOf(7));
  EXPECT_FALSE(Readable(0));
  const LivenessBytes ack =
      EncodeLivenessDatagram(kSlot, kIncarnation, 1, 1, KeyOf(7), LivenessKind::kAck);
  ToAgent(ack);
  ToAgent("junk", 4);
  const std::string too_long(kMaxDirectiveDatagramBytes + 1, 'x');
  ToAgent(too_long.data(), too_long.size());
  const std::string directive(100, 'd');
  ToAgent(directive.data(), directive.size());
  // Once the probe sent last is answered, the thread has read them all.
  ToAgent(Probe(9));
  ASSERT_TRUE(FromAgent().has_value());
  ASSERT_TRUE(Readable(10000));
  std::vector<LivenessBytes> out;
  std::vector<std::string> directives;
  sender_->Receive(&out, 16, &directives);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], ack);
  ASSERT_EQ(directives.size(), 1u);
  EXPECT_EQ(directives[0], directive);
  EXPECT_FALSE(Readable(0)) << "taken: nothing left";
}

TEST_F(LivenessSenderTest, TheQueueIsBounded_AndReceiveTakesAtMostMax) {
  sender_->SetIdentity(kSlot, kIncarnation, KeyOf(7));
  // 300 acks in bursts of 50 (each burst read before the next, so that the
  // kernel's buffer drops none): the queue keeps the first 256.
  for (int burst = 0; burst < 6; ++burst) {
    for (int i = 0; i < 50; ++i) {
      ToAgent(EncodeLivenessDatagram(kSlot, kIncarnation, 1, 1 + burst * 50 + i, KeyOf(7),
                                     LivenessKind::kAck));
    }
    ToAgent(Probe(100 + burst));
    ASSERT_TRUE(FromAgent().has_value());
  }
  std::vector<LivenessBytes> out;
  sender_->Receive(&out, 16);
  EXPECT_EQ(out.size(), 16u);
  EXPECT_TRUE(Readable(0)) << "more than max: readable again";
  sender_->Receive(&out, 1000);
  ASSERT_EQ(out.size(), kMaxQueuedLivenessDatagrams);
  std::optional<LivenessDatagram> first =
      ParseLivenessDatagram(out.front().data(), out.front().size(), LivenessKind::kAck);
  std::optional<LivenessDatagram> last =
      ParseLivenessDatagram(out.back().data(), out.back().size(), LivenessKind::kAck);
  ASSERT_TRUE(first.has_value() && last.has_value());
  EXPECT_EQ(first->seq, 1u);
  EXPECT_EQ(last->seq, kMaxQueuedLivenessDatagrams) << "the newest dropped, in order";
  EXPECT_FALSE(Readable(0));
}

}  // namespace
}  // namespace liveness_sender_test
}  // namespace trainlet::rendezvous
