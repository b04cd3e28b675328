#include "config/options.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::vector<OptionSpec>& Table() {
  static const auto* table = new std::vector<OptionSpec>{
      {"nnodes", OptionKind::kString, "N|MIN:MAX", "1", "Nodes."},
      {"nproc-per-node", OptionKind::kString, "N", "auto", "Workers."},
      {"grace-period", OptionKind::kDuration, "DURATION", "30s", "Grace."},
      {"prefix-output", OptionKind::kBool, "", "false", "Prefix."},
  };
  return *table;
}

constexpr char kUsage[] = "trainlet test [OPTIONS] -- COMMAND";

absl::StatusOr<ParsedOptions> Parse(const std::vector<std::string>& args,
                                    const std::map<std::string, std::string>& env = {}) {
  return ParseOptions(Table(), args, env, kUsage);
}

std::string Text(const ParsedOptions& p, const std::string& name) {
  const OptionValue* v = p.Find(name);
  return v == nullptr ? "<unset>" : v->text;
}

OptionValue Flag(const std::string& name, const std::string& text) {
  return OptionValue{text, "--" + name, ValueSource::kFlag};
}

TEST(ParseOptions, AnAliasSetsItsOptionAndIsNamedAsTyped) {
  std::vector<OptionSpec> table = {
      {"coordinator", OptionKind::kString, "HOST", "", "C.", false, false, {"rdzv-endpoint"}}};
  auto p = ParseOptions(table, {"--rdzv_endpoint=h:1"}, {}, kUsage);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Find("coordinator")->text, "h:1");
  EXPECT_EQ(p->Find("coordinator")->origin, "--rdzv-endpoint");
  // No variable of the alias's name.
  auto env = ParseOptions(table, {}, {{"TRAINLET_RDZV_ENDPOINT", "x"}}, kUsage);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->Find("coordinator"), nullptr);
  EXPECT_THAT(HelpText(kUsage, "", table, false),
              HasSubstr("--coordinator=HOST, --rdzv-endpoint=HOST"));
}

TEST(ClosestName, WithinTwoEditsOrEqualButForCaseAndSeparators) {
  const std::vector<std::string> names = {"TRAINLET_LOG_LEVEL", "TRAINLET_NNODES", "run"};
  EXPECT_EQ(ClosestName("TRAINLET_LOGLEVEL", names), "TRAINLET_LOG_LEVEL");
  EXPECT_EQ(ClosestName("trainlet_log-level", names), "TRAINLET_LOG_LEVEL");
  EXPECT_EQ(ClosestName("runn", names), "run");
  EXPECT_EQ(ClosestName("TRAINLET_COORDINATOR", names), "");
}

TEST(UnknownTrainletVariables, OnlyTrainletNamesAndNeverValues) {
  const std::vector<std::string> known = {"TRAINLET_NNODES"};
  auto w = UnknownTrainletVariables({{"TRAINLET_NNODES", "2"},
                                     {"PATH", "/bin"},
                                     {"TRAINLET_NNODE", "s3cret"},
                                     {"trainlet_nnodes", "2"},
                                     {"TRAINLET_X\nFORGED", "1"}},
                                    known);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0], "unknown environment variable TRAINLET_NNODE (did you mean TRAINLET_NNODES?)");
  EXPECT_THAT(w[1], HasSubstr("TRAINLET_X\\nFORGED"));  // escaped: cannot forge a line
  EXPECT_EQ(w[2],
            "unknown environment variable trainlet_nnodes (did you mean TRAINLET_NNODES? "
            "variable names are case-sensitive)");
  for (const std::string& line : w) EXPECT_THAT(line, Not(HasSubstr("s3cret")));
}

