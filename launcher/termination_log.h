// The termination message: why this pod's entrypoint exited, in one line,
// where Kubernetes shows it (`kubectl describe pod`: the container's
// "Message:"). The kubelet reads the file at the container's
// terminationMessagePath (default /dev/termination-log, a file it mounts for
// each container start) when the container ends, and keeps at most 4096 bytes
// of it (less when a pod has many containers: 12 KiB in all).
//
// `trainlet run`, `mpi-launcher`, `mpi-worker`, `coordinator` and
// `controller` write it as they exit (cmd/main.cc); the short-lived
// commands (`probe`, `status`, `health`, `install`) never do, so that one run
// with `kubectl exec` cannot replace the entrypoint's message. A message a
// worker wrote itself during the run is kept. docs/kubernetes.md is the user
// copy.
//
// Thread-compatible; SetTerminationReason/TerminationReason are thread-safe.
#ifndef TRAINLET_LAUNCHER_TERMINATION_LOG_H_
#define TRAINLET_LAUNCHER_TERMINATION_LOG_H_

#include <sys/types.h>

#include <cstddef>
#include <ctime>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainlet::launcher {

// A path, "none" (no message at all), or unset/empty: kDefaultTerminationLog.
inline constexpr char kTerminationLogVariable[] = "TRAINLET_TERMINATION_LOG";
inline constexpr char kDefaultTerminationLog[] = "/dev/termination-log";
// What the kubelet keeps of one container's message.
inline constexpr size_t kMaxTerminationMessageBytes = 4096;

// "exit code 75 on node pod-0: job failed: worker rank 3 ... on node pod-1
// exited with code 3": the code, this node (when known), and the reason;
// for a reason-less signal code (128+N) the signal's name. One line ending
// in '\n', every byte that is not printable ASCII escaped (SafeForLog), at
// most `max_bytes` bytes in all (the reason is cut first, saying how much).
std::string TerminationMessage(int exit_code, absl::string_view node, absl::string_view reason,
                               size_t max_bytes = kMaxTerminationMessageBytes);

// The outcome the command decided (RunAgent's exit line), for the message;
// without one, main uses the last ERROR line (LastErrorMessage()).
void SetTerminationReason(absl::string_view reason);
std::string TerminationReason();

class TerminationLog {
 public:
  // From `env`: TRAINLET_TERMINATION_LOG, else kDefaultTerminationLog. Notes
  // the file's state now (size and modification time), so that Write() can
  // tell whether someone else (a worker) wrote it meanwhile.
  static TerminationLog FromEnv(const std::map<std::string, std::string>& env);
  // The same for a path ("" or "none": off); `create`: make the file when it
  // is missing (a path the user named), else only write one that exists (the
  // kubelet's).
  TerminationLog(std::string path, bool create);

  // Writes `message` (TerminationMessage()) over the file's content. OK and
  // nothing written when off, or when the file changed since construction
  // and is not empty (a worker's own message, kept); NotFound when the
  // default file does not exist (outside Kubernetes); FailedPrecondition
  // when it is not a regular file (never opened: a FIFO, a device), or
  // holds more than kMaxTerminationMessageBytes (no message is that long:
  // somebody's data, kept); the errno's status when it cannot be opened or
  // written (a read-only mount: not writable). Never blocks on a FIFO.
  absl::Status Write(absl::string_view message) const;

  const std::string& path() const { return path_; }
  bool explicit_path() const { return create_; }

 private:
  std::string path_;  // empty: off.
  bool create_ = false;
  bool existed_ = false;  // at construction
  off_t size_ = 0;
  timespec mtime_{};
};

}  // namespace trainlet::launcher

#endif  // TRAINLET_LAUNCHER_TERMINATION_LOG_H_
