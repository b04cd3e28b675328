#include "mpi/formats.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi/keys.h"
#include "mpi/testing/test_util.h"

namespace trainlet::mpi {
namespace {

using ::trainlet::mpi::testing::ExpectGolden;
using ::trainlet::mpi::testing::RunShell;

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKey1[] =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPDfVOErM2gZofCvvxaPGM5kgVfCuOHzoGE5cueIt82t";
constexpr char kKey2[] =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJqDUZrtysrbMoDu7US0nnFCQ/kK0INFNS103K3eJFMw";
constexpr char kKey3[] =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAb6+dAz81AE7OCQhXJwPfXtJUDHILyZQevgAKkgjBkk";

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/trainlet-mpi-test-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::string ignored;
    RunShell(absl::StrCat("rm -rf ", ShellQuote(path_)), &ignored);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return absl::StrCat(path_, "/", name); }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  ASSERT_TRUE(WriteFileAtomically(path, text, mode).ok()) << path;
}

// The launcher hosting slots (port 0, no key: not reached over SSH), then
// three workers.
std::vector<MpiHost> JobHosts() {
  return {{"launcher", "job-launcher-0.job.default.svc", 1, 0, ""},
          {"pod-0", "job-worker-0.job.default.svc", 2, 2222, kKey1},
          {"pod-1", "job-worker-1.job.default.svc", 2, 22, kKey2},
          {"pod-2", "10.200.0.13", 2, 2222, kKey3}};
}

TEST(Formats, OpenMpiHostfile) { ExpectGolden("hostfile", OpenMpiHostfile(JobHosts())); }

TEST(Formats, HydraHostfile) { ExpectGolden("hydra_hostfile", HydraHostfile(JobHosts())); }

TEST(Formats, KnownHostsBracketsOnlyNonDefaultPorts) {
  ExpectGolden("known_hosts", KnownHosts(JobHosts()));
}

TEST(Formats, SshClientConfig) {
  ExpectGolden("ssh_config", SshClientConfig(JobHosts(), {"/tmp/trainlet-0/job/launcher/id",
                                                          "/tmp/trainlet-0/job/launcher/"
                                                          "known_hosts"}));
}

TEST(Formats, SshClientConfigNamesEachHostsMultiplexingSocket) {
  const std::vector<MpiHost> hosts = JobHosts();
  const std::string config = SshClientConfig(hosts, {"/s/id", "/s/known_hosts", "/s/mux"});
  const std::string w0 = ControlSocketPath(hosts[1].name, 2222, kKey1, "/s/mux");
  const std::string w2 = ControlSocketPath(hosts[3].name, 2222, kKey3, "/s/mux");
  EXPECT_THAT(config, HasSubstr("Host job-worker-0.job.default.svc\n  Port 2222\n"
                                "  ControlPath " +
                                w0 + "\n"));
  EXPECT_THAT(config, HasSubstr("Host 10.200.0.13\n  Port 2222\n  ControlPath " + w2 + "\n"));
  EXPECT_THAT(config, HasSubstr("  ControlMaster no\n"));  // only the probe makes masters
  EXPECT_THAT(config, Not(HasSubstr("job-launcher")));
  // Short, and the same only for the same name, port and host key.
  EXPECT_EQ(w0.size(), std::string("/s/mux/").size() + 16);
  EXPECT_EQ(w0, ControlSocketPath(hosts[1].name, 2222, kKey1, "/s/mux"));
  EXPECT_NE(w0, ControlSocketPath(hosts[1].name, 2222, kKey2, "/s/mux"));  // a replaced pod
  EXPECT_NE(w0, ControlSocketPath(hosts[1].name, 2223, kKey1, "/s/mux"));
  EXPECT_NE(w0, ControlSocketPath(hosts[2].name, 2222, kKey1, "/s/mux"));
  EXPECT_EQ(ControlSocketPath(hosts[0].name, 0, "", "/s/mux"), "");  // the launcher
  EXPECT_EQ(ControlSocketPath(hosts[1].name, 2222, kKey1, ""), "");
  EXPECT_THAT(SshClientConfig(hosts, {"/s/id", "/s/known_hosts"}), Not(HasSubstr("Control")));
}

