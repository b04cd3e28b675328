// grpc_connection_memory: how much heap a GrpcServer holds per idle
// connection, for grpc_memory_test.cc. It must be a process of its own:
// gRPC reads GRPC_EXPERIMENTS once, at its first read.
//
//   grpc_connection_memory tuned|default N
//
// `tuned` calls DisableGrpcReadChunks first, as trainlet's main does;
// `default` runs gRPC as it comes. The process forks a client before any gRPC
// object exists; the client opens N connections in two halves, each with one
// finished health Check (then idle, as an agent's connection between calls),
// and the server's heap in use (mallinfo2) is read after each half. Prints
// "bytes_per_connection=B": the second half's growth over its connections.
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "rendezvous/grpc_memory.h"
#include "rendezvous/grpc_server.h"

namespace {

bool WriteByte(int fd, char c) { return write(fd, &c, 1) == 1; }
bool ReadByte(int fd, char* c) { return read(fd, c, 1) == 1; }

// The client: `n` channels in two halves; a byte to the server after each.
int RunClient(int from_server, int to_server, int n) {
  int port = 0;
  if (read(from_server, &port, sizeof(port)) != sizeof(port)) return 2;
  const std::string target = "127.0.0.1:" + std::to_string(port);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int half = 0; half < 2; ++half) {
    for (int i = 0; i < n / 2; ++i) {
      grpc::ChannelArguments args;
      // One connection per channel, as one per agent.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
      auto stub = grpc::health::v1::Health::NewStub(channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      grpc::health::v1::HealthCheckRequest request;
      grpc::health::v1::HealthCheckResponse response;
      if (!stub->Check(&ctx, request, &response).ok()) return 3;
      channels.push_back(std::move(channel));
    }
    char done = 0;
    if (!WriteByte(to_server, 'h') || !ReadByte(from_server, &done)) return 4;
  }
  return 0;
}

size_t HeapInUse() { return mallinfo2().uordblks; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s tuned|default N\n", argv[0]);
    return 64;
  }
  const std::string mode = argv[1];
  const int n = std::atoi(argv[2]);
  if ((mode != "tuned" && mode != "default") || n < 2) {
    std::fprintf(stderr, "usage: %s tuned|default N (N >= 2)\n", argv[0]);
    return 64;
  }
  if (mode == "tuned") {
    trainlet::rendezvous::DisableGrpcReadChunks();
  } else {
    unsetenv("GRPC_EXPERIMENTS");
  }
  int to_client[2], to_server[2];
  if (pipe(to_client) != 0 || pipe(to_server) != 0) return 70;
  const pid_t client = fork();
  if (client < 0) return 70;
  if (client == 0) _exit(RunClient(to_client[0], to_server[1], n));

  trainlet::rendezvous::GrpcServerOptions options;
  options.listen.push_back({"127.0.0.1", 0});
  options.name = "memory probe";
  auto server = trainlet::rendezvous::GrpcServer::Start(options, {});
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(server.status().message()).c_str());
    return 70;
  }
  (*server)->SetServing(true);
  const int port = (*server)->port(0);
  if (write(to_client[1], &port, sizeof(port)) != sizeof(port)) return 70;
  size_t in_use[2] = {0, 0};
  for (int half = 0; half < 2; ++half) {
    char c = 0;
    if (!ReadByte(to_server[0], &c)) return 71;
    usleep(200 * 1000);  // the last reads' buffers settle
    in_use[half] = HeapInUse();
    if (!WriteByte(to_client[1], 'k')) return 71;
  }
  int status = 0;
  waitpid(client, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "client failed: status %d\n", status);
    return 71;
  }
  const long long growth = static_cast<long long>(in_use[1]) - static_cast<long long>(in_use[0]);
  std::printf("bytes_per_connection=%lld\n", growth / (n / 2));
  (*server)->Shutdown(absl::ZeroDuration());
  return 0;
}
