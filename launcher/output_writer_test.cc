#include "launcher/output_writer.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "launcher/process_test_util.h"

namespace trainlet {
namespace launcher {
namespace {
// Its own namespace: the files of one test executable are compiled as one
// unit (TRAINLET_UNITY_TESTS), and other files have helpers of these names.
namespace output_writer_test {

using testing::CaptureFd;

constexpr absl::Duration kTimeout = absl::Seconds(10);

// A 100-byte line with its number: "line 00042 xxx...x\n".
std::string NumberedLine(int i, size_t size = 100) {
  std::string line = absl::StrFormat("line %05d ", i);
  line.append(size - 1 - line.size(), 'x');
  line.push_back('\n');
  return line;
}

// A pipe with a one-page buffer. Nobody reads it until StartReading(); then a
// thread collects everything written to it.
class TestPipe {
 public:
  TestPipe() {
    EXPECT_EQ(pipe2(fds_, O_CLOEXEC), 0);
    fcntl(fds_[1], F_SETPIPE_SZ, 4096);
  }
  ~TestPipe() {
    CloseWriteEnd();
    if (reader_.joinable()) reader_.join();
    close(fds_[0]);
  }
  int write_fd() const { return fds_[1]; }
  // Every writer must be closed first (the writers hold their own dups).
  void CloseWriteEnd() {
    if (fds_[1] >= 0) close(fds_[1]);
    fds_[1] = -1;
  }
  void StartReading() {
    reader_ = std::thread([this] {
      char buffer[8192];
      for (ssize_t n; (n = read(fds_[0], buffer, sizeof(buffer))) > 0;) {
        absl::MutexLock lock(&mu_);
        data_.append(buffer, static_cast<size_t>(n));
      }
    });
  }
  std::string Data() {
    absl::MutexLock lock(&mu_);
    return data_;
  }
  // Everything written: closes this end and waits for the reader to see EOF.
  // Flush() only says the writer handed its bytes to the pipe; the reader may
  // not have taken the last of them yet. Every writer must be closed first.
  std::string ReadToEnd() {
    CloseWriteEnd();
    if (reader_.joinable()) reader_.join();
    return Data();
  }
  // Waits until what was read contains `needle`.
  bool WaitForText(const std::string& needle, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    needle_ = needle;
    return mu_.AwaitWithTimeout(absl::Condition(this, &TestPipe::HasNeedleLocked), timeout);
  }

 private:
  bool HasNeedleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return data_.find(needle_) != std::string::npos;
  }

