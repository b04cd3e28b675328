#include "controller/views.h"

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
  EXPECT_EQ(t.nodes, 3);
  EXPECT_EQ(t.nodes_up, 2);
  EXPECT_EQ(t.workers, 6);
  EXPECT_EQ(t.workers_running, 3);
  EXPECT_EQ(t.progress_step, 1210);
  EXPECT_EQ(t.progress_age_ms, 400);
  EXPECT_EQ(t.report_lag_ms, 40);
  EXPECT_EQ(t.gpus_fatal, 1);
  EXPECT_EQ(t.gpus_degraded, 1);
}

TEST(ParseSnapshotJson, RoundTripsRenderJson) {
  const ControllerSnapshot original = SampleSnapshot(7);
  auto parsed = ParseSnapshotJson(RenderJson(original));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // Same document again (invalid UTF-8 became U+FFFD the first time).
  EXPECT_EQ(RenderJson(*parsed), RenderJson(original));
  EXPECT_EQ(parsed->jobs[0].nodes[2].incarnation, 0xffffffffffffffffu);
  // The table too (but for the invalid UTF-8, now U+FFFD).
  EXPECT_EQ(RenderStatusTable(*parsed, "demo"), RenderStatusTable(original, "demo"));
}

TEST(ParseSnapshotJson, NotJsonOrOtherSchema_IsInvalidArgument) {
  EXPECT_EQ(ParseSnapshotJson("<html>").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSnapshotJson("{\"schema\":2}").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSnapshotJson(std::string(100, ' '), 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainlet::controller
