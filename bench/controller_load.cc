// Controller load generator (issue 11, "Performance"): N simulated agents
// reporting their health to a real `trainlet controller` running as a
// SEPARATE process, so that the figures are the controller's and not the
// generator's.
//
// The controller runs as `trainlet controller --listen=127.0.0.1:P
// --http=127.0.0.1:H --db=TMP/c.db --token-file=TMP/token` (free ports picked
// here). Each simulated agent has its own identity (job, node id, random
// incarnation), its own gRPC channel and HTTP/2 connection (a local subchannel
// pool, as each pod has its own), the product client's channel settings
// (agent/reporter_grpc.cc) and the job token in the metadata. With
// --rpc=stream (the default, what `trainlet run` does) each agent sends its
// first report (a STATE_CHANGE) as an acknowledged Report call with the
// product's 2 s deadline (--deadline; 0: none), then keeps one ReportStream
// open and writes each periodic report on it; with --rpc=unary every report
// is a Report call (the product before the stream). Each agent sends what `trainlet run` sends
// (agent/reporter.cc): identity, sequence, round 1, rank, RUNNING, 8 workers, the latest progress
// line (`step=... loss=... lr=... tokens_per_s=...`, the step growing 2 a
// second) and its age, 8 GPU reports with their health, the agent's RSS, the
// report interval, the event that says why (STATE_CHANGE for the first report,
// PERIODIC after it), and on node 0 of each job the coordinator's view. Every
// report is checked with controller::ValidateHealthReport before it is sent.
//
// Agents are spread over --jobs jobs (agent i is node i / jobs of job
// i % jobs) and over the interval: agent i reports at
// T0 + i * interval / N + k * interval, so reports arrive evenly, not in
// lockstep. Like the product's reporter, an agent whose previous report is
// still in flight does not send another (counted as "skipped").
//
// Nothing costs a thread per agent: each generator process has --cqs
// completion queues with one thread each, one sending thread, and one command
// thread. --procs=K forks K generator processes before any gRPC object exists,
// each owning the agents i with i % K == its index; the parent drives them
// over pipes (one text command, one text answer) and never uses gRPC itself.
// Every timestamp is CLOCK_MONOTONIC, which all processes share.
//
// Phases, on one controller:
//   warm-up (--warmup seconds, default interval + 2): every agent connects and
//     sends its first report.
//   steady (--steady seconds): reports only. The controller's CPU
//     (utime+stime, /proc/PID/stat) in % of one core and per report
//     accepted, the time its threads waited for a CPU (schedstat: what other
//     work on the machine cost it), its VmRSS; reports sent, accepted,
//     failed, skipped, per second; client-side report latency p50/p99/max.
//   views (--views seconds, default 25): the same load, and in the parent
//     (a process of its own) --http-requests GETs each of `/`, `/api/jobs`,
//     `/api/jobs/JOB` (the first job, its first page of nodes) and
//     `/metrics`, interleaved and spread over the window, each on a new
//     connection (cpp-httplib's blocking client): p50/p99/max latency, the
//     size of each answer, and the controller's CPU in that window.
// Through steady and views, a second client (a thread of the parent) polls as
// an open status page does, every --poll seconds (default 1; 0: none):
// `/api/jobs`, then `/api/jobs/JOB?limit=50` of the first job; its
// latencies are poll_api_jobs_* and poll_job_page_*, and the controller's CPU
// in the steady window includes what it costs.
// At the end: every stream is half-closed and its answer (the reports the
// controller accepted on it) checked against the reports written; the controller's VmRSS, VmHWM,
// RssAnon and threads
// (/proc/PID/status), the SQLite file sizes (c.db and c.db-wal); then
// /metrics' trainlet_controller_reports_received_total is compared with the
// reports the agents saw accepted.
//
// Output: a table for humans, then one JSON line starting with
// {"bench":"controller_load". Exit status 0 when every report sent was
// accepted, every HTTP request answered 200 and the controller's count agrees;
// 1 otherwise; 64 on bad arguments. No target is asserted.
//
// Build and run:
//   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release
//   ninja -C build-bench -j2 trainlet bench_controller_load
//   build-bench/bench/bench_controller_load --trainlet=build-bench/trainlet
//       [--agents=1000] [--jobs=50] [--interval=5] [--steady=60] [--warmup=SECONDS]
//       [--procs=1] [--cqs=2] [--http-requests=50] [--views=25] [--server-arg=ARG]...
//       [--rpc=stream|unary] [--deadline=2] [--generators-sched=normal|idle] [--poll=1]
// Issue 26's case, one job of 1,000 nodes with 8 workers each:
//   --agents=1000 --jobs=1 (docs/benchmarks-history.md, "Controller views").
// --generators-sched=idle runs the generator processes under SCHED_IDLE, as
// in bench/coordinator_load.cc: the agents of a real job run on other
// machines and take none of the controller's CPUs.
// ctest runs a short version (controller_load_short): 200 agents, 5 s.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/flags.h"
#include "bench/load_harness.h"
#include "common/deadlock_detection.h"
#include "controller/report_limits.h"
#include "httplib.h"
#include "rendezvous/grpc_auth.h"
#include "trainlet/v1/controller_service.grpc.pb.h"

