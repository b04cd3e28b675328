#include "controller/testing/sample_snapshot.h"

#include <cmath>

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
  n0.incarnation = 0x1a2b3c4d00000000;
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
  n0.progress.local_rank = 0;
  n0.progress.age_ms = 400;
  n0.progress.fields = {{"loss", "0.31"}, {"lr", "3e-4"}};
  n0.gpus = {{0, "GPU-8f6c2a4e-0000-0000-0000-000000000000", GpuStatus::kHealthy, ""},
             {1, "GPU-8f6c2a4e-0000-0000-0000-000000000001", GpuStatus::kHealthy, ""}};

  // Its preflight of round 3 passed (a check it cannot make is skipped).
  n0.preflight.known = true;
  n0.preflight.round = 3;
  n0.preflight.started_unix_ms = 1795435150000;
  n0.preflight.duration_ms = 118;
  n0.preflight.checks = {
      {"gpu_ecc", CheckOutcome::kPass, "no uncorrectable ECC errors on 2 GPUs", 0, "count", 0},
      {"shm_size", CheckOutcome::kPass, "/dev/shm has 64 GiB", 68719476736.0, "bytes", 1073741824},
      {"dns", CheckOutcome::kPass, "3 names resolve", 3, "count", 0},
      {"path_round_trip", CheckOutcome::kSkipped, "no --preflight-path", 0, "", 0}};
  n0.preflight.links = {{"demo-node-1", 1.25e9, 0.00012, ""}};

  NodeView n1 = n0;
  n1.node_id = "demo-node-1";
  n1.node_rank = 1;
  n1.incarnation = 0x0000004200000000;
  n1.report_age_ms = 1500;
  n1.report_lag_ms = 40;
  n1.workers = {{0, 2, 5200, WorkerState::kRunning, 0, 0}, {1, 3, 0, WorkerState::kHung, 137, 1}};
  n1.progress.step = 1195 + tick * 5;
  n1.progress.local_rank = 1;
  n1.progress.age_ms = 2100;
  n1.progress.fields = {{"loss", "0.32"}};
  n1.gpus = {{0, "GPU-1", GpuStatus::kDegraded, "2 correctable ECC errors"},
             {1, "GPU-2", GpuStatus::kFatal, "uncorrectable ECC error (Xid 48)"}};
  // Its preflight failed two checks.
  n1.preflight.checks = {
      {"gpu_ecc", CheckOutcome::kFail, "GPU 1 (GPU-2) has 1 uncorrectable ECC error", 1, "count",
       0},
      {"shm_size", CheckOutcome::kPass, "/dev/shm has 64 GiB", 68719476736.0, "bytes", 1073741824},
      {"dns", CheckOutcome::kFail,
       "1 of 3 names do not resolve: demo-node-2 (Domain name not found)", 1, "count", 0},
      {"path_round_trip", CheckOutcome::kSkipped, "no --preflight-path", 0, "", 0}};
  n1.preflight.links = {{"demo-node-2", 0, 0, "connect to 10.0.0.3:29510: refused"}};

  NodeView n2;
  n2.node_id = "demo-node-2";
  n2.node_rank = 2;
  n2.incarnation = 0xffffffff00000000;
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
  // Lost in round 1: its last state, greyed, counted nowhere.
  NodeView n3;
  n3.node_id = "demo-node-3";
  n3.node_rank = 3;
  n3.incarnation = 0x0000003300000000;
  n3.lost = true;
  n3.lost_at_unix_ms = 1795431600000 + 600000;
  n3.lost_reason = "stream broken";
  n3.report_age_ms = 3000000 + tick * 1000;
  n3.agent_state = AgentState::kRunning;
  n3.round = 1;
  n3.workers = {{0, 6, 7100, WorkerState::kRunning, 0, 0},
                {1, 7, 7101, WorkerState::kRunning, 0, 0}};
  n3.progress.known = true;
  n3.progress.step = 300;
  n3.progress.age_ms = 3000000;
  // A lost node's failed preflight is its last state: no bad node of the job.
  n3.preflight.known = true;
  n3.preflight.round = 1;
  n3.preflight.checks = {
      {"memlock", CheckOutcome::kFail, "RLIMIT_MEMLOCK is 64 KiB", 65536, "bytes", 0}};
  demo.nodes.push_back(n3);
  demo.started_unix_ms = 1795431600000;  // 11:00:00Z
  demo.command = "python train.py --epochs 10";
  demo.slow_nodes.push_back(
      {"demo-node-2", "cpu",
       "node demo-node-2 is slow (cpu): its workers waited for a CPU 48% of the last 30s, the "
       "job's median 2%; the job runs about 88% slower for it; since 11:58:10",
       1795435090000, 88});
  demo.min_nodes = 2;
  demo.max_nodes = 4;
  demo.root_cause = {true,
                     "worker-hung",
                     "demo-node-1",
                     3,
                     1,
                     -1,
                     1795435150000,
                     2,
                     "rank 3 on demo-node-1 hung: no progress for 60s"};
  demo.hangs[0].suspect = true;
  demo.hangs[0].seq = 5;
  demo.hangs[0].evidence_bytes = 3000;
  RoundView r1{1, 1795431600000, 1795435100000, 4, 8, "", {}};
  r1.ended_by = {true,
                 "worker-failed",
                 "demo-node-2",
                 4,
                 0,
                 1,
                 1795435100000,
                 1,
                 "rank 4 on demo-node-2 exited with code 1"};
  RoundView r2{2, 1795435100000, 1795435150000, 3, 6, "worker 0 (rank 4) exited with code 1", {}};
  r2.ended_by = demo.root_cause;
  RoundView r3{3, 1795435150000, 0, 3, 6, "worker 1 (rank 3) hung: no progress for 60s", {}};
  // What the restarts cost (docs/goodput.md): the same numbers as the job's.
  r2.restart = {true, 1795435098000, 2000,          9000, 0, 21000, 18000, 1080, 1040,
                40,   true,          "demo-node-2", 4};
  r3.restart = {true, 1795435090000, 60000,         11000, 0, 24000, 0, 1150, -1,
                -1,   false,         "demo-node-1", 3};
  demo.rounds_timeline = {r1, r2, r3};
  for (RestartView& restart : demo.restarts) {
    for (const RoundView& r : demo.rounds_timeline) {
      if (r.round == restart.round) restart.times = r.restart;
    }
  }
  // 11:00:00Z to now (12:00:00Z at tick 0), partitioned.
  demo.goodput.known = true;
  demo.goodput.ms = {3415000 + tick * 1000, 40000, 0, 62000, 20000, 45000, 18000};
  demo.goodput.wall_ms = 0;
  for (int64_t ms : demo.goodput.ms) demo.goodput.wall_ms += ms;
  demo.goodput.ettr = static_cast<double>(demo.goodput.ms[kPhaseProductive]) /
                      static_cast<double>(demo.goodput.wall_ms);
  demo.goodput.phase = "rewarm";
  demo.goodput.phase_since_unix_ms = 1795435171000;
  demo.series.keys = {"loss"};
  demo.series.every_ms = 5000;
  for (int i = 0; i < 24; ++i) {
    SeriesPointView p;
    p.at_unix_ms = s.now_unix_ms - (23 - i) * 5000;
    p.step = 1085 + i * 5 + tick * 5;
    p.steps_per_second = i == 0 ? -1 : 1.0 + (i % 5) * 0.25;
    p.values = {i == 7 ? NAN : 2.0 / (1 + i + tick)};
    demo.series.points.push_back(p);
  }

  // Finished an hour ago: collapsed on the page, no progress age.
  JobView done;
  done.job_id = "done";
  done.state = JobState::kSucceeded;
  done.round = 1;
  done.rounds = 1;
  done.nnodes = 1;
  done.world_size = 1;
  done.started_unix_ms = 1795428000000;  // 10:00:00Z
  done.ended_unix_ms = 1795431540000;    // 10:59:00Z
  done.last_report_unix_ms = done.ended_unix_ms;
  done.command = "python eval.py";
  NodeView d0;
  d0.node_id = "done-0";
  d0.node_rank = 0;
  d0.incarnation = 0x000000d000000000;
  d0.report_age_ms = 3660000 + tick * 1000;
  d0.agent_state = AgentState::kDone;
  d0.round = 1;
  d0.exit_code = 0;
  d0.workers = {{0, 0, 0, WorkerState::kSucceeded, 0, 0}};
  d0.progress.known = true;
  d0.progress.step = 500;
  d0.progress.age_ms = 3670000 + tick * 1000;
  done.nodes = {d0};

  // Waiting for a second node after a restart.
  JobView wait;
  wait.job_id = "wait";
  wait.state = JobState::kActive;
  wait.round = 2;
  wait.rounds = 2;
  wait.started_unix_ms = 1795435080000;
  wait.min_nodes = 2;
  wait.max_nodes = 2;
  wait.waiting = {true, 1, 2, 2, s.now_unix_ms + 290000, 2};
  NodeView w0;
  w0.node_id = "wait-0";
  w0.node_rank = 0;
  w0.incarnation = 0x0000007700000000;
  w0.up = true;
  w0.report_age_ms = 1000;
  w0.agent_state = AgentState::kJoining;
  w0.round = 2;
  wait.nodes = {w0};

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
  on.incarnation = 0x0000000700000000;
  on.up = false;
  on.report_age_ms = 20000;
  on.agent_state = AgentState::kJoining;
  on.last_failure = "line1\nline2\ttab \"quoted\" \\ back";
  // A check name that is no label (an agent that breaks the caps) and a
  // reason with markup: text everywhere, and no series.
  on.preflight.known = true;
  on.preflight.round = 1;
  on.preflight.checks = {
      {"Bad Name\"}", CheckOutcome::kFail, "<img src=x onerror=alert(2)>", 0, "", 0}};
  odd.nodes = {on};
  s.jobs = {demo, done, odd, wait};
  for (JobView& job : s.jobs) {
    job.totals = TotalsOf(job);
    job.nodes_total = static_cast<int64_t>(job.nodes.size());
  }
  return s;
}

}  // namespace trainlet::controller::testing
