// Turns a byte stream from one worker pipe into whole lines, each prefixed
// (e.g. "[rank 3] "), and hands them to an OutputWriter, which writes them
// without ever blocking the caller and never splits a line.
//
// With an empty prefix (OutputMode::kRelay) the bytes pass unchanged: no
// newline is ever added (not to a cut long line, not at the end), and a
// partial line is handed on at Flush(), which the Supervisor calls once it
// has read the pipe empty, so a progress bar redrawn with '\r' and no '\n'
// shows as soon as the worker wrote it, as it would written directly.
// Whole lines still go out whole, so ranks' lines never mix mid-line.
//
// Threading: not thread-safe; the Supervisor owns one per process stream and
// drives it from its own thread.
#ifndef TRAINLET_LAUNCHER_OUTPUT_PREFIXER_H_
#define TRAINLET_LAUNCHER_OUTPUT_PREFIXER_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "launcher/output_writer.h"

namespace trainlet {
namespace launcher {

class OutputPrefixer {
 public:
  // A line longer than this is written out (with a newline added) as soon as
  // it reaches this size, so a worker that never prints '\n' cannot make the
  // agent buffer without bound.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // Does not own `out`, which must outlive this object.
  OutputPrefixer(std::string prefix, OutputWriter* out);

  // Writes every complete line in `data` (plus any buffered start of the
  // first one); keeps the trailing partial line.
  void Append(absl::string_view data);
  // Unchanged (empty prefix) only: writes the buffered partial line as it
  // is. A no-op with a prefix, which ends every line it writes.
  void Flush();
  // End of stream: writes the buffered partial line, adding the newline
  // (with a prefix; unchanged without).
  void Finish();

  size_t buffered_bytes() const { return partial_.size(); }

 private:
  void EmitLine(absl::string_view line, std::string* out) const;
  // The partial line, as it is (unchanged mode).
  void EmitPartial();

  const std::string prefix_;
  OutputWriter* const out_;
  std::string partial_;
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_OUTPUT_PREFIXER_H_
