#include "launcher/output_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"

namespace trainlet {
namespace launcher {
namespace {

// After the close deadline, how long FinishClose() still waits for the
// thread before detaching it.
constexpr absl::Duration kDetachMargin = absl::Milliseconds(250);

int PollMillis(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  int64_t micros = absl::ToInt64Microseconds(timeout);
  return static_cast<int>(std::min<int64_t>((micros + 999) / 1000, INT_MAX));
}

// Chunks to files and terminals (see the header).
constexpr size_t kLargeChunk = 64 * 1024;

// The end of the next chunk of `data` starting at `from`: whole lines of at
// most `max_chunk` bytes together, or one whole line if it alone is longer.
size_t ChunkEnd(absl::string_view data, size_t from, size_t max_chunk) {
  const size_t limit = std::min(data.size(), from + max_chunk);
  if (limit == data.size()) return limit;
  size_t last_newline = data.rfind('\n', limit - 1);
  if (last_newline != absl::string_view::npos && last_newline >= from) return last_newline + 1;
  size_t next_newline = data.find('\n', limit);
  return next_newline == absl::string_view::npos ? data.size() : next_newline + 1;
}

}  // namespace

std::string DropNotice(absl::string_view stream_name, uint64_t bytes, uint64_t lines) {
  return absl::StrCat("trainlet: dropped ", bytes, " bytes (", lines, " lines) of worker ",
                      stream_name, ": the reader is not keeping up\n");
}

struct OutputWriter::State {
  State(int out_fd, int wake, size_t chunk, const Options& options)
      : fd(out_fd),
        wake_fd(wake),
        max_chunk(chunk),
        capacity(options.capacity),
        notice_interval(options.notice_interval),
        stall_timeout(options.stall_timeout),
        stream_name(options.stream_name),
        on_room(options.on_room),
        clock(options.clock != nullptr ? options.clock : Clock::Monotonic()) {}
  ~State() {
    if (fd >= 0) close(fd);
    if (wake_fd >= 0) close(wake_fd);
  }

  enum class WriteResult { kOk, kBroken, kDeadline };
  // Writes all of `data`, waiting for POLLOUT before each write(2); gives up
  // at the close deadline once closing. Called by the thread only.
  WriteResult WriteAll(absl::string_view data);
  // Drop accounting for lines that do not fit.
  void DropLocked(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    stats.dropped_bytes += bytes;
    stats.dropped_lines += 1;
    unreported_bytes += bytes;
    unreported_lines += 1;
  }
  // The notice to write now, or "" (the rule in the header comment).
  std::string TakeNoticeLocked(bool final) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  int last_error = 0;  // of the failed write; the thread's only
  const int fd;        // our own dup; -1 if the dup failed
  const int wake_fd;   // eventfd: BeginClose() interrupts the thread's poll()
  const size_t max_chunk;
  const size_t capacity;
  const absl::Duration notice_interval;
  const absl::Duration stall_timeout;
  const std::string stream_name;
  const std::function<void()> on_room;
  Clock* const clock;

