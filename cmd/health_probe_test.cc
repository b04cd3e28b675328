#include "cmd/health_probe.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseHealthOptions, AddressAndTimeout) {
  absl::StatusOr<HealthOptions> def = ParseHealthOptions({});
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->target, "127.0.0.1:29401");
  EXPECT_EQ(def->timeout_ms, 1000);
  absl::StatusOr<HealthOptions> port = ParseHealthOptions({"8080", "--timeout-ms=250"});
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(port->target, "127.0.0.1:8080");
  EXPECT_EQ(port->timeout_ms, 250);
  absl::StatusOr<HealthOptions> host = ParseHealthOptions({"--timeout-ms", "5", "pod-0:29401"});
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->target, "pod-0:29401");
  EXPECT_EQ(host->timeout_ms, 5);
  EXPECT_TRUE(ParseHealthOptions({"9", "--help"})->help);
}

// The option table's errors, as every other command gives them.
TEST(ParseHealthOptions, BadInput_NamesIt) {
  EXPECT_THAT(ParseHealthOptions({"--timout-ms=5"}).status().message(),
              HasSubstr("unknown flag --timout-ms (did you mean --timeout-ms?)"));
  EXPECT_THAT(ParseHealthOptions({"--timeout-ms=0"}).status().message(), HasSubstr("--timeout-ms"));
  EXPECT_THAT(ParseHealthOptions({"--timeout-ms=x"}).status().message(), HasSubstr("--timeout-ms"));
  EXPECT_THAT(ParseHealthOptions({"--timeout-ms"}).status().message(),
              HasSubstr("--timeout-ms needs a value"));
  EXPECT_THAT(ParseHealthOptions({"1", "2"}).status().message(), HasSubstr("one [HOST:]PORT"));
  EXPECT_THAT(ParseHealthOptions({"--", "x"}).status().message(), HasSubstr("no COMMAND"));
  // It reads no TRAINLET_* variable, so it takes no --strict-env either.
  EXPECT_THAT(ParseHealthOptions({"--strict-env"}).status().message(),
              HasSubstr("unknown flag --strict-env"));
}

TEST(HealthHelpText, NamesTheOptionAndNoVariable) {
  const std::string help = HealthHelpText();
  EXPECT_THAT(help, HasSubstr("Usage: trainlet health [HOST:]PORT"));
  EXPECT_THAT(help, HasSubstr("--timeout-ms=N"));
  EXPECT_THAT(help, Not(HasSubstr("TRAINLET_")));
  EXPECT_THAT(help, Not(HasSubstr("--strict-env")));
}

}  // namespace
}  // namespace trainlet::agent