namespace trainlet::bench {
namespace {

namespace v1 = ::trainlet::v1;

constexpr char kToken[] = "controller-load-bench-token";
constexpr int kWorkersPerNode = 8;
constexpr int kGpusPerNode = 8;

struct Config {
  int agents = 1000;
  int jobs = 50;
  double interval_s = 5;
  int steady_s = 60;
  double warmup_s = -1;  // < 0: interval + 2.
  int procs = 1;
  int cqs = 2;
  int http_requests = 50;
  double views_s = 25;
  double poll_s = 1;             // --poll: the second client's period; 0: none.
  double deadline_s = 2;         // each unary report's. 0: none.
  bool stream = true;            // --rpc=stream (ReportStream) or unary (Report).
  bool generators_idle = false;  // --generators-sched=idle
  std::string trainlet;
  std::vector<std::string> server_args;
};

// 127.0.0.1:PORT of the controller's gRPC; set before the generators fork.
std::string g_target;

// ---------------------------------------------------------------------------
// Generator process: the simulated agents.

class Generator;

// A completion-queue tag.
struct Op {
  virtual ~Op() = default;
  virtual void Done(bool ok) = 0;
};

struct Agent;

// One step of an agent's ReportStream; the agent owns one of each.
struct StreamOp : Op {
  enum Kind { kStart, kWrite, kWritesDone, kFinish };
  Agent* agent = nullptr;
  Kind kind = kStart;
  void Done(bool ok) override;
};

struct Agent {
  int index = 0;
  int job = 0;
  int node_rank = 0;
  int nnodes = 0;
  uint64_t incarnation = 0;
  Generator* gen = nullptr;
  grpc::CompletionQueue* cq = nullptr;
  std::unique_ptr<v1::Controller::Stub> stub;
  v1::HealthReport base;  // what does not change between reports.
  uint64_t sequence = 0;  // sending thread only.
  int64_t offset_ns = 0;  // its place in the interval.
  std::atomic<bool> in_flight{false};
  // --rpc=stream: the agent's stream, opened with its first report.
  std::unique_ptr<grpc::ClientContext> stream_ctx;
  std::unique_ptr<grpc::ClientAsyncWriter<v1::HealthReport>> writer;
  v1::HealthReportResponse stream_resp;
  grpc::Status stream_status;
  v1::HealthReport pending;  // the report being written.
  int64_t write_ns = 0;
  int64_t written = 0;  // reports written on the stream.
  bool broken = false;  // a write failed: no more reports.
  StreamOp start_op, write_op, writes_done_op, finish_op;
};

struct ReportCall : Op {
  Agent* agent = nullptr;
  int64_t sent_ns = 0;
  grpc::ClientContext ctx;
  v1::HealthReport req;
  v1::HealthReportResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::HealthReportResponse>> rpc;
  void Done(bool ok) override;
};

class Generator {
 public:
  Generator(const Config& c, int proc, int procs);
  // Serves commands from `in` until "quit"; answers on `out`.
  void Serve(FILE* in, FILE* out);

 private:
  void BuildBase(Agent* a) const;
  void SendLoop(int64_t t0_ns);
  void Send(Agent* a, int64_t now_ns, int64_t t0_ns);
  void OnDone(ReportCall* call);
  void OnStream(Agent* a, StreamOp::Kind kind, bool ok);
  void Record(Agent* a, int64_t lat_us, const grpc::Status& status);
  void CloseStreams();
  std::string Stats();
  friend struct ReportCall;
  friend struct StreamOp;

