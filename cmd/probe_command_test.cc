#include "cmd/probe_command.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

using ::testing::HasSubstr;

int Probe(std::vector<std::string> args, std::string* out, std::string* err,
          std::map<std::string, std::string> env = {}) {
  std::ostringstream o, e;
  const int code = RunProbeCommand(args, env, o, e);
  *out = o.str();
  *err = e.str();
  return code;
}

TEST(ProbeCommand, BadFlagsAreUsageErrorsNamingTheInput) {
  std::string out, err;
  EXPECT_EQ(Probe({"--format=xml"}, &out, &err), 64);
  EXPECT_THAT(err, HasSubstr("--format: expected json, nccl-topo or env"));
  EXPECT_EQ(Probe({"--timeout=0"}, &out, &err), 64);
  EXPECT_THAT(err, HasSubstr("--timeout"));
  EXPECT_EQ(Probe({"--", "x"}, &out, &err), 64);
  EXPECT_THAT(err, HasSubstr("no COMMAND"));
  // --format is a flag only: TRAINLET_FORMAT means nothing.
  EXPECT_EQ(Probe({"--sysfs-root=/nonexistent", "--nvml-library=none", "--nccl-library=none"}, &out,
                  &err, {{"TRAINLET_FORMAT", "bogus"}}),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("\"sysfs\""));
}

TEST(ProbeCommand, HelpNamesTheFormats) {
  std::string out, err;
  EXPECT_EQ(Probe({"--help"}, &out, &err), 0);
  EXPECT_THAT(out, HasSubstr("--format=json|nccl-topo|env"));
  EXPECT_THAT(out, HasSubstr("env TRAINLET_SYSFS_ROOT"));
}

TEST(ProbeCommand, AnEmptyTreeGivesAnEmptyTopologyFileAndNoGpuAdvice) {
  std::string out, err;
  EXPECT_EQ(Probe({"--format=nccl-topo", "--sysfs-root=/nonexistent", "--nvml-library=none",
                   "--nccl-library=none"},
                  &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("<system version=\"1\""));
  EXPECT_EQ(Probe({"--format=env", "--sysfs-root=/nonexistent", "--nvml-library=none",
                   "--nccl-library=none"},
                  &out, &err),
            0)
      << err;
  EXPECT_EQ(out.find("CUDA_DEVICE_ORDER"), std::string::npos) << out;
}

TEST(ProbeCommand, AlwaysTriesTheNvmlLibraryItIsGiven) {
  std::string out, err;
  EXPECT_EQ(Probe({"--sysfs-root=/nonexistent", "--nvml-library=/nonexistent/libnvidia-ml.so.1",
                   "--nccl-library=none"},
                  &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("dlopen /nonexistent/libnvidia-ml.so.1"));
  EXPECT_EQ(out.find("nvidiactl"), std::string::npos) << out;
}

TEST(DefaultRouteInterface, FindsTheDefaultRoute) {
  const std::string table =
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
      "net1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
      "eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
  EXPECT_EQ(DefaultRouteInterface(table), "eth0");
  EXPECT_EQ(DefaultRouteInterface("Iface\tDestination\n"), "");
  EXPECT_EQ(DefaultRouteInterface("garbage"), "");
}

}  // namespace
}  // namespace trainlet::agent
