#include "rendezvous/grpc_memory.h"

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainlet::rendezvous {
namespace {

TEST(GrpcExperiments, UnsetBecomesReadChunksOff) {
  EXPECT_EQ(GrpcExperimentsWithoutReadChunks(std::nullopt), "-tcp_read_chunks");
  EXPECT_EQ(GrpcExperimentsWithoutReadChunks(""), "-tcp_read_chunks");
}

TEST(GrpcExperiments, TheUsersOwnExperimentsAreKept) {
  EXPECT_EQ(GrpcExperimentsWithoutReadChunks("tcp_rcv_lowat"), "tcp_rcv_lowat,-tcp_read_chunks");
  EXPECT_EQ(GrpcExperimentsWithoutReadChunks(" tcp_rcv_lowat , -event_engine_client"),
            "tcp_rcv_lowat,-event_engine_client,-tcp_read_chunks");
}

TEST(GrpcExperiments, TheUsersWordOnReadChunksWins) {
  EXPECT_EQ(GrpcExperimentsWithoutReadChunks("tcp_read_chunks"), "tcp_read_chunks");
  EXPECT_EQ(GrpcExperimentsWithoutReadChunks("x, tcp_read_chunks"), "x, tcp_read_chunks");
  EXPECT_EQ(GrpcExperimentsWithoutReadChunks("-tcp_read_chunks"), "-tcp_read_chunks");
}

TEST(MemoryTrimmer, TrimsOnceARoundsAnswersSettled) {
  SimulatedClock clock;
  int trims = 0;
  MemoryTrimmer trimmer(&clock, [&trims] { ++trims; });
  EXPECT_FALSE(trimmer.MaybeTrim()) << "nothing answered yet";
  trimmer.RoundAnswered();
  EXPECT_FALSE(trimmer.MaybeTrim()) << "not while the answers settle";
  clock.Advance(MemoryTrimmer::kSettle);
  EXPECT_TRUE(trimmer.MaybeTrim());
  clock.Advance(MemoryTrimmer::kMinInterval);
  EXPECT_FALSE(trimmer.MaybeTrim()) << "one trim per answered round";
  EXPECT_EQ(trims, 1);
}

TEST(MemoryTrimmer, AtMostOncePerInterval_ARoundInItTrimsAtItsEnd) {
  SimulatedClock clock;
  int trims = 0;
  MemoryTrimmer trimmer(&clock, [&trims] { ++trims; });
  trimmer.RoundAnswered();
  clock.Advance(MemoryTrimmer::kSettle);
  EXPECT_TRUE(trimmer.MaybeTrim());
  clock.Advance(absl::Seconds(2));
  trimmer.RoundAnswered();
  clock.Advance(MemoryTrimmer::kSettle);
  EXPECT_FALSE(trimmer.MaybeTrim());
  clock.Advance(MemoryTrimmer::kMinInterval - absl::Seconds(2) - MemoryTrimmer::kSettle -
                absl::Milliseconds(1));
  EXPECT_FALSE(trimmer.MaybeTrim());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(trimmer.MaybeTrim()) << "the round answered within the interval is not forgotten";
  EXPECT_EQ(trims, 2);
}

TEST(MemoryTrimmer, ReleasedStreams_TrimAfterTheBurstSettled_AndAgainOnceTheirConnectionsClosed) {
  SimulatedClock clock;
  int trims = 0;
  MemoryTrimmer trimmer(&clock, [&trims] { ++trims; });
  const absl::Duration close_after = absl::Minutes(2);
  // A burst of releases, 0.5 s apart: the trim waits for its end.
  for (int i = 0; i < 4; ++i) {
    trimmer.StreamsReleased(close_after);
    clock.Advance(absl::Milliseconds(500));
    EXPECT_FALSE(trimmer.MaybeTrim()) << i;
  }
  clock.Advance(MemoryTrimmer::kSettle);
  EXPECT_TRUE(trimmer.MaybeTrim());
  clock.Advance(absl::Minutes(1));
  EXPECT_FALSE(trimmer.MaybeTrim());
  clock.Advance(absl::Minutes(1));
  EXPECT_TRUE(trimmer.MaybeTrim()) << "their idle connections are closed by now";
  clock.Advance(absl::Minutes(5));
  EXPECT_FALSE(trimmer.MaybeTrim());
  EXPECT_EQ(trims, 2);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif

// The heap the helper's server holds per idle connection; -1 on failure.
long long BytesPerConnection(const std::string& mode, int connections) {
  const std::string command =
      absl::StrCat(TRAINLET_CONNECTION_MEMORY_HELPER, " ", mode, " ", connections, " 2>&1");
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return -1;
  std::string text;
  char buf[512];
  while (fgets(buf, sizeof(buf), out) != nullptr) text += buf;
  const int status = pclose(out);
  long long bytes = -1;
  const std::string key = "bytes_per_connection=";
  const size_t at = text.find(key);
  if (status != 0 || at == std::string::npos ||
      !absl::SimpleAtoi(text.substr(at + key.size(), text.find('\n', at) - at - key.size()),
                        &bytes)) {
    ADD_FAILURE() << command << " -> status " << status << ":\n" << text;
    return -1;
  }
  return bytes;
}

// gRPC 1.51 keeps an 8 KiB read block per idle connection unless its
// tcp_read_chunks experiment is off; trainlet turns it off. This fails if a
// gRPC upgrade drops the experiment or the channel arguments stop sizing
// the reads.
TEST(GrpcReadBuffers, TheTunedServerHoldsLessPerIdleConnection) {
  if (kSanitizer) GTEST_SKIP() << "the sanitizer's allocator does not report mallinfo2";
  constexpr int kConnections = 200;
  const long long tuned = BytesPerConnection("tuned", kConnections);
  const long long plain = BytesPerConnection("default", kConnections);
  ASSERT_GT(tuned, 0);
  ASSERT_GT(plain, 0);
  RecordProperty("tuned_bytes_per_connection", static_cast<int>(tuned));
  RecordProperty("default_bytes_per_connection", static_cast<int>(plain));
  EXPECT_LE(tuned, plain - 4096) << "tuned " << tuned << " B, default " << plain
                                 << " B per idle connection";
}

}  // namespace
}  // namespace trainlet::rendezvous