  const Config config_;
  const int64_t interval_ns_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<std::thread> cq_threads_;
  std::thread sender_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> sent_{0}, ok_{0}, err_{0}, skipped_{0}, invalid_{0}, pending_{0};
  std::atomic<int64_t> open_streams_{0};
  absl::Mutex mu_;
  std::vector<int64_t> latencies_us_ ABSL_GUARDED_BY(mu_);
  std::string first_error_ ABSL_GUARDED_BY(mu_);
};

Generator::Generator(const Config& c, int proc, int procs)
    : config_(c), interval_ns_(static_cast<int64_t>(c.interval_s * 1e9)) {
  for (int i = 0; i < c.cqs; ++i) cqs_.push_back(std::make_unique<grpc::CompletionQueue>());
  std::mt19937_64 rng{std::random_device{}()};
  for (int i = proc; i < c.agents; i += procs) {
    auto a = std::make_unique<Agent>();
    a->index = i;
    a->job = i % c.jobs;
    a->node_rank = i / c.jobs;
    a->nnodes = c.agents / c.jobs + (a->job < c.agents % c.jobs ? 1 : 0);
    while (a->incarnation == 0) a->incarnation = rng();
    a->gen = this;
    for (StreamOp* op : {&a->start_op, &a->write_op, &a->writes_done_op, &a->finish_op}) {
      op->agent = a.get();
    }
    a->start_op.kind = StreamOp::kStart;
    a->write_op.kind = StreamOp::kWrite;
    a->writes_done_op.kind = StreamOp::kWritesDone;
    a->finish_op.kind = StreamOp::kFinish;
    a->cq = cqs_[agents_.size() % cqs_.size()].get();
    a->offset_ns = static_cast<int64_t>(static_cast<double>(i) * interval_ns_ / c.agents);
    // The product client's settings (agent/reporter_grpc.cc), and one
    // HTTP/2 connection per agent, as one per pod.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(std::max<int64_t>(1000, interval_ns_ / 1000000)));
    args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    a->stub = v1::Controller::NewStub(
        grpc::CreateCustomChannel(g_target, grpc::InsecureChannelCredentials(), args));
    BuildBase(a.get());
    agents_.push_back(std::move(a));
  }
  for (auto& cq : cqs_) {
    cq_threads_.emplace_back([this, q = cq.get()] {
      void* tag;
      bool ok;
      while (q->Next(&tag, &ok)) static_cast<Op*>(tag)->Done(ok);
    });
  }
}

// What agent/reporter.cc and run_agent.cc's enrich put in every report of a
// node with 8 workers and 8 GPUs, in round 1 of a healthy job.
void Generator::BuildBase(Agent* a) const {
  v1::HealthReport& r = a->base;
  r.set_job_id(absl::StrFormat("bench-job-%03d", a->job));
  r.set_node_id(absl::StrFormat("bench-job-%03d-worker-%d", a->job, a->node_rank));
  r.set_incarnation(a->incarnation);
  r.set_round(1);
  r.set_node_rank(a->node_rank);
  r.set_nnodes(a->nnodes);
  r.set_world_size(a->nnodes * kWorkersPerNode);
  r.set_state(v1::HealthReport::RUNNING);
  r.set_restart_count(0);
  r.set_exit_code(-1);
  r.set_report_interval_ms(interval_ns_ / 1000000);
  for (int w = 0; w < kWorkersPerNode; ++w) {
    v1::WorkerHealth* h = r.add_workers();
    h->set_local_rank(w);
    h->set_rank(a->node_rank * kWorkersPerNode + w);
    h->set_pid(4000 + a->index % 1000 * 10 + w);
    h->set_state(v1::WorkerHealth::RUNNING);
    h->set_restarts(0);
  }
  for (int g = 0; g < kGpusPerNode; ++g) {
    v1::GpuReport* gr = r.add_gpus();
    gr->set_index(g);
    gr->set_uuid(
        absl::StrFormat("GPU-%08x-%04x-4000-8000-%012x", a->index, g, a->incarnation >> 16));
    v1::GpuHealth* h = gr->mutable_health();
    h->set_ecc_known(true);
    h->set_ecc_enabled(true);
    h->set_ecc_sbe_volatile(g == 3 ? 2 : 0);
    h->set_remap_known(true);
    h->set_remapped_rows_correctable(g == 3 ? 1 : 0);
    h->set_recovery_action_known(true);
    gr->set_fatal(false);
  }
  r.set_agent_rss_bytes(uint64_t{11} << 20);
  if (a->node_rank == 0) {
    v1::CoordinatorView* cv = r.mutable_coordinator();
    cv->set_members(a->nnodes);
    cv->set_rounds(1);
  }
}

void Generator::Send(Agent* a, int64_t now_ns, int64_t t0_ns) {
  if (a->in_flight.exchange(true)) {
    skipped_.fetch_add(1);
    return;
  }
  auto* call = new ReportCall;
  call->agent = a;
  v1::HealthReport& r = call->req;
  r = a->base;
  r.set_sequence(++a->sequence);
  const int64_t unix_ms = absl::ToUnixMillis(absl::Now());
  r.set_sent_unix_ms(unix_ms);
  // The freshest progress line of the node's workers, written 0..999 ms ago.
  const int64_t since_ns = std::max<int64_t>(0, now_ns - t0_ns);
  const int64_t step = 1000 + since_ns / 500000000;
  v1::Progress* p = r.mutable_progress();
  p->set_known(true);
  p->set_step(step);
  p->set_local_rank(static_cast<int>(a->sequence % kWorkersPerNode));
  p->set_age_ms(static_cast<int64_t>((a->sequence * 7919 + a->index) % 1000));
  auto field = [p](const char* key, std::string value) {
    v1::ProgressField* f = p->add_fields();
    f->set_key(key);
    f->set_value(std::move(value));
  };
  field("loss", absl::StrFormat("%.4f", 2.5 / (1.0 + step / 1000.0)));
  field("lr", "3e-4");
  field("tokens_per_s", absl::StrCat(40000 + a->index % 997));
  v1::ReportEvent* why = r.add_events();
  why->set_kind(a->sequence == 1 ? v1::ReportEvent::STATE_CHANGE : v1::ReportEvent::PERIODIC);
  why->set_round(1);
  why->set_at_unix_ms(unix_ms);
  if (a->sequence == 1) {
    if (absl::Status s = trainlet::controller::ValidateHealthReport(r); !s.ok()) {
      invalid_.fetch_add(1);
      absl::MutexLock lock(&mu_);
      if (first_error_.empty()) first_error_ = absl::StrCat("invalid report: ", s.message());
    }
  }
  // As the product's transport (agent/reporter_grpc.h): the first report
  // (STATE_CHANGE) is an acknowledged unary call, periodic ones go on the
  // stream.
  if (config_.stream && a->sequence > 1) {
    if (a->broken) {
      delete call;
      a->in_flight.store(false);
      skipped_.fetch_add(1);
      return;
    }
    a->pending = std::move(call->req);
    delete call;
    a->write_ns = MonoNs();
    pending_.fetch_add(1);
    sent_.fetch_add(1);
    if (a->writer == nullptr) {  // the first report opens the stream.
      a->stream_ctx = std::make_unique<grpc::ClientContext>();
      a->stream_ctx->AddMetadata(trainlet::rendezvous::kTokenMetadataKey, kToken);
      a->writer = a->stub->PrepareAsyncReportStream(a->stream_ctx.get(), &a->stream_resp, a->cq);
      open_streams_.fetch_add(1);
      a->writer->StartCall(&a->start_op);
    } else {
      a->writer->Write(a->pending, &a->write_op);
    }
    return;
  }
  call->ctx.AddMetadata(trainlet::rendezvous::kTokenMetadataKey, kToken);
  if (config_.deadline_s > 0) {
    call->ctx.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::nanoseconds(static_cast<int64_t>(config_.deadline_s * 1e9)));
  }
  call->sent_ns = MonoNs();
  pending_.fetch_add(1);
  sent_.fetch_add(1);
  call->rpc = a->stub->PrepareAsyncReport(&call->ctx, call->req, a->cq);
  call->rpc->StartCall();
  call->rpc->Finish(&call->resp, &call->status, call);
}

void ReportCall::Done(bool) { agent->gen->OnDone(this); }
void StreamOp::Done(bool ok) { agent->gen->OnStream(agent, kind, ok); }

void Generator::Record(Agent* a, int64_t lat_us, const grpc::Status& status) {
  if (status.ok()) {
    ok_.fetch_add(1);
  } else {
    err_.fetch_add(1);
  }
  absl::MutexLock lock(&mu_);
  if (lat_us >= 0) latencies_us_.push_back(lat_us);
  if (!status.ok() && first_error_.empty()) {
    first_error_ = absl::StrCat(a->base.node_id(), ": ", static_cast<int>(status.error_code()), " ",
                                status.error_message().substr(0, 200));
  }
}

void Generator::OnDone(ReportCall* call) {
  Record(call->agent, (MonoNs() - call->sent_ns) / 1000, call->status);
  call->agent->in_flight.store(false);
  pending_.fetch_sub(1);
  delete call;
}

// A stream step completed (on the agent's completion-queue thread).
void Generator::OnStream(Agent* a, StreamOp::Kind kind, bool ok) {
  switch (kind) {
    case StreamOp::kStart:
      if (ok) {
        a->writer->Write(a->pending, &a->write_op);
        return;
      }
      [[fallthrough]];
    case StreamOp::kWrite:
      if (ok) {
        ++a->written;
        Record(a, (MonoNs() - a->write_ns) / 1000, grpc::Status::OK);
      } else {
        // The stream is over (the controller refused a report or went
        // away); Finish says why.
        a->broken = true;
        a->writer->Finish(&a->stream_status, &a->finish_op);
      }
      a->in_flight.store(false);
      pending_.fetch_sub(1);
      return;
    case StreamOp::kWritesDone:
      a->writer->Finish(&a->stream_status, &a->finish_op);
      return;
    case StreamOp::kFinish: {
      grpc::Status s = a->stream_status;
      if (s.ok() && a->stream_resp.accepted() != static_cast<uint64_t>(a->written)) {
        s = grpc::Status(grpc::StatusCode::INTERNAL,
                         absl::StrCat("the controller accepted ", a->stream_resp.accepted(),
                                      " of the ", a->written, " reports written on the stream"));
      }
      if (!s.ok()) Record(a, -1, s);
      open_streams_.fetch_sub(1);
      return;
    }
  }
}

// Half-closes every stream and waits (up to 5 s) for the controller's
// answers.
void Generator::CloseStreams() {
  for (auto& a : agents_) {
    if (a->writer != nullptr && !a->broken) a->writer->WritesDone(&a->writes_done_op);
  }
  const int64_t until = MonoNs() + 5000000000;
  while (open_streams_.load() > 0 && MonoNs() < until) absl::SleepFor(absl::Milliseconds(5));
  if (open_streams_.load() > 0) {
    err_.fetch_add(open_streams_.load());
    absl::MutexLock lock(&mu_);
    if (first_error_.empty()) {
      first_error_ = absl::StrCat(open_streams_.load(), " streams not answered within 5 s");
    }
  }
}

void Generator::SendLoop(int64_t t0_ns) {
  // The owned agents in order of their offsets (ascending with the index).
  for (int64_t k = 0; !stop_.load(); ++k) {
    for (auto& a : agents_) {
      const int64_t due = t0_ns + a->offset_ns + k * interval_ns_;
      while (!stop_.load()) {
        const int64_t now = MonoNs();
        if (now >= due) break;
        absl::SleepFor(absl::Nanoseconds(std::min<int64_t>(due - now, 100000000)));
      }
      if (stop_.load()) return;
      Send(a.get(), MonoNs(), t0_ns);
    }
  }
}

// sent ok err skipped invalid pending cpu_us maxrss_kb first_error
std::string Generator::Stats() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const int64_t cpu_us = int64_t{ru.ru_utime.tv_sec} * 1000000 + ru.ru_utime.tv_usec +
                         int64_t{ru.ru_stime.tv_sec} * 1000000 + ru.ru_stime.tv_usec;
  std::string err;
  {
    absl::MutexLock lock(&mu_);
    err = first_error_.empty() ? "-" : first_error_;
  }
  std::replace(err.begin(), err.end(), ' ', '_');
  std::replace(err.begin(), err.end(), '\n', '_');
  return absl::StrCat(sent_.load(), " ", ok_.load(), " ", err_.load(), " ", skipped_.load(), " ",
                      invalid_.load(), " ", pending_.load(), " ", cpu_us, " ", ru.ru_maxrss, " ",
                      err);
}

