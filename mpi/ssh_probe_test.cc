// LibsshProber against a real OpenSSH sshd on loopback (skipped where
// /usr/sbin/sshd or ssh-keygen is missing).
#include "mpi/ssh_probe.h"

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::mpi {
namespace {

using ::testing::HasSubstr;

// The bound of a probe that runs the remote command: it runs through the
// user's login shell, and bash sources ~/.bashrc for sshd's commands, which
// can take seconds on a loaded developer machine (pyenv init, say).
constexpr absl::Duration kSlowShell = absl::Seconds(60);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// A port that nothing listens on (right now).
int FreePort() {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  close(s);
  return ntohs(addr.sin_port);
}

bool PortAnswers(int port) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(s);
  return ok;
}

int OpenFds() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n;
}

// "256 SHA256:xxxx comment (ED25519)" -> "SHA256:xxxx".
std::string KeygenFingerprint(const std::string& pub_path) {
  std::string out;
  FILE* p = popen(absl::StrCat("ssh-keygen -l -E sha256 -f ", pub_path).c_str(), "r");
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  pclose(p);
  std::vector<std::string> fields = absl::StrSplit(out, ' ');
  return fields.size() > 1 ? fields[1] : "";
}

// One sshd for the whole suite: a host key, and an authorized_keys with the
// job key, a "forced" key whose sessions all run `exit 1` and a "sleeper"
// key whose sessions hang until the client leaves (`cat`).
class SshProbeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (access("/usr/sbin/sshd", X_OK) != 0 || system("command -v ssh-keygen >/dev/null") != 0)
      return;
    char tmpl[] = "/tmp/mpi_ready_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
    for (const char* name : {"host", "other_host", "job", "forced", "sleeper", "stranger"}) {
      ASSERT_EQ(
          system(absl::StrCat("ssh-keygen -q -t ed25519 -N '' -C ", name, " -f ", *dir_, "/", name)
                     .c_str()),
          0);
    }
    WriteFile(*dir_ + "/authorized_keys",
              absl::StrCat(ReadFile(*dir_ + "/job.pub"), "command=\"exit 1\" ",
                           ReadFile(*dir_ + "/forced.pub"), "command=\"cat\" ",
                           ReadFile(*dir_ + "/sleeper.pub")));
    if (geteuid() == 0) mkdir("/run/sshd", 0755);  // privilege separation
    port_ = FreePort();
    WriteFile(*dir_ + "/sshd_config", absl::StrCat("Port ", port_,
                                                   "\n"
                                                   "ListenAddress 127.0.0.1\n"
                                                   "HostKey ",
                                                   *dir_,
                                                   "/host\n"
                                                   "AuthorizedKeysFile ",
                                                   *dir_,
                                                   "/authorized_keys\n"
                                                   "PidFile ",
                                                   *dir_,
                                                   "/sshd.pid\n"
                                                   "UsePAM no\n"
                                                   "StrictModes no\n"
                                                   "PasswordAuthentication no\n"
                                                   "KbdInteractiveAuthentication no\n"
                                                   "PubkeyAuthentication yes\n"
                                                   "PermitRootLogin prohibit-password\n"
                                                   "LogLevel VERBOSE\n"));
    const std::string config = *dir_ + "/sshd_config";
    const std::string log = *dir_ + "/sshd.log";
    sshd_pid_ = fork();
    ASSERT_GE(sshd_pid_, 0);
    if (sshd_pid_ == 0) {
      FILE* out = freopen(log.c_str(), "w", stderr);
      (void)out;
      execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", config.c_str(), nullptr);
      _exit(127);
    }
    const absl::Time give_up = absl::Now() + kSlowShell;
    while (!PortAnswers(port_) && absl::Now() < give_up) {
      if (waitpid(sshd_pid_, nullptr, WNOHANG) == sshd_pid_) {
        sshd_pid_ = -1;
        FAIL() << "sshd exited: " << ReadFile(log);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_TRUE(PortAnswers(port_)) << "sshd did not listen: " << ReadFile(log);
  }

  static void TearDownTestSuite() {
    if (sshd_pid_ > 0) {
      kill(sshd_pid_, SIGTERM);
      waitpid(sshd_pid_, nullptr, 0);
      sshd_pid_ = -1;
    }
    if (dir_ != nullptr) {
      ASSERT_EQ(system(absl::StrCat("rm -rf ", *dir_).c_str()), 0);
      delete dir_;
      dir_ = nullptr;
    }
  }

  void SetUp() override {
    if (dir_ == nullptr) GTEST_SKIP() << "no /usr/sbin/sshd or ssh-keygen here";
  }

  static std::string Pem(const std::string& name) { return ReadFile(*dir_ + "/" + name); }
  static std::string Pub(const std::string& name) {
    return std::string(absl::StripTrailingAsciiWhitespace(ReadFile(*dir_ + "/" + name + ".pub")));
  }

  std::unique_ptr<LibsshProber> Prober(const std::string& key) {
    absl::StatusOr<std::string> user = CurrentUserName();
    EXPECT_TRUE(user.ok()) << user.status();
    absl::StatusOr<std::unique_ptr<LibsshProber>> prober = LibsshProber::Create(Pem(key), *user);
    EXPECT_TRUE(prober.ok()) << prober.status();
    return prober.ok() ? std::move(*prober) : nullptr;
  }

  ProbeTarget Target(const std::string& name = "127.0.0.1") const {
    return {"worker-0", name, port_, Pub("host")};
  }

  static std::string SshdLog() { return ReadFile(*dir_ + "/sshd.log"); }

  static std::string* dir_;
  static int port_;
  static pid_t sshd_pid_;
};

