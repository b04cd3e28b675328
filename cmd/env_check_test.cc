#include "cmd/env_check.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/testing/temp_root.h"
#include "config/options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

bool Known(const std::string& name) {
  const std::vector<std::string>& known = KnownTrainletVariables();
  return std::binary_search(known.begin(), known.end(), name);
}

// Every match of `pattern`'s first group in the files below `dirs` whose
// name ends in one of `suffixes`, with where it was found.
std::map<std::string, std::string> Scan(const std::vector<std::string>& dirs,
                                        const std::vector<std::string>& suffixes,
                                        const std::regex& pattern, bool skip_tests) {
  std::map<std::string, std::string> found;
  for (const std::string& dir : dirs) {
    const std::filesystem::path root = std::filesystem::path(TRAINLET_SOURCE_DIR) / dir;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      if (!entry.is_regular_file()) continue;
      const std::string name = entry.path().filename().string();
      if (std::none_of(suffixes.begin(), suffixes.end(),
                       [&](const std::string& s) { return absl::EndsWith(name, s); })) {
        continue;
      }
      if (skip_tests && (absl::EndsWith(name, "_test.cc") ||
                         absl::StrContains(entry.path().string(), "/testing/"))) {
        continue;
      }
      const std::string text = testing::ReadFile(entry.path().string());
      for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
           it != std::sregex_iterator(); ++it) {
        found.emplace((*it)[1].str(), entry.path().string());
      }
    }
  }
  return found;
}

TEST(KnownTrainletVariables, EveryOptionOfEveryCommandIsKnown) {
  for (const char* name :
       {"TRAINLET_NNODES", "TRAINLET_NPROC_PER_NODE", "TRAINLET_HANG_TIMEOUT", "TRAINLET_LOG_LEVEL",
        "TRAINLET_TLS_SERVER_NAME",                            // run
        "TRAINLET_SSH_PORT", "TRAINLET_SSHD", "TRAINLET_MPI",  // mpi-worker, mpi-launcher
        "TRAINLET_PORT",                                       // coordinator
        "TRAINLET_LISTEN", "TRAINLET_DB",                      // controller
        "TRAINLET_PROBE_ROOT", "TRAINLET_NVML_LIBRARY"}) {     // probe
    EXPECT_TRUE(Known(name)) << name;
  }
  // Flag-only options have no variable.
  EXPECT_FALSE(Known("TRAINLET_FORMAT"));
  const std::vector<std::string>& known = KnownTrainletVariables();
  EXPECT_TRUE(std::is_sorted(known.begin(), known.end()));
  EXPECT_EQ(std::adjacent_find(known.begin(), known.end()), known.end());
}

TEST(KnownTrainletVariables, WhatTrainletSetsForItsProcessesIsKnown) {
  for (const char* name :
       {"TRAINLET_PROGRESS_FILE", "TRAINLET_TRACEBACK_FILE", "TRAINLET_HOSTFILE", "TRAINLET_NP",
        "TRAINLET_STATE_DIR", "TRAINLET_STRICT_ENV", "TRAINLET_TERMINATION_LOG"}) {
    EXPECT_TRUE(Known(name)) << name;
  }
}

// The list is only as good as its completeness: every TRAINLET_* name the
// program's sources spell out (as a string, to read or to set) is in it.
TEST(KnownTrainletVariables, EveryNameTheSourcesSpellOutIsKnown) {
  const std::map<std::string, std::string> found =
      Scan({"agent", "cmd", "common", "config", "controller", "launcher", "mpi", "progress",
            "rendezvous", "topology"},
           {".cc", ".h"}, std::regex("\"(TRAINLET_[A-Z0-9_]*[A-Z0-9])\""), /*skip_tests=*/true);
  EXPECT_THAT(found, Not(IsEmpty()));
  for (const auto& [name, where] : found) EXPECT_TRUE(Known(name)) << name << " in " << where;
}

// ... and every one the docs and scripts name, but the build's own options
// (CMake cache variables and an image build argument, never read from the
// environment of trainlet).
TEST(KnownTrainletVariables, EveryNameTheDocsAndScriptsUseIsKnown) {
  const std::set<std::string> kBuildOptions = {
      "TRAINLET_BUILD_TESTS",     "TRAINLET_FUZZ",
      "TRAINLET_FUZZ_ENGINE",     "TRAINLET_FUZZ_CI_RUNS",
      "TRAINLET_FUZZ_CI_SECONDS", "TRAINLET_SKIP_DIRS",
      "TRAINLET_E2E_PYTHON",      "TRAINLET_DEPLOY_PYTHON",
      "TRAINLET_IMAGE",           "TRAINLET_STATIC_BUILD",
      "TRAINLET_WERROR",          "TRAINLET_LINKER",
      "TRAINLET_TEST_OPT",        "TRAINLET_UNITY_TESTS",
      "TRAINLET_GTEST_RULES",     "TRAINLET_NVML_READER",
  };
  // The typos the docs show as examples of the warning.
  const std::set<std::string> kTyposShown = {"TRAINLET_HANG_TIMOUT", "TRAINLET_NPROC_PER_NODES"};
  const std::map<std::string, std::string> found =
      Scan({"docs", "scripts"}, {".md", ".sh"}, std::regex("(TRAINLET_[A-Z0-9_]*[A-Z0-9])\\b"),
           /*skip_tests=*/false);
  EXPECT_THAT(found, Not(IsEmpty()));
  for (const auto& [name, where] : found) {
    if (kBuildOptions.count(name) != 0 || kTyposShown.count(name) != 0) continue;
    EXPECT_TRUE(Known(name)) << name << " in " << where;
  }
}

