// The agent's round, driven through its seams: the real executor and state
// machine with a scripted worker group, a scripted rendezvous client and a
// simulated clock. Every scenario runs on the test thread; time only moves
// when the agent waits with nothing to do.
#include "agent/agent.h"

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/testing/fake_worker_group.h"
#include "progress/testing/fake_slow_sampler.h"
#include "rendezvous/error_reason.h"
#include "rendezvous/liveness_datagram.h"
#include "rendezvous/testing/fake_rendezvous_client.h"

namespace trainlet::agent {
namespace {

using launcher::testing::FakeWorkerGroup;
using rendezvous::testing::FakeRendezvousClient;
using rendezvous::testing::MakeAssignment;
using rendezvous::testing::MakeDirective;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kHeartbeat = absl::Milliseconds(500);  // timeout 5 s.
constexpr const char* AgentTest_kUdpKey = "0123456789abcdef";   // UdpAssignment's key

class AgentTest : public ::testing::Test {
 protected:
  AgentTest() : workers_(&clock_) {
    config_.node_id = "node-1";
    config_.job_id = "job";
    config_.command = {"train"};
    config_.nproc_per_node = 2;
    config_.nnodes = {2, 2};
    config_.grace_period = absl::Seconds(30);
    config_.join_timeout = absl::Minutes(10);  // a RunConfig has no defaults of its own
  }

  RoundOptions Options() {
    RoundOptions o = RoundOptionsFrom(config_, /*incarnation=*/0x1234, /*master_port=*/29500);
    o.verdict_timeout = absl::Seconds(10);
    o.quiet_when_acked = quiet_when_acked_;
    return o;
  }
  bool quiet_when_acked_ = true;

  // Answers every join with round `round` of a 2-node job, this node rank 1.
  void JoinAnswers(std::vector<v1::Assignment> answers) {
    answers_ = std::move(answers);
    client_.on_join =
        [this](const v1::JoinRequest&) -> std::optional<absl::StatusOr<v1::Assignment>> {
      if (next_answer_ >= answers_.size()) return std::nullopt;  // pending
      return answers_[next_answer_++];
    };
  }

  int Run() {
    AgentSeams seams;
    seams.workers = &workers_;
    seams.client = &client_;
    seams.clock = &clock_;
    seams.set_serving = [this](bool on) { serving_.push_back(on); };
    seams.progress = progress_;
    seams.output_progress = output_progress_;
    seams.reporter = reporter_;
    seams.slow = slow_;
    seams.proc_root = "/nonexistent/proc";  // the fake's pids are not this host's
    seams.node_health = node_health_;
    seams.idle_with_workers = [this] { idle_with_workers_at_.push_back(workers_.starts.size()); };
    agent_ = std::make_unique<Agent>(config_, std::map<std::string, std::string>{{"PATH", "/bin"}},
                                     Options(), seams);
    return agent_->Run();
  }
  // A UDP liveness assignment: T = 5 s, slot 3, key kUdpKey.
  static constexpr const char* kUdpKey = AgentTest_kUdpKey;
  static v1::Assignment UdpAssignment(absl::Duration interval) {
    v1::Assignment a = MakeAssignment(1, 1, 2, 2, interval);
    a.set_heartbeat_timeout_ms(5000);
    a.set_liveness_udp_port(29400);
    a.set_liveness_slot(3);
    a.set_liveness_key(kUdpKey);
    return a;
  }
  // Runs the agent on `a` until about `run_for` of simulated time, answering
  // every Report with udp_heard = heard(time since the start); returns when
  // each RUNNING Report went (from the start) and the exit code in *code.
  std::vector<absl::Duration> RunRecordingReports(const v1::Assignment& a, absl::Duration run_for,
                                                  std::function<bool(absl::Duration)> heard,
                                                  int* code) {
    JoinAnswers({a});
    const absl::Time start = clock_.Now();
    std::vector<absl::Duration> reports;
    bool finishing = false;
    client_.report_response = [&](const v1::ReportRequest&) {
      v1::ReportResponse r;
      r.set_udp_heard(heard(clock_.Now() - start));
      return r;
    };
    client_.on_report = [&](const v1::ReportRequest& r) {
      if (r.state() != v1::ReportRequest::RUNNING) return;
      reports.push_back(clock_.Now() - start);
      if (clock_.Now() - start >= run_for && !finishing) {
        finishing = true;
        WhenIdle([&] {
          workers_.ExitAll(0);
          WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
        });
      }
    };
    *code = Run();
    return reports;
  }

  // Runs `fn` the next time the agent is idle (one per idle wait, in order).
  void WhenIdle(std::function<void()> fn) {
    pending_.push_back(std::move(fn));
    workers_.on_idle = [this] {
      if (pending_.empty()) return;
      auto fn = std::move(pending_.front());
      pending_.erase(pending_.begin());
      fn();
    };
  }

  // The coordinator goes silent once the workers run: every heartbeat times
  // out and the directive stream breaks. Runs the agent; returns its exit
  // code and, in *silent_for, how long after the break it gave up.
  int RunWithCoordinatorSilent(absl::Duration* silent_for) {
    client_.report_status = [](const v1::ReportRequest&) {
      return absl::DeadlineExceededError("Deadline Exceeded");
    };
    absl::Time broke;
    workers_.on_start = [&](const auto&) {
      WhenIdle([&] {
        broke = clock_.Now();
        client_.EndStream(absl::UnavailableError("Socket closed"));
      });
    };
    const int code = Run();
    *silent_for = clock_.Now() - broke;
    workers_.on_start = nullptr;  // it refers to `broke`
    return code;
  }

  v1::Directive JobFinished(uint64_t round) {
    v1::Directive d = MakeDirective(round);
    d.mutable_job_finished();
    return d;
  }
  v1::Directive JobFailed(uint64_t round, bool exhausted = false) {
    v1::Directive d = MakeDirective(round);
    d.mutable_job_failed()->set_reason("worker rank 0 on node node-0 exited with code 3");
    d.mutable_job_failed()->set_restarts_exhausted(exhausted);
    return d;
  }
  v1::Directive Rejoin(uint64_t round, const std::string& reason) {
    v1::Directive d = MakeDirective(round);
    d.mutable_rejoin()->set_next_round(round + 1);
    d.mutable_rejoin()->set_reason(reason);
    return d;
  }

  SimulatedClock clock_;
  FakeWorkerGroup workers_;
  FakeRendezvousClient client_;
  RunConfig config_;
  std::unique_ptr<Agent> agent_;
  std::vector<bool> serving_;
  std::vector<v1::Assignment> answers_;
  size_t next_answer_ = 0;
  std::vector<std::function<void()>> pending_;
  ProgressDir* progress_ = nullptr;
  OutputProgress* output_progress_ = nullptr;
  StatusReporter* reporter_ = nullptr;
  SlowSignalsSampler* slow_ = nullptr;
  std::function<std::vector<std::string>()> node_health_;
  // How many starts the workers had seen at each idle_with_workers call.
  std::vector<size_t> idle_with_workers_at_;
};

TEST_F(AgentTest, Success_ReportsAndWaitsForTheVerdict) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { workers_.ExitAll(0); };
  WhenIdle([&] { EXPECT_TRUE(client_.SendDirective(JobFinished(1))); });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 1u);
  const auto& specs = workers_.starts[0];
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].global_rank, 3);
  EXPECT_THAT(specs[1].env, ::testing::Contains("RANK=3"));
  EXPECT_THAT(specs[1].env, ::testing::Contains("MASTER_ADDR=node-0.example"));
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::SUCCEEDED), 1);
  EXPECT_TRUE(client_.leaves().empty());
  EXPECT_TRUE(workers_.signals_sent.empty());
  EXPECT_THAT(serving_, ElementsAre(true, false));
  EXPECT_EQ(agent_->status().state, RoundState::kDone);
  EXPECT_EQ(agent_->status().exit_code, 0);
}

TEST_F(AgentTest, JoinRequest_CarriesIdentityAndRoundHistory) {
  config_.node_rank_hint = 1;
  config_.advertise_addr = "10.0.0.2";
  JoinAnswers({MakeAssignment(4, 1, 2, 2, kHeartbeat, /*restart_count=*/2),
               MakeAssignment(5, 1, 2, 2, kHeartbeat, 3)});
  workers_.on_start = [&](const auto&) {
    if (workers_.starts.size() == 1) {
      WhenIdle([&] { client_.SendDirective(Rejoin(4, "scale-up: node node-2 joined")); });
    } else {
      workers_.ExitAll(0);
      WhenIdle([&] { client_.SendDirective(JobFinished(5)); });
    }
  };
  EXPECT_EQ(Run(), 0);
  const auto joins = client_.joins();
  ASSERT_EQ(joins.size(), 2u);
  EXPECT_EQ(joins[0].member().node_id(), "node-1");
  EXPECT_EQ(joins[0].member().incarnation(), 0x1234u);
  EXPECT_EQ(joins[0].rank_hint(), 1);
  EXPECT_EQ(joins[0].advertise_addr(), "10.0.0.2");
  EXPECT_EQ(joins[0].local_world_size(), 2);
  EXPECT_EQ(joins[0].last_round(), 0u);
  // The re-join carries the round and restart count it saw.
  EXPECT_EQ(joins[1].last_round(), 4u);
  EXPECT_EQ(joins[1].restart_count(), 2);
  EXPECT_EQ(joins[1].member().incarnation(), 0x1234u);
}

TEST_F(AgentTest, NodeProbe_GoesInTheJoinAndPlacesTheWorkers) {
  auto probe = std::make_shared<v1::NodeProbe>();
  probe->mutable_nvml()->set_status(v1::Source::OK);
  probe->set_boot_id("3f1c2a4e-1b2c-4d5e-8f90-123456789abc");
  probe->set_ipc_namespace("ipc:[4026531839]");
  probe->set_visible_gpu_count(2);
  for (int i = 0; i < 2; ++i) {
    v1::Gpu* g = probe->add_gpus();
    g->set_uuid(absl::StrCat("GPU-", i));
    g->set_visible(true);
    g->set_visible_ordinal(i);
    g->set_numa_node(i);
    v1::NumaNode* n = probe->add_numa_nodes();
    n->set_id(i);
    n->set_cpulist(absl::StrCat(i * 4, "-", i * 4 + 3));
  }
  config_.node_probe = probe;
  config_.bind_numa = true;
  config_.gpu_binding = GpuBinding::kSingle;
  v1::Assignment a = MakeAssignment(1, 1, 2, 2, kHeartbeat);
  a.mutable_self()->set_nccl_hostid("3f1c2a4e-1b2c-4d5e-8f90-123456789abc");
  JoinAnswers({a});
  workers_.on_start = [&](const auto&) {
    workers_.ExitAll(0);
    WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
  };
  EXPECT_EQ(Run(), 0);
  const auto joins = client_.joins();
  ASSERT_EQ(joins.size(), 1u);
  EXPECT_EQ(joins[0].topology().gpu_count(), 2);
  EXPECT_THAT(joins[0].topology().gpu_uuids(), ElementsAre("GPU-0", "GPU-1"));
  EXPECT_EQ(joins[0].topology().boot_id(), "3f1c2a4e-1b2c-4d5e-8f90-123456789abc");
  EXPECT_EQ(joins[0].topology().ipc_namespace(), "ipc:[4026531839]");
  ASSERT_EQ(workers_.starts.size(), 1u);
  const auto& w1 = workers_.starts[0][1];
  EXPECT_THAT(w1.env, ::testing::Contains("CUDA_VISIBLE_DEVICES=GPU-1"));
  EXPECT_THAT(w1.env, ::testing::Contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  EXPECT_THAT(w1.env, ::testing::Contains("NCCL_HOSTID=3f1c2a4e-1b2c-4d5e-8f90-123456789abc"));
  EXPECT_THAT(w1.env, ::testing::Contains("LOCAL_RANK=1"));
  EXPECT_THAT(w1.cpus, ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(w1.numa_node, 1);
  EXPECT_TRUE(std::is_sorted(w1.env.begin(), w1.env.end(), [](const auto& x, const auto& y) {
    return x.substr(0, x.find('=')) < y.substr(0, y.find('='));
  }));
}

TEST_F(AgentTest, NodeProbe_NeverOverridesWhatTheUserSet) {
  auto probe = std::make_shared<v1::NodeProbe>();
  probe->mutable_nvml()->set_status(v1::Source::OK);
  probe->set_visible_gpu_count(1);
  v1::Gpu* g = probe->add_gpus();
  g->set_visible(true);
  g->set_visible_ordinal(0);
  v1::Nic* ib = probe->add_nics();
  ib->set_name("mlx5_0");
  ib->set_kind(v1::Nic::INFINIBAND);
  v1::IbPort* port = ib->add_ports();
  port->set_port(1);
  port->set_state("ACTIVE");
  port->set_link_layer("InfiniBand");
  config_.node_probe = probe;
  config_.nccl_conf_vars = {{"NCCL_IB_HCA", "=mlx5_4"}};
  config_.nproc_per_node = 1;
  v1::Assignment a = MakeAssignment(1, 1, 2, 1, kHeartbeat);
  a.mutable_self()->set_nccl_hostid("machine");
  JoinAnswers({a});
  workers_.on_start = [&](const auto&) {
    workers_.ExitAll(0);
    WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
  };
  AgentSeams seams;
  seams.workers = &workers_;
  seams.client = &client_;
  seams.clock = &clock_;
  agent_ = std::make_unique<Agent>(
      config_,
      std::map<std::string, std::string>{{"PATH", "/bin"},
                                         {"NCCL_HOSTID", "mine"},
                                         {"CUDA_DEVICE_ORDER", "FASTEST_FIRST"},
                                         {"CUDA_VISIBLE_DEVICES", "0"}},
      Options(), seams);
  EXPECT_EQ(agent_->Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 1u);
  const auto& env = workers_.starts[0][0].env;
  EXPECT_THAT(env, ::testing::Contains("NCCL_HOSTID=mine"));
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("NCCL_IB_HCA=", 0) == 0; }),
            0)
      << "/etc/nccl.conf sets it";
  EXPECT_THAT(env, ::testing::Contains("CUDA_DEVICE_ORDER=FASTEST_FIRST"));
  EXPECT_THAT(env, ::testing::Contains("CUDA_VISIBLE_DEVICES=0"));
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("NCCL_HOSTID=", 0) == 0; }),
            1);
}

