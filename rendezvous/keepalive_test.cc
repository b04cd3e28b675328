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

}  // namespace
}  // namespace trainlet::rendezvous
