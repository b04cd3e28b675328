#include "controller/views.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/testing/golden.h"
#include "controller/testing/sample_snapshot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::SampleSnapshot;

const char kTestData[] = TRAINLET_CONTROLLER_TESTDATA;

TEST(RenderJson, SampleSnapshot_MatchesGolden) {
  trainlet::testing::ExpectGoldenFile(kTestData, "views_sample.json", RenderJson(SampleSnapshot()));
}

TEST(RenderPrometheus, SampleSnapshot_MatchesGolden) {
  trainlet::testing::ExpectGoldenFile(kTestData, "views_sample.prom",
                                      RenderPrometheus(SampleSnapshot()));
}

TEST(RenderStatusTable, AllJobs_MatchesGolden) {
  trainlet::testing::ExpectGoldenFile(kTestData, "views_sample_table.txt",
                                      RenderStatusTable(SampleSnapshot()));
}

TEST(RenderStatusTable, OneJob_ShowsWorkersGpusAndEvidence) {
  const std::string table = RenderStatusTable(SampleSnapshot(), "demo");
  trainlet::testing::ExpectGoldenFile(kTestData, "views_sample_table_demo.txt", table);
  EXPECT_THAT(table, HasSubstr("evidence: thread 5201 state D"));
  EXPECT_THAT(table, Not(HasSubstr("odd")));
}

TEST(RenderStatusTable, UnknownJob_SaysSo) {
  EXPECT_THAT(RenderStatusTable(SampleSnapshot(), "nope"), HasSubstr("no job nope\n"));
  EXPECT_THAT(RenderStatusTable(ControllerSnapshot{}), HasSubstr("no jobs\n"));
}

TEST(RenderStatusTable, NetworkStrings_AreEscapedForTheTerminal) {
  const std::string table = RenderStatusTable(SampleSnapshot());
  EXPECT_THAT(table, Not(HasSubstr("\x01")));
  EXPECT_THAT(table, Not(HasSubstr("\xff")));
  EXPECT_THAT(table, HasSubstr("odd\"job\\\\<b>&\\n"));
}

