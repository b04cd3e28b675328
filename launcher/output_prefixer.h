// Turns a byte stream from one worker pipe into whole lines, each prefixed
// (e.g. "[rank 3] "), written to an output fd with one write(2) per batch of
// lines so that lines of different workers never interleave mid-line.
//
// Threading: not thread-safe; the Supervisor owns one per worker stream and
// drives it from its own thread.
#ifndef TRAINLET_LAUNCHER_OUTPUT_PREFIXER_H_
#define TRAINLET_LAUNCHER_OUTPUT_PREFIXER_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace trainlet {
namespace launcher {

class OutputPrefixer {
 public:
  // A line longer than this is written out (with a newline added) as soon as
  // it reaches this size, so a worker that never prints '\n' cannot make the
  // agent buffer without bound.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // Does not own `out_fd`.
  OutputPrefixer(std::string prefix, int out_fd);

  // Writes every complete line in `data` (plus any buffered start of the
  // first one); keeps the trailing partial line.
  void Append(absl::string_view data);
  // End of stream: writes the buffered partial line, adding the newline.
  void Finish();

  size_t buffered_bytes() const { return partial_.size(); }

 private:
  void EmitLine(absl::string_view line, std::string* out) const;

  const std::string prefix_;
  const int out_fd_;
  std::string partial_;
};

// Writes all of `data` to `fd`, retrying on EINTR, short writes and EAGAIN
// (waiting for POLLOUT). Returns false if the fd is broken (e.g. EPIPE); the
// output is then dropped, since a worker must not die of the agent's stdout.
bool WriteFully(int fd, absl::string_view data);

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_OUTPUT_PREFIXER_H_