void Generator::Serve(FILE* in, FILE* out) {
  ServeCommands(in, out, [&](const std::vector<std::string>& w) -> std::optional<std::string> {
    std::string answer;
    const std::string& cmd = w[0];
    if (cmd == "start" && w.size() == 2) {  // start T0_NS
      int64_t t0 = 0;
      (void)absl::SimpleAtoi(w[1], &t0);
      sender_ = std::thread([this, t0] { SendLoop(t0); });
      answer = "ok";
    } else if (cmd == "stats") {
      answer = Stats();
    } else if (cmd == "latencies") {  // the report latencies (us) since the last call
      std::vector<int64_t> lat;
      {
        absl::MutexLock lock(&mu_);
        lat.swap(latencies_us_);
      }
      answer = absl::StrCat(lat.size());
      for (int64_t v : lat) absl::StrAppend(&answer, " ", v);
    } else if (cmd == "stop") {  // stops sending; waits up to 5 s for the calls in flight
      stop_.store(true);
      if (sender_.joinable()) sender_.join();
      const int64_t until = MonoNs() + 5000000000;
      while (pending_.load() > 0 && MonoNs() < until) absl::SleepFor(absl::Milliseconds(5));
      if (config_.stream) CloseStreams();
      answer = Stats();
    } else {
      return std::nullopt;
    }
    return answer;
  });
}