TEST(UnknownTrainletVariables, ADidYouMeanOnlyForANearName) {
  const std::vector<std::string> known = {"TRAINLET_DB", "TRAINLET_JOB_ID",
                                          "TRAINLET_HANG_TIMEOUT"};
  auto w = UnknownTrainletVariables({{"TRAINLET_JOB", "1"},
                                     {"TRAINLET_X", "1"},
                                     {"TRAINLET_HANG_TIMOUT", "1"},
                                     {"TRAINLET_" + std::string(100000, 'D') + "B", "1"}},
                                    known);
  ASSERT_EQ(w.size(), 4u);  // in name order
  // A name far longer than any known: near none (and never compared edit by
  // edit).
  EXPECT_THAT(w[0], StartsWith("unknown environment variable TRAINLET_DDDD"));
  EXPECT_THAT(w[0], Not(HasSubstr("did you mean")));
  EXPECT_EQ(
      w[1],
      "unknown environment variable TRAINLET_HANG_TIMOUT (did you mean TRAINLET_HANG_TIMEOUT?)");
  // Two edits from TRAINLET_DB, but most of what follows TRAINLET_: no hint.
  EXPECT_EQ(w[2], "unknown environment variable TRAINLET_JOB");
  EXPECT_EQ(w[3], "unknown environment variable TRAINLET_X");
}

TEST(UnknownTrainletVariables, NamesAtMostTenAndCountsTheRest) {
  std::map<std::string, std::string> env;
  for (int i = 0; i < 25; ++i) env["TRAINLET_JUNK_" + std::to_string(100 + i)] = "1";
  auto w = UnknownTrainletVariables(env, {});
  ASSERT_EQ(w.size(), 11u);
  EXPECT_EQ(w[10], "and 15 more unknown TRAINLET_* variable(s) not named here");
}

TEST(EnvNameFor, UpperCasesAndReplacesDashes) {
  EXPECT_EQ(EnvNameFor("nproc-per-node"), "TRAINLET_NPROC_PER_NODE");
  EXPECT_EQ(EnvNameFor("nnodes"), "TRAINLET_NNODES");
}

TEST(ParseOptions, FlagOnlyOptionsReadNoEnvironmentVariable) {
  std::vector<OptionSpec> table = {
      {"format", OptionKind::kString, "F", "json", "Format.", false, /*flag_only=*/true},
      {"sysfs-root", OptionKind::kString, "DIR", "/sys", "Root."}};
  auto p =
      ParseOptions(table, {}, {{"TRAINLET_FORMAT", "env"}, {"TRAINLET_SYSFS_ROOT", "/x"}}, kUsage);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Find("format"), nullptr);
  EXPECT_EQ(Text(*p, "sysfs-root"), "/x");
  auto flag = ParseOptions(table, {"--format=env"}, {}, kUsage);
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(Text(*flag, "format"), "env");
  const std::string help = HelpText(kUsage, "D.", table, false);
  EXPECT_EQ(help.find("TRAINLET_FORMAT"), std::string::npos) << help;
  EXPECT_NE(help.find("env TRAINLET_SYSFS_ROOT, default: /sys"), std::string::npos) << help;
}

TEST(ParseOptions, EqualsForm) {
  auto p = Parse({"--nnodes=4", "--", "x"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "nnodes"), "4");
  EXPECT_EQ(p->Find("nnodes")->origin, "--nnodes");
  EXPECT_EQ(p->Find("nnodes")->source, ValueSource::kFlag);
}

TEST(ParseOptions, SpaceForm) {
  auto p = Parse({"--nnodes", "2:4", "--grace-period", "5s", "--", "x"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "nnodes"), "2:4");
  EXPECT_EQ(Text(*p, "grace-period"), "5s");
}

TEST(ParseOptions, EmptyValueWithEquals) {
  auto p = Parse({"--nnodes="});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "nnodes"), "");
}

TEST(ParseOptions, BareBoolIsTrueAndDoesNotTakeNextWord) {
  auto p = Parse({"--prefix-output", "--", "python"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "prefix-output"), "true");
  EXPECT_THAT(p->command, ::testing::ElementsAre("python"));
  // A word after a bare bool is not its value: it is a stray positional.
  EXPECT_FALSE(Parse({"--prefix-output", "false"}).ok());
}