  mutable absl::Mutex mu;
  std::string pending ABSL_GUARDED_BY(mu);        // queued, not yet taken by the thread
  size_t in_flight ABSL_GUARDED_BY(mu) = 0;       // taken by the thread, not yet written
  bool busy ABSL_GUARDED_BY(mu) = false;          // the thread holds a batch (or a notice)
  bool check_notice ABSL_GUARDED_BY(mu) = false;  // drops since the thread last looked
  // When the reader last took bytes, or lines started waiting for it.
  absl::Time last_progress ABSL_GUARDED_BY(mu);
  bool wants_room ABSL_GUARDED_BY(mu) = false;  // Room() said to pause
  bool closing ABSL_GUARDED_BY(mu) = false;
  absl::Time close_deadline ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();  // monotonic
  bool broken ABSL_GUARDED_BY(mu) = false;  // EPIPE or the like: everything is discarded
  bool done ABSL_GUARDED_BY(mu) = false;    // the thread has returned
  Stats stats ABSL_GUARDED_BY(mu);
  uint64_t unreported_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t unreported_lines ABSL_GUARDED_BY(mu) = 0;
  bool noticed_before ABSL_GUARDED_BY(mu) = false;
  absl::Time last_notice ABSL_GUARDED_BY(mu);
};

std::string OutputWriter::State::TakeNoticeLocked(bool final) {
  if (unreported_lines == 0 || broken) return "";
  if (!final) {
    if (pending.size() + in_flight > capacity / 2) return "";  // not caught up yet
    if (noticed_before && clock->Now() - last_notice < notice_interval) return "";
  }
  std::string notice = DropNotice(stream_name, unreported_bytes, unreported_lines);
  unreported_bytes = 0;
  unreported_lines = 0;
  noticed_before = true;
  last_notice = clock->Now();
  stats.notices += 1;
  return notice;
}

OutputWriter::State::WriteResult OutputWriter::State::WriteAll(absl::string_view data) {
  bool watch_wake = true;
  while (!data.empty()) {
    absl::Time deadline;
    {
      absl::MutexLock lock(&mu);
      deadline = close_deadline;
      if (closing) watch_wake = false;  // from now on only the deadline matters
    }
    absl::Duration timeout = deadline == absl::InfiniteFuture()
                                 ? absl::InfiniteDuration()
                                 : deadline - Clock::Monotonic()->Now();
    struct pollfd fds[2] = {{fd, POLLOUT, 0}, {wake_fd, POLLIN, 0}};
    int ready = poll(fds, watch_wake ? 2 : 1, PollMillis(timeout));
    if (ready < 0 && errno != EINTR) {
      last_error = errno;
      return WriteResult::kBroken;
    }
    if (ready <= 0) {
      if (deadline != absl::InfiniteFuture() && Clock::Monotonic()->Now() >= deadline) {
        return WriteResult::kDeadline;
      }
      continue;
    }
    if (fds[0].revents == 0) continue;  // woken for closing: re-read the deadline
    // POLLERR/POLLHUP: the write below reports the error.
    ssize_t n = write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      absl::MutexLock lock(&mu);
      last_progress = clock->Now();
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    last_error = n < 0 ? errno : EIO;
    return WriteResult::kBroken;
  }
  return WriteResult::kOk;
}

void OutputWriter::Run(std::shared_ptr<State> state) {
  State& s = *state;
  for (;;) {
    std::string batch;
    {
      absl::MutexLock lock(&s.mu);
      s.mu.Await(absl::Condition(
          +[](State* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
            return !st->pending.empty() || st->closing || st->check_notice;
          },
          &s));
      s.check_notice = false;
      if (s.pending.empty() && s.closing) break;  // everything is written
      batch.swap(s.pending);
      s.in_flight = batch.size();
      s.busy = true;
    }
    State::WriteResult result = State::WriteResult::kOk;
    for (size_t from = 0; from < batch.size();) {
      const size_t end = ChunkEnd(batch, from, s.max_chunk);
      result = s.WriteAll(absl::string_view(batch).substr(from, end - from));
      if (result != State::WriteResult::kOk) break;
      bool room = false;
      {
        absl::MutexLock lock(&s.mu);
        s.in_flight -= end - from;
        s.stats.written_bytes += end - from;
        if (s.wants_room && s.pending.size() + s.in_flight <= s.capacity / 4) {
          s.wants_room = false;
          room = true;
        }
      }
      if (room && s.on_room) s.on_room();
      from = end;
    }
    std::string notice;
    {
      absl::MutexLock lock(&s.mu);
      if (result == State::WriteResult::kBroken && !s.broken) {
        s.broken = true;
        TLOG(kWarning) << "cannot write worker " << s.stream_name << " (" << strerror(s.last_error)
                       << "); discarding the workers' " << s.stream_name << " from now on";
      }
      if (result == State::WriteResult::kDeadline) {
        // Closing, and the reader did not take it in time: count the rest.
        for (size_t from = batch.size() - s.in_flight; from < batch.size();) {
          size_t end = batch.find('\n', from);
          end = end == std::string::npos ? batch.size() : end + 1;
          s.DropLocked(end - from);
          from = end;
        }
        s.in_flight = 0;
        for (size_t from = 0; from < s.pending.size();) {
          size_t end = s.pending.find('\n', from);
          end = end == std::string::npos ? s.pending.size() : end + 1;
          s.DropLocked(end - from);
          from = end;
        }
        s.pending.clear();
        s.busy = false;
        break;
      }
      s.in_flight = 0;
      if (s.broken) s.pending.clear();
      notice = s.TakeNoticeLocked(/*final=*/false);
      if (notice.empty()) s.busy = false;
    }
    if (!notice.empty()) {
      State::WriteResult r = s.WriteAll(notice);
      absl::MutexLock lock(&s.mu);
      if (r == State::WriteResult::kBroken) s.broken = true;
      s.busy = false;
    }
  }
  // Closing: the last notice, whatever the rate limit, if there is time.
  std::string notice;
  {
    absl::MutexLock lock(&s.mu);
    if (Clock::Monotonic()->Now() < s.close_deadline) notice = s.TakeNoticeLocked(/*final=*/true);
  }
  if (!notice.empty()) s.WriteAll(notice);
  absl::MutexLock lock(&s.mu);
  s.done = true;
}

OutputWriter::OutputWriter(int fd, const Options& options) {
  int own_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int dup_error = errno;
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  // Only pipes (and sockets) need chunks small enough to be atomic.
  struct stat st;
  const bool pipe_like =
      own_fd < 0 || fstat(own_fd, &st) != 0 || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
  state_ = std::make_shared<State>(own_fd, wake_fd, pipe_like ? PIPE_BUF : kLargeChunk, options);
  if (own_fd < 0 || wake_fd < 0) {
    TLOG(kError) << "cannot set up the writer of worker " << options.stream_name << ": "
                 << strerror(own_fd < 0 ? dup_error : errno) << "; discarding it";
    absl::MutexLock lock(&state_->mu);
    state_->broken = true;
    state_->done = true;
    return;
  }
  thread_ = std::thread(&OutputWriter::Run, state_);
}

OutputWriter::~OutputWriter() { Close(); }

void OutputWriter::WriteLines(absl::string_view lines) { Queue(lines, /*end_lines=*/true); }

void OutputWriter::WriteUnchanged(absl::string_view bytes) { Queue(bytes, /*end_lines=*/false); }

void OutputWriter::Queue(absl::string_view lines, bool end_lines) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (s.closing || s.broken) return;
  while (!lines.empty()) {
    size_t end = lines.find('\n');
    end = end == absl::string_view::npos ? lines.size() : end + 1;
    absl::string_view line = lines.substr(0, end);
    lines.remove_prefix(end);
    if (s.pending.empty() && s.in_flight == 0) s.last_progress = s.clock->Now();
    const bool add_newline = end_lines && line.back() != '\n';
    const size_t size = line.size() + (add_newline ? 1 : 0);
    if (s.pending.size() + s.in_flight + size > s.capacity) {
      s.DropLocked(size);
      s.check_notice = true;  // the thread decides whether to report it now
      continue;
    }
    s.pending.append(line.data(), line.size());
    if (add_newline) s.pending.push_back('\n');
  }
}

size_t OutputWriter::Room() {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  const size_t queued = s.pending.size() + s.in_flight;
  if (s.closing || s.broken) return kUnlimited;
  if (queued < s.capacity / 2) return s.capacity - queued;
  if (s.clock->Now() - s.last_progress >= s.stall_timeout) return kUnlimited;  // stalled
  s.wants_room = true;
  return 0;
}

bool OutputWriter::Flush(absl::Duration timeout) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  return s.mu.AwaitWithTimeout(absl::Condition(
                                   +[](State* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
                                     return st->done ||
                                            (st->pending.empty() && !st->busy && !st->check_notice);
                                   },
                                   &s),
                               timeout);
}

