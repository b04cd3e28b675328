#include "config/python_command.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using V = std::vector<std::string>;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Target = PythonCommand::Target;

TEST(ParsePythonCommand, ScriptWithOptionsAndArgs) {
  auto cmd = ParsePythonCommand(
      V{"/usr/bin/python3", "-u", "-W", "ignore", "-Xdev", "train.py", "--lr", "0.1", "-m", "x"});
  ASSERT_TRUE(cmd.has_value());
  EXPECT_THAT(cmd->launcher, ElementsAre("/usr/bin/python3"));
  EXPECT_THAT(cmd->options, ElementsAre("-u", "-W", "ignore", "-Xdev"));
  EXPECT_EQ(cmd->target, Target::kScript);
  EXPECT_EQ(cmd->target_name, "train.py");
  EXPECT_THAT(cmd->args, ElementsAre("--lr", "0.1", "-m", "x"));
}

TEST(ParsePythonCommand, ModuleSpellings) {
  for (const V& argv : {V{"python", "-m", "pkg.mod", "a"}, V{"python3.11", "-mpkg.mod", "a"},
                        V{"python", "-um", "pkg.mod", "a"}, V{"python", "-umpkg.mod", "a"}}) {
    auto cmd = ParsePythonCommand(argv);
    ASSERT_TRUE(cmd.has_value()) << argv[1];
    EXPECT_EQ(cmd->target, Target::kModule) << argv[1];
    EXPECT_EQ(cmd->target_name, "pkg.mod") << argv[1];
    EXPECT_THAT(cmd->args, ElementsAre("a")) << argv[1];
  }
  // The flags before -m in the same word stay options, without the m.
  EXPECT_THAT(ParsePythonCommand(V{"python", "-uBm", "pkg"})->options, ElementsAre("-uB"));
}

TEST(ParsePythonCommand, OtherTargets) {
  EXPECT_EQ(ParsePythonCommand(V{"python", "-c", "print(1)", "a"})->target, Target::kCode);
  EXPECT_EQ(ParsePythonCommand(V{"python", "-uc", "print(1)"})->target_name, "print(1)");
  EXPECT_EQ(ParsePythonCommand(V{"python", "-", "a"})->target, Target::kStdin);
  EXPECT_EQ(ParsePythonCommand(V{"python", "-u"})->target, Target::kNone);
  EXPECT_EQ(ParsePythonCommand(V{"python", "-m"})->target, Target::kNone);
  // After --, the script, even one that looks like an option.
  auto dashed = ParsePythonCommand(V{"python", "-u", "--", "-x.py", "a"});
  EXPECT_EQ(dashed->target, Target::kScript);
  EXPECT_EQ(dashed->target_name, "-x.py");
  // -W's value is never the script.
  EXPECT_EQ(ParsePythonCommand(V{"python", "-W", "error", "t.py"})->target_name, "t.py");
  EXPECT_THAT(ParsePythonCommand(V{"python", "--check-hash-based-pycs", "always", "t.py"})->options,
              ElementsAre("--check-hash-based-pycs", "always"));
}

TEST(ParsePythonCommand, EnvPrefix) {
  auto cmd =
      ParsePythonCommand(V{"env", "-u", "X", "-C", "/w", "A=1", "--unset=Y", "python3", "t.py"});
  ASSERT_TRUE(cmd.has_value());
  EXPECT_THAT(cmd->launcher,
              ElementsAre("env", "-u", "X", "-C", "/w", "A=1", "--unset=Y", "python3"));
  EXPECT_THAT(cmd->env_unsets, ElementsAre("X", "Y"));
  EXPECT_THAT(cmd->env_sets, ElementsAre("A=1"));
  EXPECT_EQ(cmd->env_chdir, "/w");
  EXPECT_FALSE(cmd->env_clears);
  EXPECT_TRUE(cmd->env_unknown_option.empty());
  EXPECT_TRUE(ParsePythonCommand(V{"env", "-i", "python", "t.py"})->env_clears);
  EXPECT_EQ(ParsePythonCommand(V{"env", "--block-signal", "python", "t.py"})->env_unknown_option,
            "--block-signal");
  EXPECT_EQ(ParsePythonCommand(V{"env", "--", "python", "t.py"})->target_name, "t.py");
}

TEST(ParsePythonCommand, NotPython) {
  EXPECT_FALSE(ParsePythonCommand(V{}).has_value());
  EXPECT_FALSE(ParsePythonCommand(V{"python3-config", "t.py"}).has_value());
  EXPECT_FALSE(ParsePythonCommand(V{"bash", "-c", "python t.py"}).has_value());
  EXPECT_FALSE(ParsePythonCommand(V{"env", "-S", "python t.py"}).has_value());
  EXPECT_FALSE(ParsePythonCommand(V{"env", "A=1"}).has_value());
  EXPECT_FALSE(ParsePythonCommand(V{"torchrun", "t.py"}).has_value());
}

TEST(ProgramAfterEnv, Basename) {
  EXPECT_EQ(ProgramAfterEnv(V{"/usr/local/bin/fleetrun", "t.py"}), "fleetrun");
  EXPECT_EQ(ProgramAfterEnv(V{"env", "A=1", "fleetrun"}), "fleetrun");
  EXPECT_EQ(ProgramAfterEnv(V{"env", "A=1"}), "");
  EXPECT_THAT(ProgramAfterEnv(V{}), IsEmpty());
}

}  // namespace
}  // namespace trainlet::agent