TEST(ParseOptions, BoolWithExplicitValue) {
  auto p = Parse({"--prefix-output=false"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "prefix-output"), "false");
  auto bad = Parse({"--prefix-output=maybe"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--prefix-output: expected true or false"));
}

TEST(ParseOptions, UnderscoreAliasLikeTorchrun) {
  auto p = Parse({"--nproc_per_node=2"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "nproc-per-node"), "2");
  EXPECT_EQ(p->Find("nproc-per-node")->origin, "--nproc-per-node");
}

TEST(ParseOptions, LastOccurrenceWins) {
  auto p = Parse({"--nnodes=2", "--nnodes=3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "nnodes"), "3");
}

TEST(ParseOptions, DoubleDashEndsOptions) {
  auto p = Parse({"--nnodes=2", "--", "python", "--nnodes=9", "--", "-h"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->saw_separator);
  EXPECT_FALSE(p->help_requested);
  EXPECT_EQ(Text(*p, "nnodes"), "2");
  EXPECT_THAT(p->command, ::testing::ElementsAre("python", "--nnodes=9", "--", "-h"));
}

TEST(ParseOptions, NoSeparator) {
  auto p = Parse({"--nnodes=2"});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->saw_separator);
  EXPECT_TRUE(p->command.empty());
}

TEST(ParseOptions, UnknownFlagSuggestsClosestName) {
  auto p = Parse({"--nnode=2", "--", "x"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("unknown flag --nnode (did you mean --nnodes?)"));
}

TEST(ParseOptions, UnknownFlagFarFromAnyNameHasNoSuggestion) {
  auto p = Parse({"--frobnicate"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("unknown flag --frobnicate"));
  EXPECT_THAT(std::string(p.status().message()), ::testing::Not(HasSubstr("did you mean")));
}

TEST(ParseOptions, UnknownShortFlag) {
  auto p = Parse({"-x"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("unknown flag -x"));
}

TEST(ParseOptions, ForeignFlagsGetTheirHint) {
  std::vector<ForeignFlag> foreign = {{"rdzv-endpoint", "use --coordinator=HOST:PORT"},
                                      {"m", "use -- python -m MODULE"}};
  for (const char* arg : {"--rdzv-endpoint=h:1", "--rdzv_endpoint", "--rdzv-endpoint"}) {
    auto p = ParseOptions(Table(), {arg, "x", "--", "cmd"}, {}, kUsage, foreign);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << arg;
    EXPECT_THAT(p.status().message(), HasSubstr("is a torchrun flag"));
    EXPECT_THAT(p.status().message(), HasSubstr("use --coordinator=HOST:PORT")) << arg;
  }
  auto m = ParseOptions(Table(), {"-m", "pkg"}, {}, kUsage, foreign);
  EXPECT_THAT(m.status().message(), HasSubstr("-m is a torchrun flag"));
  EXPECT_THAT(m.status().message(), HasSubstr("use -- python -m MODULE"));
  // Known flags and plain typos are unaffected.
  EXPECT_TRUE(ParseOptions(Table(), {"--nnodes=2", "--", "cmd"}, {}, kUsage, foreign).ok());
  EXPECT_THAT(ParseOptions(Table(), {"--nnode=2"}, {}, kUsage, foreign).status().message(),
              HasSubstr("did you mean --nnodes?"));
}

TEST(ParseOptions, MissingValueNamesFlag) {
  auto p = Parse({"--nnodes"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("--nnodes: expected a value"));
  EXPECT_FALSE(Parse({"--nnodes", "--", "x"}).ok());
  EXPECT_FALSE(Parse({"--nnodes", "--grace-period=1s"}).ok());
}

TEST(ParseOptions, PositionalBeforeSeparatorIsRejected) {
  auto p = Parse({"python", "train.py"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("unexpected argument \"python\""));
  EXPECT_THAT(p.status().message(), HasSubstr("after --"));
}

TEST(ParseOptions, WordsBeforeSeparator_KeptForACommandThatTakesThem) {
  auto p = ParseOptions(Table(), {"job-a", "--nnodes", "2", "--prefix-output", "job-b"}, {}, kUsage,
                        /*foreign=*/{}, /*takes_words=*/true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->words, (std::vector<std::string>{"job-a", "job-b"}));
  EXPECT_EQ(Text(*p, "nnodes"), "2");
  EXPECT_EQ(Text(*p, "prefix-output"), "true");
}

TEST(ParseOptions, MissingValue_SaysTheFlagNeedsOneAndHowToGiveIt) {
  auto p = Parse({"--grace-period"});
  EXPECT_THAT(p.status().message(),
              HasSubstr("--grace-period needs a value: --grace-period=DURATION"));
}

// A command whose options are all flags (`trainlet health`) reads no
// TRAINLET_* variable: neither its help nor its errors offer --strict-env.
TEST(HelpText, FlagsOnly_NoStrictEnvAndNoPrecedence) {
  const std::vector<OptionSpec> flags = {{"timeout-ms", OptionKind::kInt, "N", "1000", "Wait.",
                                          /*hidden=*/false,
                                          /*flag_only=*/true}};
  const std::string help = HelpText("trainlet x", "X.", flags, false);
  EXPECT_THAT(help, HasSubstr("--timeout-ms=N"));
  EXPECT_THAT(help, Not(HasSubstr("--strict-env")));
  EXPECT_THAT(help, Not(HasSubstr("Precedence")));
  EXPECT_THAT(ParseOptions(flags, {"--strict-en"}, {}, "trainlet x").status().message(),
              Not(HasSubstr("did you mean --strict-env")));
  // A table that reads variables keeps both.
  EXPECT_THAT(HelpText("trainlet test", "T.", Table(), false), HasSubstr("--strict-env"));
  EXPECT_THAT(HelpText("trainlet test", "T.", Table(), false), HasSubstr("Precedence"));
}

TEST(UsageErrorText, NamesTheCommandAndItsHelp) {
  EXPECT_EQ(UsageErrorText("status", absl::InvalidArgumentError("one JOB at most")),
            "trainlet status: one JOB at most\nRun 'trainlet status --help' for usage.\n");
}

TEST(ParseOptions, HelpWinsOverOtherErrors) {
  for (const char* help : {"-h", "--help"}) {
    auto p = Parse({"--bogus", help}, {{"TRAINLET_PREFIX_OUTPUT", "maybe"}});
    ASSERT_TRUE(p.ok()) << help << ": " << p.status();
    EXPECT_TRUE(p->help_requested);
  }
}

TEST(ParseOptions, EnvFallback) {
  auto p = Parse({}, {{"TRAINLET_NNODES", "3"}, {"TRAINLET_PREFIX_OUTPUT", "1"}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(Text(*p, "nnodes"), "3");
  EXPECT_EQ(p->Find("nnodes")->origin, "TRAINLET_NNODES");
  EXPECT_EQ(p->Find("nnodes")->source, ValueSource::kEnv);
  EXPECT_EQ(Text(*p, "prefix-output"), "1");
}

TEST(ParseOptions, FlagBeatsEnv) {
  auto p = Parse({"--nnodes=2"}, {{"TRAINLET_NNODES", "3"}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Text(*p, "nnodes"), "2");
}

TEST(ParseOptions, EmptyEnvCountsAsUnset) {
  auto p = Parse({}, {{"TRAINLET_NNODES", ""}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->Find("nnodes"), nullptr);
}

TEST(ParseOptions, BadBoolEnvNamesVariable) {
  auto p = Parse({}, {{"TRAINLET_PREFIX_OUTPUT", "maybe"}});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("TRAINLET_PREFIX_OUTPUT: expected true or false"));
}

TEST(ValueOrDefault, FallsBackToTableDefault) {
  auto p = Parse({});
  ASSERT_TRUE(p.ok());
  OptionValue v = ValueOrDefault(*p, Table(), "grace-period");
  EXPECT_EQ(v.text, "30s");
  EXPECT_EQ(v.source, ValueSource::kDefault);
}

TEST(HelpText, MentionsKubernetesDiscoveryOnlyWhenAsked) {
  EXPECT_THAT(HelpText(kUsage, "Does things.", Table(), /*kubernetes_discovery=*/true),
              HasSubstr("Kubernetes discovery"));
  EXPECT_THAT(HelpText(kUsage, "Does things.", Table(), /*kubernetes_discovery=*/false),
              ::testing::Not(HasSubstr("Kubernetes")));
}

TEST(RoundPolicyOptionSpecs, SayNothingOfKubernetes) {
  for (const OptionSpec& spec : RoundPolicyOptionSpecs()) {
    EXPECT_THAT(spec.help, ::testing::Not(HasSubstr("Kubernetes"))) << spec.name;
    EXPECT_THAT(spec.help, ::testing::Not(HasSubstr("PET_"))) << spec.name;
  }
}

TEST(HelpText, ListsFlagsEnvNamesAndDefaults) {
  std::string help = HelpText(kUsage, "Does things.", Table(), true);
  EXPECT_THAT(help, HasSubstr("Usage: trainlet test"));
  EXPECT_THAT(help, HasSubstr("--nproc-per-node=N"));
  EXPECT_THAT(help, HasSubstr("env TRAINLET_NPROC_PER_NODE, default: auto"));
  EXPECT_THAT(help, HasSubstr("--prefix-output\n"));
  EXPECT_THAT(help, HasSubstr("--help"));
}

TEST(EditDistance, Basics) {
  EXPECT_EQ(EditDistance("nnodes", "nnodes"), 0);
  EXPECT_EQ(EditDistance("nnode", "nnodes"), 1);
  EXPECT_EQ(EditDistance("nprocs-per-nod", "nproc-per-node"), 2);
  EXPECT_EQ(EditDistance("", "abc"), 3);
}

TEST(ParseIntValue, RangeAndSyntax) {
  EXPECT_EQ(*ParseIntValue(Flag("n", "42"), 0, 100), 42);
  EXPECT_FALSE(ParseIntValue(Flag("n", "101"), 0, 100).ok());
  EXPECT_FALSE(ParseIntValue(Flag("n", "4x"), 0, 100).ok());
  EXPECT_FALSE(ParseIntValue(Flag("n", ""), 0, 100).ok());
  EXPECT_FALSE(ParseIntValue(Flag("n", "99999999999999"), 0, 100).ok());
  auto bad = ParseIntValue(Flag("master-port", "70000"), 1, 65535);
  EXPECT_EQ(bad.status().message(),
            "--master-port: expected an integer in 1..65535, got \"70000\"");
}

TEST(ParseDurationValue, AbslFormsAndPlainSeconds) {
  EXPECT_EQ(*ParseDurationValue(Flag("d", "30s")), absl::Seconds(30));
  EXPECT_EQ(*ParseDurationValue(Flag("d", "500ms")), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDurationValue(Flag("d", "2m")), absl::Minutes(2));
  EXPECT_EQ(*ParseDurationValue(Flag("d", "1h30m")), absl::Minutes(90));
  EXPECT_EQ(*ParseDurationValue(Flag("d", "30")), absl::Seconds(30));
  EXPECT_EQ(*ParseDurationValue(Flag("d", "1.5")), absl::Milliseconds(1500));
  EXPECT_EQ(*ParseDurationValue(Flag("d", "0")), absl::ZeroDuration());
}

TEST(ParseDurationValue, RejectsGarbageNegativeInfiniteAndBelowMin) {
  for (const char* text : {"abc", "5 s", "-1s", "-3", "inf", "1e3", ""}) {
    auto d = ParseDurationValue(Flag("grace-period", text));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(d.status().message(), HasSubstr("--grace-period: expected a duration")) << text;
  }
  EXPECT_FALSE(ParseDurationValue(Flag("d", "0s"), absl::Milliseconds(1)).ok());
}

TEST(ParseBoolValue, Forms) {
  EXPECT_TRUE(*ParseBoolValue(Flag("b", "TRUE")));
  EXPECT_TRUE(*ParseBoolValue(Flag("b", "yes")));
  EXPECT_FALSE(*ParseBoolValue(Flag("b", "0")));
  EXPECT_FALSE(ParseBoolValue(Flag("b", "2")).ok());
}

TEST(ParseLogLevelValue, Forms) {
  EXPECT_EQ(*ParseLogLevelValue(Flag("log-level", "debug")), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevelValue(Flag("log-level", "WARNING")), LogLevel::kWarning);
  auto bad = ParseLogLevelValue(Flag("log-level", "loud"));
  EXPECT_THAT(bad.status().message(), HasSubstr("--log-level: expected debug, info"));
}

TEST(ParseNnodesValue, FixedAndElastic) {
  NnodesRange fixed = *ParseNnodesValue(Flag("nnodes", "4"));
  EXPECT_EQ(fixed.min, 4);
  EXPECT_EQ(fixed.max, 4);
  EXPECT_FALSE(fixed.elastic());
  NnodesRange elastic = *ParseNnodesValue(Flag("nnodes", "2:4"));
  EXPECT_EQ(elastic.min, 2);
  EXPECT_EQ(elastic.max, 4);
  EXPECT_TRUE(elastic.elastic());
  EXPECT_FALSE(ParseNnodesValue(Flag("nnodes", "3:3")).value().elastic());
  EXPECT_EQ(NnodesToString(elastic), "2:4");
  EXPECT_EQ(NnodesToString(fixed), "4");
}

TEST(ParseNnodesValue, RejectsBadInputNamingTheFlag) {
  auto r = ParseNnodesValue(Flag("nnodes", "3:2"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX <= 100000, got \"3:2\"");
  for (const char* text : {"0", "abc", "0:2", "1:2:3", "100001", "-1", ":", "2:", "+2", ""}) {
    EXPECT_EQ(ParseNnodesValue(Flag("nnodes", text)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

TEST(ParseHostPortValue, Forms) {
  HostPort hp = *ParseHostPortValue(Flag("coordinator", "job-node-0-0.job"), 29400);
  EXPECT_EQ(hp.host, "job-node-0-0.job");
  EXPECT_EQ(hp.port, 29400);
  hp = *ParseHostPortValue(Flag("coordinator", "10.0.0.1:1234"), 29400);
  EXPECT_EQ(hp.host, "10.0.0.1");
  EXPECT_EQ(hp.port, 1234);
  hp = *ParseHostPortValue(Flag("coordinator", "[::1]:29401"), 29400);
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 29401);
  hp = *ParseHostPortValue(Flag("coordinator", "[fd00::2]"), 29400);
  EXPECT_EQ(hp.host, "fd00::2");
  EXPECT_EQ(hp.port, 29400);
}

TEST(ParseHostPortValue, RejectsBadPortsAndAmbiguousIpv6) {
  for (const char* text : {"host:0", "host:70000", "host:", "host:x", ":29400", "::1", "::1:29400",
                           "[::1", "[::1]x", "[]:1", "a b:1", ""}) {
    auto hp = ParseHostPortValue(Flag("coordinator", text), 29400);
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(hp.status().message(), HasSubstr("--coordinator: expected HOST[:PORT]")) << text;
  }
}

TEST(ParseHostValue, StripsBrackets) {
  EXPECT_EQ(*ParseHostValue(Flag("advertise-addr", "[fd00::1]")), "fd00::1");
  EXPECT_EQ(*ParseHostValue(Flag("advertise-addr", "10.0.0.3")), "10.0.0.3");
  EXPECT_EQ(*ParseHostValue(Flag("advertise-addr", "fd00::1")), "fd00::1");
  EXPECT_FALSE(ParseHostValue(Flag("advertise-addr", "")).ok());
  EXPECT_FALSE(ParseHostValue(Flag("advertise-addr", "a b")).ok());
}

// One validator (common/host_names.h) for every host from flags and env.
TEST(ParseHostValue, OnlyValidHostNamesAndAddresses) {
  for (const char* good : {"head", "t-node-0-0.t", "t-node-0-0.t.ns.svc.cluster.local.",
                           "compose_service", "10.0.0.1", "::1", "[::1]", "fe80::1%eth0"}) {
    EXPECT_TRUE(ParseHostValue(Flag("advertise-addr", good)).ok()) << good;
  }
  for (const char* bad : {"head ", " head", "a\tb", "-head", "head-", "a..b", "a/b", "h\xc3\xa4",
                          "[head]", "[10.0.0.1]", "head!", "a@b"}) {
    auto h = ParseHostValue(Flag("advertise-addr", bad));
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(h.status().message(), HasSubstr("--advertise-addr: expected a host name or IP"))
        << bad;
  }
  EXPECT_FALSE(ParseHostValue(Flag("advertise-addr", std::string(254, 'a'))).ok());
}

TEST(ParseHostValue, HostWithPortSaysThePortDoesNotBelong) {
  for (const char* text : {"host:1234", "10.0.0.1:29500", "[::1]:29400"}) {
    auto h = ParseHostValue(Flag("advertise-addr", text));
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(h.status().message(), HasSubstr("without a port")) << text;
  }
}

TEST(ParseHostPortValue, UsesTheHostValidator) {
  for (const char* text : {"a b", "a b:1", "bad!host:1", "-head:1", "[head]:1", "a..b"}) {
    auto hp = ParseHostPortValue(Flag("coordinator", text), 29400);
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_EQ(ParseHostPortValue(Flag("coordinator", "[fe80::1%eth0]:5"), 1)->host, "fe80::1%eth0");
}

TEST(ParseIpAddressValue, LiteralsOnly) {
  EXPECT_EQ(*ParseIpAddressValue(Flag("bind-addr", "0.0.0.0")), "0.0.0.0");
  EXPECT_EQ(*ParseIpAddressValue(Flag("bind-addr", "[::]")), "::");
  EXPECT_EQ(*ParseIpAddressValue(Flag("bind-addr", "::1")), "::1");
  auto name = ParseIpAddressValue(Flag("bind-addr", "head"));
  EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(name.status().message(), HasSubstr("--bind-addr: expected an IP address"));
}

TEST(JoinHostPort, BracketsIpv6Only) {
  EXPECT_EQ(JoinHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(JoinHostPort("::1", 29400), "[::1]:29400");
  EXPECT_EQ(JoinHostPort("job-node-0-0.job", 29500), "job-node-0-0.job:29500");
}

TEST(ValidateJobId, Charset) {
  EXPECT_TRUE(ValidateJobId(Flag("job-id", "My_job-1.v2")).ok());
  EXPECT_FALSE(ValidateJobId(Flag("job-id", "")).ok());
  EXPECT_FALSE(ValidateJobId(Flag("job-id", "a/b")).ok());
  EXPECT_FALSE(ValidateJobId(Flag("job-id", std::string(129, 'a'))).ok());
  EXPECT_TRUE(ValidateJobId(Flag("job-id", std::string(128, 'a'))).ok());
  EXPECT_THAT(ValidateJobId(Flag("job-id", "a b")).message(), HasSubstr("--job-id: expected"));
}

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/trainlet_token_XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Write(const std::string& content) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(content.data(), 1, content.size(), f);
    std::fclose(f);
  }
  std::string path_;
};

TEST_F(TokenFileTest, TrailingWhitespaceStripped) {
  Write("s3cret token\n\r\t ");
  EXPECT_EQ(*ReadTokenFile(Flag("token-file", path_)), "s3cret token");
}

// An empty token would silently turn authentication off (D5).
TEST_F(TokenFileTest, EmptyOrWhitespaceOnlyTokenIsAConfigError) {
  for (const char* content : {"", "\n", " \t\r\n  "}) {
    Write(content);
    auto t = ReadTokenFile(Flag("token-file", path_));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << "\"" << content << "\"";
    EXPECT_THAT(t.status().message(), HasSubstr("--token-file: token file " + path_ + " is empty"));
    EXPECT_EQ(ExitCodeForConfigError(t.status()), kExitConfig);
  }
}

TEST_F(TokenFileTest, NonPrintableByteRejected) {
  Write(std::string("abc\x01", 4));
  auto t = ReadTokenFile(Flag("token-file", path_));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), HasSubstr("0x01 at offset 3"));
}

TEST_F(TokenFileTest, TooLargeRejected) {
  Write(std::string(5000, 'a'));
  EXPECT_EQ(ReadTokenFile(Flag("token-file", path_)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReadTokenFile, MissingFileIsFailedPreconditionNamingPath) {
  auto t = ReadTokenFile(Flag("token-file", "/nonexistent/trainlet/token"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), HasSubstr("--token-file"));
  EXPECT_THAT(t.status().message(), HasSubstr("/nonexistent/trainlet/token"));
  EXPECT_EQ(ExitCodeForConfigError(t.status()), kExitConfig);
}

TEST(ExitCodeForConfigError, MapsCodes) {
  EXPECT_EQ(ExitCodeForConfigError(absl::OkStatus()), kExitSuccess);
  EXPECT_EQ(ExitCodeForConfigError(absl::InvalidArgumentError("x")), kExitUsage);
  EXPECT_EQ(ExitCodeForConfigError(absl::FailedPreconditionError("x")), kExitConfig);
  EXPECT_EQ(ExitCodeForConfigError(absl::InternalError("x")), kExitInternal);
}

TEST(GpuPlacement, ParseGpuBinding) {
  EXPECT_EQ(*ParseGpuBinding(" Single ", "--gpu-binding"), GpuBinding::kSingle);
  auto bad = ParseGpuBinding("each", "TRAINLET_GPU_BINDING");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("TRAINLET_GPU_BINDING"));
}

}  // namespace
}  // namespace trainlet::agent