// Above the member-list limit the assignment has no node list, only this
// node's own entry: Paddle's current endpoint comes from it.
TEST(WorkerSpecsFor, PaddleCurrentEndpointFromTheOwnEntryWithoutTheMemberList) {
  RunConfig config;
  config.job_id = "big";
  config.command = {"python", "train.py"};
  v1::Assignment a = MakeAssignment(1, 300, 400, 2);
  a.clear_nodes();
  a.mutable_self()->set_addr("10.0.3.44");
  std::vector<launcher::ProcessSpec> specs = WorkerSpecsFor(config, {}, a, false);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_THAT(specs[1].env, ::testing::Contains("PADDLE_CURRENT_ENDPOINT=10.0.3.44:29502"));
  EXPECT_THAT(specs[1].env, ::testing::Contains("PADDLE_TRAINER_ID=601"));
  EXPECT_FALSE(std::any_of(specs[1].env.begin(), specs[1].env.end(), [](const std::string& kv) {
    return absl::StartsWith(kv, "PADDLE_TRAINER_ENDPOINTS=");
  }));
}

TEST_F(AgentTest, Rejoin_StopsWorkersThenStartsTheNewRoundWithItsEnvironment) {
  JoinAnswers({MakeAssignment(1, 1, 3, 2, kHeartbeat), MakeAssignment(2, 0, 2, 2, kHeartbeat, 1)});
  workers_.on_start = [&](const auto&) {
    if (workers_.starts.size() == 1) {
      WhenIdle(
          [&] { client_.SendDirective(Rejoin(1, "lost node node-0: its agent disconnected")); });
    } else {
      workers_.ExitAll(0);
      WhenIdle([&] { client_.SendDirective(JobFinished(2)); });
    }
  };
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
  EXPECT_THAT(workers_.starts[1][0].env, ::testing::Contains("WORLD_SIZE=4"));
  EXPECT_THAT(workers_.starts[1][0].env, ::testing::Contains("TORCHELASTIC_RESTART_COUNT=1"));
  EXPECT_EQ(agent_->status().round, 2u);
  EXPECT_EQ(agent_->status().restart_count, 1);
  // One stream per round; the old one was closed before the new round.
  const auto watches = client_.watches();
  ASSERT_EQ(watches.size(), 2u);
  EXPECT_EQ(watches[0].round(), 1u);
  EXPECT_EQ(watches[1].round(), 2u);
}

// --slow-nodes: the assignment's interval starts the sampler on the
// round's workers; each interval's signals go on a RUNNING Report of the
// round, with the steps the progress lines named; sampling stops with the
// round, and a new round samples its own workers.
class SlowSignalsTest : public AgentTest {
 protected:
  void SetUp() override {
    auto dir = ProgressDir::Create({}, {});
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
    progress_ = dir_.get();
    slow_ = &sampler_;
  }
  static v1::Assignment WithInterval(v1::Assignment a, int interval_ms) {
    a.set_slow_signals_interval_ms(interval_ms);
    return a;
  }
  // The Reports that carry SlowSignals.
  std::vector<v1::ReportRequest> SlowReports() const {
    std::vector<v1::ReportRequest> out;
    for (const v1::ReportRequest& r : client_.reports()) {
      if (r.has_slow()) out.push_back(r);
    }
    return out;
  }
  std::unique_ptr<ProgressDir> dir_;
  testing::FakeSlowSampler sampler_;
};

TEST_F(SlowSignalsTest, EachIntervalOnARunningReport_WithTheSteps_StoppedWithTheRound) {
  // Heartbeats an hour apart: every RUNNING Report here is the signals'.
  JoinAnswers({WithInterval(MakeAssignment(1, 1, 2, 2, absl::Hours(1)), 10000)});
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] { std::ofstream(progress_->ProgressFile(1)) << "step=42 loss=0.25\n"; });
  };
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.has_slow() && r.slow().seq() == 3) {
      WhenIdle([&] {
        workers_.ExitAll(0);
        WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
      });
    }
  };
  const absl::Time start = clock_.Now();
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(sampler_.starts.size(), 1u);
  EXPECT_THAT(sampler_.starts[0].workers, ElementsAre(4000, 4001)) << "the workers' pids";
  EXPECT_EQ(sampler_.starts[0].interval, absl::Seconds(10));
  EXPECT_THAT(sampler_.steps, ElementsAre(std::make_pair(1, int64_t{42})));
  const std::vector<v1::ReportRequest> slow = SlowReports();
  ASSERT_EQ(slow.size(), 3u);
  for (size_t i = 0; i < slow.size(); ++i) {
    EXPECT_EQ(slow[i].state(), v1::ReportRequest::RUNNING);
    EXPECT_EQ(slow[i].round(), 1u);
    EXPECT_EQ(slow[i].slow().seq(), i + 1);
    EXPECT_EQ(slow[i].slow().step(), 42);
  }
  EXPECT_GE(clock_.Now() - start, absl::Seconds(30)) << "one interval apart";
  EXPECT_EQ(sampler_.ends, 1) << "stopped with the round";
  EXPECT_EQ(sampler_.NextDeadline(), absl::InfiniteFuture());
}

TEST_F(SlowSignalsTest, IntervalZero_NothingSampledNorSent) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  int running = 0;
  client_.on_report = [&](const v1::ReportRequest& r) {
    // 30 s of heartbeats, then the end.
    if (r.state() == v1::ReportRequest::RUNNING && ++running == 60) {
      WhenIdle([&] {
        workers_.ExitAll(0);
        WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
      });
    }
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(running, 60);
  EXPECT_TRUE(sampler_.starts.empty());
  EXPECT_TRUE(SlowReports().empty());
}

TEST_F(SlowSignalsTest, ARejoin_SamplesTheNewRoundsWorkers_TooShortAnIntervalIsOneSecond) {
  JoinAnswers({WithInterval(MakeAssignment(1, 1, 3, 2, absl::Hours(1)), 10000),
               WithInterval(MakeAssignment(2, 0, 2, 1, absl::Hours(1), 1), 5)});
  workers_.on_start = [&](const auto&) {
    if (workers_.starts.size() == 1) {
      WhenIdle([&] { client_.SendDirective(Rejoin(1, "lost node node-0")); });
    }
  };
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.has_slow() && r.round() == 2) {
      WhenIdle([&] {
        workers_.ExitAll(0);
        WhenIdle([&] { client_.SendDirective(JobFinished(2)); });
      });
    }
  };
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(sampler_.starts.size(), 2u);
  EXPECT_EQ(sampler_.starts[1].interval, absl::Seconds(1));
  EXPECT_EQ(sampler_.starts[1].workers.size(), 1u) << "the new round's one worker";
  EXPECT_EQ(sampler_.ends, 2);
  ASSERT_FALSE(SlowReports().empty());
  for (const v1::ReportRequest& r : SlowReports()) {
    EXPECT_EQ(r.round(), 2u) << "no signals of round 1 (it stopped before an interval)";
    EXPECT_EQ(r.state(), v1::ReportRequest::RUNNING);
  }
}

// Re-join by datagram (docs/protocol.md, "Re-join on the stream"): a Rejoin
// that allows it keeps the stream; once the workers stopped, READY datagrams
// for the next round go out (every interval) instead of a Join call, and the
// assignment comes down the same stream.
class RejoinByDatagramTest : public AgentTest {
 protected:
  v1::Directive ReadyRejoin(uint64_t round) {
    v1::Directive d = Rejoin(round, "node node-0 lost");
    d.mutable_rejoin()->set_ready_by_datagram(true);
    return d;
  }
  static v1::Assignment Round(uint64_t round) {
    v1::Assignment a = UdpAssignment(absl::Milliseconds(470));
    a.set_round(round);
    a.set_node_rank(0);
    a.set_nnodes(2);
    a.set_world_size(4);
    a.set_restart_count(static_cast<int>(round) - 1);
    return a;
  }
  static v1::Directive Pushed(const v1::Assignment& a) {
    v1::Directive d = MakeDirective(a.round());
    *d.mutable_assignment() = a;
    return d;
  }
  // Round 1 runs until the coordinator restarts it with ReadyRejoin(1);
  // the next round's workers exit 0 and the job finishes in `final_round`.
  void RestartThenFinishIn(uint64_t final_round) {
    workers_.on_start = [this, final_round](const auto&) {
      if (workers_.starts.size() == 1) {
        WhenIdle([this] { client_.SendDirective(ReadyRejoin(1)); });
      } else {
        workers_.ExitAll(0);
        WhenIdle([this, final_round] { client_.SendDirective(JobFinished(final_round)); });
      }
    };
  }
  // Round 1 runs until ReadyRejoin(1), and nothing runs after it.
  void RestartOnce() {
    workers_.on_start = [this](const auto&) {
      WhenIdle([this] { client_.SendDirective(ReadyRejoin(1)); });
    };
  }
  // `fn` sees each READY the agent sends; what it returns comes back to the
  // agent (an ack, or nothing).
  using ReadyFn =
      std::function<std::optional<rendezvous::LivenessBytes>(const rendezvous::LivenessDatagram&)>;
  void OnReady(ReadyFn fn) {
    client_.on_datagram =
        [fn](const rendezvous::LivenessBytes& b) -> std::optional<rendezvous::LivenessBytes> {
      std::optional<rendezvous::LivenessDatagram> d =
          rendezvous::ParseLivenessDatagram(b.data(), b.size(), rendezvous::LivenessKind::kReady);
      if (!d.has_value()) return std::nullopt;
      return fn(*d);
    };
  }
  static rendezvous::LivenessBytes AckOf(const rendezvous::LivenessDatagram& d) {
    return rendezvous::EncodeLivenessDatagram(d.slot, d.incarnation, d.round, d.seq,
                                              *rendezvous::LivenessKeyFromBytes(kUdpKey),
                                              rendezvous::LivenessKind::kAck);
  }
  // The READY datagrams the agent sent.
  std::vector<rendezvous::LivenessDatagram> Readies() const {
    std::vector<rendezvous::LivenessDatagram> out;
    for (const rendezvous::LivenessBytes& b : client_.datagrams()) {
      std::optional<rendezvous::LivenessDatagram> d =
          rendezvous::ParseLivenessDatagram(b.data(), b.size(), rendezvous::LivenessKind::kReady);
      if (d.has_value()) out.push_back(*d);
    }
    return out;
  }
};

TEST_F(RejoinByDatagramTest, KeepsTheStream_SendsReady_TakesTheAssignmentFromTheStream) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  RestartThenFinishIn(2);
  // The coordinator answers the second READY (the first was "lost").
  int readies = 0;
  OnReady([&](const rendezvous::LivenessDatagram&) -> std::optional<rendezvous::LivenessBytes> {
    if (++readies == 2) WhenIdle([&] { client_.SendDirective(Pushed(Round(2))); });
    return std::nullopt;
  });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_THAT(workers_.starts[1][0].env, ::testing::Contains("WORLD_SIZE=4"));
  EXPECT_THAT(workers_.starts[1][0].env, ::testing::Contains("TORCHELASTIC_RESTART_COUNT=1"));
  EXPECT_EQ(agent_->status().round, 2u);
  EXPECT_EQ(client_.joins().size(), 1u) << "no Join call for round 2";
  EXPECT_EQ(client_.watches().size(), 1u) << "the stream of round 1 served round 2";
  EXPECT_TRUE(client_.watches()[0].accepts_assignment());
  const std::vector<rendezvous::LivenessDatagram> ready = Readies();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].round, 2u);
  EXPECT_EQ(ready[0].slot, 3u);
  EXPECT_EQ(ready[0].incarnation, 0x1234u);
  EXPECT_GT(ready[1].seq, ready[0].seq);
  EXPECT_TRUE(ready[0].MacValid(*rendezvous::LivenessKeyFromBytes(kUdpKey)));
  // Round 2's liveness datagrams follow, of round 2.
  std::optional<rendezvous::LivenessDatagram> last = rendezvous::ParseLivenessDatagram(
      client_.datagrams().back().data(), client_.datagrams().back().size());
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->round, 2u);
  EXPECT_GT(last->seq, ready[1].seq);
}

TEST_F(RejoinByDatagramTest, TheStreamEndsBeforeTheAssignment_FallsBackToAJoinCall) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470)), Round(2)});
  RestartThenFinishIn(2);
  OnReady([&](const rendezvous::LivenessDatagram&) -> std::optional<rendezvous::LivenessBytes> {
    WhenIdle([&] { client_.EndStream(absl::UnavailableError("Socket closed")); });
    return std::nullopt;
  });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 2u);
  ASSERT_EQ(client_.joins().size(), 2u);
  EXPECT_EQ(client_.joins()[1].last_round(), 1u);
  ASSERT_EQ(client_.watches().size(), 2u) << "a new stream for the round the Join answered";
  EXPECT_EQ(client_.watches()[1].round(), 2u);
  EXPECT_EQ(Readies().size(), 1u);
}

