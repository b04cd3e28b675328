#include "controller/testing/sample_snapshot.h"

namespace trainlet::controller::testing {

ControllerSnapshot SampleSnapshot(int64_t tick) {
  ControllerSnapshot s;
  // 2026-11-23T12:00:00Z, then one second a tick.
  s.now_unix_ms = 1795435200000 + tick * 1000;
  s.uptime_ms = 3723000 + tick * 1000;
  s.reports_received = 1234 + tick * 3;
  s.reports_rejected = 2;
  s.version = "0.1.0";

  JobView demo;
  demo.job_id = "demo";
  demo.state = JobState::kActive;
  demo.round = 3;
  demo.rounds = 3;
  demo.nnodes = 3;
  demo.world_size = 6;
  demo.last_report_unix_ms = s.now_unix_ms - 800;
  demo.restarts_total = 2;
  demo.hangs_total = 1;
  demo.failures_total = 1;

  NodeView n0;
  n0.node_id = "demo-node-0";
  n0.node_rank = 0;
  n0.incarnation = 0x1a2b3c4d5e6f7081;
  n0.up = true;
  n0.report_age_ms = 800;
  n0.report_lag_ms = 12;
  n0.agent_state = AgentState::kRunning;
  n0.round = 3;
  n0.restart_count = 2;
  n0.agent_rss_bytes = 9 << 20;
  n0.workers = {{0, 0, 4100, WorkerState::kRunning, 0, 1},
                {1, 1, 4101, WorkerState::kRunning, 0, 1}};
  n0.progress.known = true;
  n0.progress.step = 1200 + tick * 5;
  n0.progress.steps_per_second = 5;
  n0.progress.age_ms = 400;
  n0.progress.fields = {{"loss", "0.31"}, {"lr", "3e-4"}};
  n0.gpus = {{0, "GPU-8f6c2a4e-0000-0000-0000-000000000000", GpuStatus::kHealthy, ""},
             {1, "GPU-8f6c2a4e-0000-0000-0000-000000000001", GpuStatus::kHealthy, ""}};

  NodeView n1 = n0;
  n1.node_id = "demo-node-1";
  n1.node_rank = 1;
  n1.incarnation = 0x0000000000000042;
  n1.report_age_ms = 1500;
  n1.report_lag_ms = 40;
  n1.workers = {{0, 2, 5200, WorkerState::kRunning, 0, 0}, {1, 3, 0, WorkerState::kHung, 137, 1}};
  n1.progress.step = 1195 + tick * 5;
  n1.progress.age_ms = 2100;
  n1.progress.fields = {{"loss", "0.32"}};
  n1.gpus = {{0, "GPU-1", GpuStatus::kDegraded, "2 correctable ECC errors"},
             {1, "GPU-2", GpuStatus::kFatal, "uncorrectable ECC error (Xid 48)"}};

  NodeView n2;
  n2.node_id = "demo-node-2";
  n2.node_rank = 2;
  n2.incarnation = 0xffffffffffffffff;
  n2.up = false;
  n2.report_age_ms = 65000 + tick * 1000;
  n2.report_lag_ms = -1;
  n2.agent_state = AgentState::kStopping;
  n2.round = 2;
  n2.last_failure = "worker 0 (rank 4) exited with code 1";
  n2.workers = {{0, 4, 0, WorkerState::kFailed, 1, 0}, {1, 5, 0, WorkerState::kStopped, 143, 0}};
  demo.nodes = {n0, n1, n2};
  demo.restarts = {
      {2, 1795435100000, "demo-node-2", "worker 0 (rank 4) exited with code 1"},
      {3, 1795435150000, "demo-node-1", "worker 1 (rank 3) hung: no progress for 60s"}};
  demo.hangs = {{3, 1795435150000, "demo-node-1", "hung: no progress for 60s",
                 "thread 5201 state D wchan futex_wait_queue; last line: step=1100"}};
  demo.lost_nodes = {"demo-node-3"};

  // Names from the network, with every character that needs escaping.
  JobView odd;
  odd.job_id = "odd\"job\\<b>&\n";
  odd.state = JobState::kStale;
  odd.round = 1;
  odd.rounds = 1;
  odd.nnodes = 1;
  odd.world_size = 1;
  NodeView on;
  on.node_id = "n\xff\x01<script>alert(1)</script>";
  on.node_rank = 0;
  on.incarnation = 7;
  on.up = false;
  on.report_age_ms = 20000;
  on.agent_state = AgentState::kJoining;
  on.last_failure = "line1\nline2\ttab \"quoted\" \\ back";
  odd.nodes = {on};
  s.jobs = {demo, odd};
  return s;
}

}  // namespace trainlet::controller::testing
