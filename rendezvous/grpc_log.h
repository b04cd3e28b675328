// Routes gRPC's own log lines (gpr_log: the raw core error dumps, "Failed
// accept4", connection errors) through trainlet's logger at DEBUG, escaped
// and truncated, so that they appear only with --log-level=debug. An
// "assertion failed" line (gRPC aborts right after it) is logged at ERROR, so
// a crash never goes unexplained.
//
// Threading: call once from main before any gRPC object exists; the sink
// itself is thread-safe.
#ifndef TRAINLET_RENDEZVOUS_GRPC_LOG_H_
#define TRAINLET_RENDEZVOUS_GRPC_LOG_H_

namespace trainlet::rendezvous {

void InstallGrpcLogSink();

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_GRPC_LOG_H_
