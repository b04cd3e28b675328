// Turns a byte stream from one worker pipe into whole lines, each prefixed
// (e.g. "[rank 3] "), and hands them to an OutputWriter, which writes them
// without ever blocking the caller and never splits a line.
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
  // End of stream: writes the buffered partial line, adding the newline.
  void Finish();

  size_t buffered_bytes() const { return partial_.size(); }

 private:
  void EmitLine(absl::string_view line, std::string* out) const;

  const std::string prefix_;
  OutputWriter* const out_;
  std::string partial_;
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_OUTPUT_PREFIXER_H_