TEST(Formats, SshClientConfigQuotesSpacesAndEscapesTokens) {
  const std::string config = SshClientConfig({}, {"/a b/id", "/c/%h"});
  EXPECT_THAT(config, HasSubstr("IdentityFile \"/a b/id\"\n"));
  EXPECT_THAT(config, HasSubstr("UserKnownHostsFile /c/%%h\n"));
}

TEST(Formats, DiscoverHosts) {
  ExpectGolden("discover_hosts.sh", DiscoverHostsScript("/tmp/trainlet-0/job/launcher/hosts"));
  ExpectGolden("discover_hosts_list", DiscoverHostsList(JobHosts()));
}

TEST(Formats, DiscoverHostsScriptPrintsTheLiveFile) {
  TempDir dir;
  const std::string list = dir.File("it's hosts");
  WriteFile(dir.File("discover.sh"), DiscoverHostsScript(list), 0755);
  WriteFile(list, DiscoverHostsList(JobHosts()), 0644);
  std::string output;
  ASSERT_EQ(RunShell(ShellQuote(dir.File("discover.sh")), &output), 0) << output;
  EXPECT_EQ(output, DiscoverHostsList(JobHosts()));
  WriteFile(list, "only-one:4\n", 0644);
  ASSERT_EQ(RunShell(ShellQuote(dir.File("discover.sh")), &output), 0) << output;
  EXPECT_EQ(output, "only-one:4\n");
}

TEST(Formats, SshWrapperScript) {
  ExpectGolden("ssh_wrapper.sh",
               SshWrapperScript("/usr/bin/ssh", "/tmp/trainlet-0/job/launcher/ssh_config"));
}

TEST(Formats, SshWrapperPassesItsArgumentsThrough) {
  TempDir dir;
  const std::string fake_ssh = dir.File("fake ssh");
  WriteFile(fake_ssh, "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]' \"$a\"; done\n", 0755);
  WriteFile(dir.File("ssh"), SshWrapperScript(fake_ssh, "/cfg"), 0755);
  std::string output;
  ASSERT_EQ(
      RunShell(absl::StrCat(ShellQuote(dir.File("ssh")), " host ' orted' '-mca \"x\"'"), &output),
      0)
      << output;
  EXPECT_EQ(output, "[-F][/cfg][host][ orted][-mca \"x\"]");
}

TEST(Formats, SshWrapperScript_WithAGate) {
  ExpectGolden("ssh_wrapper_gate.sh",
               SshWrapperScript("/usr/bin/ssh", "/tmp/trainlet-0/job/launcher/ssh_config",
                                "/tmp/trainlet-0/job/launcher/ssh-gate"));
}

