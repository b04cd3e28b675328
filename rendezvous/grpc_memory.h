// What a connection costs the coordinator's memory, and giving back what a
// round leaves behind.
//
// At 10,000 agents the coordinator holds 10,000 gRPC connections, each with
// an open Watch stream; gRPC 1.51's per-connection state is nearly all of
// node 0's memory (docs/benchmarks-history.md, section 7). One piece of it is ours
// to choose: the TCP read buffers. gRPC 1.51's default ("tcp_read_chunks",
// an experiment that is on by default) reads into 8 KiB blocks, and every
// idle connection keeps one: 80 MB at 10,000 connections whose traffic is a
// keepalive ping now and then. With the experiment off, the server's channel
// arguments size the reads (kReadChunkBytes, adapted between
// kMinReadChunkBytes and kMaxReadChunkBytes by what arrives: gRPC's own
// behaviour before 1.50). gRPC reads its experiments once, from
// GRPC_EXPERIMENTS, at its first read; DisableGrpcReadChunks sets it.
//
// A round's Join calls (about 12 KiB of call arena each, all held at once
// while the round gathers), their requests and answers are freed once the
// answers are sent, but glibc keeps the pages, in holes between the
// connections' long-lived state. MemoryTrimmer gives them back
// (malloc_trim) once a round's answers are all sent: 75 MB of 507 at 10,000
// agents. malloc_trim holds each malloc arena's lock while it walks it (1.7 s
// in all at 10,000 agents on the test VM, one madvise per free chunk), so it
// runs on a thread of its own, not the ticker: a thread that allocates from
// the arena being walked waits, but the coordinator's clocks (Tick) do not.
#ifndef TRAINLET_RENDEZVOUS_GRPC_MEMORY_H_
#define TRAINLET_RENDEZVOUS_GRPC_MEMORY_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace trainlet::rendezvous {

// The server's TCP reads, with DisableGrpcReadChunks (grpc_server.cc): the
// first read's size, and the range the later ones adapt within. Requests
// are small (a JoinRequest is about 1-2 KiB, a ping 17 bytes); a larger one
// takes several reads.
inline constexpr int kReadChunkBytes = 2048;
inline constexpr int kMinReadChunkBytes = 256;
inline constexpr int kMaxReadChunkBytes = 4096;

// The GRPC_EXPERIMENTS value that turns gRPC's 8 KiB read blocks off, given
// the one the user set (nullopt: unset). The user's own experiments are
// kept; one that names tcp_read_chunks itself wins.
std::string GrpcExperimentsWithoutReadChunks(const std::optional<std::string>& user_value);

// Sets GRPC_EXPERIMENTS in this process (GrpcExperimentsWithoutReadChunks
// of its current value). Call from main before any gRPC object exists, and
// after the workers' environment was taken: workers do not inherit it.
void DisableGrpcReadChunks();

// Gives freed heap pages back to the kernel (malloc_trim) after a round's
// answers are all sent: once they settled for kSettle, and at most once per
// kMinInterval. Thread-safe.
class MemoryTrimmer {
 public:
  // The answers' calls end, their streams' first messages go: then trim.
  static constexpr absl::Duration kSettle = absl::Seconds(1);
  static constexpr absl::Duration kMinInterval = absl::Seconds(30);
  // How often the host's memory thread calls MaybeTrim.
  static constexpr absl::Duration kPollEvery = absl::Milliseconds(250);
  // `trim` defaults to malloc_trim(0); tests pass a counter.
  explicit MemoryTrimmer(Clock* clock = Clock::Monotonic(), std::function<void()> trim = nullptr);

  // A round's answers were all sent (any thread; cheap): a trim kSettle
  // after the first such since the last trim.
  void RoundAnswered();
  // Members' streams were released (coordinator.h): their calls are freed
  // now, their idle connections once the server closes them
  // (`connections_close_after`, its kConnectionIdleClose): a trim kSettle
  // after the last release of a burst, and another once those connections
  // are closed.
  void StreamsReleased(absl::Duration connections_close_after);
  // From one thread (the host's memory thread): trims if one is due and
  // kMinInterval has passed since the last trim. True when it trimmed.
  bool MaybeTrim();

 private:
  Clock* const clock_;
  const std::function<void()> trim_;
  absl::Mutex mu_;
  std::optional<absl::Time> soon_ ABSL_GUARDED_BY(mu_);  // a trim due then (settled)
  std::optional<absl::Time> late_ ABSL_GUARDED_BY(mu_);  // ... and then (connections closed)
  std::optional<absl::Time> last_trim_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_GRPC_MEMORY_H_
