#include "mpi/launcher_env.h"

#include <stdlib.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi/testing/test_util.h"

namespace trainlet::mpi {
namespace {

using ::trainlet::mpi::testing::ExpectGolden;
using ::trainlet::mpi::testing::RunShell;

constexpr char kKey[] =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPDfVOErM2gZofCvvxaPGM5kgVfCuOHzoGE5cueIt82t";

// Sorted "K=V" lines.
std::string Lines(const std::map<std::string, std::string>& env) {
  std::string out;
  for (const auto& [name, value] : env) absl::StrAppend(&out, name, "=", value, "\n");
  return out;
}

LauncherEnvInput Input(Flavor flavor, bool root) {
  const std::string dir = "/tmp/trainlet-0/job/launcher";
  LauncherEnvInput input;
  input.flavor = flavor;
  input.files = {
      dir + "/hostfile",   dir + "/hydra_hostfile", dir + "/discover_hosts.sh", dir + "/hosts",
      dir + "/ssh_config", dir + "/id_ed25519",     dir + "/known_hosts",       dir + "/bin"};
  input.hosts = {{"l", "job-launcher-0.job", 1, 0, ""},  // hosts slots, not reached over SSH
                 {"w0", "job-worker-0.job", 2, 2222, kKey},
                 {"w1", "job-worker-1.job", 2, 2222, kKey},
                 {"w2", "job-worker-2.job", 4, 2222, kKey}};
  input.restart_count = 1;
  input.root = root;
  input.path = "/usr/local/bin:/usr/bin:/bin";
  return input;
}

TEST(LauncherEnv, EachFlavor) {
  ExpectGolden("launcher_env_openmpi", Lines(LauncherEnv(Input(Flavor::kOpenMpi4, false))));
  ExpectGolden("launcher_env_openmpi5", Lines(LauncherEnv(Input(Flavor::kOpenMpi5, false))));
  ExpectGolden("launcher_env_mpich", Lines(LauncherEnv(Input(Flavor::kMpich, false))));
  ExpectGolden("launcher_env_intel", Lines(LauncherEnv(Input(Flavor::kIntel, false))));
  ExpectGolden("launcher_env_unknown_root", Lines(LauncherEnv(Input(Flavor::kUnknown, true))));
}

TEST(LauncherEnv, RootOnlyMattersToOpenMpi) {
  EXPECT_EQ(LauncherEnv(Input(Flavor::kOpenMpi5, true)).count("PRTE_ALLOW_RUN_AS_ROOT"), 1u);
  EXPECT_EQ(LauncherEnv(Input(Flavor::kOpenMpi4, true)).count("OMPI_ALLOW_RUN_AS_ROOT"), 1u);
  EXPECT_EQ(LauncherEnv(Input(Flavor::kMpich, true)).count("OMPI_ALLOW_RUN_AS_ROOT"), 0u);
  EXPECT_EQ(LauncherEnv(Input(Flavor::kOpenMpi4, false)).count("OMPI_ALLOW_RUN_AS_ROOT"), 0u);
}

TEST(LauncherEnv, PrteShortensNamesUnlessThatMergesHosts) {
  // #4028: the launcher's FQDN line must match its short hostname.
  EXPECT_EQ(LauncherEnv(Input(Flavor::kOpenMpi5, false))["PRTE_MCA_prte_keep_fqdn_hostnames"], "0");
  LauncherEnvInput input = Input(Flavor::kOpenMpi5, false);
  input.hosts[2].name = "job-worker-0.other";  // "job-worker-0" twice
  EXPECT_EQ(LauncherEnv(input)["PRTE_MCA_prte_keep_fqdn_hostnames"], "1");
  EXPECT_TRUE(FirstLabelsDistinct({{"a", "10.0.0.1", 1, 22, ""}, {"b", "10.0.0.2", 1, 22, ""}}));
  EXPECT_FALSE(FirstLabelsDistinct({{"a", "w", 1, 22, ""}, {"b", "w.x", 1, 22, ""}}));
}

TEST(LauncherEnv, EmptyPathGetsADefaultNotTheCurrentDirectory) {
  LauncherEnvInput input = Input(Flavor::kMpich, false);
  input.path = "";
  EXPECT_EQ(LauncherEnv(input)["PATH"], absl::StrCat(input.files.bin_dir, ":", kDefaultPath));
}

TEST(SshBypass, NothingNamesAnotherAgent_Empty) {
  EXPECT_EQ(SshBypass({{"PATH", "/usr/bin"},
                       {"OMPI_MCA_plm_rsh_args", "-p 2222"},
                       {"OMPI_MCA_plm_rsh_launch_agent", "orted"},
                       {"HYDRA_LAUNCHER", "rsh"},
                       {"HYDRA_BOOTSTRAP", "ssh"}},
                      {"mpirun", "-np", "4", "--mca", "btl", "tcp,self", "./train"},
                      {{"/etc/openmpi/openmpi-mca-params.conf",
                        "# plm_rsh_agent = x\nbtl = ^openib\nmtl = ^ofi\n"}}),
            "");
}

TEST(SshBypass, EachWayOfNamingAnotherAgent) {
  for (const char* key :
       {"OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_rsh_agent", "OMPI_MCA_pls_rsh_agent",
        "PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm", "OMPI_MCA_mca_base_param_files",
        "HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC", "I_MPI_HYDRA_BOOTSTRAP_EXEC"}) {
    EXPECT_EQ(SshBypass({{key, "/usr/bin/rsh"}}, {"mpirun"}, {}), absl::StrCat(key, " is set"));
  }
  EXPECT_EQ(SshBypass({{"HYDRA_BOOTSTRAP", "slurm"}}, {"mpiexec"}, {}), "HYDRA_BOOTSTRAP is set");
  for (const char* arg : {"plm_rsh_agent", "--launcher", "-launcher-exec", "-bootstrap-exec",
                          "--tune", "PRTE_MCA_plm_ssh_agent=x", "plm"}) {
    EXPECT_EQ(SshBypass({}, {"mpirun", "--mca", arg, "x"}, {}),
              absl::StrCat("COMMAND's argument \"", arg, "\""));
  }
  EXPECT_EQ(
      SshBypass({}, {"mpirun"}, {{"/home/u/.openmpi/mca-params.conf", "plm_rsh_agent = rsh\n"}}),
      "/home/u/.openmpi/mca-params.conf sets plm_rsh_agent");
}

// What else makes Open MPI or Hydra start its daemons with another agent:
// Open MPI's override file and aggregate parameter sets (-am), Hydra's
// configuration files (mpiexec options, one per token).
TEST(SshBypass, OverrideFilesAggregateSetsAndHydraConfigFiles) {
  for (const char* key : {"OMPI_MCA_mca_base_param_file_prefix",
                          "OMPI_MCA_mca_base_override_param_file", "HYDRA_CONFIG_FILE"}) {
    EXPECT_EQ(SshBypass({{key, "/x"}}, {"mpirun"}, {}), absl::StrCat(key, " is set"));
  }
  for (const char* arg : {"-am", "--am"}) {
    EXPECT_EQ(SshBypass({}, {"mpirun", arg, "ssh-elsewhere", "./a"}, {}),
              absl::StrCat("COMMAND's argument \"", arg, "\""));
  }
  EXPECT_EQ(
      SshBypass({}, {"mpiexec"},
                {{"/usr/etc/mpiexec.hydra.conf", "# a comment\n-launcher-exec /usr/bin/ssh\n"}}),
      "/usr/etc/mpiexec.hydra.conf sets -launcher-exec");
  EXPECT_EQ(SshBypass({}, {"mpiexec"}, {{"/home/u/.mpiexec.hydra.conf", "-ppn 2 -launcher rsh\n"}}),
            "/home/u/.mpiexec.hydra.conf sets -launcher");
  EXPECT_EQ(SshBypass({}, {"mpiexec"}, {{"/usr/etc/mpiexec.hydra.conf", "-ppn 2\n-iface eth0\n"}}),
            "");
  EXPECT_EQ(SshBypass({}, {"mpirun"},
                      {{"/etc/openmpi/openmpi-mca-params-override.conf", "plm_rsh_agent = rsh\n"}}),
            "/etc/openmpi/openmpi-mca-params-override.conf sets plm_rsh_agent");
}

TEST(McaParamFiles, SystemAndUser) {
  EXPECT_THAT(
      McaParamFiles({"/opt/openmpi/bin/mpirun"}, "/home/u", ""),
      ::testing::IsSupersetOf(
          {"/etc/openmpi/openmpi-mca-params.conf", "/opt/openmpi/etc/openmpi-mca-params.conf",
           "/opt/openmpi/etc/prte-mca-params.conf", "/home/u/.openmpi/mca-params.conf",
           "/home/u/.prte/mca-params.conf", "/etc/openmpi/openmpi-mca-params-override.conf",
           "/opt/openmpi/etc/openmpi-mca-params-override.conf",
           "/opt/openmpi/etc/mpiexec.hydra.conf", "/home/u/.mpiexec.hydra.conf"}));
  EXPECT_THAT(McaParamFiles({}, "", ""),
              ::testing::ElementsAre("/etc/openmpi/openmpi-mca-params.conf",
                                     "/etc/openmpi/openmpi-mca-params-override.conf",
                                     "/etc/openmpi/prte-mca-params.conf"));
}

// The installation a symlink leads to (Debian: /usr/bin/mpirun ->
// /etc/alternatives/mpirun -> /usr/bin/mpirun.openmpi) and a relocated one
// (OPAL_PREFIX) are read too, each file once.
TEST(McaParamFiles, EveryPrefix_EachFileOnce) {
  const std::vector<std::string> files =
      McaParamFiles({"/usr/bin/mpirun", "/opt/ompi-4.1/bin/orterun", "/usr/bin/mpirun.openmpi"}, "",
                    "/sw/openmpi");
  EXPECT_THAT(files, ::testing::IsSupersetOf({"/usr/etc/openmpi-mca-params-override.conf",
                                              "/opt/ompi-4.1/etc/openmpi-mca-params.conf",
                                              "/sw/openmpi/etc/prte-mca-params.conf"}));
  EXPECT_EQ(std::set<std::string>(files.begin(), files.end()).size(), files.size());
}

// A batch scheduler's job: the MPI starts its daemons through it.
TEST(SshBypass, ASchedulersJobIsABypass) {
  for (const char* key : {"SLURM_JOB_ID", "SLURM_JOBID", "PBS_JOBID", "PBS_ENVIRONMENT",
                          "LSB_JOBID", "PE_HOSTFILE", "FLUX_JOB_ID"}) {
    EXPECT_THAT(SshBypass({{key, "42"}}, {"mpirun"}, {}),
                ::testing::StartsWith(absl::StrCat(key, " is set")));
  }
}

TEST(RshArgs, PortOnlyWhenAllHostsAgree) {
  LauncherEnvInput input = Input(Flavor::kOpenMpi4, false);
  const std::string same = RshArgs(input.files, input.hosts);
  EXPECT_EQ(same.substr(same.size() - 8), " -p 2222");
  input.hosts[2].port = 22;
  EXPECT_EQ(RshArgs(input.files, input.hosts).find("-p "), std::string::npos);
  EXPECT_EQ(RshArgs(input.files, {}).find("-p "), std::string::npos);
  // The launcher (port 0) alone: nothing is reached over SSH, no -p 0.
  EXPECT_EQ(RshArgs(input.files, {input.hosts[0]}).find("-p "), std::string::npos);
}

}  // namespace
}  // namespace trainlet::mpi