// ---------------------------------------------------------------------------
// Parent: the controller process, the generator processes, the HTTP prober.

std::string g_tmpdir;

std::vector<Child> StartGenerators(const Config& c) {
  return trainlet::bench::StartGenerators(c.procs, c.generators_idle,
                                          [&c](int k, FILE* in, FILE* out) {
                                            Generator gen(c, k, c.procs);
                                            gen.Serve(in, out);
                                          });
}

struct ClientStats {
  int64_t sent = 0, ok = 0, err = 0, skipped = 0, invalid = 0, pending = 0, cpu_us = 0,
          maxrss_kb = 0;
  std::string first_error;
};

ClientStats ParseStats(const std::vector<std::string>& answers) {
  ClientStats s;
  for (const std::string& a : answers) {
    std::vector<std::string> w = absl::StrSplit(a, ' ', absl::SkipEmpty());
    if (w.size() < 9) continue;
    int64_t v[8] = {};
    for (int i = 0; i < 8; ++i) (void)absl::SimpleAtoi(w[i], &v[i]);
    s.sent += v[0];
    s.ok += v[1];
    s.err += v[2];
    s.skipped += v[3];
    s.invalid += v[4];
    s.pending += v[5];
    s.cpu_us += v[6];
    s.maxrss_kb = std::max(s.maxrss_kb, v[7]);
    if (s.first_error.empty() && w[8] != "-") s.first_error = w[8];
  }
  return s;
}

struct Server {
  pid_t pid = -1;
  int port = 0;
  int http_port = 0;
  std::string log_path;
  std::string db_path;
};

Server StartServer(const Config& c) {
  Server s;
  s.port = FreePort();
  do {
    s.http_port = FreePort();
  } while (s.http_port == s.port);
  s.log_path = g_tmpdir + "/controller.log";
  s.db_path = g_tmpdir + "/c.db";
  std::vector<std::string> args = {
      c.trainlet,
      "controller",
      absl::StrCat("--listen=127.0.0.1:", s.port),
      absl::StrCat("--http=127.0.0.1:", s.http_port),
      absl::StrCat("--db=", s.db_path),
      absl::StrCat("--token-file=", g_tmpdir, "/token"),
  };
  args.insert(args.end(), c.server_args.begin(), c.server_args.end());
  fflush(stdout);
  fflush(stderr);
  s.pid = fork();
  if (s.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(s.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    dup2(fd, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    perror("execv");
    _exit(127);
  }
  TrackPid(s.pid);
  const int64_t until = MonoNs() + 30000000000;
  while (!PortOpen(s.port) || !PortOpen(s.http_port)) {
    int st;
    if (waitpid(s.pid, &st, WNOHANG) == s.pid || MonoNs() > until) {
      PrintServerLog("the controller did not start", s.log_path, 200);
      KillAll();
      exit(1);
    }
    usleep(10000);
  }
  g_target = absl::StrCat("127.0.0.1:", s.port);
  return s;
}

// SIGTERM, then SIGKILL after 5 s; the exit status (128+N for a signal).
int StopServer(Server* s) {
  kill(s->pid, SIGTERM);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
      exited = true;
      break;
    }
    usleep(10000);
  }
  if (!exited) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &status, 0);
  }
  UntrackPid(s->pid);
  s->pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// Figures in print order.
struct Figures {
  std::vector<std::pair<std::string, double>> values;
  std::vector<std::string> errors;
  void Set(const std::string& k, double v) { values.emplace_back(k, v); }
  void Fail(const std::string& e) { errors.push_back(e); }
};

void AddLatencies(Figures* f, const std::string& name, const std::vector<double>& ms) {
  f->Set(name + "_p50_ms", Percentile(ms, 50));
  f->Set(name + "_p99_ms", Percentile(ms, 99));
  f->Set(name + "_max_ms", ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()));
}

struct HttpResult {
  std::vector<double> ms;
  int64_t bytes = 0;
  int failed = 0;
  std::string first_error;
};

// One GET of `path` on a new connection, its latency or failure added to *r.
void TimedGet(int port, const std::string& path, HttpResult* r) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_keep_alive(false);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(10, 0);
  const int64_t t0 = MonoNs();
  httplib::Result res = cli.Get(path.c_str());
  const int64_t t1 = MonoNs();
  if (!res || res->status != 200 || res->body.empty()) {
    ++r->failed;
    if (r->first_error.empty()) {
      r->first_error = res ? absl::StrCat("HTTP ", res->status)
                           : absl::StrCat("error ", static_cast<int>(res.error()));
    }
    return;
  }
  r->ms.push_back((t1 - t0) / 1e6);
  r->bytes = static_cast<int64_t>(res->body.size());
}

// `requests` GETs of each path, interleaved, spread evenly from now to
// `end_ns`; one new connection per request.
std::map<std::string, HttpResult> ProbeHttp(int port, const std::vector<std::string>& paths,
                                            int requests, int64_t end_ns) {
  std::map<std::string, HttpResult> out;
  const int total = requests * static_cast<int>(paths.size());
  const int64_t start = MonoNs();
  const int64_t gap = total > 0 ? std::max<int64_t>(0, (end_ns - start) / total) : 0;
  for (int i = 0; i < total; ++i) {
    const int64_t due = start + i * gap + gap / 2;
    const int64_t now = MonoNs();
    if (due > now) absl::SleepFor(absl::Nanoseconds(due - now));
    const std::string& path = paths[i % paths.size()];
    TimedGet(port, path, &out[path]);
  }
  return out;
}