TEST_F(RejoinByDatagramTest, AVerdictInsteadOfTheAssignment_IsTakenInPlace_NoJoinCall) {
  // The job failed while the round gathered: the verdict on the kept stream
  // ends the agent with its code (a Join could find the coordinator gone).
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  RestartOnce();
  OnReady([&](const rendezvous::LivenessDatagram&) -> std::optional<rendezvous::LivenessBytes> {
    WhenIdle([&] { client_.SendDirective(JobFailed(1, /*exhausted=*/true)); });
    return std::nullopt;
  });
  EXPECT_EQ(Run(), kExitRestartsExhausted);
  EXPECT_EQ(client_.joins().size(), 1u);
}

TEST_F(RejoinByDatagramTest, TheVerdictWhileStillStopping_ReplacesTheRejoin) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  workers_.ignore_terminate = true;  // the workers take their time to stop
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] {
      client_.SendDirective(ReadyRejoin(1));
      WhenIdle([&] {
        client_.SendDirective(JobFailed(1));
        WhenIdle([&] { workers_.ExitAll(143); });
      });
    });
  };
  EXPECT_EQ(Run(), kExitPeerFailed);
  EXPECT_EQ(client_.joins().size(), 1u);
  EXPECT_TRUE(Readies().empty());
}

TEST_F(RejoinByDatagramTest, ReadiesNotAcked_FallBackToAJoinCall_TheStreamKeptUntilItsAnswer) {
  // Unacked: after kReadiesBeforeJoin READYs (UDP does not get through) the
  // Join call of before; the stream stays open until the answer's new one.
  JoinAnswers({UdpAssignment(absl::Milliseconds(470)), Round(2)});
  RestartThenFinishIn(2);
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(client_.joins().size(), 2u);
  EXPECT_EQ(Readies().size(), static_cast<size_t>(kReadiesBeforeJoin));
  ASSERT_EQ(client_.watches().size(), 2u);
  EXPECT_EQ(client_.watches()[1].round(), 2u);
}

TEST_F(RejoinByDatagramTest, AcksThatStop_FallBackToAJoinCall) {
  // The coordinator acked the first READY, then went quiet (its host gone
  // without closing the stream): after kReadiesBeforeJoin more, a Join call.
  JoinAnswers({UdpAssignment(absl::Milliseconds(470)), Round(2)});
  RestartThenFinishIn(2);
  int readies = 0;
  OnReady([&](const rendezvous::LivenessDatagram& d) -> std::optional<rendezvous::LivenessBytes> {
    if (++readies == 1) return AckOf(d);
    return std::nullopt;
  });
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(client_.joins().size(), 2u);
  EXPECT_EQ(Readies().size(), static_cast<size_t>(1 + kReadiesBeforeJoin));
}

TEST_F(RejoinByDatagramTest, AVerdictOnTheKeptStreamWhileTheFallbackJoinWaits_EndsIt) {
  // UDP does not get through: the Join call; before it is answered the job
  // fails and the verdict comes down the stream still open. The agent takes
  // it (the coordinator may be gone before the Join gets there).
  RestartOnce();
  int joins = 0;
  client_.on_join = [&](const v1::JoinRequest&) -> std::optional<absl::StatusOr<v1::Assignment>> {
    if (++joins == 1) return UdpAssignment(absl::Milliseconds(470));
    WhenIdle([&] { client_.SendDirective(JobFailed(1, /*exhausted=*/true)); });
    return std::nullopt;  // the fallback Join stays pending
  };
  EXPECT_EQ(Run(), kExitRestartsExhausted);
  EXPECT_EQ(client_.joins().size(), 2u);
  EXPECT_EQ(client_.cancel_joins(), 1);
}

TEST_F(RejoinByDatagramTest, AnAckedReady_WaitsForTheAssignmentWithoutAJoinCall) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  RestartThenFinishIn(2);
  // The coordinator acks every READY; the round closes after the tenth (a
  // slow survivor elsewhere).
  int readies = 0;
  OnReady([&](const rendezvous::LivenessDatagram& d) -> std::optional<rendezvous::LivenessBytes> {
    if (++readies == 10) WhenIdle([&] { client_.SendDirective(Pushed(Round(2))); });
    return AckOf(d);
  });
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(client_.joins().size(), 1u);
  EXPECT_EQ(Readies().size(), 10u);
  EXPECT_EQ(agent_->status().round, 2u);
}

TEST_F(RejoinByDatagramTest, ARestartBeforeTheAssignmentCame_ReJoinsTheNewerRound) {
  // Round 2 closed with this node and failed again before its assignment
  // was written: Rejoin(next 3) first, then the stale assignment of round 2.
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  RestartThenFinishIn(3);
  int readies = 0;
  OnReady([&](const rendezvous::LivenessDatagram& d) -> std::optional<rendezvous::LivenessBytes> {
    ++readies;
    if (d.round == 2 && readies == 1) {
      WhenIdle([&] {
        client_.SendDirective(ReadyRejoin(2));  // Rejoin(next 3), of round 2
        client_.SendDirective(Pushed(Round(2)));
      });
    } else if (d.round == 3) {
      WhenIdle([&] { client_.SendDirective(Pushed(Round(3))); });
    }
    return std::nullopt;
  });
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(client_.joins().size(), 1u);
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_EQ(agent_->status().round, 3u);
  EXPECT_EQ(Readies().back().round, 3u);
}

TEST_F(RejoinByDatagramTest, ASignalWhileReady_LeavesAndExits128PlusN) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  RestartOnce();
  OnReady([&](const rendezvous::LivenessDatagram&) -> std::optional<rendezvous::LivenessBytes> {
    WhenIdle([&] { workers_.Signal(SIGTERM); });
    return std::nullopt;
  });
  EXPECT_EQ(Run(), 128 + SIGTERM);
  ASSERT_EQ(client_.leaves().size(), 1u);
  EXPECT_EQ(client_.joins().size(), 1u);
}

// The Rejoin as a REJOIN datagram (docs/protocol.md, "Re-join on the
// stream"): what the coordinator sends a member whose Watch accepts it.
class RejoinDatagramTest : public RejoinByDatagramTest {
 protected:
  static rendezvous::LivenessBytes RejoinDatagram(uint64_t round, uint32_t slot = 3,
                                                  uint64_t incarnation = 0x1234,
                                                  const char* key = kUdpKey) {
    return rendezvous::EncodeLivenessDatagram(slot, incarnation, round, 0,
                                              *rendezvous::LivenessKeyFromBytes(key),
                                              rendezvous::LivenessKind::kRejoin);
  }
  static std::string DirectiveDatagram(const v1::Directive& d, const char* key = kUdpKey) {
    return *rendezvous::EncodeDirectiveDatagram(3, 0x1234, d.round(), d.SerializeAsString(),
                                                *rendezvous::LivenessKeyFromBytes(key));
  }
  // Round 1 runs until `restart` delivers the Rejoin by datagram at its
  // first idle; the READYs of round 2 get its assignment down the kept
  // stream; round 2's workers exit 0 and the job finishes.
  void RestartByDatagramThenFinish(std::function<void()> restart) {
    workers_.on_start = [this, restart](const auto&) {
      if (workers_.starts.size() == 1) {
        WhenIdle(restart);
      } else {
        workers_.ExitAll(0);
        WhenIdle([this] { client_.SendDirective(JobFinished(2)); });
      }
    };
    OnReady(
        [this](const rendezvous::LivenessDatagram& d) -> std::optional<rendezvous::LivenessBytes> {
          if (d.round == 2) WhenIdle([this] { client_.SendDirective(Pushed(Round(2))); });
          return std::nullopt;
        });
  }
  // Whether an alive datagram of `round` went out before the first READY:
  // the Rejoin confirmed at once (the workers still stop), so that the
  // coordinator sends it no more.
  bool ConfirmedBeforeReady(uint64_t round) const {
    for (const rendezvous::LivenessBytes& b : client_.datagrams()) {
      std::optional<rendezvous::LivenessDatagram> d =
          rendezvous::ParseAgentDatagram(b.data(), b.size());
      if (!d.has_value() || d->kind == rendezvous::LivenessKind::kReady) return false;
      if (d->round == round) return true;
    }
    return false;
  }
};

TEST_F(RejoinDatagramTest, IsTheRejoin_ReadyByDatagram_TheAssignmentFromTheKeptStream) {
  client_.liveness_fd_value = 77;
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  RestartByDatagramThenFinish([this] { client_.DeliverDatagram(RejoinDatagram(2)); });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_EQ(agent_->status().round, 2u);
  EXPECT_EQ(client_.joins().size(), 1u) << "no Join call for round 2";
  ASSERT_EQ(client_.watches().size(), 1u) << "the stream of round 1 served round 2";
  EXPECT_TRUE(client_.watches()[0].accepts_rejoin_datagram());
  ASSERT_FALSE(Readies().empty());
  EXPECT_EQ(Readies()[0].round, 2u);
  EXPECT_TRUE(ConfirmedBeforeReady(2));
  // The liveness socket is in the loop's poll (a REJOIN wakes it), and
  // out of it at the end.
  EXPECT_THAT(workers_.watched_fds, ::testing::Contains(std::make_pair(1, 77)));
  EXPECT_EQ(workers_.watched_fds.back(), std::make_pair(1, -1));
}

TEST_F(RejoinDatagramTest, AsADirectiveDatagram_ItsReasonIsLogged_AndItIsConfirmed) {
  // The coordinator sends the Rejoin itself, reason and all, to a Watch
  // that accepts_rejoin_directive: this node's log says why it restarts.
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  v1::Directive rejoin = ReadyRejoin(1);
  rejoin.mutable_rejoin()->set_reason(
      "node node-0 (rank 0) lost: its agent disconnected (watch stream closed) (restart 1 of 3)");
  RestartByDatagramThenFinish([&] {
    v1::Directive replay = rejoin;
    replay.mutable_rejoin()->set_next_round(1);  // not above its round: nothing
    client_.DeliverDirectiveDatagram(DirectiveDatagram(replay));
    client_.DeliverDirectiveDatagram(DirectiveDatagram(rejoin));
  });
  ::testing::internal::CaptureStderr();
  const int code = Run();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 0);
  EXPECT_THAT(log, HasSubstr("restart: node node-0 (rank 0) lost: its agent disconnected (watch "
                             "stream closed) (restart 1 of 3); re-joining for round 2"));
  EXPECT_THAT(log, Not(HasSubstr("told by a REJOIN datagram")));
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_EQ(client_.joins().size(), 1u) << "no Join call for round 2";
  ASSERT_FALSE(client_.watches().empty());
  EXPECT_TRUE(client_.watches()[0].accepts_rejoin_directive());
  EXPECT_TRUE(ConfirmedBeforeReady(2));
}

TEST_F(RejoinDatagramTest, NotItsOwn_OrNotNewer_IsIgnored) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  workers_.on_start = [this](const auto&) {
    WhenIdle([this] {
      client_.DeliverDatagram(RejoinDatagram(2, /*slot=*/4));            // another slot
      client_.DeliverDatagram(RejoinDatagram(2, 3, /*incarnation=*/7));  // another incarnation
      client_.DeliverDatagram(RejoinDatagram(2, 3, 0x1234, "fedcba9876543210"));  // forged
      client_.DeliverDatagram(RejoinDatagram(1));  // the round it is in (a replay)
      rendezvous::LivenessBytes ack = RejoinDatagram(2);
      ack[5] = static_cast<uint8_t>(rendezvous::LivenessKind::kAlive);  // not for an agent
      client_.DeliverDatagram(ack);
      WhenIdle([this] {
        workers_.ExitAll(0);
        WhenIdle([this] { client_.SendDirective(JobFinished(1)); });
      });
    });
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(workers_.starts.size(), 1u) << "never restarted";
  EXPECT_TRUE(Readies().empty());
  EXPECT_TRUE(workers_.signals_sent.empty()) << "never stopped";
}

TEST_F(RejoinDatagramTest, TheStreamsCopyOfTheRejoin_WhileReady_ChangesNothing) {
  // The confirmation was late: the coordinator also wrote the Rejoin down
  // the stream. The agent, READY already, keeps on; no Join call.
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  workers_.on_start = [this](const auto&) {
    if (workers_.starts.size() == 1) {
      WhenIdle([this] { client_.DeliverDatagram(RejoinDatagram(2)); });
    } else {
      workers_.ExitAll(0);
      WhenIdle([this] { client_.SendDirective(JobFinished(2)); });
    }
  };
  int readies = 0;
  OnReady([&](const rendezvous::LivenessDatagram& d) -> std::optional<rendezvous::LivenessBytes> {
    if (d.round != 2) return std::nullopt;
    if (++readies == 1) {
      WhenIdle([&] { client_.SendDirective(ReadyRejoin(1)); });
    } else if (readies == 2) {
      WhenIdle([&] { client_.SendDirective(Pushed(Round(2))); });
    }
    return std::nullopt;
  });
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(client_.joins().size(), 1u) << "no Join call";
  EXPECT_EQ(agent_->status().round, 2u);
}

TEST_F(RejoinDatagramTest, WhileReady_ANewerOne_RetargetsTheReadies) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  RestartThenFinishIn(3);  // the first restart on the stream
  int readies = 0;
  OnReady([&](const rendezvous::LivenessDatagram& d) -> std::optional<rendezvous::LivenessBytes> {
    ++readies;
    if (d.round == 2 && readies == 1) {
      WhenIdle([&] {
        client_.DeliverDatagram(RejoinDatagram(3));
        client_.DeliverDatagram(RejoinDatagram(2));  // a repeat of an older one: nothing
      });
    } else if (d.round == 3) {
      WhenIdle([&] { client_.SendDirective(Pushed(Round(3))); });
    }
    return std::nullopt;
  });
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(client_.joins().size(), 1u);
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_EQ(agent_->status().round, 3u);
  EXPECT_EQ(Readies().back().round, 3u);
}

