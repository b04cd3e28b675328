#include "rendezvous/grpc_memory.h"

#include <stdlib.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

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

}  // namespace trainlet::rendezvous
