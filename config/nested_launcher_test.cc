#include "config/nested_launcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

TEST(DetectNestedLauncher, PythonDashMPaddleLaunch) {
  using V = std::vector<std::string>;
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-m", "paddle.distributed.launch", "train.py"}),
            NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(V{"/usr/bin/python3.11", "-u", "-W", "ignore", "-m",
                                   "paddle.distributed.launch", "--devices=0,1", "t.py"}),
            NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(V{"python3", "-mpaddle.distributed.launch", "t.py"}),
            NestedLauncher::kPaddle);
  // Combined options, env in front, the fleet spellings.
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-um", "paddle.distributed.launch", "t.py"}),
            NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-uBmpaddle.distributed.launch", "t.py"}),
            NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(
                V{"python", "-Wignore", "-Xdev", "-m", "paddle.distributed.launch", "t.py"}),
            NestedLauncher::kPaddle);
  EXPECT_EQ(
      DetectNestedLauncher(V{"/usr/bin/env", "python", "-m", "paddle.distributed.launch", "t.py"}),
      NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(V{"env", "-i", "-u", "X", "A=1", "python3", "-m",
                                   "paddle.distributed.launch", "t.py"}),
            NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(V{"fleetrun", "--gpus=0,1", "t.py"}), NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(V{"/usr/local/bin/fleetrun", "t.py"}), NestedLauncher::kPaddle);
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-m", "paddle.distributed.fleet.launch", "t.py"}),
            NestedLauncher::kPaddle);
}

TEST(DetectNestedLauncher, AnythingElseIsNone) {
  using V = std::vector<std::string>;
  EXPECT_EQ(DetectNestedLauncher(V{}), NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"python", "train.py", "-m", "paddle.distributed.launch"}),
            NestedLauncher::kNone);  // an argument of the script
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-c", "import x", "-m", "paddle.distributed.launch"}),
            NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-m", "paddle.distributed.launcher"}),
            NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-m"}), NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"python3-config", "-m", "paddle.distributed.launch"}),
            NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"bash", "-c", "python -m paddle.distributed.launch t.py"}),
            NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"torchrun", "train.py"}), NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-uc", "x", "-m", "paddle.distributed.launch"}),
            NestedLauncher::kNone);  // -c in a combined word
  EXPECT_EQ(DetectNestedLauncher(V{"python", "-W", "-m", "paddle.distributed.launch"}),
            NestedLauncher::kNone);  // "-m" is -W's value
  EXPECT_EQ(DetectNestedLauncher(V{"env", "python", "train.py"}), NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"env", "-S", "python -m paddle.distributed.launch t.py"}),
            NestedLauncher::kNone);
  EXPECT_EQ(DetectNestedLauncher(V{"env", "A=1"}), NestedLauncher::kNone);
}

}  // namespace
}  // namespace trainlet::agent