TEST_F(AgentTest, WorkerFailure_ReportsStopsTheOthersAndExitsWithItsCode) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { workers_.Exit(1, 3); };
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::FAILED) {
      WhenIdle([&] { client_.SendDirective(JobFailed(1)); });
    }
  };
  EXPECT_EQ(Run(), 3);
  const auto reports = client_.reports();
  auto failed = std::find_if(reports.begin(), reports.end(),
                             [](const auto& r) { return r.state() == v1::ReportRequest::FAILED; });
  ASSERT_NE(failed, reports.end());
  EXPECT_EQ(failed->exit_code(), 3);
  EXPECT_EQ(failed->failed_local_rank(), 1);
  EXPECT_THAT(failed->message(), HasSubstr("rank 3"));
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
  EXPECT_THAT(agent_->status().last_failure, HasSubstr("worker rank 3"));
}

// Records what the executor hands the controller's reporter.
class RecordingReporter : public StatusReporter {
 public:
  struct Event {
    v1::ReportEvent::Kind kind;
    std::string cause;
    std::string evidence;
  };
  void Update(const AgentStatus&) override {}
  void AddEvent(v1::ReportEvent::Kind kind, std::string cause, std::string evidence) override {
    events.push_back({kind, std::move(cause), std::move(evidence)});
  }
  std::vector<Event> events;
};

// The executor's part of hang detection: the workers' environment, progress
// read from the real files, every worker's evidence taken and summarised for
// the coordinator, the suspect's kept for status() and reported first.
class HungWorkerTest : public AgentTest {
 protected:
  // Worker rank 3 (local 1) reports, then both workers go silent.
  void Start() {
    auto dir = ProgressDir::Create({}, {});
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
    progress_ = dir_.get();
    reporter_ = &reporter;
    config_.hang_timeout = absl::Seconds(10);
    config_.prefix_output = true;
    workers_.output_tail = {"loading batch 7"};
    JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
    workers_.on_start = [&](const std::vector<launcher::ProcessSpec>& specs) {
      ASSERT_EQ(specs.size(), 2u);
      for (const launcher::ProcessSpec& spec : specs) {
        EXPECT_THAT(spec.env,
                    ::testing::Contains(absl::StrCat("TRAINLET_PROGRESS_FILE=",
                                                     progress_->ProgressFile(spec.local_rank))));
        EXPECT_THAT(spec.env,
                    ::testing::Contains(absl::StrCat("TRAINLET_TRACEBACK_FILE=",
                                                     progress_->TracebackFile(spec.local_rank))));
      }
      WhenIdle([&] {
        std::ofstream(progress_->ProgressFile(1)) << "step=41\nstep=42 loss=0.25\n";
        reported_at = clock_.Now();
      });
    };
  }
  // The Reports that carry a HangReport.
  std::vector<v1::ReportRequest> HangReports() const {
    std::vector<v1::ReportRequest> out;
    for (const v1::ReportRequest& r : client_.reports()) {
      if (r.has_hang()) out.push_back(r);
    }
    return out;
  }
  std::unique_ptr<ProgressDir> dir_;
  RecordingReporter reporter;
  absl::Time reported_at;
};

TEST_F(HungWorkerTest, EveryWorkersEvidence_TheCoordinatorsVerdict_TheSuspectsNodeExits80) {
  Start();
  absl::Time declared_at;
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.hang().declared() && declared_at == absl::Time()) declared_at = clock_.Now();
    if (!r.hang().collected()) return;
    WhenIdle([&] {
      v1::Directive d = MakeDirective(1);
      d.mutable_job_failed()->set_reason("hang: suspect rank 3 on node-1 (the oldest progress)");
      v1::HangVerdict* v = d.mutable_job_failed()->mutable_hang();
      v->set_suspect_node_id("node-1");
      v->set_suspect_rank(3);
      v->set_suspect_local_rank(1);
      v->set_summary("suspect rank 3 on node-1 (the oldest progress)");
      client_.SendDirective(d);
    });
  };
  EXPECT_EQ(Run(), kExitWorkerHung);
  // Read on the next turn of the loop after the write, declared 10 s later
  // (the fake advances time by whole waits: at most one heartbeat late).
  EXPECT_GE(declared_at - reported_at, absl::Seconds(10));
  EXPECT_LE(declared_at - reported_at, absl::Seconds(10) + kHeartbeat);
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::FAILED), 0) << "the coordinator judged";
  const std::vector<v1::ReportRequest> hang = HangReports();
  ASSERT_GE(hang.size(), 2u);
  EXPECT_TRUE(hang[0].hang().declared());
  EXPECT_EQ(hang[0].hang().declared_local_rank(), 1);
  EXPECT_FALSE(hang[0].hang().collected());
  const v1::HangReport& collected = hang[1].hang();
  EXPECT_TRUE(collected.collected());
  ASSERT_EQ(collected.workers_size(), 2);
  EXPECT_EQ(collected.workers(0).progress_age_ms(), -1) << "rank 2 never reported";
  EXPECT_EQ(collected.workers(1).step(), 42);
  EXPECT_GE(collected.workers(1).progress_age_ms(), 10000);
  EXPECT_EQ(collected.workers(1).stack(), v1::WorkerEvidence::STACK_UNKNOWN) << "not opted in";

  const AgentStatus status = agent_->status();
  EXPECT_EQ(status.hangs, 1);
  ASSERT_EQ(status.progress.size(), 1u);
  EXPECT_EQ(status.progress[0].global_rank, 3);
  EXPECT_EQ(status.progress[0].line, "step=42 loss=0.25");
  ASSERT_NE(status.last_hang, nullptr);
  const HangEvidence& e = *status.last_hang;
  EXPECT_EQ(e.global_rank, 3);
  EXPECT_TRUE(e.declared);
  EXPECT_EQ(e.last_progress, "step=42 loss=0.25");
  EXPECT_EQ(e.pid, 4001);  // the fake's pid of local rank 1
  EXPECT_THAT(e.output_tail, ElementsAre("loading batch 7"));
  EXPECT_THAT(e.traceback_note, HasSubstr("did not create TRAINLET_TRACEBACK_FILE"));
  EXPECT_THAT(e.ToText(), HasSubstr("| loading batch 7"));
  // The controller gets the hang with the suspect named first, and its
  // evidence before the other worker's.
  ASSERT_EQ(reporter.events.size(), 1u);
  EXPECT_EQ(reporter.events[0].kind, v1::ReportEvent::HANG);
  EXPECT_EQ(reporter.events[0].cause, "hang: suspect rank 3 on node-1 (the oldest progress)");
  EXPECT_THAT(reporter.events[0].evidence,
              ::testing::StartsWith("hang: suspect rank 3 on node-1 (the oldest progress)\n"
                                    "worker rank 3 (local rank 1, pid 4001), round 1:"));
  EXPECT_THAT(reporter.events[0].evidence, HasSubstr("worker rank 2 (local rank 0"));
}

// --progress-from-output: what the worker group read of a worker's output
// is its progress, as its progress file's would be (the hang detector sees
// its steps and its silence); a worker whose file has spoken is read from
// its file only.
TEST_F(HungWorkerTest, ProgressFromOutput_IsProgress_TheFileWins) {
  Start();
  absl::StatusOr<std::unique_ptr<OutputProgress>> from_output =
      OutputProgress::Create(OutputProgressSpec{}, &clock_);
  ASSERT_TRUE(from_output.ok());
  output_progress_ = from_output->get();
  workers_.on_start = [&](const std::vector<launcher::ProcessSpec>&) {
    WhenIdle([&] {
      std::ofstream(progress_->ProgressFile(0)) << "step=7\n";
      WhenIdle([&] {
        output_progress_->OnOutput(0, 0, "step  99 loss 0.5\n");
        output_progress_->OnOutput(1, 1, "\r 42%|####      | 42/100 [00:10<00:14,  4.00it/s]\r");
        reported_at = clock_.Now();
      });
    });
  };
  bool collected = false;
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (!r.hang().collected() || collected) return;
    collected = true;
    WhenIdle([&] {
      v1::Directive d = MakeDirective(1);
      d.mutable_job_failed()->set_reason("hang: suspect rank 3 on node-1 (the oldest progress)");
      client_.SendDirective(d);
    });
  };
  EXPECT_EQ(Run(), 75);
  const std::vector<v1::ReportRequest> hang = HangReports();
  ASSERT_GE(hang.size(), 2u);
  const v1::HangReport& evidence = hang[1].hang();
  ASSERT_TRUE(evidence.collected());
  ASSERT_EQ(evidence.workers_size(), 2);
  EXPECT_EQ(evidence.workers(0).step(), 7) << "the file wins over the output's step 99";
  EXPECT_EQ(evidence.workers(1).step(), 42) << "read from the tqdm bar";
  EXPECT_GE(evidence.workers(1).progress_age_ms(), 9900);
  const AgentStatus status = agent_->status();
  ASSERT_EQ(status.progress.size(), 2u);
  EXPECT_EQ(status.progress[0].line, "step=7");
  EXPECT_EQ(status.progress[1].line, "step=42 total=100");
}

TEST_F(HungWorkerTest, AnotherNodesSuspect_NoHangReportedHere_Exits75) {
  Start();
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (!r.hang().collected()) return;
    WhenIdle([&] {
      v1::Directive d = MakeDirective(1);
      d.mutable_job_failed()->set_reason("hang: suspect rank 0 on node-0 (not in a collective)");
      d.mutable_job_failed()->mutable_hang()->set_suspect_node_id("node-0");
      d.mutable_job_failed()->mutable_hang()->set_summary("suspect rank 0 on node-0");
      client_.SendDirective(d);
    });
  };
  EXPECT_EQ(Run(), kExitPeerFailed);
  EXPECT_TRUE(reporter.events.empty()) << "node-0 reports it";
  EXPECT_EQ(agent_->status().last_hang, nullptr) << "its workers were the victims";
}

TEST_F(HungWorkerTest, NoVerdict_JudgesItsOwnWorkers_ReportedFailedWithCode80) {
  Start();
  absl::Time collected_at, failed_at;
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.hang().collected() && collected_at == absl::Time()) collected_at = clock_.Now();
    if (r.state() == v1::ReportRequest::FAILED) {
      if (failed_at == absl::Time()) failed_at = clock_.Now();
      WhenIdle([&] { client_.SendDirective(JobFailed(1)); });
    }
  };
  EXPECT_EQ(Run(), kExitWorkerHung);
  EXPECT_GE(failed_at - collected_at, absl::Seconds(10));
  EXPECT_LE(failed_at - collected_at, absl::Seconds(10) + kHeartbeat);
  const auto reports = client_.reports();
  auto failed = std::find_if(reports.begin(), reports.end(),
                             [](const auto& r) { return r.state() == v1::ReportRequest::FAILED; });
  ASSERT_NE(failed, reports.end());
  EXPECT_EQ(failed->exit_code(), kExitWorkerHung);
  EXPECT_EQ(failed->failed_local_rank(), 1);
  EXPECT_THAT(failed->message(), HasSubstr("hang: suspect rank 3 on node-1 (no Python stack; the "
                                           "oldest progress: 10s ago"));
  ASSERT_EQ(reporter.events.size(), 1u);
  EXPECT_THAT(reporter.events[0].cause, HasSubstr("hang: suspect rank 3 on node-1"));
  ASSERT_NE(agent_->status().last_hang, nullptr);
  EXPECT_EQ(agent_->status().last_hang->global_rank, 3);
}

TEST_F(AgentTest, ElasticRejoinAfterALocalFailure_ChecksGpuHealth_AndLeavesWith81) {
  config_.policy.max_restarts = 3;
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { workers_.Exit(0, 3); };
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::FAILED) {
      WhenIdle([&] { client_.SendDirective(Rejoin(1, "worker rank 2 exited with code 3")); });
    }
  };
  int checks = 0;
  node_health_ = [&]() -> std::vector<std::string> {
    ++checks;
    return {"GPU 0 (0000:3b:00.0): NVML's recovery action asks for a node reboot"};
  };
  EXPECT_EQ(Run(), kExitNodeUnhealthy);
  EXPECT_EQ(checks, 1);
  EXPECT_EQ(client_.joins().size(), 1u) << "no second join";
  ASSERT_EQ(client_.leaves().size(), 1u);
  EXPECT_THAT(client_.leaves()[0].reason(), HasSubstr("node reboot"));
  EXPECT_THAT(agent_->status().last_failure, HasSubstr("node unhealthy"));
}

TEST_F(AgentTest, OtherNodeFailed_ExitsWithPeerFailedNotTheStoppedWorkersCode) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { WhenIdle([&] { client_.SendDirective(JobFailed(1)); }); };
  // Our workers die of our SIGTERM (143): that is not this node's failure.
  EXPECT_EQ(Run(), kExitPeerFailed);
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::FAILED), 0);
}

TEST_F(AgentTest, RestartsExhausted_Exits79) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { workers_.Exit(0, 1); };
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::FAILED) {
      WhenIdle([&] { client_.SendDirective(JobFailed(1, /*exhausted=*/true)); });
    }
  };
  EXPECT_EQ(Run(), kExitRestartsExhausted);
}