// The gate (--early-command): a FIFO nobody holds open keeps the wrapper
// waiting; once someone holds it open for writing, the wrapper goes on; no
// FIFO there, no wait.
TEST(Formats, SshWrapperWaitsAtTheGateUntilItIsHeldOpen) {
  TempDir dir;
  const std::string fake_ssh = dir.File("fake-ssh");
  const std::string gate = dir.File("gate");
  WriteFile(fake_ssh, "#!/bin/sh\necho ran \"$@\"\n", 0755);
  WriteFile(dir.File("ssh"), SshWrapperScript(fake_ssh, "/cfg", gate), 0755);
  std::string output;
  // No FIFO: straight through.
  ASSERT_EQ(RunShell(absl::StrCat(ShellQuote(dir.File("ssh")), " host"), &output), 0) << output;
  EXPECT_EQ(output, "ran -F /cfg host\n");
  ASSERT_EQ(mkfifo(gate.c_str(), 0600), 0);
  // Closed: still waiting after a while (timeout kills it: 124).
  ASSERT_EQ(RunShell(absl::StrCat("timeout 0.5 ", ShellQuote(dir.File("ssh")), " host"), &output),
            124)
      << output;
  EXPECT_EQ(output, "");
  // Open (as the launcher holds it: read-write, never blocking).
  const int fd = open(gate.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(RunShell(absl::StrCat("timeout 30 ", ShellQuote(dir.File("ssh")), " host"), &output), 0)
      << output;
  EXPECT_EQ(output, "ran -F /cfg host\n");
  close(fd);
}

SshdPaths PathsIn(const std::string& dir) {
  return {absl::StrCat(dir, "/ssh_host_ed25519_key"), absl::StrCat(dir, "/authorized_keys"),
          absl::StrCat(dir, "/sshd.pid"), absl::StrCat(dir, "/session.sh")};
}

TEST(Formats, SshdConfig) {
  ExpectGolden("sshd_config", SshdConfig(2222, PathsIn("/tmp/trainlet-0/job/worker-0")));
}

TEST(Formats, SessionScript) {
  ExpectGolden("session.sh", SessionScript("/tmp/trainlet-0/job/worker-0/sessions",
                                           "/tmp/trainlet-0/job/worker-0/env.sh"));
}

TEST(Formats, SessionScriptRecordsSessionsButNotTheProbe) {
  TempDir dir;
  const std::string script = dir.File("session.sh");
  WriteFile(script, SessionScript(dir.File("sessions"), dir.File("env.sh")), 0755);
  WriteFile(dir.File("env.sh"), EnvFile({{"JOB_VAR", "from the pod"}}), 0644);
  std::string output;
  ASSERT_EQ(
      RunShell(absl::StrCat("SSH_ORIGINAL_COMMAND='", kReadinessCommand, "' ", ShellQuote(script)),
               &output),
      0)
      << output;
  EXPECT_FALSE(access(dir.File("sessions").c_str(), F_OK) == 0) << "the probe was recorded";
  ASSERT_EQ(RunShell(absl::StrCat("SSH_ORIGINAL_COMMAND='echo \"$JOB_VAR\"; exit 3' ",
                                  ShellQuote(script)),
                     &output),
            3)
      << output;
  EXPECT_EQ(output, "from the pod\n");
  std::ifstream sessions(dir.File("sessions"));
  std::string line;
  ASSERT_TRUE(std::getline(sessions, line));
  EXPECT_GT(std::stoi(line), 1);
}

TEST(Formats, EnvFile) {
  ExpectGolden("env.sh", EnvFile({{"PATH", "/usr/local/bin:/usr/bin"},
                                  {"QUOTES", "it's \"x\""},
                                  {"MULTI", "line one\nline two"},
                                  {"NCCL_DEBUG", "INFO"},
                                  {"bad-name", "x"},
                                  {"1BAD", "x"},
                                  {"HOME", "/root"},
                                  {"SSH_CONNECTION", "1.2.3.4"},
                                  {"_", "/bin/sh"},
                                  {"EMPTY", ""}}));
}

TEST(Formats, EnvFileRoundTripsThroughTheShell) {
  const std::map<std::string, std::string> env = {
      {"A_QUOTE", "it's"},
      {"DOUBLE", "say \"hi\""},
      {"DOLLAR", "$HOME and ${PATH}"},
      {"BACKTICK", "`id` $(id)"},
      {"BACKSLASH", "a\\b\\\\c\\n"},
      {"NEWLINES", "one\ntwo\n\nthree\n"},
      {"SPACES", "  lead and trail  "},
      {"EMPTY", ""},
      {"UNICODE", "gr\xc3\xbc\xc3\x9f"},
      {"LD_LIBRARY_PATH", "/usr/local/cuda/lib64"},
      {"HOME", "/should/not/appear"},
      {"SSH_AUTH_SOCK", "/nope"},
      {"not-a-name", "skipped"},
  };
  TempDir dir;
  WriteFile(dir.File("env.sh"), EnvFile(env), 0644);
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat("env -i /bin/sh -c '. \"$0\" && env -0' ",
                                  ShellQuote(dir.File("env.sh"))),
                     &output),
            0)
      << output;
  std::map<std::string, std::string> got;
  for (absl::string_view entry : absl::StrSplit(output, '\0', absl::SkipEmpty())) {
    const size_t eq = entry.find('=');
    ASSERT_NE(eq, absl::string_view::npos) << entry;
    got[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  for (const auto& [name, value] : env) {
    if (name == "HOME" || name == "SSH_AUTH_SOCK" || name == "not-a-name") {
      EXPECT_EQ(got.count(name), 0u) << name;
    } else {
      EXPECT_EQ(got[name], value) << name;
    }
  }
}

TEST(Formats, EnvFileSkipsValuesWithNul) {
  EXPECT_EQ(EnvFile({{"A", std::string("x\0y", 3)}, {"B", "b"}}), "export B='b'\n");
}

TEST(ShellQuote, QuotesEverything) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
}

