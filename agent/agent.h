// The agent's executor: drives the round state machine (round.h) and does
// what it asks through three seams, each a small interface with a fake:
// the worker group (launcher/worker_group.h), the rendezvous client
// (rendezvous/rendezvous_client.h) and the clock. It holds no policy of its
// own: every decision is the machine's. It never blocks on the network:
// joins, reports and leaves run on the client's threads and come back as
// events through an inbox.
//
// Threading: Run() owns the calling thread, which must outlive the workers
// (PDEATHSIG is tied to the forking thread). Client callbacks run on other
// threads; they only queue events in the inbox and Wake() the worker group.
// status() may be called from any thread.
#ifndef TRAINLET_AGENT_AGENT_H_
#define TRAINLET_AGENT_AGENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/launch_plan.h"
#include "agent/round.h"
#include "agent/run_config.h"
#include "common/clock.h"
#include "launcher/worker_group.h"
#include "rendezvous/rendezvous_client.h"

namespace trainlet::agent {

struct AgentSeams {
  launcher::WorkerGroup* workers = nullptr;
  rendezvous::RendezvousClient* client = nullptr;
  Clock* clock = nullptr;  // monotonic in production.
  // Health: ready while the workers of a round run. May be empty.
  std::function<void(bool)> set_serving;
  // The agent's stdin is a terminal whose foreground group it is: a single
  // local worker is then given the terminal (tini-like), so pdb works.
  bool stdin_is_terminal = false;
  // What the round's local processes are; null: `run`'s workers
  // (TorchrunPlan).
  LaunchPlan* plan = nullptr;
};

// The round's options from the run configuration. `master_port` is the one
// resolved at start (RunConfig::master_port may be 0 = pick one).
RoundOptions RoundOptionsFrom(const RunConfig& config, uint64_t incarnation, int master_port);

// The local workers of a round: COMMAND with the framework environment of
// `assignment` (worker_env.h) on top of `base_env`. Every address variable
// is taken from the assignment unchanged, so it is byte-identical on every
// node.
// With a node probe (config.node_probe): each worker's GPU, CUDA_VISIBLE_DEVICES
// and NUMA placement (gpu_placement.h), and the NCCL/CUDA advice
// (topology/env_advice.h: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, CUDA_DEVICE_ORDER,
// the coordinator's NCCL_HOSTID), none of it over a variable `base_env` has.
// `notes` (may be null) gets one line per placement and piece of advice.
std::vector<launcher::ProcessSpec> WorkerSpecsFor(
    const RunConfig& config, const std::map<std::string, std::string>& base_env,
    const v1::Assignment& assignment, bool give_terminal,
    std::vector<std::string>* notes = nullptr);

class Agent {
 public:
  Agent(const RunConfig& config, std::map<std::string, std::string> base_env, RoundOptions options,
        AgentSeams seams);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs rounds until the machine finishes; returns the exit code. Queued
  // reports and leaves are flushed (bounded) before it returns.
  int Run();

  AgentStatus status() const;

 private:
  void Feed(const RoundEvent& event);
  void Execute(const std::vector<RoundAction>& actions);
  void Post(RoundEvent event);
  void DrainInbox();
  void PublishStatus();
  // A plan's Prepare() answered (any thread).
  void PostPrepared(uint64_t round, absl::StatusOr<std::vector<launcher::ProcessSpec>> specs);
  // Starts the prepared processes of the current round, if they are ready.
  void StartPrepared();

  const RunConfig& config_;
  const std::map<std::string, std::string> base_env_;
  const AgentSeams seams_;
  RoundMachine machine_;
  std::unique_ptr<TorchrunPlan> default_plan_;
  LaunchPlan* plan_;
  std::unique_ptr<rendezvous::WatchStream> watch_;
  int exit_code_ = -1;
  bool round_started_ = false;  // a round's processes were asked for.
  // The round whose Prepare() is in flight (0: none).
  uint64_t preparing_round_ = 0;

  absl::Mutex inbox_mu_;
  std::deque<RoundEvent> inbox_ ABSL_GUARDED_BY(inbox_mu_);
  struct Prepared {
    uint64_t round = 0;
    absl::StatusOr<std::vector<launcher::ProcessSpec>> specs;
  };
  std::optional<Prepared> prepared_ ABSL_GUARDED_BY(inbox_mu_);

  // ReportResponse.udp_heard of the last answered Report: written by the
  // response handler, read by the same Report's callback (same thread).
  std::shared_ptr<std::atomic<bool>> udp_heard_ = std::make_shared<std::atomic<bool>>(false);
  mutable absl::Mutex status_mu_;
  AgentStatus status_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_AGENT_H_
