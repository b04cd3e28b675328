#include "launcher/output_prefixer.h"

#include <algorithm>
#include <utility>

namespace trainlet {
namespace launcher {

OutputPrefixer::OutputPrefixer(std::string prefix, OutputWriter* out)
    : prefix_(std::move(prefix)), out_(out) {}

void OutputPrefixer::EmitLine(absl::string_view line, std::string* out) const {
  out->append(prefix_);
  out->append(line.data(), line.size());
  out->push_back('\n');
}

void OutputPrefixer::EmitPartial() {
  if (partial_.empty()) return;
  out_->WriteUnchanged(partial_);
  partial_.clear();
}

void OutputPrefixer::Append(absl::string_view data) {
  if (prefix_.empty()) {
    // Unchanged: the whole lines as they came, in one piece.
    const size_t last_newline = data.rfind('\n');
    if (last_newline != absl::string_view::npos) {
      if (partial_.empty()) {
        out_->WriteUnchanged(data.substr(0, last_newline + 1));
      } else {
        partial_.append(data.data(), last_newline + 1);
        EmitPartial();
      }
      data.remove_prefix(last_newline + 1);
    }
    while (!data.empty()) {  // a long line is cut where it reaches the bound
      const size_t take = std::min(data.size(), kMaxLineBytes - partial_.size());
      partial_.append(data.data(), take);
      data.remove_prefix(take);
      if (partial_.size() >= kMaxLineBytes) EmitPartial();
    }
    return;
  }
  std::string out;
  while (!data.empty()) {
    size_t newline = data.find('\n');
    size_t line_len = newline == absl::string_view::npos ? data.size() : newline;
    size_t take = std::min(line_len, kMaxLineBytes - partial_.size());
    partial_.append(data.data(), take);
    data.remove_prefix(take);
    if (take < line_len) {
      // Longer than kMaxLineBytes: cut here, the rest follows as a new line.
      EmitLine(partial_, &out);
      partial_.clear();
      continue;
    }
    if (newline == absl::string_view::npos) break;
    data.remove_prefix(1);
    EmitLine(partial_, &out);
    partial_.clear();
  }
  if (!out.empty()) out_->WriteLines(out);
}

void OutputPrefixer::Flush() {
  if (prefix_.empty()) EmitPartial();
}

void OutputPrefixer::Finish() {
  if (prefix_.empty()) {
    EmitPartial();
    return;
  }
  if (partial_.empty()) return;
  std::string out;
  EmitLine(partial_, &out);
  partial_.clear();
  out_->WriteLines(out);
}

}  // namespace launcher
}  // namespace trainlet