TEST_F(AgentTest, VerdictTimeout_AfterALocalFailureExitsWithTheWorkersCode) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { workers_.Exit(0, 7); };
  const absl::Time start = clock_.Now();
  EXPECT_EQ(Run(), 7);
  // Not before the verdict timeout, and not much after it.
  EXPECT_GE(clock_.Now() - start, absl::Seconds(10));
  EXPECT_LE(clock_.Now() - start, absl::Seconds(11));
}

TEST_F(AgentTest, LocalSuccess_WaitsForOtherNodesHowEverLongTheyRun) {
  // Issue 7, D1: node 0's workers finish long before another node's. The
  // agent must keep waiting (and heartbeating) until the job's verdict.
  JoinAnswers({MakeAssignment(1, 0, 2, 1, kHeartbeat)});
  config_.nproc_per_node = 1;
  workers_.on_start = [&](const auto&) { workers_.ExitAll(0); };
  const absl::Time start = clock_.Now();
  workers_.on_idle = [&] {
    if (clock_.Now() - start >= absl::Hours(1) && client_.stream_open()) {
      client_.SendDirective(JobFinished(1));
    }
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_GE(clock_.Now() - start, absl::Hours(1));
  // Heartbeats went on the whole time (one per interval), saying SUCCEEDED.
  EXPECT_GE(client_.CountReports(v1::ReportRequest::SUCCEEDED), 7000);
}

TEST_F(AgentTest, SignalDuringJoin_CancelsTheJoinAndExits128PlusN) {
  JoinAnswers({});  // the join stays pending
  WhenIdle([&] { workers_.Signal(SIGTERM); });
  EXPECT_EQ(Run(), 128 + SIGTERM);
  EXPECT_EQ(client_.cancel_joins(), 1);
  EXPECT_TRUE(workers_.starts.empty());
  EXPECT_TRUE(client_.leaves().empty());
}

TEST_F(AgentTest, SignalWhileRunning_ForwardsItLeavesAndExitsLikeTini) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { WhenIdle([&] { workers_.Signal(SIGINT); }); };
  EXPECT_EQ(Run(), 128 + SIGINT);
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGINT));
  ASSERT_EQ(client_.leaves().size(), 1u);
  EXPECT_THAT(client_.leaves()[0].reason(), HasSubstr("signal 2"));
}

TEST_F(AgentTest, SecondSignal_KillsTheWorkersAtOnce) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.ignore_terminate = true;  // workers that take their time
  const absl::Time start = clock_.Now();
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] { workers_.Signal(SIGTERM); });
    WhenIdle([&] { workers_.Signal(SIGTERM); });
  };
  EXPECT_EQ(Run(), 128 + SIGKILL);  // tini: the workers' own code
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM, SIGKILL));
  EXPECT_LT(clock_.Now() - start, absl::Seconds(30));  // not the grace period
  EXPECT_EQ(client_.leaves().size(), 1u);
}

TEST_F(AgentTest, GracePeriod_ThenSigkill) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.ignore_terminate = true;
  absl::Time signalled;
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] {
      signalled = clock_.Now();
      workers_.Signal(SIGTERM);
    });
  };
  EXPECT_EQ(Run(), 128 + SIGKILL);
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM, SIGKILL));
  EXPECT_GE(clock_.Now() - signalled, absl::Seconds(30));
  EXPECT_LE(clock_.Now() - signalled, absl::Seconds(31));
}

TEST_F(AgentTest, WorkerFailureWhileStopping_TheFirstFailureIsTheExitCode) {
  // SIGTERM: one worker ignores it and later exits 5 on its own, the other
  // dies of it. tini semantics: the first failing worker's code.
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.ignore_terminate = true;
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] { workers_.Signal(SIGTERM); });
    WhenIdle([&] { workers_.Exit(0, 5); });
    WhenIdle([&] { workers_.Exit(1, 143); });
  };
  EXPECT_EQ(Run(), 5);
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
}

TEST_F(AgentTest, SignalAfterSuccess_LeavesAndExitsAtOnce) {
  JoinAnswers({MakeAssignment(1, 1, 2, 1, kHeartbeat)});
  config_.nproc_per_node = 1;
  workers_.on_start = [&](const auto&) {
    workers_.ExitAll(0);
    WhenIdle([&] { workers_.Signal(SIGTERM); });
  };
  EXPECT_EQ(Run(), 128 + SIGTERM);
  EXPECT_EQ(client_.leaves().size(), 1u);
  EXPECT_TRUE(workers_.signals_sent.empty());
}

TEST_F(AgentTest, NoHeartbeatsAfterLeaving) {
  // Issue 6: after SIGTERM, while workers took their time, the agent logged
  // "report to the coordinator failed: ... is fenced" every 500 ms. Once it
  // has left the job it sends no more reports at all.
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.ignore_terminate = true;
  client_.report_status = [&](const v1::ReportRequest&) {
    return client_.leaves().empty()
               ? absl::OkStatus()
               : rendezvous::WithReason(absl::FailedPreconditionError("fenced"),
                                        v1::ErrorInfo::FENCED);
  };
  int reports_after_leave = 0;
  client_.on_report = [&](const v1::ReportRequest&) {
    reports_after_leave += !client_.leaves().empty();
  };
  const absl::Time start = clock_.Now();
  bool signalled = false;
  workers_.on_idle = [&] {
    if (!signalled && clock_.Now() - start >= absl::Seconds(3)) {
      signalled = true;
      workers_.Signal(SIGTERM);
    }
  };
  EXPECT_EQ(Run(), 128 + SIGKILL);  // they ignored SIGTERM for the 30 s grace period
  EXPECT_GE(client_.CountReports(v1::ReportRequest::RUNNING), 5);  // before the signal
  EXPECT_EQ(reports_after_leave, 0);
}

TEST_F(AgentTest, StreamBreak_IsReopenedNotALoss) {
  // Issue 7, D4: a stream that breaks while heartbeats still get through is
  // re-opened, and the job goes on.
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] { client_.EndStream(absl::UnavailableError("keepalive watchdog timeout")); });
    WhenIdle([&] {
      // Re-opened on the next idle after the backoff.
    });
    WhenIdle([&] {});
    WhenIdle([&] { workers_.ExitAll(0); });
    WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
  };
  EXPECT_EQ(Run(), 0);
  const auto watches = client_.watches();
  ASSERT_GE(watches.size(), 2u);
  EXPECT_EQ(watches[1].round(), 1u);
  EXPECT_TRUE(workers_.signals_sent.empty());
}

TEST_F(AgentTest, CoordinatorSilentPastTheTimeout_StaticJobExits69) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  absl::Duration silent_for;
  EXPECT_EQ(RunWithCoordinatorSilent(&silent_for), kExitUnavailable);
  // Lost at the heartbeat timeout (5 s) plus half an interval, not at once.
  EXPECT_GE(silent_for, absl::Seconds(5));
  EXPECT_LE(silent_for, absl::Seconds(6));
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
}

TEST_F(AgentTest, UdpLiveness_DatagramEveryInterval_ReportsEveryTimeoutOnlyWhileHeard) {
  // The coordinator offers UDP liveness: a datagram every 470 ms (signed,
  // seq increasing); Reports every 470 ms until an answer says udp_heard,
  // then every 5 s - 470 ms, and every 470 ms again once it says otherwise.
  const absl::Duration interval = absl::Milliseconds(470);
  const std::string key = kUdpKey;
  int code = -1;
  const std::vector<absl::Duration> reports = RunRecordingReports(
      UdpAssignment(interval), absl::Seconds(30),
      [](absl::Duration since) { return since < absl::Seconds(20); }, &code);
  EXPECT_EQ(code, 0);
  ASSERT_FALSE(client_.joins().empty());
  EXPECT_TRUE(client_.joins()[0].udp_liveness()) << "the agent offers it";

  const std::vector<rendezvous::LivenessBytes> datagrams = client_.datagrams();
  EXPECT_GE(datagrams.size(), 60u);  // ~30 s / 470 ms
  uint64_t last_seq = 0;
  for (const rendezvous::LivenessBytes& b : datagrams) {
    std::optional<rendezvous::LivenessDatagram> d =
        rendezvous::ParseLivenessDatagram(b.data(), b.size());
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->slot, 3u);
    EXPECT_EQ(d->incarnation, 0x1234u);
    EXPECT_EQ(d->round, 1u);
    EXPECT_GT(d->seq, last_seq);
    last_seq = d->seq;
    EXPECT_TRUE(d->MacValid(*rendezvous::LivenessKeyFromBytes(key)));
  }
  // While heard (after the first answer, before 20 s): Reports 4.53 s apart.
  int slow = 0, fast = 0;
  for (size_t i = 1; i < reports.size(); ++i) {
    const absl::Duration gap = reports[i] - reports[i - 1];
    const absl::Duration at = reports[i];
    if (at > absl::Seconds(2) && at < absl::Seconds(20)) {
      EXPECT_GE(gap, absl::Milliseconds(4500)) << "at " << at;
      ++slow;
    }
    if (at > absl::Milliseconds(25000) && at < absl::Seconds(30)) {
      EXPECT_LE(gap, interval + absl::Milliseconds(10)) << "at " << at;
      ++fast;
    }
  }
  EXPECT_GE(slow, 3);
  EXPECT_GE(fast, 5);
}

// The coordinator's acks (rendezvous::AckInterval): for each datagram while
// `acking(time since start)`, at most one per T/4, of that datagram's seq,
// mutated by `tamper` (to test what the agent refuses).
void AckLikeTheCoordinator(FakeRendezvousClient* client, SimulatedClock* clock,
                           std::function<bool(absl::Duration)> acking,
                           std::function<void(rendezvous::LivenessBytes*)> tamper = nullptr) {
  const absl::Time start = clock->Now();
  auto last_ack = std::make_shared<absl::Time>(absl::InfinitePast());
  client->on_datagram =
      [=](const rendezvous::LivenessBytes& b) -> std::optional<rendezvous::LivenessBytes> {
    const absl::Time now = clock->Now();
    if (!acking(now - start) || now - *last_ack < absl::Milliseconds(1250)) return std::nullopt;
    *last_ack = now;
    std::optional<rendezvous::LivenessDatagram> d =
        rendezvous::ParseLivenessDatagram(b.data(), b.size());
    rendezvous::LivenessBytes ack = rendezvous::EncodeLivenessDatagram(
        d->slot, d->incarnation, d->round, d->seq,
        *rendezvous::LivenessKeyFromBytes(AgentTest_kUdpKey), rendezvous::LivenessKind::kAck);
    if (tamper) tamper(&ack);
    return ack;
  };
}

// While the coordinator acks the node's datagrams no RUNNING Report is due
// for minutes; each interval's slow-node signals still go, an interval apart.
TEST_F(SlowSignalsTest, WhileDatagramsAreAcked_EachIntervalsSignalsStillGo) {
  AckLikeTheCoordinator(&client_, &clock_, [](absl::Duration) { return true; });
  v1::Assignment a = UdpAssignment(absl::Milliseconds(470));
  a.set_slow_signals_interval_ms(10000);
  int code = -1;
  const std::vector<absl::Duration> running = RunRecordingReports(
      a, absl::Seconds(30), [](absl::Duration) { return true; }, &code);
  EXPECT_EQ(code, 0);
  const std::vector<v1::ReportRequest> slow = SlowReports();
  ASSERT_EQ(running.size(), slow.size()) << "every RUNNING Report was the signals'";
  ASSERT_GE(slow.size(), 3u);
  for (size_t i = 0; i < slow.size(); ++i) {
    EXPECT_EQ(slow[i].slow().seq(), i + 1);
    EXPECT_GE(running[i], absl::Seconds(10) * static_cast<double>(i + 1));
    EXPECT_LE(running[i], absl::Seconds(10) * static_cast<double>(i + 1) + absl::Seconds(1));
  }
}

// Released streams (docs/protocol.md): the coordinator of a large round
// ends the stream with a Release once it acks the node's datagrams.
class ReleasedStreamTest : public RejoinDatagramTest {
 protected:
  // The coordinator releases the stream of round 1: a Release as its last
  // directive, then the stream's end.
  void ReleaseStream() {
    v1::Directive d = MakeDirective(1);
    d.mutable_release();
    client_.SendDirective(d);
    client_.EndStream(absl::OkStatus());
  }
  // Acks every alive and READY datagram (not at most one per T/4: enough
  // for these tests) while `acking(time since start)`.
  void AckAll(std::function<bool(absl::Duration)> acking) {
    const absl::Time start = clock_.Now();
    client_.on_datagram =
        [this, start,
         acking](const rendezvous::LivenessBytes& b) -> std::optional<rendezvous::LivenessBytes> {
      std::optional<rendezvous::LivenessDatagram> d =
          rendezvous::ParseAgentDatagram(b.data(), b.size());
      if (!d.has_value() || d->kind == rendezvous::LivenessKind::kTaken ||
          !acking(clock_.Now() - start)) {
        return std::nullopt;
      }
      return AckOf(*d);
    };
  }
  // The TAKEN datagrams the agent sent: their rounds.
  std::vector<uint64_t> Taken() const {
    std::vector<uint64_t> out;
    for (const rendezvous::LivenessBytes& b : client_.datagrams()) {
      std::optional<rendezvous::LivenessDatagram> d =
          rendezvous::ParseAgentDatagram(b.data(), b.size());
      if (d.has_value() && d->kind == rendezvous::LivenessKind::kTaken) out.push_back(d->round);
    }
    return out;
  }
  // Calls `fn(time since start)` at every idle wait of the agent.
  void EveryIdle(std::function<void(absl::Duration)> fn) {
    const absl::Time start = clock_.Now();
    workers_.on_idle = [this, start, fn] { fn(clock_.Now() - start); };
  }
  // Releases the stream 3 s into the round, then calls `then(time since
  // the start)` at every idle until it returns true.
  void ReleaseThen(std::function<bool(absl::Duration)> then) {
    auto stage = std::make_shared<int>(0);
    EveryIdle([this, stage, then](absl::Duration t) {
      if (*stage == 0 && t >= absl::Seconds(3)) {
        *stage = 1;
        ReleaseStream();
      } else if (*stage == 1 && then(t)) {
        *stage = 2;
      }
    });
  }
};

