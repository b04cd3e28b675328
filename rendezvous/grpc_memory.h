// What a connection costs the coordinator's memory.
//
// At 10,000 agents the coordinator holds 10,000 gRPC connections, each with
// an open Watch stream; gRPC 1.51's per-connection state is nearly all of
// node 0's memory (docs/benchmarks.md, section 7). One piece of it is ours
// to choose: the TCP read buffers. gRPC 1.51's default ("tcp_read_chunks",
// an experiment that is on by default) reads into 8 KiB blocks, and every
// idle connection keeps one: 80 MB at 10,000 connections whose traffic is a
// keepalive ping now and then. With the experiment off, the server's channel
// arguments size the reads (kReadChunkBytes, adapted between
// kMinReadChunkBytes and kMaxReadChunkBytes by what arrives: gRPC's own
// behaviour before 1.50). gRPC reads its experiments once, from
// GRPC_EXPERIMENTS, at its first read; DisableGrpcReadChunks sets it.
//
// Not done, measured (docs/benchmarks.md section 7): malloc_trim after a
// round's answers gave back nothing at 10,000 agents and held the
// allocator's locks for 1.7 s.
#ifndef TRAINLET_RENDEZVOUS_GRPC_MEMORY_H_
#define TRAINLET_RENDEZVOUS_GRPC_MEMORY_H_

#include <optional>
#include <string>

namespace trainlet::rendezvous {

// The server's TCP reads, with DisableGrpcReadChunks (grpc_server.cc): the
// first read's size, and the range the later ones adapt within. Requests
// are small (a JoinRequest is about 1-2 KiB, a ping 17 bytes); a larger one
// takes several reads.
inline constexpr int kReadChunkBytes = 2048;
inline constexpr int kMinReadChunkBytes = 256;
inline constexpr int kMaxReadChunkBytes = 4096;

// The GRPC_EXPERIMENTS value that turns gRPC's 8 KiB read blocks off, given
// the one the user set (nullopt: unset). The user's own experiments are
// kept; one that names tcp_read_chunks itself wins.
std::string GrpcExperimentsWithoutReadChunks(const std::optional<std::string>& user_value);

// Sets GRPC_EXPERIMENTS in this process (GrpcExperimentsWithoutReadChunks
// of its current value). Call from main before any gRPC object exists, and
// after the workers' environment was taken: workers do not inherit it.
void DisableGrpcReadChunks();

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_GRPC_MEMORY_H_
