// Every node check of a round, in one call, for the agent: the GPU health
// checks, /dev/shm and memlock, DNS, --preflight-path and the clock offset
// (each in its own header), with the two that wait on the outside world
// (DNS, the path) run side by side, each bounded by io_timeout. The rest are
// pure and take microseconds, so a healthy node's checks take about as long
// as its slowest DNS answer or fsync.
//
// Also the report around the results and the one summary line each node
// logs.
//
// Thread-compatible: one NodeChecker per agent, Run from one thread at a
// time. It keeps a BoundedRunner per blocking check across rounds, so that a
// hung filesystem or resolver costs one stuck thread, not one a round.
#ifndef TRAINLET_PREFLIGHT_NODE_CHECKS_H_
#define TRAINLET_PREFLIGHT_NODE_CHECKS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "preflight/bounded.h"
#include "preflight/clock_offset.h"
#include "preflight/dns.h"
#include "preflight/gpu_checks.h"
#include "preflight/host_checks.h"
#include "preflight/path_check.h"
#include "trainlet/v1/preflight.pb.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::preflight {

struct NodeCheckConfig {
  GpuThresholds gpu;
  HostThresholds host;
  std::string path;  // --preflight-path; "" for none.
  PathThresholds path_thresholds;
  absl::Duration max_clock_offset = absl::Seconds(1);
  absl::Duration io_timeout = absl::Seconds(2);  // DNS, and the path check.
};

struct NodeCheckInputs {
  GpuInputs gpus;                  // GpuInputsFromProbe(the node's probe).
  v1::NodeProbe host;              // shm_bytes, memlock_bytes, nics (the probe, or ReadHostLimits).
  std::vector<std::string> names;  // to resolve: the master, the members this node talks to.
  std::optional<ClockSample> clock;  // the last timed exchange with the coordinator.
};

class NodeChecker {
 public:
  // `node_id` names the path check's probe file; `resolver` answers DNS
  // (MakeAresResolver() in production).
  NodeChecker(NodeCheckConfig config, std::string node_id, std::shared_ptr<Resolver> resolver);

  // Every check, in a fixed order (docs/preflight.md), each with its micros.
  std::vector<v1::CheckResult> Run(const NodeCheckInputs& inputs);

 private:
  const NodeCheckConfig config_;
  const std::string node_id_;
  const std::shared_ptr<Resolver> resolver_;
  BoundedRunner dns_runner_;
  BoundedRunner path_runner_;
};

// A report for the coordinator: the results and links, cut to the caps
// (kMaxResults, kMaxLinks), and when and how long.
v1::PreflightReport MakeReport(const std::string& node_id, uint64_t incarnation, uint64_t round,
                               std::vector<v1::CheckResult> results,
                               std::vector<v1::LinkResult> links, absl::Time started,
                               absl::Duration took);

// The node's one log line for a round: "preflight round 3: 9 passed, 1
// failed, 3 skipped in 4.2ms; FAILED dns: 1 of 3 names do not resolve: ...".
std::string SummaryLine(const v1::PreflightReport& report);

}  // namespace trainlet::preflight

#endif  // TRAINLET_PREFLIGHT_NODE_CHECKS_H_
