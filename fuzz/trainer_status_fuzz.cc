// Fuzz target: what Kubeflow Trainer's progress reads from outside
// (kubeflow/): the pod's KUBEFLOW_TRAINER_SERVER_URL (EndpointFromEnv), the
// status server's answer (ParseHttpAnswer), and the workers' progress lines,
// each line of the input one line, through the estimate to the request
// body. An endpoint keeps the documented shape (a valid host, a port, a
// path of printable ASCII from '/'); the body is valid JSON within
// Trainer's bounds (percentage 0-100, remaining >= 0, 1-64-byte metrics).
#include <string>

#include "absl/strings/numbers.h"
#include "common/host_names.h"
#include "fuzz/fuzz_util.h"
#include "kubeflow/https_post.h"
#include "kubeflow/trainer_status.h"
#include "progress/progress.h"

namespace kubeflow = trainlet::kubeflow;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trainlet::fuzz::AsText(data, size));
  auto endpoint =
      kubeflow::EndpointFromEnv({{kubeflow::kServerUrlEnv, text}, {kubeflow::kTokenEnv, "/token"}});
  if (endpoint.ok() && endpoint->has_value()) {
    const kubeflow::HttpsTarget& t = (*endpoint)->target;
    FUZZ_CHECK(trainlet::IsValidHost(t.host), text);
    FUZZ_CHECK(t.port >= 1 && t.port <= 65535, text);
    FUZZ_CHECK(!t.path.empty() && t.path[0] == '/' && t.path.size() <= 2048, text);
    for (char c : t.path) FUZZ_CHECK(c > 0x20 && c < 0x7f, text);
  }
  auto answer = kubeflow::ParseHttpAnswer(text);
  if (answer.ok()) FUZZ_CHECK(answer->status >= 100 && answer->status <= 599, text);

  kubeflow::ProgressEstimate estimate;
  absl::Time at = absl::FromUnixSeconds(1000);
  for (const std::string& line : trainlet::fuzz::SplitLines(text)) {
    if (auto parsed = trainlet::agent::ParseProgressTail(line, /*from_start=*/true)) {
      estimate.Observe(parsed->fields, at);
    }
    at += absl::Milliseconds(700);
  }
  for (bool finished : {false, true}) {
    auto s = estimate.Status(at, absl::FromUnixSeconds(1737628245), finished);
    if (!s.has_value()) continue;
    if (s->progress_percentage) {
      FUZZ_CHECK(*s->progress_percentage >= 0 && *s->progress_percentage <= 100, text);
    }
    if (s->estimated_remaining_seconds) FUZZ_CHECK(*s->estimated_remaining_seconds >= 0, text);
    FUZZ_CHECK(s->metrics.size() <= kubeflow::kMaxMetrics, text);
    for (const auto& [name, value] : s->metrics) {
      FUZZ_CHECK(!name.empty() && name.size() <= 64 && !value.empty() && value.size() <= 64, text);
    }
    const std::string body = kubeflow::TrainerStatusJson(*s);
    FUZZ_CHECK(trainlet::fuzz::JsonChecker::Valid(body), body);
  }
  return 0;
}