// A sample of /metrics: `name` (no labels); -1 when absent.
double ScrapeMetric(int port, const std::string& name) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(10, 0);
  httplib::Result res = cli.Get("/metrics");
  if (!res || res->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

// The second client: polls like an open page until stopped.
class Poller {
 public:
  Poller(int port, double period_s, std::string job)
      : port_(port), period_ns_(static_cast<int64_t>(period_s * 1e9)), job_(std::move(job)) {
    if (period_ns_ > 0) thread_ = std::thread([this] { Loop(); });
  }
  ~Poller() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  HttpResult jobs, page;

 private:
  void Loop() {
    int64_t next = MonoNs();
    while (!stop_) {
      TimedGet(port_, "/api/jobs", &jobs);
      TimedGet(port_, absl::StrCat("/api/jobs/", job_, "?limit=50"), &page);
      next += period_ns_;
      while (!stop_ && MonoNs() < next) absl::SleepFor(absl::Milliseconds(10));
    }
  }
  const int port_;
  const int64_t period_ns_;
  const std::string job_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

int Run(const Config& c) {
  Figures f;
  const double load_before = LoadAvg();
  Server s = StartServer(c);
  std::vector<Child> ch = StartGenerators(c);
  // The controller with no agent yet: its sweeper and idle threads.
  const int64_t idle_cpu0 = ProcCpuMs(s.pid);
  usleep(1000000);
  f.Set("controller_idle_cpu_pct_of_one_core", (ProcCpuMs(s.pid) - idle_cpu0) / 10.0);
  f.Set("controller_rss_before_agents_kb", static_cast<double>(ProcStatusKb(s.pid, "VmRSS:")));

  // Warm-up: every agent connects and sends its first report.
  const int64_t t0 = MonoNs() + 100000000;
  Broadcast(ch, absl::StrCat("start ", t0));
  const double warmup_s = c.warmup_s >= 0 ? c.warmup_s : c.interval_s + 2;
  absl::SleepFor(absl::Nanoseconds(t0 - MonoNs()) + absl::Seconds(warmup_s));
  const ClientStats w = ParseStats(Broadcast(ch, "stats"));
  if (w.sent < c.agents) {
    f.Fail(absl::StrCat("only ", w.sent, " of ", c.agents, " agents reported in the warm-up"));
  }
  f.Set("controller_rss_after_warmup_kb", static_cast<double>(ProcStatusKb(s.pid, "VmRSS:")));

  // The steady window: ingest, and the second client polling.
  Poller poller(s.http_port, c.poll_s, "bench-job-000");
  Broadcast(ch, "latencies");  // drops the warm-up's
  const ClientStats a = ParseStats(Broadcast(ch, "stats"));
  const int64_t cpu0 = ProcCpuMs(s.pid);
  const int64_t wait0 = ProcRunQueueWaitMs(s.pid);
  const int64_t w0 = MonoNs();
  absl::SleepFor(absl::Seconds(c.steady_s));
  const int64_t cpu1 = ProcCpuMs(s.pid);
  const int64_t wait1 = ProcRunQueueWaitMs(s.pid);
  const int64_t w1 = MonoNs();
  const ClientStats b = ParseStats(Broadcast(ch, "stats"));
  const double secs = (w1 - w0) / 1e9;
  f.Set("steady_s", secs);
  f.Set("controller_cpu_pct_of_one_core", 100.0 * (cpu1 - cpu0) / 1000.0 / secs);
  f.Set("controller_cpu_us_per_report",
        b.ok > a.ok ? 1000.0 * (cpu1 - cpu0) / static_cast<double>(b.ok - a.ok) : 0);
  f.Set("controller_runqueue_wait_ms", static_cast<double>(wait1 - wait0));
  f.Set("controller_rss_after_steady_kb", static_cast<double>(ProcStatusKb(s.pid, "VmRSS:")));
  f.Set("reports_sent", static_cast<double>(b.sent - a.sent));
  f.Set("reports_accepted", static_cast<double>(b.ok - a.ok));
  f.Set("reports_failed", static_cast<double>(b.err - a.err));
  f.Set("reports_skipped_in_flight", static_cast<double>(b.skipped - a.skipped));
  f.Set("reports_per_s", (b.ok - a.ok) / secs);
  f.Set("expected_reports_per_s", c.agents / c.interval_s);
  f.Set("client_cpu_pct_of_one_core", 100.0 * (b.cpu_us - a.cpu_us) / 1e6 / secs);
  std::vector<double> lat;
  for (const std::string& ans : Broadcast(ch, "latencies")) {
    std::vector<std::string> v = absl::StrSplit(ans, ' ', absl::SkipEmpty());
    for (size_t i = 1; i < v.size(); ++i) {
      int64_t us = 0;
      if (absl::SimpleAtoi(v[i], &us)) lat.push_back(us / 1000.0);
    }
  }
  AddLatencies(&f, "report", lat);

  // The views window: the same load, and the views asked for.
  if (c.http_requests > 0) {
    const std::vector<std::string> paths = {"/", "/api/jobs", "/api/jobs/bench-job-000",
                                            "/metrics"};
    const int64_t v_cpu0 = ProcCpuMs(s.pid);
    const int64_t v0 = MonoNs();
    const int64_t v_end = v0 + static_cast<int64_t>(c.views_s * 1e9);
    // The parent's own thread is idle here: it is the prober.
    std::map<std::string, HttpResult> http = ProbeHttp(s.http_port, paths, c.http_requests, v_end);
    const int64_t now = MonoNs();
    if (v_end > now) absl::SleepFor(absl::Nanoseconds(v_end - now));
    const double v_secs = (MonoNs() - v0) / 1e9;
    f.Set("views_s", v_secs);
    f.Set("controller_cpu_pct_during_views", 100.0 * (ProcCpuMs(s.pid) - v_cpu0) / 1000.0 / v_secs);
    for (const std::string& p : paths) {
      HttpResult& r = http[p];
      const std::string name = p == "/"           ? "page"
                               : p == "/api/jobs" ? "api_jobs"
                               : p == "/metrics"  ? "metrics"
                                                  : "api_job_detail";
      AddLatencies(&f, name, r.ms);
      f.Set(name + "_bytes", static_cast<double>(r.bytes));
      if (r.failed > 0) f.Fail(absl::StrCat(r.failed, " GET ", p, " failed (", r.first_error, ")"));
    }
  }
  poller.Stop();
  if (c.poll_s > 0) {
    AddLatencies(&f, "poll_api_jobs", poller.jobs.ms);
    f.Set("poll_api_jobs_bytes", static_cast<double>(poller.jobs.bytes));
    f.Set("poll_api_jobs_requests", static_cast<double>(poller.jobs.ms.size()));
    AddLatencies(&f, "poll_job_page", poller.page.ms);
    f.Set("poll_job_page_bytes", static_cast<double>(poller.page.bytes));
    for (const auto& [what, r] : {std::pair<const char*, HttpResult*>{"/api/jobs", &poller.jobs},
                                  {"/api/jobs/JOB?limit=50", &poller.page}}) {
      if (r->failed > 0) {
        f.Fail(absl::StrCat(r->failed, " polls of ", what, " failed (", r->first_error, ")"));
      }
    }
  }
  f.Set("controller_rss_kb", static_cast<double>(ProcStatusKb(s.pid, "VmRSS:")));
  f.Set("controller_hwm_kb", static_cast<double>(ProcStatusKb(s.pid, "VmHWM:")));
  f.Set("controller_rss_anon_kb", static_cast<double>(ProcStatusKb(s.pid, "RssAnon:")));
  f.Set("controller_threads", static_cast<double>(ProcStatusKb(s.pid, "Threads:")));
  f.Set("sqlite_db_bytes", static_cast<double>(FileSize(s.db_path)));
  f.Set("sqlite_wal_bytes", static_cast<double>(FileSize(s.db_path + "-wal")));

  // Every report answered; the controller's count agrees.
  const ClientStats z = ParseStats(Broadcast(ch, "stop"));
  const double received = ScrapeMetric(s.http_port, "trainlet_controller_reports_received_total");
  const double rejected = ScrapeMetric(s.http_port, "trainlet_controller_reports_rejected_total");
  const double jobs = ScrapeMetric(s.http_port, "trainlet_controller_jobs");
  f.Set("total_reports_sent", static_cast<double>(z.sent));
  f.Set("total_reports_accepted", static_cast<double>(z.ok));
  f.Set("controller_reports_received_total", received);
  f.Set("controller_reports_rejected_total", rejected);
  f.Set("controller_jobs", jobs);
  if (z.err > 0 || z.invalid > 0) {
    f.Fail(absl::StrCat(z.err, " reports failed, ", z.invalid, " invalid; first: ", z.first_error));
  }
  if (z.pending > 0) f.Fail(absl::StrCat(z.pending, " reports still unanswered after 5 s"));
  if (z.sent == 0) f.Fail("no report was sent");
  if (received != static_cast<double>(z.ok)) {
    f.Fail(absl::StrCat("the controller counts ", received, " reports received, the agents ", z.ok,
                        " accepted"));
  }
  if (jobs != c.jobs) f.Fail(absl::StrCat("the controller knows ", jobs, " jobs, not ", c.jobs));
  f.Set("generator_maxrss_kb", static_cast<double>(z.maxrss_kb));
  StopGenerators(&ch);
  const int exit_status = StopServer(&s);
  if (exit_status != 128 + SIGTERM) {
    f.Fail(absl::StrCat("the controller exited with ", exit_status, " on SIGTERM"));
  }
  const double load_after = LoadAvg();

  printf(
      "\n%d agents in %d jobs, a report every %.1f s each (%s), %d generator process(es) x %d "
      "CQ thread(s), %u CPUs, load average %.2f -> %.2f\n",
      c.agents, c.jobs, c.interval_s, c.stream ? "ReportStream" : "unary Report", c.procs, c.cqs,
      std::thread::hardware_concurrency(), load_before, load_after);
  printf("%s\n", f.errors.empty() ? "ok" : "FAILED:");
  for (const std::string& e : f.errors) printf("    %s\n", e.c_str());
  for (const auto& [k, v] : f.values) printf("    %-45s %12.1f\n", k.c_str(), v);
  std::string json = absl::StrFormat(
      "{\"bench\":\"controller_load\",\"agents\":%d,\"jobs\":%d,\"interval_s\":%g,\"procs\":%d,"
      "\"cqs\":%d,\"generators_sched\":\"%s\",\"rpc\":\"%s\",\"cpus\":%u,\"load_before\":%.2f,"
      "\"load_after\":%.2f,\"poll_s\":%g,"
      "\"ok\":%s",
      c.agents, c.jobs, c.interval_s, c.procs, c.cqs, c.generators_idle ? "idle" : "normal",
      c.stream ? "stream" : "unary", std::thread::hardware_concurrency(), load_before, load_after,
      c.poll_s, f.errors.empty() ? "true" : "false");
  for (const auto& [k, v] : f.values) absl::StrAppendFormat(&json, ",\"%s\":%.3f", k, v);
  absl::StrAppend(&json, "}");
  printf("%s\n", json.c_str());
  if (!f.errors.empty()) PrintServerLog("the run failed", s.log_path, 200);
  return f.errors.empty() ? 0 : 1;
}

}  // namespace

int Main(int argc, char** argv) {
  // As `trainlet` does (common/deadlock_detection.h): off in release builds.
  trainlet::ConfigureDeadlockDetection();
  Config c;
  std::string v;
  UsageProblem bad;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "--agents", &v)) {
      bad.Int("--agents", v, &c.agents);
    } else if (Flag(argv[i], "--jobs", &v)) {
      bad.Int("--jobs", v, &c.jobs);
    } else if (Flag(argv[i], "--interval", &v)) {
      bad.Number("--interval", v, &c.interval_s);
    } else if (Flag(argv[i], "--steady", &v)) {
      bad.Int("--steady", v, &c.steady_s);
    } else if (Flag(argv[i], "--warmup", &v)) {
      bad.Number("--warmup", v, &c.warmup_s);
    } else if (Flag(argv[i], "--procs", &v)) {
      bad.Int("--procs", v, &c.procs);
    } else if (Flag(argv[i], "--cqs", &v)) {
      bad.Int("--cqs", v, &c.cqs);
    } else if (Flag(argv[i], "--http-requests", &v)) {
      bad.Int("--http-requests", v, &c.http_requests);
    } else if (Flag(argv[i], "--deadline", &v)) {
      bad.Number("--deadline", v, &c.deadline_s);
    } else if (Flag(argv[i], "--generators-sched", &v)) {
      bad.OneOf("--generators-sched", v, {"normal", "idle"});
      c.generators_idle = v == "idle";
    } else if (Flag(argv[i], "--rpc", &v)) {
      bad.OneOf("--rpc", v, {"stream", "unary"});
      c.stream = v == "stream";
    } else if (Flag(argv[i], "--views", &v)) {
      bad.Number("--views", v, &c.views_s);
    } else if (Flag(argv[i], "--poll", &v)) {
      bad.Number("--poll", v, &c.poll_s);
    } else if (Flag(argv[i], "--server-arg", &v)) {
      c.server_args.push_back(v);
    } else if (Flag(argv[i], "--trainlet", &v)) {
      c.trainlet = v;
    } else {
      bad.Unknown(argv[i]);
    }
  }
  // The controller's caps: 256 jobs, 4,096 nodes per job, 8,192 in all.
  bad.InRange("--agents", c.agents, 1, 8192);
  bad.Require(c.jobs >= 1 && c.jobs <= 256 && c.jobs <= c.agents,
              absl::StrCat("--jobs=", c.jobs, ": 1 to 256, and at most --agents"));
  bad.Require(c.jobs < 1 || (c.agents + c.jobs - 1) / c.jobs <= 4096,
              absl::StrCat("--agents=", c.agents, " --jobs=", c.jobs,
                           ": at most 4,096 agents per job (the controller's cap)"));
  bad.InRange("--interval", c.interval_s, 0.1, 3600.0);
  bad.AtLeast("--steady", c.steady_s, 1);
  bad.Require(c.views_s > 0, absl::StrCat("--views=", c.views_s, ": above 0 seconds"));
  bad.AtLeast("--deadline", c.deadline_s, 0.0);
  bad.InRange("--procs", c.procs, 1, 64);
  bad.AtLeast("--cqs", c.cqs, 1);
  bad.AtLeast("--http-requests", c.http_requests, 0);
  bad.AtLeast("--poll", c.poll_s, 0.0);
  bad.Executable("--trainlet", c.trainlet);
  if (bad.Print(argv[0])) {
    fprintf(stderr,
            "usage: %s --trainlet=PATH [--agents=1000 (1..8192)] [--jobs=50 (1..256)]\n"
            "    [--interval=SECONDS (5)] [--steady=SECONDS (60)] [--warmup=SECONDS "
            "(interval+2)]\n"
            "    [--procs=1] [--cqs=2] [--http-requests=50] [--views=SECONDS (25)]\n"
            "    [--rpc=stream|unary (stream: what trainlet run does)]\n"
            "    [--deadline=SECONDS (each Report call's: 2; 0: none)]\n"
            "    [--generators-sched=normal|idle] [--poll=SECONDS (1; 0: no polling client)]\n"
            "    [--server-arg=ARG]...\n",
            argv[0]);
    return 64;
  }
  if (!RaiseDescriptorLimitFor(c.agents)) return 1;
  InstallSignalHandlers();
  g_tmpdir = MakeRunDir("controller_load", kToken);
  if (g_tmpdir.empty()) return 1;
  const int64_t t0 = MonoNs();
  const int rc = Run(c);
  printf("total %.1f s\n", (MonoNs() - t0) / 1e9);
  KillAll();
  if (rc == 0) {
    std::error_code ec;
    std::filesystem::remove_all(g_tmpdir, ec);
  } else {
    fprintf(stderr, "controller log and database kept in %s\n", g_tmpdir.c_str());
  }
  return rc;
}

}  // namespace trainlet::bench

int main(int argc, char** argv) { return trainlet::bench::Main(argc, argv); }
