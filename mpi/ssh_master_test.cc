// OpenSshMasterProber with a fake `ssh` (a shell script that records its
// arguments and answers as told) and the scripted libssh stand-in; the real
// OpenSSH path runs end to end in e2e/e2e_mpi.py and bench/mpi_launch.py.

#include "mpi/ssh_master.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mpi/testing/fake_ssh_prober.h"

namespace trainlet::mpi {
namespace {

using ::testing::HasSubstr;

class FakeSsh : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ssh-master-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { system(absl::StrCat("rm -rf '", dir_, "'").c_str()); }

  // A fake ssh that writes its arguments, one a line, to args, prints
  // `say` and exits `code` (after `sleep`).
  std::string Ssh(int code, const std::string& say = "", const std::string& sleep = "0") {
    const std::string path = dir_ + "/ssh";
    std::ofstream out(path);
    out << "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > '" << dir_ << "/args'\n"
        << "echo '" << say << "' >&2\n"
        << (sleep == "0" ? "" : absl::StrCat("exec sleep ", sleep, "\n")) << "exit " << code
        << "\n";
    out.close();
    chmod(path.c_str(), 0700);
    return path;
  }
  std::string Args() const {
    std::ifstream in(dir_ + "/args");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
  testing::FakeSshProber libssh_{nullptr, absl::ZeroDuration()};
  ProbeTarget target_{"w1", "w1.job", 2223, "ssh-ed25519 AAAA"};
};

TEST_F(FakeSsh, ExitZeroIsReadyAndLeavesTheMasterToSsh) {
  OpenSshMasterProber prober(Ssh(0), "/state/ssh_config", dir_ + "/mux", {"PATH=/usr/bin:/bin"},
                             &libssh_);
  const ProbeResult r = prober.Probe(target_, absl::Seconds(30));
  EXPECT_EQ(r.stage, ProbeStage::kOk) << r.detail;
  EXPECT_EQ(Args(),
            "-F\n/state/ssh_config\n-o\nControlMaster=auto\n-o\nControlPersist=yes\n-o\n"
            "ConnectionAttempts=1\n-o\nConnectTimeout=30\n-p\n2223\nw1.job\n"
            "true trainlet-readiness\n");
  EXPECT_EQ(libssh_.total_probes(), 0);  // no second login
}

// The check's connection comes from `trainlet ssh-connect` (TCP_NODELAY),
// run by ssh with SHELL=/bin/sh whatever the pod's SHELL; a helper path
// the shell would split or ssh expand is not used.
TEST_F(FakeSsh, TheConnectionComesFromTheHelper_WithAPlainShell) {
  const std::string ssh = dir_ + "/ssh";
  std::ofstream(ssh) << "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > '" << dir_
                     << "/args'\necho \"$SHELL\" > '" << dir_ << "/shell'\nexit 0\n";
  chmod(ssh.c_str(), 0700);
  OpenSshMasterProber prober(ssh, "/c", dir_ + "/mux", {"SHELL=/sbin/nologin", "PATH=/bin"},
                             &libssh_, "/opt/trainlet/bin/trainlet");
  ASSERT_EQ(prober.Probe(target_, absl::Seconds(30)).stage, ProbeStage::kOk);
  EXPECT_THAT(Args(), HasSubstr("-o\nProxyCommand=/opt/trainlet/bin/trainlet ssh-connect %h %p\n"
                                "-o\nProxyUseFdpass=yes\n-p\n2223\nw1.job\n"));
  std::ifstream shell(dir_ + "/shell");
  std::string got;
  std::getline(shell, got);
  EXPECT_EQ(got, "/bin/sh");
  for (const char* odd : {"trainlet", "/opt/my bin/trainlet", "/opt/%h/trainlet",
                          "/opt/x;rm/trainlet", "/opt/$(x)/trainlet", "/tmp/t (deleted)"}) {
    OpenSshMasterProber plain(ssh, "/c", dir_ + "/mux", {}, &libssh_, odd);
    ASSERT_EQ(plain.Probe(target_, absl::Seconds(30)).stage, ProbeStage::kOk);
    EXPECT_THAT(Args(), Not(HasSubstr("Proxy"))) << odd;
  }
}

TEST_F(FakeSsh, AFailureIsNamedByTheLibsshProbe) {
  libssh_.Script("w1", {{ProbeStage::kHostKey, "w1.job:2223 presented host key SHA256:x"}});
  OpenSshMasterProber prober(Ssh(255, "Host key verification failed."), "/c", dir_ + "/mux", {},
                             &libssh_);
  const ProbeResult r = prober.Probe(target_, absl::Seconds(30));
  EXPECT_EQ(r.stage, ProbeStage::kHostKey);
  EXPECT_EQ(r.detail, "w1.job:2223 presented host key SHA256:x");
  EXPECT_EQ(libssh_.probes("w1"), 1);
}

TEST_F(FakeSsh, SshFailingWhereLibsshPassesIsACommandFailureInSshsWords) {
  OpenSshMasterProber prober(Ssh(255, "command-line line 0: Bad configuration option"), "/c",
                             dir_ + "/mux", {}, &libssh_);
  const ProbeResult r = prober.Probe(target_, absl::Seconds(30));
  EXPECT_EQ(r.stage, ProbeStage::kCommand);
  EXPECT_THAT(r.detail, HasSubstr("exited with status 255"));
  EXPECT_THAT(r.detail, HasSubstr("Bad configuration option"));
}

TEST_F(FakeSsh, AHangingSshIsKilledAtTheBound) {
  OpenSshMasterProber prober(Ssh(0, "", "60"), "/c", dir_ + "/mux", {}, &libssh_);
  const absl::Time start = absl::Now();
  const ProbeResult r = prober.Probe(target_, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));  // not 60 s
  EXPECT_EQ(r.stage, ProbeStage::kCommand);
  EXPECT_THAT(r.detail, HasSubstr("did not finish in time"));
}

TEST_F(FakeSsh, ANameSshWouldTakeForAnOptionNeverReachesIt) {
  libssh_.Script("w1", {{ProbeStage::kDns, "'-oProxyCommand=x' is not a valid host name"}});
  OpenSshMasterProber prober(Ssh(0), "/c", dir_ + "/mux", {}, &libssh_);
  target_.name = "-oProxyCommand=x";
  const ProbeResult r = prober.Probe(target_, absl::Seconds(30));
  EXPECT_EQ(r.stage, ProbeStage::kDns);
  EXPECT_EQ(Args(), "");  // ssh never ran
}

TEST(RunBounded, PassesTheExitCodeAndOutput) {
  const BoundedRun r = RunBounded({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, {},
                                  absl::Now() + absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.output, "out\nerr\n");
}

// Its helper process lives as long as the program: it must not hold a
// descriptor the agent opened for something else (here a pipe standing for
// a worker's exec-status pipe, whose reader waits for EOF), else whoever
// reads that pipe waits for the probe.
TEST(RunBounded, TheHelperHoldsNoneOfTheCallersDescriptors) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  char pattern[] = "/tmp/run-bounded-test-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string pid_file = absl::StrCat(pattern, "/pid");
  BoundedRun result;
  std::thread run([&] {
    result = RunBounded({"/bin/sh", "-c", absl::StrCat("echo $$ > ", pid_file, "; exec sleep 60")},
                        {}, absl::Now() + absl::Seconds(120));
  });
  // The program runs: the helper was forked while fds[1] was open.
  std::string pid;
  for (int i = 0; i < 2000 && pid.empty(); ++i) {
    std::ifstream in(pid_file);
    std::getline(in, pid);
    if (pid.empty()) usleep(5000);
  }
  ASSERT_FALSE(pid.empty());
  close(fds[1]);
  pollfd pfd{fds[0], POLLIN, 0};
  // EOF at once: nobody else holds the write end (the program sleeps 60 s).
  const int ready = poll(&pfd, 1, 10000);
  EXPECT_EQ(ready, 1);
  char c;
  if (ready == 1) {
    EXPECT_EQ(read(fds[0], &c, 1), 0);
  }
  close(fds[0]);
  kill(std::stoi(pid), SIGKILL);
  run.join();
  EXPECT_EQ(result.exit_code, 128 + SIGKILL);
  unlink(pid_file.c_str());
  rmdir(pattern);
}

TEST(RunBounded, AMissingProgramIs127) {
  EXPECT_EQ(RunBounded({"/nonexistent/ssh"}, {}, absl::Now() + absl::Seconds(30)).exit_code, 127);
}

TEST(StopMasters, NothingToStopWithoutADirectory) { EXPECT_EQ(StopMasters(""), 0); }

}  // namespace
}  // namespace trainlet::mpi