TEST_F(ReleasedStreamTest, TakenWhileAcked_NoReopenNoReports_TheVerdictByDatagram_ConfirmedTaken) {
  AckAll([](absl::Duration) { return true; });
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  ReleaseThen([&](absl::Duration t) {
    // Past the acked node's 5-minute Report: it does not go either.
    if (t < absl::Minutes(6)) return false;
    client_.DeliverDirectiveDatagram(DirectiveDatagram(JobFinished(1)));
    return true;
  });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(client_.watches().size(), 1u) << "no stream opened again";
  EXPECT_TRUE(client_.watches()[0].accepts_release());
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::RUNNING), 0)
      << "released and acked: not even the 5-minute Report";
  EXPECT_THAT(Taken(), ::testing::ElementsAre(1u)) << "the verdict confirmed";
  EXPECT_FALSE(workers_.signals_sent.empty()) << "the verdict stopped the workers";
}

TEST_F(ReleasedStreamTest, AskedForHangEvidenceByDatagram_ReportsItsWorkersEvidence) {
  AckAll([](absl::Duration) { return true; });
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  bool asked = false;
  ReleaseThen([&](absl::Duration t) {
    if (!asked) {
      asked = true;
      v1::Directive ask = MakeDirective(1);
      ask.mutable_collect_evidence()->set_declared_by_node("node-0");
      v1::Directive other = ask;
      other.set_round(7);  // not its round: nothing
      client_.DeliverDirectiveDatagram(DirectiveDatagram(other));
      client_.DeliverDirectiveDatagram(DirectiveDatagram(ask));
      return false;
    }
    // Its evidence reported (or a minute without it): the job ends.
    if (client_.CountReports(v1::ReportRequest::RUNNING) == 0 && t < absl::Minutes(1)) {
      return false;
    }
    client_.DeliverDirectiveDatagram(DirectiveDatagram(JobFinished(1)));
    return true;
  });
  EXPECT_EQ(Run(), 0);
  std::vector<v1::ReportRequest> hang;
  for (const v1::ReportRequest& r : client_.reports()) {
    if (r.has_hang()) hang.push_back(r);
  }
  ASSERT_EQ(hang.size(), 1u);
  EXPECT_FALSE(hang[0].hang().declared());
  EXPECT_TRUE(hang[0].hang().collected());
  EXPECT_EQ(hang[0].hang().workers_size(), 2);
}

TEST_F(ReleasedStreamTest, WithoutAcks_TheReleaseIsRefused_TheStreamOpensAgainWithoutIt) {
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  int stage = 0;
  EveryIdle([&](absl::Duration t) {
    if (stage == 0 && t >= absl::Seconds(2)) {
      stage = 1;
      ReleaseStream();
    } else if (stage == 1 && client_.watches().size() == 2 && client_.stream_open()) {
      stage = 2;
      client_.SendDirective(JobFinished(1));
    }
  });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(client_.watches().size(), 2u);
  EXPECT_TRUE(client_.watches()[0].accepts_release());
  EXPECT_FALSE(client_.watches()[1].accepts_release()) << "refused: never released again";
}

TEST_F(ReleasedStreamTest, AcksThatStop_BringTheStreamBack) {
  AckAll([](absl::Duration since) { return since < absl::Seconds(8); });
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  int stage = 0;
  absl::Duration reopened_at;
  EveryIdle([&](absl::Duration t) {
    if (stage == 0 && t >= absl::Seconds(3)) {
      stage = 1;
      ReleaseStream();
    } else if (stage == 1 && client_.watches().size() == 2 && client_.stream_open()) {
      stage = 2;
      reopened_at = t;
      client_.SendDirective(JobFinished(1));
    }
  });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(client_.watches().size(), 2u);
  EXPECT_FALSE(client_.watches()[1].accepts_release());
  // The last ack came by 8 s; the stream again 0.6 T (3 s) after it.
  EXPECT_GE(reopened_at, absl::Seconds(10));
  EXPECT_LE(reopened_at, absl::Seconds(12));
  EXPECT_GT(client_.CountReports(v1::ReportRequest::RUNNING), 0) << "and the Reports";
}

TEST_F(ReleasedStreamTest, Restart_RejoinDatagram_Ready_TheAssignmentByDatagram_NoJoinNoWatch) {
  client_.liveness_fd_value = 77;
  AckAll([](absl::Duration) { return true; });
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  int stage = 0;
  EveryIdle([&](absl::Duration t) {
    if (stage == 0 && t >= absl::Seconds(3)) {
      stage = 1;
      ReleaseStream();
    } else if (stage == 1 && t >= absl::Seconds(5)) {
      stage = 2;
      client_.DeliverDatagram(RejoinDatagram(2));
    } else if (stage == 2 && !Readies().empty()) {
      stage = 3;
      // The answer, without the key (the agent keeps its own); once lost,
      // then again for the next READY.
      v1::Assignment a = Round(2);
      a.clear_liveness_key();
      client_.DeliverDirectiveDatagram(DirectiveDatagram(Pushed(a)));
    } else if (stage == 3 && workers_.starts.size() == 2) {
      stage = 4;
      workers_.ExitAll(0);
    } else if (stage == 4 && t >= absl::Seconds(9)) {
      stage = 5;
      client_.DeliverDirectiveDatagram(DirectiveDatagram(JobFinished(2)));
    }
  });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_THAT(workers_.starts[1][0].env, ::testing::Contains("WORLD_SIZE=4"));
  EXPECT_EQ(agent_->status().round, 2u);
  EXPECT_EQ(client_.joins().size(), 1u) << "no Join call for round 2";
  EXPECT_EQ(client_.watches().size(), 1u) << "no stream for round 2 either";
  EXPECT_THAT(Taken(), ::testing::ElementsAre(2u));
  // Round 2's datagrams are signed with the key of round 1 (the datagram
  // brought none).
  std::optional<rendezvous::LivenessDatagram> last;
  for (const rendezvous::LivenessBytes& b : client_.datagrams()) {
    std::optional<rendezvous::LivenessDatagram> d =
        rendezvous::ParseLivenessDatagram(b.data(), b.size());
    if (d.has_value()) last = d;
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->round, 2u);
  EXPECT_TRUE(last->MacValid(*rendezvous::LivenessKeyFromBytes(kUdpKey)));
}

TEST_F(ReleasedStreamTest, AVerdictNotTaken_IsNotConfirmed) {
  // A verdict of another round (a replay, or the job's verdict while this
  // node is somewhere else) changes nothing here: no TAKEN, which would let
  // node 0 exit without this agent knowing how the job ended.
  AckAll([](absl::Duration) { return true; });
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  int stage = 0;
  EveryIdle([&](absl::Duration t) {
    if (stage == 0 && t >= absl::Seconds(3)) {
      stage = 1;
      ReleaseStream();
    } else if (stage == 1 && t >= absl::Seconds(4)) {
      stage = 2;
      client_.DeliverDirectiveDatagram(DirectiveDatagram(JobFinished(7)));
    } else if (stage == 2 && t >= absl::Seconds(6)) {
      stage = 3;
      EXPECT_TRUE(Taken().empty()) << "not taken, not confirmed";
      EXPECT_TRUE(workers_.signals_sent.empty());
      client_.DeliverDirectiveDatagram(DirectiveDatagram(JobFinished(1)));
    }
  });
  EXPECT_EQ(Run(), 0);
  EXPECT_THAT(Taken(), ::testing::ElementsAre(1u));
}

TEST_F(ReleasedStreamTest, AfterAcksStopped_AReleaseIsTakenAgainOnceTheyFlowForTwoMinutes) {
  // Acks for 8 s, none until 12 s, then again: the stream comes back at
  // ~11 s refusing releases, and kReleaseRetryAfter later a new stream
  // accepts one again.
  AckAll(
      [](absl::Duration since) { return since < absl::Seconds(8) || since > absl::Seconds(12); });
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  int stage = 0;
  absl::Duration third_at;
  EveryIdle([&](absl::Duration t) {
    if (stage == 0 && t >= absl::Seconds(3)) {
      stage = 1;
      ReleaseStream();
    } else if (stage == 1 && client_.watches().size() == 3) {
      stage = 2;
      third_at = t;
      client_.SendDirective(JobFinished(1));
    }
  });
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(client_.watches().size(), 3u);
  EXPECT_FALSE(client_.watches()[1].accepts_release()) << "the stream again, refusing";
  EXPECT_TRUE(client_.watches()[2].accepts_release()) << "two minutes of acks later";
  EXPECT_GE(third_at, absl::Seconds(11) + kReleaseRetryAfter);
  EXPECT_LE(third_at, absl::Seconds(13) + kReleaseRetryAfter);
}

TEST_F(ReleasedStreamTest, ADirectiveDatagramNotItsOwn_IsIgnored) {
  AckAll([](absl::Duration) { return true; });
  JoinAnswers({UdpAssignment(absl::Milliseconds(470))});
  int stage = 0;
  EveryIdle([&](absl::Duration t) {
    if (stage == 0 && t >= absl::Seconds(3)) {
      stage = 1;
      ReleaseStream();
    } else if (stage == 1 && t >= absl::Seconds(4)) {
      stage = 2;
      client_.DeliverDirectiveDatagram(DirectiveDatagram(JobFinished(1), "fedcba9876543210"));
      v1::Directive other = JobFinished(1);
      other.set_coordinator_incarnation(other.coordinator_incarnation() + 1);
      client_.DeliverDirectiveDatagram(DirectiveDatagram(other));
      std::string cut = DirectiveDatagram(JobFinished(1));
      cut.pop_back();
      client_.DeliverDirectiveDatagram(cut);
    } else if (stage == 2 && t >= absl::Seconds(8)) {
      stage = 3;
      EXPECT_TRUE(workers_.signals_sent.empty()) << "none of them stopped anything";
      client_.DeliverDirectiveDatagram(DirectiveDatagram(JobFinished(1)));
    }
  });
  EXPECT_EQ(Run(), 0);
  EXPECT_THAT(Taken(), ::testing::ElementsAre(1u)) << "only the real one";
}

TEST_F(AgentTest, UdpLiveness_Acked_NoRunningReports_UntilTheAcksStop) {
  // Acks for the first 20 s: the Reports due (the first after one interval,
  // then every T - interval while heard) wait for kAckedReportInterval; once
  // the acks stop, within 0.6 T the node reports every interval again, and
  // nothing is lost meanwhile.
  const absl::Duration interval = absl::Milliseconds(470);
  AckLikeTheCoordinator(&client_, &clock_,
                        [](absl::Duration since) { return since < absl::Seconds(20); });
  int code = -1;
  const std::vector<absl::Duration> reports = RunRecordingReports(
      UdpAssignment(interval), absl::Seconds(30), [](absl::Duration) { return false; }, &code);
  EXPECT_EQ(code, 0) << "acks are contact: the coordinator is not silent";
  std::vector<absl::Duration> acked, after;
  for (absl::Duration at : reports) (at < absl::Seconds(20) ? acked : after).push_back(at);
  EXPECT_THAT(acked, ::testing::IsEmpty());
  ASSERT_FALSE(after.empty());
  // The last ack came at most ~1.7 s before 20 s; 0.6 x 5 s later, reports.
  EXPECT_LE(after[0], absl::Seconds(20) + absl::Seconds(3) + interval);
  EXPECT_GE(after.size(), 8u) << "every interval once the acks stopped";
}

// Each ack is spoiled in one way; the node keeps reporting every interval
// (the answers say nothing is heard).
rendezvous::LivenessBytes Reencoded(const rendezvous::LivenessBytes& ack, uint64_t round_delta,
                                    uint64_t seq_delta, rendezvous::LivenessKind kind) {
  std::optional<rendezvous::LivenessDatagram> d =
      rendezvous::ParseLivenessDatagram(ack.data(), ack.size(), rendezvous::LivenessKind::kAck);
  return rendezvous::EncodeLivenessDatagram(
      d->slot, d->incarnation, d->round + round_delta, d->seq + seq_delta,
      *rendezvous::LivenessKeyFromBytes(AgentTest_kUdpKey), kind);
}

class SpoiledAckTest : public AgentTest, public ::testing::WithParamInterface<int> {};

TEST_P(SpoiledAckTest, IsIgnored) {
  const std::function<void(rendezvous::LivenessBytes*)> spoil[] = {
      [](rendezvous::LivenessBytes* b) { (*b)[8] ^= 1; },   // another slot (MAC too)
      [](rendezvous::LivenessBytes* b) { (*b)[41] ^= 1; },  // the MAC
      [](rendezvous::LivenessBytes* b) {                    // an alive datagram echoed back
        *b = Reencoded(*b, 0, 0, rendezvous::LivenessKind::kAlive);
      },
      [](rendezvous::LivenessBytes* b) {  // another round, correctly signed
        *b = Reencoded(*b, 1, 0, rendezvous::LivenessKind::kAck);
      },
      [](rendezvous::LivenessBytes* b) {  // a seq this node has not sent yet
        *b = Reencoded(*b, 0, 1000, rendezvous::LivenessKind::kAck);
      },
  };
  static_assert(sizeof(spoil) / sizeof(spoil[0]) == 5);
  const absl::Duration interval = absl::Milliseconds(470);
  AckLikeTheCoordinator(
      &client_, &clock_, [](absl::Duration) { return true; }, spoil[GetParam()]);
  int code = -1;
  const std::vector<absl::Duration> reports = RunRecordingReports(
      UdpAssignment(interval), absl::Seconds(5), [](absl::Duration) { return false; }, &code);
  EXPECT_EQ(code, 0);
  EXPECT_GE(reports.size(), 9u) << "still every interval";
}