TEST(CheckTrainletEnvironment, TyposGetAWarningWithTheNameMeant) {
  std::vector<std::string> args = {"--", "true"};
  auto w = CheckTrainletEnvironment(&args, {{"TRAINLET_NPROC_PER_NODES", "2"},
                                            {"TRAINLET_HANG_TIMOUT", "5s"},
                                            {"TRAINLET_LOGLEVEL", "debug"},
                                            {"TRAINLET_NNODES", "1"},
                                            {"PATH", "/bin"}});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_THAT(*w, SizeIs(3));
  EXPECT_THAT((*w)[0], HasSubstr("TRAINLET_HANG_TIMOUT (did you mean TRAINLET_HANG_TIMEOUT?)"));
  EXPECT_THAT((*w)[1], HasSubstr("TRAINLET_LOGLEVEL (did you mean TRAINLET_LOG_LEVEL?)"));
  EXPECT_THAT((*w)[2],
              HasSubstr("TRAINLET_NPROC_PER_NODES (did you mean TRAINLET_NPROC_PER_NODE?)"));
  EXPECT_THAT((*w)[0], HasSubstr("--strict-env"));
  EXPECT_THAT((*w)[0], Not(HasSubstr("5s")));  // values are never shown
}

TEST(CheckTrainletEnvironment, WhatTrainletSetsForWorkersIsNotFlagged) {
  std::vector<std::string> args = {"--", "true"};
  auto w = CheckTrainletEnvironment(&args, {{"TRAINLET_PROGRESS_FILE", "/p"},
                                            {"TRAINLET_TRACEBACK_FILE", "/t"},
                                            {"TRAINLET_HOSTFILE", "/h"},
                                            {"TRAINLET_TERMINATION_LOG", "/m"}});
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(*w, IsEmpty());
}

TEST(CheckTrainletEnvironment, StrictFlagOrVariableMakesItAnError) {
  std::vector<std::string> args = {"--nnodes=1", "--strict-env", "--", "python", "--strict-env"};
  auto e = CheckTrainletEnvironment(&args, {{"TRAINLET_HANG_TIMOUT", "5s"}});
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(e.status()));
  EXPECT_THAT(std::string(e.status().message()),
              HasSubstr("TRAINLET_HANG_TIMOUT (did you mean TRAINLET_HANG_TIMEOUT?)"));
  // The flag is taken out before `--`; COMMAND's words are its own.
  EXPECT_THAT(args, ElementsAre("--nnodes=1", "--", "python", "--strict-env"));

  std::vector<std::string> none;
  EXPECT_FALSE(CheckTrainletEnvironment(
                   &none, {{"TRAINLET_STRICT_ENV", "1"}, {"TRAINLET_HANG_TIMOUT", "5s"}})
                   .ok());
  // The flag wins over the variable.
  std::vector<std::string> off = {"--strict_env=false"};
  auto w = CheckTrainletEnvironment(&off,
                                    {{"TRAINLET_STRICT_ENV", "1"}, {"TRAINLET_HANG_TIMOUT", "5s"}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, SizeIs(1));
  EXPECT_THAT(off, IsEmpty());
  // Strict with every variable known: fine.
  std::vector<std::string> ok = {"--strict-env"};
  EXPECT_TRUE(CheckTrainletEnvironment(&ok, {{"TRAINLET_NNODES", "2"}}).ok());
}

TEST(CheckTrainletEnvironment, ABadStrictValueIsAUsageErrorNamingIt) {
  std::vector<std::string> args = {"--strict-env=maybe"};
  auto e = CheckTrainletEnvironment(&args, {});
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("--strict-env"));
  std::vector<std::string> none;
  auto v = CheckTrainletEnvironment(&none, {{"TRAINLET_STRICT_ENV", "sure"}});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("TRAINLET_STRICT_ENV"));
}

TEST(CheckTrainletEnvironment, HelpAlwaysWorks) {
  std::vector<std::string> args = {"--strict-env", "--help"};
  auto w = CheckTrainletEnvironment(&args, {{"TRAINLET_HANG_TIMOUT", "5s"}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, SizeIs(1));
}

}  // namespace
}  // namespace trainlet::agent