// sshd -t must accept the config: as root (needing /run/sshd) and as a user.
class SshdConfigAccepted : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/usr/sbin/sshd", X_OK) != 0) GTEST_SKIP() << "no /usr/sbin/sshd";
    absl::StatusOr<KeyPair> host = GenerateEd25519();
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<KeyPair> job = GenerateEd25519();
    ASSERT_TRUE(job.ok()) << job.status();
    paths_ = PathsIn(dir_.path());
    WriteFile(paths_.host_key, host->private_pem, 0600);
    WriteFile(paths_.authorized_keys, job->public_line + "\n", 0600);
    WriteFile(paths_.session_script, SessionScript(dir_.File("sessions"), dir_.File("env.sh")),
              0755);
    WriteFile(dir_.File("sshd_config"), SshdConfig(2345, paths_), 0600);
  }

  TempDir dir_;
  SshdPaths paths_;
};

TEST_F(SshdConfigAccepted, ByRootSshd) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  if (access("/run/sshd", F_OK) != 0) {
    ASSERT_EQ(mkdir("/run/sshd", 0755), 0);
  }
  std::string output;
  EXPECT_EQ(RunShell(absl::StrCat("/usr/sbin/sshd -t -f ", ShellQuote(dir_.File("sshd_config"))),
                     &output),
            0)
      << output;
  EXPECT_EQ(output, "");
  // The effective configuration has what we meant (sshd -T prints it).
  ASSERT_EQ(RunShell(absl::StrCat("/usr/sbin/sshd -T -f ", ShellQuote(dir_.File("sshd_config"))),
                     &output),
            0)
      << output;
  output = "\n" + output;  // every line, the first too, is "\n<keyword> <value>\n"
  EXPECT_THAT(output, HasSubstr("\nport 2345\n"));
  EXPECT_THAT(output, HasSubstr("\nforcecommand '" + paths_.session_script + "'\n"));
  EXPECT_THAT(output, HasSubstr("\nusepam no\n"));
  EXPECT_THAT(output, HasSubstr("\nstrictmodes no\n"));
  EXPECT_THAT(output, HasSubstr("\nmaxstartups 200:30:400\n"));
  EXPECT_THAT(output, HasSubstr("\nauthorizedkeysfile " + paths_.authorized_keys + "\n"));
}

TEST_F(SshdConfigAccepted, ByNonRootSshd) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to uid 65534";
  std::string output;
  if (RunShell("setpriv --reuid=65534 --regid=65534 --clear-groups true", &output) != 0) {
    GTEST_SKIP() << "setpriv cannot switch users here: " << output;
  }
  ASSERT_EQ(RunShell(absl::StrCat("chown -R 65534:65534 ", ShellQuote(dir_.path())), &output), 0)
      << output;
  EXPECT_EQ(RunShell(absl::StrCat("setpriv --reuid=65534 --regid=65534 --clear-groups "
                                  "/usr/sbin/sshd -t -f ",
                                  ShellQuote(dir_.File("sshd_config"))),
                     &output),
            0)
      << output;
  EXPECT_EQ(output, "");
}

