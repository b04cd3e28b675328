// AgentStore: --agent-store (docs/warm-workers.md, "The agent's store").
// torch's env:// rendezvous makes rank 0 host the c10d TCPStore; the other
// ranks' clients retry a refused connect only after a fixed 1 s (torch 1.13),
// so a restarted round whose rank 0 is a moment late pays a second. With
// --agent-store every agent hosts a store (a helper process: the COMMAND's
// Python with torch imported, TCPStore as master) that listens before the
// agent joins and lives across rounds; the round's rank-0 node's store is
// the workers' (TORCHELASTIC_USE_AGENT_STORE=True: every rank a client, its
// keys under /worker/attempt_<TORCHELASTIC_RESTART_COUNT>, as torchrun does).
//
//   Launch(): StartHelper("agent-store") -> AwaitListening(): a connect to
//        127.0.0.1:port every 20 ms
//          | accepted                  | exited first (78: no torch;
//          v                           v  1: the port is taken), a signal,
//   the agent joins with            the agent exits (its output says why)
//   agent_store_port              or the timeout
//          |
//          |  exits later: the supervisor restarts it (1 s, 2 s ... 30 s);
//          |  the workers' clients retry their connect meanwhile
//          v
//   OnRound(assignment): this node is rank 0, the round uses this store, and
//   the store served that restart count already (its keys are there: the
//   workers would meet them) -> SIGKILL it; the supervisor starts a fresh one.
//
// Threading: the agent's thread only (the Supervisor's owner).
#ifndef TRAINLET_AGENT_AGENT_STORE_H_
#define TRAINLET_AGENT_AGENT_STORE_H_

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/run_config.h"
#include "launcher/supervisor.h"
#include "launcher/worker.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

inline constexpr char kAgentStoreHelper[] = "agent-store";
// How long the agent waits for its store before joining (an `import torch`
// from a slow filesystem takes tens of seconds).
inline constexpr absl::Duration kAgentStoreStartTimeout = absl::Minutes(2);
// The store program's exit code when torch.distributed cannot be imported.
inline constexpr int kAgentStoreNoTorch = 78;

// The store's port: --agent-store-port, else `master_port` - 1.
int AgentStorePort(const RunConfig& config, int master_port);

// The COMMAND's interpreter with its `env` prefix and options when COMMAND
// is Python, else {"python3"} (from the PATH): what the agent's Python
// helpers run with (this store, --preflight-gpu's loopback).
std::vector<std::string> PythonInterpreterArgv(const RunConfig& config);

// The helper: the COMMAND's interpreter (its `env` prefix and options) when
// COMMAND is Python, else python3 from the PATH, running the store program
// on `port`, with `base_env`, its output prefixed "[agent-store]".
launcher::ProcessSpec AgentStoreSpec(const RunConfig& config,
                                     const std::map<std::string, std::string>& base_env, int port);

// Whether something accepts TCP connections on 127.0.0.1:port now.
bool AcceptsOnLoopback(int port);

class AgentStore {
 public:
  AgentStore(launcher::Supervisor* supervisor, int port) : supervisor_(supervisor), port_(port) {}

  // StartHelper(spec); Spawn errors as StartHelper's.
  absl::Status Launch(const launcher::ProcessSpec& spec);
  // Waits until the store accepts on loopback, at most `timeout`.
  // FailedPrecondition naming the port and the exit code when it exits
  // first; DeadlineExceeded; Cancelled with *signal set when the agent got a
  // terminating signal meanwhile (the caller exits 128+N).
  absl::Status AwaitListening(absl::Duration timeout, int* signal);

  // Before a round's workers start (see the top). Returns whether the store
  // was restarted.
  bool OnRound(const v1::Assignment& assignment);

  int port() const { return port_; }

 private:
  launcher::Supervisor* supervisor_;
  const int port_;
  pid_t served_pid_ = -1;  // the store process `served_` is about
  std::set<int> served_;   // restart counts it served as rank 0's store
  // Restart counts for the next store process (this one is being restarted).
  std::set<int> carried_;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_AGENT_STORE_H_
