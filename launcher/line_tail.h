// LineTail: the last lines a process wrote, kept for diagnostics (a hung
// worker's evidence, progress/hang_evidence.h). Bounded: at most kMaxLines
// lines of at most kMaxLineBytes each (longer ones are cut, marked with
// "..."); a partial line per stream is held until its newline, and counts
// as a line when read. Bytes are kept as written: escape them before logging.
//
// Threading: not thread-safe; the Supervisor feeds it from its own thread.
#ifndef TRAINLET_LAUNCHER_LINE_TAIL_H_
#define TRAINLET_LAUNCHER_LINE_TAIL_H_

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainlet {
namespace launcher {

class LineTail {
 public:
  static constexpr size_t kMaxLines = 64;
  static constexpr size_t kMaxLineBytes = 256;
  // Streams of one process (stdout, stderr): partial lines are per stream.
  static constexpr int kStreams = 2;

  // Adds bytes read from `stream` (0 or 1).
  void Append(int stream, absl::string_view data);

  // The kept lines, oldest first, then each stream's partial line.
  std::vector<std::string> Lines() const;

 private:
  void Push(std::string line);

  std::deque<std::string> lines_;
  std::string partial_[kStreams];
  bool partial_cut_[kStreams] = {false, false};
};

}  // namespace launcher
}  // namespace trainlet

#endif  // TRAINLET_LAUNCHER_LINE_TAIL_H_