// The launcher's files and the worker's files work together with real
// OpenSSH: ssh -F <SshClientConfig> reaches an sshd running SshdConfig (in
// inetd mode through ProxyCommand: no port, no daemon to wait for), pins the
// host key from KnownHosts, runs the command through SessionScript with the
// pod's env from EnvFile, and records the session unless it is the probe.
class RealSsh : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "sshd -i runs as root here";
    if (access("/usr/sbin/sshd", X_OK) != 0 || access("/usr/bin/ssh", X_OK) != 0) {
      GTEST_SKIP() << "no OpenSSH";
    }
    if (access("/run/sshd", F_OK) != 0) {
      ASSERT_EQ(mkdir("/run/sshd", 0755), 0);
    }
    absl::StatusOr<KeyPair> host = GenerateEd25519();
    absl::StatusOr<KeyPair> job = GenerateEd25519();
    ASSERT_TRUE(host.ok() && job.ok());
    host_public_ = host->public_line;
    const SshdPaths paths = PathsIn(dir_.path());
    WriteFile(paths.host_key, host->private_pem, 0600);
    WriteFile(paths.authorized_keys, job->public_line + "\n", 0600);
    WriteFile(paths.session_script, SessionScript(dir_.File("sessions"), dir_.File("env.sh")),
              0755);
    WriteFile(dir_.File("env.sh"), EnvFile({{"JOB_VAR", "it's from the pod"}}), 0644);
    WriteFile(dir_.File("sshd_config"), SshdConfig(2222, paths), 0600);
    WriteFile(dir_.File("id"), job->private_pem, 0600);
    WriteFile(dir_.File("ssh_config"),
              SshClientConfig(Hosts(host_public_), {dir_.File("id"), dir_.File("known_hosts")}),
              0600);
  }

  static std::vector<MpiHost> Hosts(const std::string& key) {
    return {{"worker-0", "127.0.0.1", 2, 2222, key}};
  }

  int Ssh(const std::string& remote_command, std::string* output) {
    return RunShell(absl::StrCat("/usr/bin/ssh -F ", ShellQuote(dir_.File("ssh_config")), " -o ",
                                 ShellQuote(absl::StrCat("ProxyCommand=/usr/sbin/sshd -i -f ",
                                                         dir_.File("sshd_config"))),
                                 " 127.0.0.1 ", ShellQuote(remote_command), " </dev/null"),
                    output);
  }

  TempDir dir_;
  std::string host_public_;
};

TEST_F(RealSsh, SessionGetsThePodEnvAndIsRecordedButTheProbeIsNot) {
  WriteFile(dir_.File("known_hosts"), KnownHosts(Hosts(host_public_)), 0644);
  std::string output;
  ASSERT_EQ(Ssh(kReadinessCommand, &output), 0) << output;
  EXPECT_EQ(output, "");
  EXPECT_NE(access(dir_.File("sessions").c_str(), F_OK), 0) << "the probe was recorded";
  ASSERT_EQ(Ssh("echo \"$JOB_VAR\"; exit 4", &output), 4) << output;
  EXPECT_EQ(output, "it's from the pod\n");
  std::ifstream sessions(dir_.File("sessions"));
  std::string line;
  ASSERT_TRUE(std::getline(sessions, line));
  EXPECT_FALSE(std::getline(sessions, line));
}

TEST_F(RealSsh, AnotherHostKeyIsRefused) {
  absl::StatusOr<KeyPair> impostor = GenerateEd25519();
  ASSERT_TRUE(impostor.ok());
  WriteFile(dir_.File("known_hosts"), KnownHosts(Hosts(impostor->public_line)), 0644);
  std::string output;
  EXPECT_EQ(Ssh("true", &output), 255) << output;
  EXPECT_THAT(output, HasSubstr("Host key verification failed"));
  EXPECT_NE(access(dir_.File("sessions").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace trainlet::mpi