INSTANTIATE_TEST_SUITE_P(AgentTest, SpoiledAckTest, ::testing::Range(0, 5));

TEST_F(AgentTest, UdpLiveness_Acked_AFailedSucceededReportIsRepeatedWithinAnInterval) {
  // Acked all along; the workers succeed at ~10 s and the first SUCCEEDED
  // Report fails: the next goes an interval later (not after the acked 5 min
  // interval), and its answer brings the verdict.
  const absl::Duration interval = absl::Milliseconds(470);
  JoinAnswers({UdpAssignment(interval)});
  AckLikeTheCoordinator(&client_, &clock_, [](absl::Duration) { return true; });
  const absl::Time start = clock_.Now();
  std::vector<absl::Time> succeeded;
  int datagrams = 0;
  auto acker = client_.on_datagram;
  client_.on_datagram = [&](const rendezvous::LivenessBytes& b) {
    if (++datagrams == 21) workers_.ExitAll(0);  // ~10 s in
    return acker(b);
  };
  client_.report_status = [&](const v1::ReportRequest& r) {
    if (r.state() != v1::ReportRequest::SUCCEEDED) return absl::OkStatus();
    succeeded.push_back(clock_.Now());
    if (succeeded.size() == 1) return absl::UnavailableError("connection reset");
    WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
    return absl::OkStatus();
  };
  EXPECT_EQ(Run(), 0);
  ASSERT_GE(succeeded.size(), 2u);
  EXPECT_GE(succeeded[0] - start, absl::Seconds(9));
  EXPECT_LE(succeeded[1] - succeeded[0], interval + absl::Milliseconds(50));
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::RUNNING), 0);
}

TEST_F(AgentTest, UdpLiveness_Acked_APlanThatNeedsReportsKeepsThem) {
  // The MPI plans (quiet_when_acked = false): the acks are contact, but the
  // Reports keep their interval (the placement check rides on them).
  quiet_when_acked_ = false;
  const absl::Duration interval = absl::Milliseconds(470);
  AckLikeTheCoordinator(&client_, &clock_, [](absl::Duration) { return true; });
  int code = -1;
  const std::vector<absl::Duration> reports = RunRecordingReports(
      UdpAssignment(interval), absl::Seconds(10), [](absl::Duration) { return false; }, &code);
  EXPECT_EQ(code, 0);
  EXPECT_GE(reports.size(), 18u) << "every interval, acks or not";
}

TEST_F(AgentTest, UdpLiveness_AckedThenEverythingStops_CoordinatorLostAtTheTimeout) {
  // Acked for 10 s, then the coordinator dies: no ack, every Report fails,
  // the stream ends. Lost about 1.05 T after the last ack, as without acks
  // (not after the 5 min Report interval of an acked node).
  const absl::Duration interval = absl::Milliseconds(470);
  JoinAnswers({UdpAssignment(interval)});
  bool dead = false;
  absl::Time died;
  AckLikeTheCoordinator(&client_, &clock_, [&](absl::Duration since) {
    if (!dead && since >= absl::Seconds(10)) {
      dead = true;
      died = clock_.Now();
    }
    return !dead;
  });
  client_.report_status = [&dead](const v1::ReportRequest&) {
    return dead ? absl::DeadlineExceededError("Deadline Exceeded") : absl::OkStatus();
  };
  EXPECT_EQ(Run(), kExitUnavailable);
  ASSERT_TRUE(dead);
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::RUNNING) > 0, true);
  const absl::Duration silent_for = clock_.Now() - died;
  EXPECT_LE(silent_for, absl::Seconds(6)) << "not minutes: the acks set the silence limit";
  EXPECT_GE(silent_for, absl::Seconds(3));
}

TEST_F(AgentTest, UdpLiveness_LargeRound_FirstReportSpreadAndHeardReportsAtTheRoundsInterval) {
  // Issue 13: a 10,000-node round tells each member when to send its first
  // Report (spread over T/2) and how often to report while heard (20 s).
  const absl::Duration interval = absl::Milliseconds(470);
  v1::Assignment a = UdpAssignment(interval);
  a.set_first_report_delay_ms(1900);
  a.set_report_interval_ms(20000);
  int code = -1;
  const std::vector<absl::Duration> reports = RunRecordingReports(
      a, absl::Seconds(60), [](absl::Duration) { return true; }, &code);
  EXPECT_EQ(code, 0) << "a 20 s Report interval is not a lost coordinator";
  ASSERT_GE(reports.size(), 4u);
  EXPECT_GE(reports[0], absl::Milliseconds(1900));
  EXPECT_LE(reports[0], absl::Milliseconds(1900) + interval);
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_GE(reports[i] - reports[i - 1], absl::Seconds(20)) << i;
    EXPECT_LE(reports[i] - reports[i - 1], absl::Seconds(20) + interval) << i;
  }
  EXPECT_GE(client_.datagrams().size(), 120u);  // datagrams still every 470 ms
}

TEST_F(AgentTest, UdpLiveness_NotOffered_NoDatagramsAndReportsEveryInterval) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] {
      clock_.Advance(absl::Seconds(3));
      workers_.ExitAll(0);
      WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
    });
  };
  EXPECT_EQ(Run(), 0);
  EXPECT_TRUE(client_.datagrams().empty());
}

TEST_F(AgentTest, CoordinatorLost_ElasticAgentRejoins) {
  config_.policy.max_restarts = 3;
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat), MakeAssignment(2, 0, 1, 2, kHeartbeat, 1)});
  bool down = true;
  client_.report_status = [&](const v1::ReportRequest&) {
    return down ? absl::UnavailableError("connection refused") : absl::OkStatus();
  };
  workers_.on_start = [&](const auto&) {
    if (workers_.starts.size() == 1) {
      WhenIdle([&] { client_.EndStream(absl::UnavailableError("Socket closed")); });
    } else {
      down = false;
      workers_.ExitAll(0);
      WhenIdle([&] { client_.SendDirective(JobFinished(2)); });
    }
  };
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(client_.joins().size(), 2u);
  EXPECT_EQ(client_.joins()[1].last_round(), 1u);
}

TEST_F(AgentTest, Fenced_StopsWorkersAndExits69) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  client_.report_status = [](const v1::ReportRequest&) {
    return rendezvous::WithReason(
        absl::FailedPreconditionError("incarnation 1234 of node node-1 is fenced"),
        v1::ErrorInfo::FENCED);
  };
  EXPECT_EQ(Run(), kExitUnavailable);
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
}

TEST_F(AgentTest, FencedStreamEnd_StopsWorkersAndExits69) {
  config_.policy.max_restarts = 3;  // even elastic: the pod must restart
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] {
      client_.EndStream(rendezvous::WithReason(
          absl::AbortedError("removed from the job: no heartbeat"), v1::ErrorInfo::FENCED));
    });
  };
  EXPECT_EQ(Run(), kExitUnavailable);
  EXPECT_EQ(client_.joins().size(), 1u);
}

TEST_F(AgentTest, StaleDirectives_AreIgnored) {
  JoinAnswers({MakeAssignment(2, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] { client_.SendDirective(JobFailed(1)); });  // an older round
    WhenIdle([&] { workers_.ExitAll(0); });
    WhenIdle([&] { client_.SendDirective(JobFinished(2)); });
  };
  EXPECT_EQ(Run(), 0);
}

TEST_F(AgentTest, JoinRejected_MapsToTheDocumentedCode) {
  client_.on_join = [](const v1::JoinRequest&) -> std::optional<absl::StatusOr<v1::Assignment>> {
    return absl::StatusOr<v1::Assignment>(absl::UnauthenticatedError("wrong job token"));
  };
  EXPECT_EQ(Run(), kExitRejected);
}

TEST_F(AgentTest, SpawnFailure_ReportsAndExits127) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.start_error = absl::NotFoundError("trainlet: cannot execute COMMAND 'train'");
  EXPECT_EQ(Run(), kExitNotFound);
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::FAILED), 1);
  EXPECT_TRUE(idle_with_workers_at_.empty());  // no start: start-up is not over
}

TEST_F(AgentTest, IdleWithWorkers_OnceAtTheFirstIdleWaitAfterAStart) {
  JoinAnswers({MakeAssignment(1, 1, 3, 2, kHeartbeat), MakeAssignment(2, 0, 2, 2, kHeartbeat, 1)});
  workers_.on_start = [&](const auto&) {
    if (workers_.starts.size() == 1) {
      // A whole wait with nothing to do: the hook runs; then a rejoin and a
      // second start.
      WhenIdle([] {});
      WhenIdle([&] { client_.SendDirective(Rejoin(1, "lost node node-0")); });
    } else {
      workers_.ExitAll(0);
      WhenIdle([&] { client_.SendDirective(JobFinished(2)); });
    }
  };
  EXPECT_EQ(Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 2u);
  EXPECT_THAT(idle_with_workers_at_, ElementsAre(1u));  // after the first start only
}

TEST_F(AgentTest, IdleWithWorkers_NotCalledWhenTheJobEndsAtOnce) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) { workers_.ExitAll(0); };
  WhenIdle([&] { EXPECT_TRUE(client_.SendDirective(JobFinished(1))); });
  EXPECT_EQ(Run(), 0);
  EXPECT_TRUE(idle_with_workers_at_.empty());
}

TEST_F(AgentTest, Heartbeats_OnePerInterval) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  const absl::Time start = clock_.Now();
  workers_.on_idle = [&] {
    if (clock_.Now() - start >= absl::Seconds(10) && workers_.running_workers() > 0) {
      workers_.ExitAll(0);
    } else if (workers_.running_workers() == 0 && client_.stream_open()) {
      client_.SendDirective(JobFinished(1));
    }
  };
  EXPECT_EQ(Run(), 0);
  const int beats = client_.CountReports(v1::ReportRequest::RUNNING);
  EXPECT_GE(beats, 19);
  EXPECT_LE(beats, 21);
}

TEST_F(AgentTest, LostSucceededReport_IsRepeatedByTheHeartbeats) {
  // Review of issue 6: a SUCCEEDED report that got lost used to be followed
  // only by RUNNING heartbeats, so the coordinator never saw the node finish
  // and every node waited forever.
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  bool first_success = true;
  client_.report_status = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::SUCCEEDED && first_success) {
      first_success = false;
      return absl::UnavailableError("connection reset");
    }
    return absl::OkStatus();
  };
  int successes = 0;
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::SUCCEEDED && ++successes == 2) {
      WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
    }
  };
  workers_.on_start = [&](const auto&) { workers_.ExitAll(0); };
  EXPECT_EQ(Run(), 0);
  EXPECT_GE(successes, 2);
}

TEST_F(AgentTest, VerdictInAHeartbeatAnswer_EndsTheRun) {
  // The stream cannot deliver the verdict (it broke and cannot be re-opened)
  // but the coordinator answers the heartbeat with it.
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  bool finished = false;
  client_.report_status = [&](const v1::ReportRequest&) {
    return finished ? rendezvous::WithReason(absl::FailedPreconditionError("succeeded"),
                                             v1::ErrorInfo::JOB_SUCCEEDED)
                    : absl::OkStatus();
  };
  workers_.on_start = [&](const auto&) {
    workers_.ExitAll(0);
    WhenIdle([&] {
      client_.EndStream(absl::UnavailableError("reset"));
      finished = true;
    });
  };
  EXPECT_EQ(Run(), 0);
}

TEST_F(AgentTest, LostFailedReport_IsRepeatedSoTheElasticJobRestarts) {
  config_.policy.max_restarts = 3;
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat), MakeAssignment(2, 1, 2, 2, kHeartbeat, 1)});
  int failed_reports = 0;
  client_.report_status = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::FAILED && ++failed_reports == 1) {
      return absl::UnavailableError("connection reset");
    }
    return absl::OkStatus();
  };
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::FAILED && failed_reports == 1) {
      WhenIdle([&] { client_.SendDirective(Rejoin(1, "worker rank 2 on node node-1 failed")); });
    }
  };
  workers_.on_start = [&](const auto&) {
    if (workers_.starts.size() == 1) {
      workers_.Exit(0, 3);
    } else {
      workers_.ExitAll(0);
      WhenIdle([&] { client_.SendDirective(JobFinished(2)); });
    }
  };
  EXPECT_EQ(Run(), 0) << "restarted in place, not exited with the worker's code";
  EXPECT_EQ(workers_.starts.size(), 2u);
  EXPECT_GE(failed_reports, 2);
}

TEST_F(AgentTest, SignalWhileRejoining_Exits128PlusNNotThePreviousRoundsFailure) {
  config_.policy.max_restarts = 3;
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});  // the re-join stays pending
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::FAILED) {
      WhenIdle([&] { client_.SendDirective(Rejoin(1, "worker failed")); });
      WhenIdle([&] { workers_.Signal(SIGTERM); });
    }
  };
  workers_.on_start = [&](const auto&) { workers_.Exit(0, 3); };
  EXPECT_EQ(Run(), 128 + SIGTERM);
  EXPECT_EQ(client_.joins().size(), 2u);
}