std::string* SshProbeTest::dir_ = nullptr;
int SshProbeTest::port_ = 0;
pid_t SshProbeTest::sshd_pid_ = -1;

TEST_F(SshProbeTest, EverythingRight_IsOkAndRunsTheReadinessCommand) {
  const ProbeResult r = Prober("job")->Probe(Target(), kSlowShell);
  EXPECT_EQ(r.stage, ProbeStage::kOk) << ProbeStageName(r.stage) << ": " << r.detail << "\n"
                                      << SshdLog();
  const ProbeResult by_name = Prober("job")->Probe(Target("localhost"), kSlowShell);
  EXPECT_EQ(by_name.stage, ProbeStage::kOk) << by_name.detail;
  EXPECT_THAT(SshdLog(), HasSubstr("Accepted publickey"));
}

// Reports how long one probe takes. An ok probe includes the remote login
// shell running `true`, which is as slow as the user's shell start-up files
// (bash sources ~/.bashrc for sshd commands); a probe refused at auth is the
// same work up to the command, so the difference is the remote shell.
TEST_F(SshProbeTest, ProbeTimes_AreReported) {
  auto median_ms = [this](LibsshProber* prober, ProbeStage want) {
    std::vector<double> ms;
    for (int i = 0; i < 7; ++i) {
      const absl::Time start = absl::Now();
      const ProbeResult r = prober->Probe(Target(), kSlowShell);
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
      EXPECT_EQ(r.stage, want) << r.detail;
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double ok = median_ms(Prober("job").get(), ProbeStage::kOk);
  const double up_to_auth = median_ms(Prober("stranger").get(), ProbeStage::kAuth);
  std::cout << "median probe: ok " << ok << " ms; refused at auth " << up_to_auth << " ms\n";
  RecordProperty("ok_probe_median_ms", static_cast<int>(ok));
  RecordProperty("auth_refused_probe_median_ms", static_cast<int>(up_to_auth));
  EXPECT_LT(ok, 30000);
  EXPECT_LT(up_to_auth, 5000);
}

TEST_F(SshProbeTest, WrongPinnedHostKey_IsHostKeyNamingBothFingerprints) {
  ProbeTarget target = Target();
  target.host_public_key = Pub("other_host");
  const ProbeResult r = Prober("job")->Probe(target, kSlowShell);
  ASSERT_EQ(r.stage, ProbeStage::kHostKey) << r.detail;
  const std::string presented = KeygenFingerprint(*dir_ + "/host.pub");
  const std::string pinned = KeygenFingerprint(*dir_ + "/other_host.pub");
  ASSERT_THAT(presented, HasSubstr("SHA256:"));
  EXPECT_THAT(r.detail, HasSubstr("presented host key " + presented));
  EXPECT_THAT(r.detail, HasSubstr("pinned " + pinned));
}

TEST_F(SshProbeTest, PinnedKeyThatDoesNotParse_IsHostKey) {
  ProbeTarget target = Target();
  target.host_public_key = "ssh-ed25519 not-base64!";
  EXPECT_EQ(Prober("job")->Probe(target, kSlowShell).stage, ProbeStage::kHostKey);
  target.host_public_key = "";
  EXPECT_EQ(Prober("job")->Probe(target, kSlowShell).stage, ProbeStage::kHostKey);
}

TEST_F(SshProbeTest, WrongJobKey_IsAuth) {
  const ProbeResult r = Prober("stranger")->Probe(Target(), kSlowShell);
  ASSERT_EQ(r.stage, ProbeStage::kAuth) << r.detail;
  EXPECT_THAT(r.detail, HasSubstr("refused"));
}

TEST_F(SshProbeTest, ClosedPort_IsConnectionRefused) {
  ProbeTarget target = Target();
  target.port = FreePort();
  const ProbeResult r = Prober("job")->Probe(target, kSlowShell);
  ASSERT_EQ(r.stage, ProbeStage::kConnect) << r.detail;
  EXPECT_THAT(r.detail, HasSubstr("connection refused"));
}

TEST_F(SshProbeTest, UnknownName_IsDns) {
  const ProbeResult r = Prober("job")->Probe(Target("no-such-host.invalid"), absl::Seconds(5));
  ASSERT_EQ(r.stage, ProbeStage::kDns) << r.detail;
  EXPECT_THAT(r.detail, HasSubstr("no-such-host.invalid"));
}

TEST_F(SshProbeTest, InvalidName_IsDnsWithoutResolvingAndEscaped) {
  const ProbeResult r = Prober("job")->Probe(Target("bad name\n"), absl::Seconds(5));
  ASSERT_EQ(r.stage, ProbeStage::kDns) << r.detail;
  EXPECT_THAT(r.detail, HasSubstr("'bad name\\n' is not a valid host name"));
}

TEST_F(SshProbeTest, CommandExitingNonZero_IsCommand) {
  const ProbeResult r = Prober("forced")->Probe(Target(), kSlowShell);
  ASSERT_EQ(r.stage, ProbeStage::kCommand) << r.detail;
  EXPECT_THAT(r.detail, HasSubstr("exited with status 1"));
}

TEST_F(SshProbeTest, CommandThatHangs_IsCommandBoundedByTheTimeout) {
  const absl::Time start = absl::Now();
  const ProbeResult r = Prober("sleeper")->Probe(Target(), absl::Seconds(2));
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(r.stage, ProbeStage::kCommand) << r.detail;
  EXPECT_THAT(r.detail, HasSubstr("did not finish in time"));
  EXPECT_LT(took, absl::Seconds(4));
}

TEST_F(SshProbeTest, SilentServer_HandshakeIsBoundedByTheTimeout) {
  // Accepts TCP connections (the kernel does) but never says a word.
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(s, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  ProbeTarget target = Target();
  target.port = ntohs(addr.sin_port);
  const absl::Time start = absl::Now();
  const ProbeResult r = Prober("job")->Probe(target, absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  close(s);
  EXPECT_EQ(r.stage, ProbeStage::kHandshake) << r.detail;
  EXPECT_LT(took, absl::Seconds(2));
}

// libssh closes a socket given with SSH_OPTIONS_FD itself when the peer hangs
// up inside ssh_connect (and leaves it open otherwise): the probe must close
// it exactly once, neither leaking it nor closing a number that another
// thread may have been given since.
TEST_F(SshProbeTest, PeerHangsUpDuringTheHandshake_IsHandshakeAndClosesTheSocketOnce) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread hang_up([listener] {
    const int c = accept(listener, nullptr, nullptr);
    if (c >= 0) close(c);
  });
  std::unique_ptr<LibsshProber> prober = Prober("job");
  const int fds_before = OpenFds();
  ProbeTarget target = Target();
  target.port = ntohs(addr.sin_port);
  const ProbeResult r = prober->Probe(target, kSlowShell);
  hang_up.join();
  close(listener);
  EXPECT_EQ(r.stage, ProbeStage::kHandshake) << r.detail;
  EXPECT_EQ(OpenFds(), fds_before - 1);  // the listener
}

TEST_F(SshProbeTest, ParallelProbesFromSeveralThreads_AllOkAndNoDescriptorLeaks) {
  std::unique_ptr<LibsshProber> prober = Prober("job");
  prober->Probe(Target(), kSlowShell);  // first use: libssh's own set-up
  const int fds_before = OpenFds();
  std::vector<ProbeResult> results(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { results[i] = prober->Probe(Target(), kSlowShell); });
  for (std::thread& t : threads) t.join();
  for (const ProbeResult& r : results) EXPECT_EQ(r.stage, ProbeStage::kOk) << r.detail;
  // Failures at every stage close what they opened too.
  ProbeTarget wrong_key = Target();
  wrong_key.host_public_key = Pub("other_host");
  ProbeTarget closed = Target();
  closed.port = FreePort();
  prober->Probe(wrong_key, kSlowShell);
  prober->Probe(closed, kSlowShell);
  Prober("stranger")->Probe(Target(), kSlowShell);
  Prober("forced")->Probe(Target(), kSlowShell);
  const int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(silent, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len);
  ProbeTarget handshake_fails = Target();
  handshake_fails.port = ntohs(addr.sin_port);
  EXPECT_EQ(prober->Probe(handshake_fails, absl::Milliseconds(100)).stage, ProbeStage::kHandshake);
  close(silent);
  EXPECT_EQ(OpenFds(), fds_before);
}

TEST_F(SshProbeTest, CreateWithABadKeyOrNoUser_IsInvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(LibsshProber::Create("not a key", "root").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LibsshProber::Create("", "root").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LibsshProber::Create(Pem("job"), "").status()));
}

TEST(ProbeStageName, NamesEveryStage) {
  EXPECT_EQ(ProbeStageName(ProbeStage::kOk), "ok");
  EXPECT_EQ(ProbeStageName(ProbeStage::kDns), "DNS");
  EXPECT_EQ(ProbeStageName(ProbeStage::kConnect), "connect");
  EXPECT_EQ(ProbeStageName(ProbeStage::kHandshake), "SSH handshake");
  EXPECT_EQ(ProbeStageName(ProbeStage::kHostKey), "host key");
  EXPECT_EQ(ProbeStageName(ProbeStage::kAuth), "auth");
  EXPECT_EQ(ProbeStageName(ProbeStage::kCommand), "command");
}

}  // namespace
}  // namespace trainlet::mpi
