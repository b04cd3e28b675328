#include "rendezvous/grpc_memory.h"

#include <malloc.h>
#include <stdlib.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace trainlet::rendezvous {
namespace {

constexpr char kReadChunks[] = "tcp_read_chunks";

}  // namespace

std::string GrpcExperimentsWithoutReadChunks(const std::optional<std::string>& user_value) {
  std::vector<std::string> experiments;
  if (user_value.has_value()) {
    for (absl::string_view e : absl::StrSplit(*user_value, ',', absl::SkipWhitespace())) {
      e = absl::StripAsciiWhitespace(e);
      // The user's own word on this experiment (on or off) wins.
      if (e == kReadChunks || e == absl::StrCat("-", kReadChunks)) return *user_value;
      experiments.emplace_back(e);
    }
  }
  experiments.push_back(absl::StrCat("-", kReadChunks));
  return absl::StrJoin(experiments, ",");
}

void DisableGrpcReadChunks() {
  const char* current = getenv("GRPC_EXPERIMENTS");
  const std::string value = GrpcExperimentsWithoutReadChunks(
      current == nullptr ? std::nullopt : std::optional<std::string>(current));
  setenv("GRPC_EXPERIMENTS", value.c_str(), 1);
}

MemoryTrimmer::MemoryTrimmer(Clock* clock, std::function<void()> trim)
    : clock_(clock), trim_(trim ? std::move(trim) : [] { malloc_trim(0); }) {}

void MemoryTrimmer::RoundAnswered() {
  absl::MutexLock lock(&mu_);
  if (!soon_.has_value()) soon_ = clock_->Now() + kSettle;
}

void MemoryTrimmer::StreamsReleased(absl::Duration connections_close_after) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  soon_ = std::max(soon_.value_or(absl::InfinitePast()), now + kSettle);
  late_ = now + connections_close_after;
}

bool MemoryTrimmer::MaybeTrim() {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    const bool soon = soon_.has_value() && now >= *soon_;
    const bool late = late_.has_value() && now >= *late_;
    if (!soon && !late) return false;
    if (last_trim_.has_value() && now - *last_trim_ < kMinInterval) return false;
    // What is asked from here on asks for the next trim.
    if (soon) soon_.reset();
    if (late) late_.reset();
    last_trim_ = now;
  }
  const absl::Time start = absl::Now();
  trim_();
  if (GetLogLevel() <= LogLevel::kDebug) {
    const struct mallinfo2 heap = mallinfo2();
    TLOG(kDebug) << "gave the heap's free pages back to the kernel (malloc_trim) in "
                 << absl::FormatDuration(absl::Now() - start) << "; heap in use "
                 << (heap.uordblks + heap.hblkhd) / 1024 << " KiB, free in it "
                 << heap.fordblks / 1024 << " KiB";
  }
  return true;
}

}  // namespace trainlet::rendezvous
