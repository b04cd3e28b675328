// The simulated agents of bench_coordinator_load (bench/coordinator_load.cc):
// each speaks the agent's side of the coordinator protocol
// (docs/protocol.md), with its own identity, gRPC channel and connection.
//
// What it mirrors, and from where (change it with them): the Join's long
// poll and retries (rendezvous/coordinator_client.cc); the Watch stream, the
// Report cadence, UDP liveness and acks, the re-join by READY and REJOIN
// datagrams, the released stream with DIRECTIVE and TAKEN datagrams
// (agent/coordinator_contact.h and agent/round.h, whose constants it uses);
// the Leave; and the node a Join describes (agent/node_probe.cc's summary of
// 8 GPUs). Not mirrored: workers, progress and hang reports, TLS, MPI.
//
// Why a second implementation, not N real RoundMachines on the real client
// (as agent/testing/grpc_job.h runs a few for tests): those cost a thread and
// a blocking client per node, and 10,000 of them on 2 CPUs would measure
// themselves, not the coordinator. Here --cqs completion-queue threads, one
// heartbeat thread (the only sender of Reports and datagrams) and the
// command thread carry every agent of the process.
#ifndef TRAINLET_BENCH_SIMULATED_AGENTS_H_
#define TRAINLET_BENCH_SIMULATED_AGENTS_H_

#include <cstdio>
#include <string>

namespace trainlet::bench {

struct SimulatedAgentsOptions {
  std::string target;  // the coordinator, host:port
  std::string job_id;
  std::string token;
  int agents = 1000;  // in the whole run: this process owns those with i % procs == proc
  int cqs = 2;        // completion queues, one thread each
  // The channels' keepalive, as the product client sets it from the timeout.
  double heartbeat_timeout_s = 5;
  double heartbeat_interval_s = 0;  // 0: the Assignment's
  bool udp_liveness = true;         // JoinRequest.udp_liveness, as the agent sends it
  bool acks = true;                 // take the coordinator's liveness acks, as the agent
  // After a Rejoin that allows it, re-join with READY datagrams and take the
  // assignment from the open stream, as the agent (false: a Join call) ...
  bool rejoin_by_datagram = true;
  // ... and take the Rejoin as a REJOIN datagram when the coordinator sends
  // one (false: only from the stream).
  bool rejoin_datagram = true;
  // Accept the coordinator's release of the stream, as the agent.
  bool release = true;
  int join_timeout_s = 600;  // the agent's --join-timeout default (10m)
};

// Creates this process's agents (channels, not yet connected) and serves
// the parent's commands from `in`, one a line, each answered with one line
// on `out` (load_harness.h's ServeCommands), until "quit" or the end of
// `in`; the process then exits. Commands (times: CLOCK_MONOTONIC ns):
//   connect T          connect every channel, waiting up to T s:
//                      "CONNECTED FAILED NS_TAKEN"
//   join LO HI         start the first Join of the owned agents in [LO, HI):
//                      "COUNT FIRST_SENT LAST_SENT"
//   wait ROUND T       wait up to T s until no join is in flight:
//                      "OK ERR MIN_NNODES MAX_NNODES MAX_ROUND FIRST_ERROR"
//                      then " SENT:RECEIVED:REJOIN_TOLD" per agent that holds
//                      an assignment of ROUND or later
//   kill LO HI SILENT  lose the owned agents in [LO, HI) (SILENT 0: their
//                      streams cancelled, as a killed pod; 1: they only fall
//                      silent, as a frozen one), and forget every agent's
//                      rejoin time: "COUNT AT"
//   stats              "CPU_US REPORTS_SENT OK ERR WATCH_ERR MAXRSS_KB
//                      DATAGRAMS_SENT DATAGRAM_ERR HEARD_BY_UDP ACKS
//                      READY_FALLBACKS REJOIN_DATAGRAMS STREAM_REJOINS
//                      RELEASED DIRECTIVE_DATAGRAMS"
//   leave              every live agent Leaves: "COUNT OK ERR AT"
[[noreturn]] void ServeSimulatedAgents(const SimulatedAgentsOptions& options, int proc, int procs,
                                       FILE* in, FILE* out);

}  // namespace trainlet::bench

#endif  // TRAINLET_BENCH_SIMULATED_AGENTS_H_
