// OutputWriter: writes whole lines to one output fd (the agent's stdout or
// stderr) from its own thread, so that a reader that stalls (a full pipe, a
// stopped terminal, a slow log collector) can never block the caller. What
// a user sees (the 1 MiB buffer, a slow reader slowing the workers, a reader
// stalled for 1 s costing dropped lines and a notice, the 2 s at exit):
// docs/pid1.md, "Worker output through the agent". Flow control is the
// caller's, through Room() and on_room.
//
// The fd itself is never made non-blocking (its open file description is
// shared with the parent shell or terminal): the thread polls for POLLOUT and
// writes chunks of whole lines, at most PIPE_BUF bytes to a pipe or socket
// (written atomically, so lines of several writers never interleave
// mid-line), up to 64 KiB to files and terminals (which serialize whole
// write(2) calls). Close() never hangs: a thread still stuck after the flush
// wait is detached with its state, and what is left is dropped and logged.
//
// Threading: every method may be called from any thread; the one writer
// thread is owned by this object (on_room runs on it).
#ifndef TRAINLET_LAUNCHER_OUTPUT_WRITER_H_
#define TRAINLET_LAUNCHER_OUTPUT_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace trainlet {
namespace launcher {

class OutputWriter {
 public:
  static constexpr size_t kDefaultCapacity = 1 << 20;
  static constexpr absl::Duration kDefaultNoticeInterval = absl::Seconds(10);
  static constexpr absl::Duration kDefaultCloseTimeout = absl::Seconds(2);
  static constexpr absl::Duration kDefaultStallTimeout = absl::Seconds(1);

  struct Options {
    // Bytes queued and not yet written, at most.
    size_t capacity = kDefaultCapacity;
    // Minimum time between two drop notices (not for the last one, at Close).
    absl::Duration notice_interval = kDefaultNoticeInterval;
    // For the notice: "... of worker <stream_name>: ...".
    std::string stream_name = "stdout";
    // No progress for this long with lines queued: the reader is stalled,
    // and Room() says to read on (and drop).
    absl::Duration stall_timeout = kDefaultStallTimeout;
    // Called on the writer thread, without locks held, when the queue fell
    // to a quarter of the capacity after Room() said to pause.
    // Must not block. Kept alive as long as the thread (which may outlive a
    // detaching FinishClose()).
    std::function<void()> on_room;
    // For the notice rate limit and stall detection; Clock::Monotonic()
    // when null. Not owned.
    Clock* clock = nullptr;
  };

  struct Stats {
    uint64_t written_bytes = 0;  // worker lines only, notices excluded
    uint64_t dropped_bytes = 0;  // total since construction
    uint64_t dropped_lines = 0;
    uint64_t notices = 0;  // drop notices written
    size_t queued_bytes = 0;
  };

  // Duplicates `fd` (F_DUPFD_CLOEXEC; the caller keeps its own) and starts
  // the writer thread. If the dup fails (EMFILE), output is dropped and the
  // error logged once.
  OutputWriter(int fd, const Options& options);
  // Close(kDefaultCloseTimeout) if not closed yet.
  ~OutputWriter();

  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // Queues `lines`: whole lines, each ending in '\n' (a trailing piece
  // without one is treated as a line). A line that does not fit in the
  // buffer is dropped and counted. Never blocks on the fd. After Close(),
  // drops silently.
  void WriteLines(absl::string_view lines);
  // Queues `bytes` as they are: like WriteLines, but a trailing piece
  // without '\n' gets none added (OutputMode::kRelay's partial lines).
  void WriteUnchanged(absl::string_view bytes);

  // Bytes that may be queued now without any being dropped: 0 from half the
  // capacity on, while the reader makes progress (the caller should pause
  // until on_room); the free space below that; kUnlimited once the reader is
  // stalled, closing or broken (the caller reads on; what does not fit is
  // dropped).
  static constexpr size_t kUnlimited = ~size_t{0};
  size_t Room();

  // Waits until everything queued so far has been written (true), or until
  // `timeout` passes (false). The writer keeps going either way.
  bool Flush(absl::Duration timeout);

  // Stops accepting lines and lets the thread write what is queued for at
  // most `timeout` (monotonic), then drop the rest. Lets a caller close
  // several writers with one shared wait. No-op after the first call.
  void BeginClose(absl::Duration timeout = kDefaultCloseTimeout);
  // Waits until the thread has finished (joins it), or, a short margin after
  // the close deadline, detaches it (only if a write(2) that poll() said
  // would not block does block). Logs drops that the stream never reported.
  // Idempotent.
  void FinishClose();
  // BeginClose(timeout) and FinishClose().
  void Close(absl::Duration timeout = kDefaultCloseTimeout);

  Stats stats() const;

 private:
  struct State;
  void Queue(absl::string_view bytes, bool end_lines);
  static void Run(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// The notice line (with its '\n') written after drops.
std::string DropNotice(absl::string_view stream_name, uint64_t bytes, uint64_t lines);

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_OUTPUT_WRITER_H_
