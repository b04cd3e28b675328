#include "preflight/link_wire.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::preflight {
namespace link_wire_test {

using ::testing::HasSubstr;

Hello SomeHello() {
  Hello h;
  h.round = 12;
  h.nonce = 0x0123456789abcdefULL;
  h.job_id = "job-a";
  h.from_node = "pod-0";
  h.to_node = "pod-1";
  return h;
}

TEST(LinkWire, HelloRoundTripsAndArrivesInPieces) {
  const std::string bytes = EncodeHello(SomeHello());
  EXPECT_EQ(bytes.size(), kHelloFixedBytes + 15);
  Hello got;
  size_t need = 0;
  std::string error;
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(ParseHello(bytes.substr(0, n), &got, &need, &error), Parsed::kNeedMore) << n;
    EXPECT_LE(need, bytes.size());
  }
  ASSERT_EQ(ParseHello(bytes, &got, &need, &error), Parsed::kOk) << error;
  EXPECT_EQ(need, bytes.size());
  EXPECT_EQ(got.round, 12u);
  EXPECT_EQ(got.nonce, 0x0123456789abcdefULL);
  EXPECT_EQ(got.job_id, "job-a");
  EXPECT_EQ(got.from_node, "pod-0");
  EXPECT_EQ(got.to_node, "pod-1");
}

TEST(LinkWire, BadHellosAreRefused) {
  Hello got;
  size_t need = 0;
  std::string error;
  EXPECT_EQ(ParseHello("GET / HTTP/1.1\r\n", &got, &need, &error), Parsed::kBad);
  EXPECT_THAT(error, HasSubstr("magic"));

  std::string bytes = EncodeHello(SomeHello());
  bytes[5] = 9;  // version 9
  EXPECT_EQ(ParseHello(bytes, &got, &need, &error), Parsed::kBad);
  EXPECT_THAT(error, HasSubstr("version 9"));

  Hello empty = SomeHello();
  empty.job_id = "";
  EXPECT_EQ(ParseHello(EncodeHello(empty), &got, &need, &error), Parsed::kBad);

  std::string long_id = EncodeHello(SomeHello());
  long_id[24] = 0x10;  // job id length 4096+: over the cap, refused before it arrives.
  EXPECT_EQ(ParseHello(long_id.substr(0, kHelloFixedBytes), &got, &need, &error), Parsed::kBad);

  Hello control = SomeHello();
  control.from_node = "pod\n0";
  EXPECT_EQ(ParseHello(EncodeHello(control), &got, &need, &error), Parsed::kBad);
  EXPECT_THAT(error, HasSubstr("printable"));
}

TEST(LinkWire, ReplyAndFrames) {
  Reply r;
  r.status = ReplyStatus::kWrongRound;
  r.round = 5;
  r.max_bulk_bytes = 64 << 20;
  const std::string bytes = EncodeReply(r);
  ASSERT_EQ(bytes.size(), kReplyBytes);
  Reply got;
  std::string error;
  ASSERT_EQ(ParseReply(bytes, &got, &error), Parsed::kOk);
  EXPECT_EQ(got.status, ReplyStatus::kWrongRound);
  EXPECT_EQ(got.round, 5u);
  EXPECT_EQ(got.max_bulk_bytes, 64u << 20);
  std::string bad = bytes;
  bad[7] = 99;
  EXPECT_EQ(ParseReply(bad, &got, &error), Parsed::kBad);

  const std::string frame = EncodeFrame({FrameType::kBulk, 1234});
  ASSERT_EQ(frame.size(), kFrameBytes);
  Frame f;
  ASSERT_EQ(ParseFrame(frame, &f, &error), Parsed::kOk);
  EXPECT_EQ(f.type, FrameType::kBulk);
  EXPECT_EQ(f.value, 1234u);
  std::string unknown = frame;
  unknown[3] = 7;
  EXPECT_EQ(ParseFrame(unknown, &f, &error), Parsed::kBad);
  EXPECT_EQ(ParseFrame(frame.substr(0, 10), &f, &error), Parsed::kNeedMore);
}

}  // namespace link_wire_test
}  // namespace trainlet::preflight
