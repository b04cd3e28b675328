// Helpers for the controller core's tests: reports as agents send them, and
// a HistorySink that records what the core hands it (and can give it back
// as a store would at start). Header-only.
#ifndef TRAINLET_CONTROLLER_TESTING_CORE_REPORTS_H_
#define TRAINLET_CONTROLLER_TESTING_CORE_REPORTS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "controller/controller_core.h"
#include "controller/report_limits.h"
#include "preflight/check_result.h"
#include "trainlet/v1/controller.pb.h"
#include "trainlet/v1/preflight.pb.h"

namespace trainlet::controller::testing {

class RecordingSink : public HistorySink {
 public:
  absl::Status Append(const HistoryBatch& batch) override {
    if (fail) return absl::UnavailableError("disk full");
    for (const HistoryRecord& r : batch.entries) records.push_back(r);
    for (const auto& j : batch.jobs) jobs[j.first] = j.second;
    ++appends;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Evidence(const std::string& job_id, int64_t seq) override {
    for (const HistoryRecord& r : records) {
      if (r.job_id == job_id && r.entry.seq() == seq) return r.entry.evidence();
    }
    return absl::NotFoundError("no such entry");
  }
  // What a store would load at start: the saved summaries and the entries,
  // evidence cut as HistoryStore::Load cuts it.
  StoredHistory Stored() const {
    StoredHistory s;
    s.jobs.assign(jobs.begin(), jobs.end());
    s.entries = records;
    for (HistoryRecord& r : s.entries) {
      r.entry.set_evidence_bytes(static_cast<int>(r.entry.evidence().size()));
      FitText(r.entry.mutable_evidence(), kEvidenceSummaryBytes);
    }
    return s;
  }
  std::vector<HistoryRecord> records;
  std::map<std::string, v1::JobRecord> jobs;
  int appends = 0;
  bool fail = false;
};

// A report of `node` (incarnation `inc`, sequence `seq`) in `round`:
// RUNNING with node rank 0 in a round, JOINING before the first.
inline v1::HealthReport MakeReport(const std::string& job, const std::string& node, uint64_t inc,
                                   uint64_t seq, uint64_t round) {
  v1::HealthReport r;
  r.set_job_id(job);
  r.set_node_id(node);
  r.set_incarnation(inc);
  r.set_sequence(seq);
  r.set_round(round);
  r.set_node_rank(round > 0 ? 0 : -1);
  r.set_nnodes(2);
  r.set_world_size(16);
  r.set_state(round > 0 ? v1::HealthReport::RUNNING : v1::HealthReport::JOINING);
  r.set_report_interval_ms(5000);
  r.set_exit_code(-1);
  return r;
}

inline v1::WorkerHealth* AddWorker(v1::HealthReport* r, int local_rank, int rank,
                                   v1::WorkerHealth::State state, int exit_code = 0) {
  v1::WorkerHealth* w = r->add_workers();
  w->set_local_rank(local_rank);
  w->set_rank(rank);
  w->set_pid(state == v1::WorkerHealth::RUNNING ? 1000 + rank : 0);
  w->set_state(state);
  if (state != v1::WorkerHealth::RUNNING) w->set_exit_code(exit_code);
  return w;
}

inline void SetProgress(v1::HealthReport* r, int64_t step, const std::string& loss = "") {
  v1::Progress* p = r->mutable_progress();
  p->set_known(true);
  p->set_step(step);
  if (!loss.empty()) {
    v1::ProgressField* f = p->add_fields();
    f->set_key("loss");
    f->set_value(loss);
  }
}

inline v1::ReportEvent* AddEvent(v1::HealthReport* r, v1::ReportEvent::Kind kind, uint64_t id,
                                 uint64_t round, const std::string& cause) {
  v1::ReportEvent* e = r->add_events();
  e->set_kind(kind);
  e->set_id(id);
  e->set_round(round);
  e->set_cause(cause);
  return e;
}

// A preflight of the report's node and incarnation for `round`: the
// checks named in `failed` FAIL ("<check> failed here"), one check passes
// (shm_size) and one is skipped (gpu_ecc: no NVML).
inline v1::PreflightReport* SetPreflight(v1::HealthReport* r, uint64_t round,
                                         const std::vector<std::string>& failed = {}) {
  v1::PreflightReport* p = r->mutable_preflight();
  p->Clear();
  p->set_node_id(r->node_id());
  p->set_incarnation(r->incarnation());
  p->set_round(round);
  *p->add_results() = preflight::MakeResult("shm_size", v1::CheckResult::PASS, "/dev/shm has 8 GiB",
                                            8.0 * (1 << 30), preflight::kUnitBytes, 1 << 30);
  *p->add_results() = preflight::Skipped("gpu_ecc", "no NVML on this node");
  for (const std::string& check : failed) {
    *p->add_results() = preflight::MakeResult(check, v1::CheckResult::FAIL, check + " failed here");
  }
  v1::LinkResult* link = p->add_links();
  link->set_from_node(r->node_id());
  link->set_to_node("peer");
  link->set_bandwidth_bytes_per_second(1e9);
  return p;
}

}  // namespace trainlet::controller::testing

#endif  // TRAINLET_CONTROLLER_TESTING_CORE_REPORTS_H_