  int fds_[2] = {-1, -1};
  std::thread reader_;
  absl::Mutex mu_;
  std::string data_ ABSL_GUARDED_BY(mu_);
  std::string needle_ ABSL_GUARDED_BY(mu_);
};

OutputWriter::Options SmallBuffer(size_t capacity, Clock* clock = nullptr) {
  OutputWriter::Options options;
  options.capacity = capacity;
  options.clock = clock;
  return options;
}

// Splits `data` into lines; fails if it does not end in '\n'.
std::vector<std::string> Lines(const std::string& data) {
  EXPECT_TRUE(data.empty() || data.back() == '\n');
  return absl::StrSplit(data, '\n', absl::SkipEmpty());
}

TEST(OutputWriter, Lines_AreWrittenInOrder) {
  CaptureFd out;
  OutputWriter writer(out.fd(), OutputWriter::Options());
  writer.WriteLines("a\nb\n");
  writer.WriteLines("c\nno newline");
  ASSERT_TRUE(writer.Flush(kTimeout));
  EXPECT_EQ(out.Contents(), "a\nb\nc\nno newline\n");
  EXPECT_EQ(writer.stats().written_bytes, 17u);
  EXPECT_EQ(writer.stats().dropped_lines, 0u);
}

TEST(OutputWriter, StalledReader_NeverBlocks_DropsWholeLinesThenReportsThem) {
  TestPipe pipe;
  const size_t kCapacity = 16 * 1024;
  auto owned = std::make_unique<OutputWriter>(pipe.write_fd(), SmallBuffer(kCapacity));
  OutputWriter& writer = *owned;
  const int kLines = 1000;  // 100 KB: far more than the pipe and the buffer hold
  // In one call, under the writer's lock: with a call per line, its thread
  // could finish a batch between two calls after the first drop and report it
  // before anybody read (seen under load).
  std::string lines;
  for (int i = 0; i < kLines; ++i) lines += NumberedLine(i);
  const absl::Time start = absl::Now();
  writer.WriteLines(lines);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  OutputWriter::Stats stats = writer.stats();
  EXPECT_GT(stats.dropped_lines, 0u);
  EXPECT_EQ(stats.dropped_bytes, stats.dropped_lines * 100);
  EXPECT_LE(stats.queued_bytes, kCapacity);
  EXPECT_EQ(stats.notices, 0u);  // nobody has caught up yet

  pipe.StartReading();
  const std::string notice = DropNotice("stdout", stats.dropped_bytes, stats.dropped_lines);
  ASSERT_TRUE(pipe.WaitForText(notice, kTimeout)) << pipe.Data().substr(0, 300);
  ASSERT_TRUE(writer.Flush(kTimeout));
  EXPECT_EQ(writer.stats().dropped_lines, stats.dropped_lines);  // nothing new
  const OutputWriter::Stats final_stats = writer.stats();
  owned.reset();  // closes its descriptor: the reader sees the end

  // Every line arrived whole, in order, with gaps only; plus one notice.
  int previous = -1;
  int data_lines = 0;
  for (const std::string& line : Lines(pipe.ReadToEnd())) {
    if (line + "\n" == notice) continue;
    int number = -1;
    ASSERT_EQ(line.size(), 99u) << line;
    ASSERT_TRUE(absl::SimpleAtoi(line.substr(5, 5), &number)) << line;
    EXPECT_EQ(line + "\n", NumberedLine(number));
    EXPECT_GT(number, previous);
    previous = number;
    ++data_lines;
  }
  EXPECT_EQ(data_lines + stats.dropped_lines, static_cast<uint64_t>(kLines));
  EXPECT_EQ(final_stats.notices, 1u);
  EXPECT_EQ(notice,
            absl::StrCat("trainlet: dropped ", stats.dropped_bytes, " bytes (", stats.dropped_lines,
                         " lines) of worker stdout: the reader is not keeping up\n"));
}

TEST(OutputWriter, Room_IsZeroFromHalfFull_UntilTheReaderStalls) {
  SimulatedClock clock;
  TestPipe pipe;
  const size_t kCapacity = 64 * 1024;
  std::atomic<int> rooms{0};
  OutputWriter::Options options = SmallBuffer(kCapacity, &clock);
  options.on_room = [&rooms] { ++rooms; };
  OutputWriter writer(pipe.write_fd(), options);
  EXPECT_EQ(writer.Room(), kCapacity);
  writer.WriteLines(NumberedLine(0));
  EXPECT_GE(writer.Room(), kCapacity - 100);
  // Over half full (the pipe takes a page): pause, the caller's sources wait.
  for (int i = 1; i < 400; ++i) writer.WriteLines(NumberedLine(i));
  EXPECT_EQ(writer.stats().dropped_lines, 0u);
  EXPECT_EQ(writer.Room(), 0u);
  EXPECT_EQ(writer.Room(), 0u);
  // No progress for the stall timeout: read on (and drop what does not fit).
  clock.Advance(OutputWriter::kDefaultStallTimeout);
  EXPECT_EQ(writer.Room(), OutputWriter::kUnlimited);
  // The reader comes back: on_room once it is down to a quarter; it all
  // arrives, nothing was lost.
  pipe.StartReading();
  ASSERT_TRUE(writer.Flush(kTimeout));
  EXPECT_EQ(rooms.load(), 1);
  EXPECT_EQ(writer.Room(), kCapacity);
  EXPECT_EQ(writer.stats().written_bytes, 400u * 100);
  ASSERT_TRUE(pipe.WaitForText(NumberedLine(399), kTimeout));
}

TEST(OutputWriter, DropNotice_AtMostOncePerInterval) {
  SimulatedClock clock;
  TestPipe pipe;
  const size_t kCapacity = 8 * 1024;
  OutputWriter writer(pipe.write_fd(), SmallBuffer(kCapacity, &clock));
  // Episode 1: drops, then the reader catches up: one notice.
  for (int i = 0; i < 300; ++i) writer.WriteLines(NumberedLine(i));
  const OutputWriter::Stats first = writer.stats();
  ASSERT_GT(first.dropped_lines, 0u);
  pipe.StartReading();
  ASSERT_TRUE(writer.Flush(kTimeout));
  EXPECT_EQ(writer.stats().notices, 1u);

  // Episode 2, less than the interval later: drops are counted but not yet
  // reported, however long the reader keeps up.
  writer.WriteLines(std::string(2 * kCapacity, 'y'));  // one line, too long for the buffer
  ASSERT_TRUE(writer.Flush(kTimeout));
  for (int i = 0; i < 5; ++i) {
    writer.WriteLines("ok\n");
    ASSERT_TRUE(writer.Flush(kTimeout));
  }
  EXPECT_EQ(writer.stats().notices, 1u);
  EXPECT_EQ(writer.stats().dropped_lines, first.dropped_lines + 1);

  // After the interval, the next write brings the notice for episode 2 only.
  clock.Advance(OutputWriter::kDefaultNoticeInterval);
  writer.WriteLines("later\n");
  ASSERT_TRUE(writer.Flush(kTimeout));
  EXPECT_EQ(writer.stats().notices, 2u);
  const std::string second_notice = DropNotice("stdout", 2 * kCapacity + 1, 1);
  ASSERT_TRUE(pipe.WaitForText("later\n" + second_notice, kTimeout)) << pipe.Data();
}

TEST(OutputWriter, Close_WithStalledReader_ReturnsWithinTimeout) {
  TestPipe pipe;
  OutputWriter writer(pipe.write_fd(), SmallBuffer(64 * 1024));
  for (int i = 0; i < 1000; ++i) writer.WriteLines(NumberedLine(i));
  const absl::Time start = absl::Now();
  writer.Close(absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(150));
  EXPECT_LT(took, absl::Seconds(2));
  // What was never written is counted as dropped; what was, was whole lines.
  OutputWriter::Stats stats = writer.stats();
  EXPECT_EQ(stats.written_bytes + stats.dropped_bytes, 1000u * 100);
  EXPECT_EQ(stats.written_bytes % 100, 0u);
  writer.WriteLines("after close\n");  // dropped silently
  EXPECT_EQ(writer.stats().dropped_lines, stats.dropped_lines);
}

TEST(OutputWriter, Close_WritesWhatIsQueuedAndAFinalNotice) {
  SimulatedClock clock;  // never advances: only the final notice may come
  TestPipe pipe;
  OutputWriter writer(pipe.write_fd(), SmallBuffer(8 * 1024, &clock));
  writer.WriteLines(std::string(10000, 'z'));  // dropped
  pipe.StartReading();
  ASSERT_TRUE(writer.Flush(kTimeout));         // the first notice
  writer.WriteLines(std::string(10000, 'z'));  // dropped, within the interval
  writer.WriteLines("last\n");
  writer.Close();
  const std::string notice = DropNotice("stdout", 10001, 1);
  EXPECT_TRUE(pipe.WaitForText(notice + "last\n" + notice, kTimeout)) << pipe.Data();
  EXPECT_EQ(writer.stats().notices, 2u);
}

TEST(OutputWriter, LongLine_IsWrittenWhole) {
  CaptureFd out;
  OutputWriter writer(out.fd(), OutputWriter::Options());
  const std::string line = std::string(3 * PIPE_BUF + 7, 'l') + "\n";
  writer.WriteLines("short\n" + line + "short\n");
  ASSERT_TRUE(writer.Flush(kTimeout));
  EXPECT_EQ(out.Contents(), "short\n" + line + "short\n");
}

TEST(OutputWriter, TwoWritersOnOnePipe_NeverInterleaveWithinALine) {
  TestPipe pipe;
  pipe.StartReading();
  const int kLines = 3000;
  {
    OutputWriter a(pipe.write_fd(), OutputWriter::Options());
    OutputWriter b(pipe.write_fd(), OutputWriter::Options());
    std::thread other([&] {
      for (int i = 0; i < kLines; ++i) b.WriteLines("[b] " + NumberedLine(i, 60));
    });
    for (int i = 0; i < kLines; ++i) a.WriteLines("[a] " + NumberedLine(i, 77));
    other.join();
    ASSERT_TRUE(a.Flush(kTimeout));
    ASSERT_TRUE(b.Flush(kTimeout));
    EXPECT_EQ(a.stats().dropped_lines + b.stats().dropped_lines, 0u);
  }
  pipe.CloseWriteEnd();
  ASSERT_TRUE(pipe.WaitForText("[a] " + NumberedLine(kLines - 1, 77), kTimeout));
  ASSERT_TRUE(pipe.WaitForText("[b] " + NumberedLine(kLines - 1, 60), kTimeout));
  int next[2] = {0, 0};
  for (const std::string& line : Lines(pipe.Data())) {
    const int who = line.rfind("[a] ", 0) == 0 ? 0 : line.rfind("[b] ", 0) == 0 ? 1 : -1;
    ASSERT_NE(who, -1) << line;
    ASSERT_EQ(line + "\n",
              (who == 0 ? "[a] " : "[b] ") + NumberedLine(next[who]++, who == 0 ? 77 : 60));
  }
  EXPECT_EQ(next[0], kLines);
  EXPECT_EQ(next[1], kLines);
}

TEST(OutputWriter, BrokenPipe_DiscardsOutputWithoutDying) {
  // The agent ignores SIGPIPE (PrepareProcessForSupervision); so does this test.
  struct sigaction old_action, ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old_action);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);
  {
    OutputWriter writer(fds[1], OutputWriter::Options());
    writer.WriteLines("lost\n");
    EXPECT_TRUE(writer.Flush(kTimeout));
    writer.WriteLines("lost too\n");
    EXPECT_TRUE(writer.Flush(kTimeout));
    EXPECT_EQ(writer.stats().written_bytes, 0u);
  }
  close(fds[1]);
  sigaction(SIGPIPE, &old_action, nullptr);
}

}  // namespace output_writer_test
}  // namespace
}  // namespace launcher
}  // namespace trainlet
