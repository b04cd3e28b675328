#include "preflight/check_result.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::preflight {
namespace check_result_test {

using ::testing::HasSubstr;

v1::PreflightReport GoodReport() {
  v1::PreflightReport r;
  r.set_node_id("pod-0");
  r.set_incarnation(7);
  r.set_round(3);
  *r.add_results() =
      MakeResult(kCheckDns, v1::CheckResult::PASS, "3 names resolved", 0, kUnitCount);
  *r.add_results() =
      MakeResult(kCheckClockOffset, v1::CheckResult::PASS, "ahead", -0.25, kUnitSeconds, 1);
  v1::LinkResult* l = r.add_links();
  l->set_from_node("pod-0");
  l->set_to_node("pod-1");
  l->set_bytes(1000);
  l->set_seconds(0.1);
  l->set_bandwidth_bytes_per_second(10000);
  return r;
}

TEST(MakeResult, LongReasonIsCutToTheCap) {
  const v1::CheckResult r =
      MakeResult(kCheckDns, v1::CheckResult::FAIL, std::string(2000, 'x'), 1, kUnitCount);
  EXPECT_EQ(r.reason().size(), kMaxReasonBytes);
  EXPECT_EQ(r.reason().substr(kMaxReasonBytes - 3), "...");
}

TEST(MakeResult, NonFiniteNumbersBecomeZero) {
  const v1::CheckResult r = MakeResult(kCheckDns, v1::CheckResult::PASS, "",
                                       std::numeric_limits<double>::infinity(), kUnitCount, NAN);
  EXPECT_EQ(r.value(), 0);
  EXPECT_EQ(r.threshold(), 0);
}

TEST(ValidateReport, AGoodReportPasses) { EXPECT_TRUE(ValidateReport(GoodReport()).ok()); }

TEST(ValidateReport, EachBrokenCapIsRefusedNamingTheField) {
  struct Case {
    const char* name;
    void (*breakit)(v1::PreflightReport*);
    const char* field;
  };
  const Case cases[] = {
      {"empty node", [](v1::PreflightReport* r) { r->clear_node_id(); }, "node_id"},
      {"node with a space", [](v1::PreflightReport* r) { r->set_node_id("a b"); }, "node_id"},
      {"long node", [](v1::PreflightReport* r) { r->set_node_id(std::string(254, 'n')); },
       "node_id"},
      {"check name", [](v1::PreflightReport* r) { r->mutable_results(0)->set_check("Bad-Name"); },
       "results[0].check"},
      {"long check name",
       [](v1::PreflightReport* r) { r->mutable_results(0)->set_check(std::string(33, 'a')); },
       "results[0].check"},
      {"outcome",
       [](v1::PreflightReport* r) {
         r->mutable_results(1)->set_outcome(v1::CheckResult::OUTCOME_UNSPECIFIED);
       },
       "results[1].outcome"},
      {"reason",
       [](v1::PreflightReport* r) { r->mutable_results(0)->set_reason(std::string(513, 'r')); },
       "results[0].reason"},
      {"unit", [](v1::PreflightReport* r) { r->mutable_results(0)->set_unit("MB/s"); },
       "results[0].unit"},
      {"value", [](v1::PreflightReport* r) { r->mutable_results(0)->set_value(NAN); },
       "results[0].value"},
      {"threshold", [](v1::PreflightReport* r) { r->mutable_results(0)->set_threshold(-1); },
       "results[0].threshold"},
      {"too many results",
       [](v1::PreflightReport* r) {
         for (int i = 0; i < kMaxResults; ++i) *r->add_results() = r->results(0);
       },
       "results has more"},
      {"too many links",
       [](v1::PreflightReport* r) {
         for (int i = 0; i < kMaxLinks; ++i) *r->add_links() = r->links(0);
       },
       "links has more"},
      {"link node", [](v1::PreflightReport* r) { r->mutable_links(0)->clear_to_node(); },
       "links[0]"},
      {"link error",
       [](v1::PreflightReport* r) { r->mutable_links(0)->set_error(std::string(513, 'e')); },
       "links[0].error"},
      {"link rate",
       [](v1::PreflightReport* r) { r->mutable_links(0)->set_bandwidth_bytes_per_second(-1); },
       "links[0]"},
      {"duration", [](v1::PreflightReport* r) { r->set_duration_micros(-1); }, "duration_micros"},
  };
  for (const Case& c : cases) {
    v1::PreflightReport r = GoodReport();
    c.breakit(&r);
    const absl::Status s = ValidateReport(r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(s.message(), HasSubstr(c.field)) << c.name;
  }
}

TEST(ValidatePlan, TargetsPortsAndTimesAreBounded) {
  v1::NetworkPlan plan;
  plan.set_round(2);
  v1::LinkTarget* t = plan.add_targets();
  t->set_node_id("pod-1");
  t->set_host("10.0.0.2");
  t->set_port(29510);
  EXPECT_TRUE(ValidatePlan(plan).ok());
  t->set_port(0);
  EXPECT_FALSE(ValidatePlan(plan).ok());
  t->set_port(70000);
  EXPECT_FALSE(ValidatePlan(plan).ok());
  t->set_port(1);
  t->set_host("");
  EXPECT_FALSE(ValidatePlan(plan).ok());
  t->set_host("10.0.0.2");
  plan.set_max_millis_per_link(kMaxMillisPerLink + 1);
  EXPECT_FALSE(ValidatePlan(plan).ok());
  plan.set_max_millis_per_link(0);
  for (int i = 0; i < kMaxTargets; ++i) *plan.add_targets() = *t;
  EXPECT_THAT(ValidatePlan(plan).message(), HasSubstr("more than 8 targets"));
}

TEST(HumanFigures, SizesAndRates) {
  EXPECT_EQ(HumanBytes(512), "512 bytes");
  EXPECT_EQ(HumanBytes(64u << 20), "64 MiB");
  EXPECT_EQ(HumanBytes(1536u << 20), "1.5 GiB");
  EXPECT_EQ(HumanRate(1.25e9), "1.25 GB/s");
  EXPECT_EQ(HumanRate(95.3e6), "95.3 MB/s");
  EXPECT_EQ(HumanRate(-1), "?");
}

}  // namespace check_result_test
}  // namespace trainlet::preflight
