// Structured fuzz target for the rendezvous core (rendezvous/coordinator.h):
// the input is a program of Join / CancelJoin / Watch / WatchClosed / Report /
// Leave / Tick calls on one Coordinator with a SimulatedClock. Each request
// is parsed from fuzz bytes (ParseFromArray), then, by a flag byte, some of
// its identity fields are pinned to a small set (5 node ids, 3 incarnations,
// the job id, current rounds) so that programs reach deep states.
//
// Invariants, after every call: the round number never decreases; a running
// round has min..max nodes; there are no more joiners or streams than node ids
// that asked to join; a finished job stays finished. Every JoinDone runs at
// most once, and (after the final Shutdown) exactly once; an assignment is
// within the job's size; no directive is sent on a stream after its last
// directive.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/protocol_version.h"

namespace v1 = trainlet::v1;
using trainlet::fuzz::FuzzInput;
using trainlet::rendezvous::Coordinator;
using trainlet::rendezvous::Phase;

namespace {

constexpr const char* kJob = "fuzz-job";
const char* const kNodes[] = {"n0", "n1", "n2", "n3", "n4"};

struct Sink : trainlet::rendezvous::DirectiveSink {
  bool ended = false;
  void Send(const v1::Directive&, bool last) override {
    FUZZ_CHECK(!ended, "a directive after the stream ended");
    ended = last;
  }
  void Close(const absl::Status&) override { ended = true; }
};

// A request parsed from fuzz bytes, with member / job id / round pinned to
// the small sets when the flag byte says so.
template <typename Request>
Request Make(FuzzInput& in, uint64_t round) {
  Request r;
  std::string raw = in.String(48);
  if (!r.ParseFromArray(raw.data(), static_cast<int>(raw.size()))) r.Clear();
  const uint8_t pin = in.Byte();
  if (pin & 1) r.mutable_member()->set_node_id(kNodes[in.Pick(5)]);
  if (pin & 2) r.mutable_member()->set_incarnation(1 + in.Pick(3));
  if (pin & 4) r.set_job_id(kJob);
  if constexpr (std::is_same_v<Request, v1::JoinRequest>) {
    if (pin & 8) {
      r.set_local_world_size(1 + in.Pick(2));
      r.set_master_port(29500);
      r.set_rank_hint(static_cast<int>(in.Pick(6)) - 1);
    }
    // Mostly this build's protocol (else every join stops at the version).
    if (!(pin & 16)) r.set_protocol_version(trainlet::rendezvous::kProtocolVersion);
  } else if constexpr (!std::is_same_v<Request, v1::LeaveRequest>) {
    if (pin & 8) r.set_round(round + in.Pick(2));
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Quiet: rejected requests are the common case here.
  static const bool quiet = (trainlet::SetLogLevel(trainlet::LogLevel::kError),
                             google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  FuzzInput in(data, size);
  trainlet::SimulatedClock clock;
  trainlet::rendezvous::CoordinatorOptions options;
  options.job_id = kJob;
  options.min_nodes = 1 + in.Pick(3);
  options.max_nodes = options.min_nodes + in.Pick(3);
  options.max_restarts = in.Pick(3);
  options.last_call = absl::Milliseconds(100 * in.Pick(10));
  options.heartbeat_timeout = absl::Seconds(1 + in.Pick(5));
  options.min_nodes_timeout = absl::Seconds(10 + in.Pick(60));
  options.incarnation = 0xf00d;
  options.clock = &clock;
  Coordinator coordinator(options);

  std::vector<std::shared_ptr<int>> done_calls;
  std::vector<uint64_t> tickets, watches;
  std::set<std::string> node_ids;  // every node id that ever asked to join
  Coordinator::Snapshot last = coordinator.GetSnapshot();
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    switch (in.Pick(8)) {
      case 0: {
        auto calls = std::make_shared<int>(0);
        done_calls.push_back(calls);
        const int max_nodes = options.max_nodes;
        auto done = [calls, max_nodes](absl::StatusOr<v1::Assignment> a) {
          FUZZ_CHECK(++*calls == 1, "JoinDone ran twice");
          if (!a.ok()) return;
          FUZZ_CHECK(a->round() >= 1 && a->nnodes() >= 1 && a->nnodes() <= max_nodes,
                     a->DebugString());
          FUZZ_CHECK(a->node_rank() >= 0 && a->node_rank() < a->nnodes(), a->DebugString());
          FUZZ_CHECK(a->restart_count() >= 0, a->DebugString());
          FUZZ_CHECK(
              a->self().first_global_rank() + a->self().local_world_size() <= a->world_size(),
              a->DebugString());
        };
        const char* peers[] = {"10.0.0.1", "", "[::1]", "bad\nname"};
        v1::JoinRequest request = Make<v1::JoinRequest>(in, last.round);
        node_ids.insert(request.member().node_id());
        const char* peer = peers[in.Pick(4)];
        // No deadline, or one that Tick reaches (answered DEADLINE_EXCEEDED).
        const absl::Time deadline =
            in.Pick(2) == 0 ? absl::InfiniteFuture() : clock.Now() + absl::Seconds(in.Byte());
        tickets.push_back(coordinator.Join(request, peer, deadline, done));
        break;
      }
      case 1:
        if (!tickets.empty()) coordinator.CancelJoin(tickets[in.Pick(tickets.size())]);
        break;
      case 2: {
        auto id =
            coordinator.Watch(Make<v1::WatchRequest>(in, last.round), std::make_shared<Sink>());
        if (id.ok()) watches.push_back(*id);
        break;
      }
      case 3:
        if (!watches.empty()) coordinator.WatchClosed(watches[in.Pick(watches.size())]);
        break;
      case 4:
        (void)coordinator.Report(Make<v1::ReportRequest>(in, last.round));
        break;
      case 5:
        (void)coordinator.Leave(Make<v1::LeaveRequest>(in, last.round));
        break;
      case 6:
        clock.Advance(absl::Milliseconds(50 * in.Byte()));
        coordinator.Tick();
        break;
      default:
        clock.Advance(absl::Seconds(in.Byte()));
        coordinator.Tick();
    }
    const Coordinator::Snapshot now = coordinator.GetSnapshot();
    FUZZ_CHECK(now.round >= last.round, "round went backwards");
    FUZZ_CHECK(now.members <= options.max_nodes, "more members than max nodes");
    FUZZ_CHECK(now.phase != Phase::kRunning || now.members >= options.min_nodes,
               "running with fewer than min nodes");
    FUZZ_CHECK(now.gathering <= static_cast<int>(node_ids.size()), "phantom joiners");
    FUZZ_CHECK(now.watching <= static_cast<int>(node_ids.size()), "phantom streams");
    const bool was_over = last.phase == Phase::kSucceeded || last.phase == Phase::kFailed;
    FUZZ_CHECK(!was_over || now.phase == last.phase, "a finished job changed phase");
    last = now;
  }
  coordinator.Shutdown("fuzz input done");
  for (const auto& calls : done_calls) FUZZ_CHECK(*calls == 1, "a JoinDone never ran");
  return 0;
}
