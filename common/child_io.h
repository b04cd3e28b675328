// What a process that runs a helper child of its own, outside the agent's
// Supervisor, needs to read its output and reap it (topology/nvml_reader.cc,
// preflight/gpu_loopback.cc): an owned descriptor, one bounded read, and
// reaping that survives the Supervisor's waitpid(-1) taking the child first.
//
// Thread-compatible; the reaping functions may run on any thread.
#ifndef TRAINLET_COMMON_CHILD_IO_H_
#define TRAINLET_COMMON_CHILD_IO_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

namespace trainlet {

// A descriptor closed when it goes.
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~OwnedFd() { Reset(); }
  int get() const { return fd_; }
  void Reset(int fd = -1);

 private:
  int fd_;
};

// One read(2) of at most 64 KiB from `fd` appended to *into, or only its
// last `keep_tail` bytes kept when keep_tail > 0. Closes *fd at EOF or an
// error other than EINTR; returns the bytes read.
size_t ReadSomeInto(OwnedFd* fd, std::string* into, size_t keep_tail = 0);

// How a child ended.
struct ChildEnd {
  bool reaped = false;        // ended: reaped by us (status known) or by another reaper
  bool status_known = false;  // the wait status is ours to read
  int status = 0;
};

// True once the child has ended. In the agent the Supervisor reaps every
// child with waitpid(-1) (launcher/supervisor.cc) and may take ours first:
// the child is then gone and its exit status unknown (ECHILD), and what it
// wrote alone decides.
bool TryReapChild(pid_t pid, ChildEnd* end);

// Reaps the child by `until`: woken by its pidfd (-1: none; then polling,
// since SIGCHLD belongs to the agent's Supervisor, a signalfd, not to this
// thread). False when it still runs then.
bool ReapChildBy(pid_t pid, int pidfd, std::chrono::steady_clock::time_point until, ChildEnd* end);

// A child that would not die by its deadline (stuck in the kernel,
// uninterruptible sleep in a driver): a detached thread reaps it once it
// does, so that it does not stay a zombie.
void ReapChildLater(pid_t pid);

// Milliseconds from now until `until` for poll(2), rounded up; 0 when past.
int MillisecondsUntil(std::chrono::steady_clock::time_point until);

// What a helper child wrote on its three pipes.
struct ChildOutput {
  std::string exec_report;  // what its pre-exec side wrote (errno bytes when exec failed)
  std::string out;          // its answer, at most max_out bytes and one read more
  std::string tail;         // the last tail_bytes of its other output
  bool timed_out = false;   // the deadline came first (or poll failed)
  bool oversize = false;    // `out` grew past max_out: read no more
};
// Reads the three pipes (any may be closed already) until each is at EOF,
// `deadline` passes, or `out` exceeds max_out bytes.
ChildOutput ReadChildOutput(OwnedFd exec_report, OwnedFd out, OwnedFd tail,
                            std::chrono::steady_clock::time_point deadline, size_t max_out,
                            size_t tail_bytes);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_CHILD_IO_H_