TEST(JsonQuote, EscapesQuotesControlsHtmlAndInvalidUtf8) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\r\t\x01<>&"),
            "\"a\\\"b\\\\c\\n\\r\\t\\u0001\\u003c\\u003e\\u0026\"");
  EXPECT_EQ(JsonQuote("\xff"), "\"\xEF\xBF\xBD\"");
  EXPECT_EQ(JsonQuote("\xC3\xA9"), "\"\xC3\xA9\"");                                  // é stays.
  EXPECT_EQ(JsonQuote("\xC0\xAF"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");                  // overlong.
  EXPECT_EQ(JsonQuote("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // surrogate.
  EXPECT_EQ(JsonQuote("\xE2\x82"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");                  // truncated.
}

TEST(JsonQuote, LongText_IsBounded) {
  EXPECT_EQ(JsonQuote(std::string(100000, 'x')).size(), 4096u + 2);
}

TEST(PrometheusLabelValue, EscapesPerTheTextFormat) {
  EXPECT_EQ(PrometheusLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(PrometheusLabelValue("\xff"), "\xEF\xBF\xBD");
  EXPECT_EQ(PrometheusLabelValue(std::string(1000, 'x')).size(), 256u);
}

TEST(RenderPrometheus, UnknownProgress_IsAbsentNotZero) {
  ControllerSnapshot s;
  JobView job;
  job.job_id = "j";
  job.nodes.push_back(NodeView{});
  s.jobs = {job};
  const std::string metrics = RenderPrometheus(s);
  EXPECT_THAT(metrics, Not(HasSubstr("trainlet_job_progress_step{")));
  EXPECT_THAT(metrics, Not(HasSubstr("trainlet_job_progress_age_seconds{")));
  EXPECT_THAT(metrics, HasSubstr("trainlet_job_nodes_up{job_id=\"j\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("# TYPE trainlet_job_restarts_total counter\n"));
}

TEST(TotalsOf, HighestStepFreshestProgressLargestLagOfNodesUp) {
  const JobTotals t = TotalsOf(SampleSnapshot(2).jobs[0]);
  // demo-node-3 is lost: its step (300), workers and node count nowhere.
  EXPECT_EQ(t.nodes, 3);
  EXPECT_EQ(t.nodes_lost, 1);
  EXPECT_EQ(t.nodes_up, 2);
  EXPECT_EQ(t.workers, 6);
  EXPECT_EQ(t.workers_running, 3);
  EXPECT_EQ(t.progress_step, 1210);
  EXPECT_EQ(t.progress_age_ms, 400);
  EXPECT_EQ(t.report_lag_ms, 40);
  EXPECT_EQ(t.gpus_fatal, 1);
  EXPECT_EQ(t.gpus_degraded, 1);
}

TEST(TotalsOf, LostNodeCountsNowhere) {
  JobView job;
  NodeView member;
  member.up = true;
  member.workers = {{0, 0, 1, WorkerState::kRunning, 0, 0, 0}};
  member.progress.known = true;
  member.progress.step = 10;
  NodeView lost = member;
  lost.lost = true;
  lost.progress.step = 99;  // its last step, older and higher: not the job's.
  job.nodes = {member, lost};
  const JobTotals t = TotalsOf(job);
  EXPECT_EQ(t.nodes, 1);
  EXPECT_EQ(t.nodes_up, 1);
  EXPECT_EQ(t.nodes_lost, 1);
  EXPECT_EQ(t.workers, 1);
  EXPECT_EQ(t.workers_running, 1);
  EXPECT_EQ(t.progress_step, 10);
}

TEST(TotalsOf, FinishedJob_HasNoProgressAge) {
  const ControllerSnapshot s = SampleSnapshot();
  EXPECT_EQ(s.jobs[1].job_id, "done");
  EXPECT_EQ(TotalsOf(s.jobs[1]).progress_age_ms, -1);
  EXPECT_EQ(TotalsOf(s.jobs[1]).progress_step, 500);
}

TEST(RenderJobsJson, SummariesWithoutNodesButWithTimesCommandAndHeadline) {
  const std::string json = RenderJobsJson(SampleSnapshot());
  EXPECT_THAT(json, Not(HasSubstr("\"nodes\":[")));
  EXPECT_THAT(json, Not(HasSubstr("demo-node-0")));
  EXPECT_THAT(json, HasSubstr("\"started_unix_ms\":1795431600000"));
  EXPECT_THAT(json, HasSubstr("\"duration_ms\":3600000"));
  EXPECT_THAT(json, HasSubstr("\"command\":\"python train.py --epochs 10\""));
  EXPECT_THAT(json, HasSubstr("\"headline\":\"rank 3 on demo-node-1 hung: no progress for 60s at "
                              "11:59:10 UTC\""));
  EXPECT_THAT(json, HasSubstr("\"text\":\"waiting for 1 more node (min 2), giving up in 4m50s\""));
  EXPECT_THAT(json, HasSubstr("\"nodes_lost\":1"));
  auto parsed = ParseSnapshotJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->jobs.size(), 4u);
  EXPECT_EQ(parsed->jobs[0].totals.nodes_up, 2);
  EXPECT_TRUE(parsed->jobs[0].nodes.empty());
}

TEST(RenderJobJson, NodesStopAtTheByteCapAndSayWhereTheNextPageStarts) {
  const ControllerSnapshot s = SampleSnapshot();
  const JobView& demo = s.jobs[0];
  size_t written = 0;
  const std::string all = RenderJobJson(s, demo, SIZE_MAX, &written);
  EXPECT_EQ(written, 4u);
  // A cap below one node still writes one; then each page says the next.
  const std::string one = RenderJobJson(s, demo, 1, &written);
  EXPECT_EQ(written, 1u);
  ControllerSnapshot figures;
  JobView job;
  int64_t next = 0;
  ASSERT_TRUE(ParseJobJson(one, &figures, &job, &next).ok());
  EXPECT_EQ(next, 1);
  EXPECT_EQ(job.nodes.size(), 1u);
  EXPECT_EQ(job.nodes_total, 4);
  EXPECT_EQ(figures.now_unix_ms, s.now_unix_ms);
  ASSERT_TRUE(ParseJobJson(all, &figures, &job, &next).ok());
  EXPECT_EQ(next, -1);
  // Everything but the nodes is in every page: the same document again.
  EXPECT_EQ(RenderJobJson(figures, job), all);
  EXPECT_EQ(job.series.points.size(), 24u);
  EXPECT_TRUE(std::isnan(job.series.points[7].values[0]));
  EXPECT_TRUE(job.nodes[3].lost);
  EXPECT_TRUE(job.hangs[0].suspect);
}

TEST(RenderPrometheus, FinishedJobHasNoProgressAgeButItsEndTime) {
  const std::string m = RenderPrometheus(SampleSnapshot());
  EXPECT_THAT(m, HasSubstr("trainlet_job_progress_age_seconds{job_id=\"demo\"} 0.400\n"));
  EXPECT_THAT(m, Not(HasSubstr("trainlet_job_progress_age_seconds{job_id=\"done\"}")));
  EXPECT_THAT(m, HasSubstr("trainlet_job_end_time_seconds{job_id=\"done\"} 1795431540.000\n"));
  EXPECT_THAT(m, Not(HasSubstr("trainlet_job_end_time_seconds{job_id=\"demo\"}")));
  EXPECT_THAT(m, HasSubstr("trainlet_job_start_time_seconds{job_id=\"demo\"} 1795431600.000\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_job_info{job_id=\"done\",state=\"succeeded\"} 1\n"));
}

TEST(RenderPrometheus, NumericProgressFieldsWorkersAndBuildInfo) {
  const std::string m = RenderPrometheus(SampleSnapshot());
  EXPECT_THAT(m, HasSubstr("trainlet_build_info{version=\"0.1.0\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_node_progress_value{job_id=\"demo\",node_id=\"demo-node-0\","
                           "field=\"loss\"} 0.31\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_node_progress_value{job_id=\"demo\",node_id=\"demo-node-0\","
                           "field=\"lr\"} 0.0003\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_worker_restarts_total{job_id=\"demo\",node_id=\"demo-node-0\","
                           "local_rank=\"1\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_worker_progress_step{job_id=\"demo\",node_id=\"demo-node-1\","
                           "local_rank=\"1\"} 1195\n"));
  // The lost node: up 0, lost 1, and its old step is not a series.
  EXPECT_THAT(m, HasSubstr("trainlet_node_lost{job_id=\"demo\",node_id=\"demo-node-3\"} 1\n"));
  EXPECT_THAT(
      m, Not(HasSubstr("trainlet_node_progress_step{job_id=\"demo\",node_id=\"demo-node-3\"}")));
  EXPECT_THAT(m, HasSubstr("trainlet_job_nodes_lost{job_id=\"demo\"} 1\n"));
}

TEST(RenderPrometheus, WorkerSeries_AreCapped) {
  ControllerSnapshot s;
  JobView job;
  job.job_id = "wide";
  NodeView node;
  node.node_id = "n";
  for (int w = 0; w < kMaxWorkerSeries + 10; ++w)
    node.workers.push_back({w, w, 1, WorkerState::kRunning, 0, 0, 0});
  job.nodes = {node};
  s.jobs = {job};
  const std::string m = RenderPrometheus(s);
  EXPECT_THAT(m, HasSubstr("trainlet_controller_metrics_workers_omitted 10\n"));
  EXPECT_THAT(m, Not(HasSubstr(absl::StrCat("local_rank=\"", kMaxWorkerSeries, "\""))));
}

// ---- Preflight (issue 29).

TEST(RenderPrometheus, PreflightCheck_OneSeriesPerCheckWithItsOutcome) {
  const std::string m = RenderPrometheus(SampleSnapshot());
  EXPECT_THAT(m, HasSubstr("# TYPE trainlet_preflight_check gauge\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_preflight_check{job_id=\"demo\",node_id=\"demo-node-1\","
                           "check=\"dns\",outcome=\"fail\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_preflight_check{job_id=\"demo\",node_id=\"demo-node-1\","
                           "check=\"shm_size\",outcome=\"pass\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_preflight_check{job_id=\"demo\",node_id=\"demo-node-0\","
                           "check=\"path_round_trip\",outcome=\"skipped\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_preflight_failed_checks{job_id=\"demo\","
                           "node_id=\"demo-node-1\"} 2\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_preflight_failed_checks{job_id=\"demo\","
                           "node_id=\"demo-node-0\"} 0\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_job_nodes_preflight_failed{job_id=\"demo\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("trainlet_controller_metrics_preflight_omitted 0\n"));
  // No preflight: no series (not a zero). Lost: history, not the job's.
  EXPECT_THAT(m, Not(HasSubstr("node_id=\"demo-node-2\",check=")));
  EXPECT_THAT(m, Not(HasSubstr("trainlet_preflight_failed_checks{job_id=\"demo\","
                               "node_id=\"demo-node-2\"}")));
  EXPECT_THAT(m, Not(HasSubstr("node_id=\"demo-node-3\",check=")));
  // A check name that is no label ([a-z0-9_]{1,32}) makes no series.
  EXPECT_THAT(m, Not(HasSubstr("Bad Name")));
}

TEST(RenderPrometheus, PreflightCheck_NameSentTwiceIsOneSeriesWithTheWorstOutcome) {
  ControllerSnapshot s;
  JobView job;
  job.job_id = "j";
  NodeView node;
  node.node_id = "n";
  node.preflight.known = true;
  node.preflight.checks = {{"dns", CheckOutcome::kPass, "", 0, "", 0},
                           {"dns", CheckOutcome::kFail, "", 0, "", 0},
                           {"dns", CheckOutcome::kSkipped, "", 0, "", 0}};
  job.nodes = {node};
  s.jobs = {job};
  const std::string m = RenderPrometheus(s);
  EXPECT_THAT(m, HasSubstr("trainlet_preflight_check{job_id=\"j\",node_id=\"n\",check=\"dns\","
                           "outcome=\"fail\"} 1\n"));
  EXPECT_THAT(m, Not(HasSubstr("outcome=\"pass\"")));
  EXPECT_THAT(m, Not(HasSubstr("outcome=\"skipped\"")));
}

TEST(RenderPrometheus, PreflightSeries_AreCappedButAFailureIsNeverLeftOut) {
  ControllerSnapshot s;
  JobView job;
  job.job_id = "wide";
  NodeView node;
  node.preflight.known = true;
  node.preflight.checks = {{"dns", CheckOutcome::kPass, "", 0, "", 0},
                           {"memlock", CheckOutcome::kSkipped, "", 0, "", 0}};
  const int nodes = kMaxPreflightSeries / 2 + 5;
  for (int i = 0; i < nodes; ++i) {
    node.node_id = absl::StrCat("n", i);
    job.nodes.push_back(node);
  }
  job.nodes.back().preflight.checks[0].outcome = CheckOutcome::kFail;
  s.jobs = {job};
  const std::string m = RenderPrometheus(s);
  EXPECT_THAT(m, HasSubstr("trainlet_controller_metrics_preflight_omitted 9\n"));
  EXPECT_THAT(m, HasSubstr(absl::StrCat("node_id=\"n", nodes - 1,
                                        "\",check=\"dns\",outcome=\"fail\"} 1\n")));
}

TEST(TotalsOf, PreflightFailedNodes_MembersOnly) {
  const JobTotals t = TotalsOf(SampleSnapshot().jobs[0]);
  // demo-node-3 failed one too, but it is lost.
  EXPECT_EQ(t.nodes_preflight_failed, 1);
  EXPECT_THAT(t.preflight_failed_nodes, ::testing::ElementsAre("demo-node-1"));
}

TEST(RenderStatusTable, Preflight_BadNodesAndEachFailedCheckWithItsReason) {
  const std::string all = RenderStatusTable(SampleSnapshot());
  EXPECT_THAT(all, HasSubstr("  preflight failed on: demo-node-1\n"));
  EXPECT_THAT(all, HasSubstr("  demo-node-1 preflight round 3: 2 failed\n"
                             "    gpu_ecc: GPU 1 (GPU-2) has 1 uncorrectable ECC error\n"
                             "    dns: 1 of 3 names do not resolve: demo-node-2 (Domain name not "
                             "found)\n"));
  EXPECT_THAT(all, Not(HasSubstr("demo-node-0 preflight round")));
  EXPECT_THAT(all, HasSubstr("1 node failed\n"));
  // The reason is text for a terminal.
  EXPECT_THAT(all, HasSubstr("Bad Name\"}: <img src=x onerror=alert(2)>"));

  // With the job named: every check that did not pass, and the links.
  const std::string demo = RenderStatusTable(SampleSnapshot(), "demo");
  EXPECT_THAT(demo, HasSubstr("  preflight checks that did not pass (4 passed):\n"));
  EXPECT_THAT(demo, ::testing::ContainsRegex(
                        "demo-node-0 +3 +path_round_trip +skipped +no --preflight-path\n"));
  EXPECT_THAT(demo, ::testing::ContainsRegex("demo-node-1 +3 +dns +fail +1 of 3 names"));
  EXPECT_THAT(demo, ::testing::ContainsRegex("demo-node-0 +demo-node-1 +1.25 GB/s +0.120ms +-\n"));
  EXPECT_THAT(demo, ::testing::ContainsRegex("demo-node-1 +demo-node-2 +- +- +connect to"));
}

TEST(ParseJobJson, PreflightRoundTrips) {
  const ControllerSnapshot s = SampleSnapshot();
  ControllerSnapshot figures;
  JobView job;
  int64_t next = 0;
  ASSERT_TRUE(ParseJobJson(RenderJobJson(s, s.jobs[0]), &figures, &job, &next).ok());
  const PreflightView& p = job.nodes[1].preflight;
  EXPECT_TRUE(p.known);
  EXPECT_EQ(p.round, 3u);
  EXPECT_EQ(p.failed(), 2);
  EXPECT_EQ(p.passed(), 1);
  EXPECT_EQ(p.skipped(), 1);
  EXPECT_EQ(p.checks[2].reason, "1 of 3 names do not resolve: demo-node-2 (Domain name not found)");
  EXPECT_EQ(p.links[0].error, "connect to 10.0.0.3:29510: refused");
  EXPECT_FALSE(job.nodes[2].preflight.known);
  EXPECT_THAT(job.totals.preflight_failed_nodes, ::testing::ElementsAre("demo-node-1"));
  // The summaries name the bad nodes too.
  auto summary = ParseSnapshotJson(RenderJobsJson(s));
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->jobs[0].totals.nodes_preflight_failed, 1);
  EXPECT_THAT(summary->jobs[0].totals.preflight_failed_nodes,
              ::testing::ElementsAre("demo-node-1"));
}

TEST(ParseJobJson, SlowNodesRoundTrip_AndTheTableNamesThem) {
  const ControllerSnapshot s = SampleSnapshot();
  ControllerSnapshot figures;
  JobView job;
  int64_t next = 0;
  ASSERT_TRUE(ParseJobJson(RenderJobJson(s, s.jobs[0]), &figures, &job, &next).ok());
  ASSERT_EQ(job.slow_nodes.size(), 1u);
  EXPECT_EQ(job.slow_nodes[0].node_id, "demo-node-2");
  EXPECT_EQ(job.slow_nodes[0].cause, "cpu");
  EXPECT_EQ(job.slow_nodes[0].since_unix_ms, 1795435090000);
  EXPECT_EQ(job.slow_nodes[0].slowdown_percent, 88);
  EXPECT_EQ(job.slow_nodes[0].evidence, s.jobs[0].slow_nodes[0].evidence);
  // What `trainlet status JOB` prints, from the parsed job.
  ControllerSnapshot parsed = figures;
  parsed.jobs = {job};
  EXPECT_THAT(RenderStatusTable(parsed, "demo"),
              HasSubstr("  slow node: node demo-node-2 is slow (cpu): its workers waited"));
  // A hostile node id or cause is escaped in the metric's labels.
  ControllerSnapshot hostile = s;
  hostile.jobs[0].slow_nodes[0].node_id = "n\"}\nfake 1";
  EXPECT_THAT(RenderPrometheus(hostile), HasSubstr("node_id=\"n\\\"}\\nfake 1\""));
  // A finished job's slow nodes stay on its page, not in the metrics.
  ControllerSnapshot finished = s;
  finished.jobs[0].state = JobState::kFailed;
  finished.jobs[0].ended_unix_ms = s.now_unix_ms;
  EXPECT_THAT(RenderPrometheus(finished), Not(HasSubstr("trainlet_slow_node{")));
  EXPECT_THAT(RenderStatusTable(finished, "demo"), HasSubstr("slow node: node demo-node-2"));
}

TEST(HeadlineOf, TextAndTimeOrBuiltFromTheFields) {
  RootCauseView c{true, "worker-failed", "node-b", 2, 0, 3, 1795435200000 - 7000, 1, ""};
  EXPECT_EQ(HeadlineOf(c), "rank 2 on node-b exited 3 at 11:59:53 UTC");
  c.text = "rank 2 on node-b exited with code 3";
  EXPECT_EQ(HeadlineOf(c), "rank 2 on node-b exited with code 3 at 11:59:53 UTC");
  RootCauseView lost{true, "node-lost", "node-c", -1, -1, -1, 0, 1, ""};
  EXPECT_EQ(HeadlineOf(lost), "node-c was lost");
}

TEST(WaitingText, MoreNodesAndTheTimeLeft) {
  WaitingView w{true, 1, 2, 4, 1000 + 290000, 2};
  EXPECT_EQ(WaitingText(w, 1000), "waiting for 1 more node (min 2), giving up in 4m50s");
  w.nodes = 0;
  w.gives_up_unix_ms = 0;
  EXPECT_EQ(WaitingText(w, 1000), "waiting for 2 more nodes (min 2)");
  EXPECT_EQ(WaitingText(WaitingView{}, 1000), "");
}

TEST(RenderEvidenceText, EveryLineMadeSafe) {
  std::string evidence;
  for (int i = 0; i < 300; ++i) absl::StrAppend(&evidence, "line ", i, "\tx\x1b[31m\n");
  const std::string text = RenderEvidenceText(
      "j", {{2, 1795435200000, "node-a", "hung: no progress for 60s", evidence, 4}});
  EXPECT_THAT(text, HasSubstr("hang 4: round 2, 2026-11-23T12:00:00Z, node node-a"));
  EXPECT_THAT(text, HasSubstr("line 0\tx\\x1b[31m\n"));
  EXPECT_THAT(text, HasSubstr("line 299\t"));
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_EQ(RenderEvidenceText("j", {}), "job j: no hang evidence\n");
}

TEST(ParseSnapshotJson, RoundTripsRenderJson) {
  const ControllerSnapshot original = SampleSnapshot(7);
  auto parsed = ParseSnapshotJson(RenderJson(original));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // Same document again (invalid UTF-8 became U+FFFD the first time).
  EXPECT_EQ(RenderJson(*parsed), RenderJson(original));
  EXPECT_EQ(parsed->jobs[0].nodes[2].incarnation, 0xffffffff00000000u);
  // The table too (but for the invalid UTF-8, now U+FFFD).
  EXPECT_EQ(RenderStatusTable(*parsed, "demo"), RenderStatusTable(original, "demo"));
}

TEST(ParseSnapshotJson, NotJsonOrOtherSchema_IsInvalidArgument) {
  EXPECT_EQ(ParseSnapshotJson("<html>").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSnapshotJson("{\"schema\":1}").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSnapshotJson(std::string(100, ' '), 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainlet::controller

namespace trainlet::controller {
namespace {

// docs/topology.md, "Rank order": each node's domains, in every view; a
// node that said nothing adds nothing (the goldens above stand).
TEST(Views, NodeTopology_ShownInTheTableAndTheJson) {
  ControllerSnapshot s = SampleSnapshot();
  ASSERT_FALSE(s.jobs.empty());
  ASSERT_FALSE(s.jobs[0].nodes.empty());
  s.jobs[0].nodes[0].topology = "zone=z1,switch=s0";
  const std::string id = s.jobs[0].nodes[0].node_id;
  EXPECT_THAT(RenderStatusTable(s, s.jobs[0].job_id),
              HasSubstr(id + " topology: zone=z1,switch=s0\n"));
  const std::string json = RenderJson(s);
  EXPECT_THAT(json, HasSubstr("\"topology\":\"zone=z1,switch=s0\""));
  auto parsed = ParseSnapshotJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->jobs[0].nodes[0].topology, "zone=z1,switch=s0");
}

}  // namespace
}  // namespace trainlet::controller