void OutputWriter::BeginClose(absl::Duration timeout) {
  State& s = *state_;
  {
    absl::MutexLock lock(&s.mu);
    if (s.closing) return;
    s.closing = true;
    s.close_deadline = Clock::Monotonic()->Now() + timeout;
  }
  uint64_t one = 1;
  ssize_t ignored = write(s.wake_fd, &one, sizeof(one));
  (void)ignored;
}

void OutputWriter::FinishClose() {
  State& s = *state_;
  bool finished;
  {
    absl::MutexLock lock(&s.mu);
    const absl::Duration wait = s.close_deadline + kDetachMargin - Clock::Monotonic()->Now();
    finished = s.mu.AwaitWithTimeout(
        absl::Condition(
            +[](State* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) { return st->done; }, &s),
        std::max(wait, absl::ZeroDuration()));
    if (s.unreported_lines > 0) {
      TLOG(kWarning) << "dropped " << s.unreported_bytes << " bytes (" << s.unreported_lines
                     << " lines) of worker " << s.stream_name
                     << " at exit: the reader is not keeping up";
      s.unreported_bytes = 0;
      s.unreported_lines = 0;
    }
  }
  if (!thread_.joinable()) return;
  if (finished) {
    thread_.join();
  } else {
    // Stuck in a write(2) that poll() said would not block (another writer
    // filled the pipe in between): leave it; it owns its state and its fd.
    TLOG(kWarning) << "the writer of worker " << s.stream_name
                   << " is stuck in write(2); leaving it behind";
    thread_.detach();
  }
}

void OutputWriter::Close(absl::Duration timeout) {
  BeginClose(timeout);
  FinishClose();
}

OutputWriter::Stats OutputWriter::stats() const {
  absl::MutexLock lock(&state_->mu);
  Stats stats = state_->stats;
  stats.queued_bytes = state_->pending.size() + state_->in_flight;
  return stats;
}

}  // namespace launcher
}  // namespace trainlet