TEST_F(AgentTest, CoordinatorForgotUsAfterLocalSuccess_StaticExits0) {
  // After this node's workers succeeded, a coordinator that restarted (it
  // no longer knows the member) is a lost coordinator: exit 0, as documented.
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  bool restarted = false;
  client_.report_status = [&](const v1::ReportRequest&) {
    return restarted ? absl::FailedPreconditionError("node node-1 is not a member; join first")
                     : absl::OkStatus();
  };
  workers_.on_start = [&](const auto&) {
    workers_.ExitAll(0);
    WhenIdle([&] { restarted = true; });
  };
  EXPECT_EQ(Run(), 0);
}

TEST_F(AgentTest, StopWorkersDirective_ThenNoVerdict_Exits69) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] {
      v1::Directive d = MakeDirective(1);
      d.mutable_stop_workers()->set_reason("draining");
      client_.SendDirective(d);
    });
  };
  const absl::Time start = clock_.Now();
  EXPECT_EQ(Run(), kExitUnavailable);
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
  EXPECT_GE(clock_.Now() - start, absl::Seconds(10));
}

TEST_F(AgentTest, Heartbeats_AfterAStall_DoNotBurst) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  std::vector<absl::Time> beats;
  client_.on_report = [&](const v1::ReportRequest& r) {
    if (r.state() == v1::ReportRequest::RUNNING) beats.push_back(clock_.Now());
  };
  bool stalled = false;
  workers_.on_idle = [&] {
    if (!stalled && beats.size() == 2) {
      stalled = true;
      clock_.Advance(absl::Seconds(3));  // the loop was stuck for 6 intervals
    } else if (beats.size() >= 6 && workers_.running_workers() > 0) {
      workers_.ExitAll(0);
    } else if (workers_.running_workers() == 0 && client_.stream_open()) {
      client_.SendDirective(JobFinished(1));
    }
  };
  EXPECT_EQ(Run(), 0);
  for (size_t i = 1; i < beats.size(); ++i) {
    EXPECT_GE(beats[i] - beats[i - 1], kHeartbeat) << "heartbeat " << i;
  }
}

TEST_F(AgentTest, SingleWorker_GetsTheTerminal) {
  config_.nproc_per_node = 1;
  JoinAnswers({MakeAssignment(1, 0, 1, 1, kHeartbeat)});
  workers_.on_start = [&](const auto&) { workers_.ExitAll(0); };
  WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
  AgentSeams seams;
  seams.workers = &workers_;
  seams.client = &client_;
  seams.clock = &clock_;
  seams.stdin_is_terminal = true;
  Agent agent(config_, {}, Options(), seams);
  EXPECT_EQ(agent.Run(), 0);
  ASSERT_EQ(workers_.starts.size(), 1u);
  EXPECT_TRUE(workers_.starts[0][0].foreground_tty);
}

// Where the workers' output goes: --prefix-output, or the unchanged relay
// that an explicit --progress-from-output asks for (config.relay_output),
// or straight to the agent's stdout.
class WorkersOutputTest : public AgentTest {
 protected:
  launcher::OutputMode StartedWith(bool prefix, bool relay) {
    config_.nproc_per_node = 1;
    config_.prefix_output = prefix;
    config_.relay_output = relay;
    JoinAnswers({MakeAssignment(1, 0, 1, 1, kHeartbeat)});
    workers_.on_start = [&](const auto&) { workers_.ExitAll(0); };
    WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
    EXPECT_EQ(Run(), 0);
    if (workers_.starts.size() != 1u) {
      ADD_FAILURE() << workers_.starts.size() << " starts";
      return launcher::OutputMode::kDirect;
    }
    return workers_.starts[0][0].output;
  }
};

TEST_F(WorkersOutputTest, Direct_ByDefault) {
  EXPECT_EQ(StartedWith(false, false), launcher::OutputMode::kDirect);
}
TEST_F(WorkersOutputTest, RelayedUnchanged_ForProgressFromOutput) {
  EXPECT_EQ(StartedWith(false, true), launcher::OutputMode::kRelay);
}
TEST_F(WorkersOutputTest, Prefixed_WithPrefixOutput) {
  EXPECT_EQ(StartedWith(true, false), launcher::OutputMode::kPrefix);
}

// ---- Launch plans (launch_plan.h): what the MPI commands plug in.

class FakePlan : public LaunchPlan {
 public:
  void Prepare(const v1::Assignment& a, Ready ready) override {
    ++prepares;
    pending = std::move(ready);
    if (answer_at_once) Answer();
  }
  void Answer() {
    Ready r = std::move(pending);
    pending = nullptr;
    if (error.ok()) {
      launcher::ProcessSpec spec;
      spec.argv = {"mpirun"};
      r(std::vector<launcher::ProcessSpec>(processes, spec));
    } else {
      r(error);
    }
  }
  void CancelPrepare() override {
    ++cancels;
    pending = nullptr;
  }
  void EndRound() override { ++round_ends; }
  void DecorateReport(v1::ReportRequest* r) override { r->set_mpi_sessions(7); }
  absl::Status Tick(absl::Time) override { return tick_status; }

  bool answer_at_once = false;
  int processes = 1;
  absl::Status error;
  absl::Status tick_status;
  Ready pending;
  int prepares = 0, cancels = 0, round_ends = 0;
};

class PlanTest : public AgentTest {
 protected:
  // Round 1 of a job with a restart in its assignment (not in the agent's
  // own policy), whose Reports are answered `crossed` until the agent idles
  // twice; then round 2 finishes. The exit code; the log in `log`.
  int RunWithRoundOneReportsAnswered(const absl::Status& crossed, std::string* log) {
    v1::Assignment first = MakeAssignment(1, 1, 2, 2, kHeartbeat);
    first.set_max_restarts(1);
    JoinAnswers({first, MakeAssignment(2, 1, 2, 2, kHeartbeat, 1)});
    plan_.answer_at_once = true;
    plan_.processes = 0;
    auto answering = std::make_shared<bool>(true);
    client_.report_status = [answering, crossed](const v1::ReportRequest& r) {
      return r.round() == 1 && *answering ? crossed : absl::OkStatus();
    };
    WhenIdle([] {});
    WhenIdle([answering] { *answering = false; });
    WhenIdle([this] { client_.SendDirective(JobFinished(2)); });
    ::testing::internal::CaptureStderr();
    const int code = RunWithPlan(0);
    *log = ::testing::internal::GetCapturedStderr();
    return code;
  }
  int RunWithPlan(int local_processes) {
    AgentSeams seams;
    seams.workers = &workers_;
    seams.client = &client_;
    seams.clock = &clock_;
    seams.plan = &plan_;
    RoundOptions o = Options();
    o.local_processes = local_processes;
    agent_ = std::make_unique<Agent>(config_, std::map<std::string, std::string>{}, o, seams);
    return agent_->Run();
  }
  FakePlan plan_;
};

TEST_F(PlanTest, SlowPrepare_RoundHeartbeatsMeanwhile_ThenStartsWhatItYields) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  // Three idle turns pass (heartbeats go out) before the plan answers.
  WhenIdle([] {});
  WhenIdle([] {});
  WhenIdle([&] { plan_.Answer(); });
  workers_.on_start = [&](const auto&) {
    workers_.ExitAll(0);
    WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
  };
  EXPECT_EQ(RunWithPlan(1), 0);
  ASSERT_EQ(workers_.starts.size(), 1u);
  EXPECT_EQ(workers_.starts[0].size(), 1u);  // what the plan yielded, not nproc.
  EXPECT_GE(client_.CountReports(v1::ReportRequest::RUNNING), 1);
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::SUCCEEDED), 1);
  for (const auto& r : client_.reports()) EXPECT_EQ(r.mpi_sessions(), 7);
  EXPECT_EQ(plan_.round_ends, 1);
}

TEST_F(PlanTest, UserSignalWhilePreparing_DoesNotCancelIt) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  WhenIdle([&] { workers_.Signal(SIGUSR1); });
  WhenIdle([&] { plan_.Answer(); });
  workers_.on_start = [&](const auto&) {
    workers_.ExitAll(0);
    WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
  };
  EXPECT_EQ(RunWithPlan(1), 0);
  EXPECT_EQ(plan_.cancels, 0);
  EXPECT_EQ(workers_.starts.size(), 1u);
}

TEST_F(PlanTest, SignalWhilePreparing_CancelsIt_NothingStarts) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  WhenIdle([&] { workers_.Signal(SIGTERM); });
  EXPECT_EQ(RunWithPlan(1), 128 + SIGTERM);
  EXPECT_EQ(plan_.cancels, 1);
  EXPECT_TRUE(workers_.starts.empty());
  // Done at once: no SIGKILL after the grace period for processes that never were.
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
  EXPECT_EQ(client_.leaves().size(), 1u);
}

TEST_F(PlanTest, PrepareDeadline_FailsTheRoundWith69) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  plan_.answer_at_once = true;
  plan_.error = absl::DeadlineExceededError("2 workers not reachable over SSH");
  EXPECT_EQ(RunWithPlan(1), kExitUnavailable);
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::FAILED), 1);
  EXPECT_TRUE(workers_.starts.empty());
}

TEST_F(PlanTest, NoLocalProcesses_HoldsUntilTheVerdict) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  plan_.answer_at_once = true;
  plan_.processes = 0;
  for (int i = 0; i < 5; ++i) WhenIdle([] {});
  WhenIdle([&] { client_.SendDirective(JobFinished(1)); });
  EXPECT_EQ(RunWithPlan(0), 0);
  EXPECT_EQ(client_.CountReports(v1::ReportRequest::SUCCEEDED), 0);  // the launcher decides.
  EXPECT_GE(client_.CountReports(v1::ReportRequest::RUNNING), 1);
  EXPECT_TRUE(workers_.signals_sent.empty());
  EXPECT_EQ(plan_.round_ends, 1);  // its sessions are killed.
}

TEST_F(PlanTest, NoLocalProcesses_RejoinEndsTheRoundFirst) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat), MakeAssignment(2, 1, 2, 2, kHeartbeat)});
  plan_.answer_at_once = true;
  plan_.processes = 0;
  WhenIdle([&] { client_.SendDirective(Rejoin(1, "node node-0 lost")); });
  WhenIdle([] {});
  WhenIdle([&] { client_.SendDirective(JobFinished(2)); });
  EXPECT_EQ(RunWithPlan(0), 0);
  EXPECT_EQ(plan_.prepares, 2);
  EXPECT_EQ(plan_.round_ends, 2);
}

TEST_F(PlanTest, TickFailure_StopsTheProcesses_ExitsWithTheOverride) {
  JoinAnswers({MakeAssignment(1, 1, 2, 2, kHeartbeat)});
  plan_.answer_at_once = true;
  workers_.on_start = [&](const auto&) {
    WhenIdle([&] { plan_.tick_status = absl::FailedPreconditionError("no MPI session on w1"); });
    WhenIdle([&] {
      plan_.tick_status = absl::OkStatus();
      client_.SendDirective(JobFailed(1));
    });
  };
  EXPECT_EQ(RunWithPlan(1), kExitConfig);
  EXPECT_THAT(workers_.signals_sent, ElementsAre(SIGTERM));
  ASSERT_EQ(client_.CountReports(v1::ReportRequest::FAILED) >= 1, true);
  for (const auto& r : client_.reports()) {
    if (r.state() == v1::ReportRequest::FAILED) {
      EXPECT_EQ(r.exit_code(), kExitConfig);
    }
  }
}

// An MPI worker has no --max-restarts of its own: the job's policy comes in
// the assignment. A heartbeat answered "round moved on" (ABORTED) before the
// Rejoin directive arrives is then a restart, not a lost coordinator.
TEST_F(PlanTest, RoundMovedOnInAJobWithRestarts_RejoinsWithoutLocalPolicy) {
  std::string log;
  EXPECT_EQ(
      RunWithRoundOneReportsAnswered(
          absl::AbortedError("report for round 1, but the current round is 1; re-join"), &log),
      0);
  EXPECT_EQ(plan_.prepares, 2);
}

// The same race with the coordinator saying why (ROUND_RESTARTED): this
// node's one restart line gives the cause, as the Rejoin would have, and no
// "moved on" warning (e2e_logs: one line per restart on each node).
TEST_F(PlanTest, AReportThatCrossedTheRestart_LogsItsCauseOnce) {
  std::string log;
  EXPECT_EQ(RunWithRoundOneReportsAnswered(
                rendezvous::WithReason(absl::AbortedError("worker local rank 0 (global rank 1) on "
                                                          "node n1 exited with code 3"),
                                       v1::ErrorInfo::ROUND_RESTARTED),
                &log),
            0);
  EXPECT_EQ(plan_.prepares, 2);
  EXPECT_THAT(log, HasSubstr("restart: worker local rank 0 (global rank 1) on node n1 exited "
                             "with code 3; re-joining for round 2"));
  EXPECT_THAT(log, Not(HasSubstr("moved on")));
}

TEST(ExitCodeForPlanError, MapsCodes) {
  EXPECT_EQ(ExitCodeForPlanError(absl::DeadlineExceededError("w1 not reachable")),
            kExitUnavailable);
  EXPECT_EQ(ExitCodeForPlanError(absl::InvalidArgumentError("bad host name")), kExitConfig);
  EXPECT_EQ(ExitCodeForPlanError(absl::FailedPreconditionError("not a key")), kExitConfig);
  EXPECT_EQ(ExitCodeForPlanError(absl::NotFoundError("mpirun")), kExitNotFound);
  EXPECT_EQ(ExitCodeForPlanError(absl::InternalError("x")), kExitInternal);
}

}  // namespace
}  // namespace trainlet::agent
