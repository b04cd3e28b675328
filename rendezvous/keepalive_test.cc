#include "rendezvous/keepalive.h"

#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

TEST(KeepaliveFor, NeverClosesBeforeTwiceTheHeartbeatTimeoutOfSilence) {
  for (absl::Duration hb : {absl::Milliseconds(1), absl::Milliseconds(300), absl::Seconds(2),
                            absl::Seconds(5), absl::Seconds(60), absl::Minutes(10)}) {
    KeepaliveSettings k = KeepaliveFor(hb);
    // The earliest close: a ping sent just as the peer fell silent.
    EXPECT_GE(k.timeout, 2 * hb) << hb;
    EXPECT_GE(k.time, absl::Seconds(1)) << hb;
    EXPECT_GE(k.time, hb) << hb;
  }
}

TEST(KeepaliveFor, DefaultTimeoutOfFiveSeconds) {
  KeepaliveSettings k = KeepaliveFor(absl::Seconds(5));
  EXPECT_EQ(k.time, absl::Seconds(5));
  EXPECT_EQ(k.timeout, absl::Seconds(10));
}

TEST(MinPermittedPingInterval, AdmitsEveryClientUsingTheseSettingsWithRoomForJitter) {
  // A client with any heartbeat timeout pings every KeepaliveFor(its).time.
  for (absl::Duration client_hb : {absl::ZeroDuration(), absl::Milliseconds(1), absl::Seconds(2),
                                   absl::Seconds(5), absl::Minutes(10)}) {
    EXPECT_LE(2 * MinPermittedPingInterval(), KeepaliveFor(client_hb).time) << client_hb;
  }
  EXPECT_GE(MinPermittedPingInterval(), absl::Milliseconds(100)) << "still a limit on floods";
}

TEST(WatchLivenessKeepalive, SilentNodeLostWithinFivePercentOfTheTimeout) {
  for (absl::Duration hb : {absl::Seconds(1), absl::Seconds(2), absl::Seconds(5), absl::Seconds(60),
                            absl::Minutes(10)}) {
    ASSERT_TRUE(WatchLivenessUsable(hb)) << hb;
    const KeepaliveSettings k = WatchLivenessKeepalive(hb);
    // The first unanswered ping leaves 0 to k.time after the node fell
    // silent; the connection closes k.timeout later, the core waits the grace.
    // The core's 20 ms tick adds 0 to 20 ms.
    const absl::Duration earliest = k.timeout + kStreamLossGrace;
    const absl::Duration latest = k.time + k.timeout + kStreamLossGrace + 2 * kLossCheckDelay;
    EXPECT_GE(earliest, hb * 0.95 - kLossCheckDelay) << hb;
    EXPECT_LE(latest, hb * 1.05 + kLossCheckDelay) << hb;
    EXPECT_EQ((earliest + latest) / 2, hb) << hb;
    EXPECT_EQ(k.time, hb / 10) << "ten pings per timeout";
  }
}

TEST(WatchLivenessKeepalive, ShortTimeoutsKeepHeartbeats) {
  EXPECT_FALSE(WatchLivenessUsable(absl::Milliseconds(999)));
  EXPECT_FALSE(WatchLivenessUsable(absl::Milliseconds(1)));
}

TEST(WatchLivenessKeepalive, HeartbeatsEveryHalfTimeout_HungAgentLostAfterOneAndAHalf) {
  EXPECT_EQ(WatchLivenessReportInterval(absl::Seconds(5)), absl::Milliseconds(2500));
  EXPECT_EQ(WatchLivenessReportLimit(absl::Seconds(5)), absl::Milliseconds(7500));
}

}  // namespace
}  // namespace trainlet::rendezvous
