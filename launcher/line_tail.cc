#include "launcher/line_tail.h"

#include <algorithm>
#include <utility>

namespace trainlet {
namespace launcher {

void LineTail::Append(int stream, absl::string_view data) {
  if (stream < 0 || stream >= kStreams) return;
  std::string& partial = partial_[stream];
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    const absl::string_view piece = data.substr(0, newline);
    // Only the first kMaxLineBytes of a line are kept; the rest is skipped.
    if (!partial_cut_[stream]) {
      const size_t room = kMaxLineBytes - partial.size();
      partial.append(piece.data(), std::min(room, piece.size()));
      if (piece.size() > room) partial_cut_[stream] = true;
    }
    if (newline == absl::string_view::npos) return;
    if (partial_cut_[stream]) partial += "...";
    Push(std::move(partial));
    partial.clear();
    partial_cut_[stream] = false;
    data.remove_prefix(newline + 1);
  }
}

void LineTail::Push(std::string line) {
  lines_.push_back(std::move(line));
  while (lines_.size() > kMaxLines) lines_.pop_front();
}

std::vector<std::string> LineTail::Lines() const {
  std::vector<std::string> out(lines_.begin(), lines_.end());
  for (int s = 0; s < kStreams; ++s) {
    if (!partial_[s].empty()) out.push_back(partial_[s] + (partial_cut_[s] ? "..." : ""));
  }
  if (out.size() > kMaxLines) out.erase(out.begin(), out.end() - kMaxLines);
  return out;
}

}  // namespace launcher
}  // namespace trainlet
