#include "agent/agent_store.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/signals.h"

namespace trainlet::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A port nothing listens on now (the kernel's pick, closed again).
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::map<std::string, std::string> Env() {
  const char* path = getenv("PATH");
  return {{"PATH", path == nullptr ? "/usr/bin:/bin" : path}};
}

// A helper named as the store that runs `program` (python3 -c).
launcher::ProcessSpec PythonHelper(const std::string& program) {
  RunConfig config;
  launcher::ProcessSpec spec = AgentStoreSpec(config, Env(), 1);
  spec.argv = {"python3", "-c", program};
  return spec;
}

std::string ListenProgram(int port) {
  return absl::StrCat(
      "import socket, time\ns = socket.socket()\n"
      "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind(('0.0.0.0', ",
      port, "))\ns.listen(16)\ntime.sleep(60)\n");
}

absl::Status Started(AgentStore* store, const launcher::ProcessSpec& spec, absl::Duration timeout,
                     int* signal) {
  if (absl::Status s = store->Launch(spec); !s.ok()) return s;
  return store->AwaitListening(timeout, signal);
}

class AgentStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_TRUE(launcher::PrepareProcessForSupervision().ok()); }
  void SetUp() override {
    auto created = launcher::Supervisor::Create({});
    ASSERT_TRUE(created.ok()) << created.status();
    supervisor_ = std::move(*created);
  }
  std::unique_ptr<launcher::Supervisor> supervisor_;
};

TEST(AgentStoreSpec, RunsTheCommandsPythonWithItsEnvPrefixAndOptions) {
  RunConfig config;
  config.command = {"env", "A=1", "python3.11", "-u", "-X", "dev", "train.py", "--lr", "1"};
  const launcher::ProcessSpec spec = AgentStoreSpec(config, {{"PATH", "/bin"}}, 29499);
  ASSERT_GE(spec.argv.size(), 8u);
  EXPECT_THAT(std::vector<std::string>(spec.argv.begin(), spec.argv.begin() + 6),
              ElementsAre("env", "A=1", "python3.11", "-u", "-X", "dev"));
  EXPECT_EQ(spec.argv[6], "-c");
  EXPECT_EQ(spec.argv.back(), "29499");
  EXPECT_THAT(spec.env, ElementsAre("PATH=/bin"));
  EXPECT_EQ(spec.role, launcher::ProcessRole::kHelper);
  EXPECT_EQ(spec.name, kAgentStoreHelper);
  EXPECT_EQ(spec.restart, launcher::RestartPolicy::kAlways);
  EXPECT_FALSE(spec.leaves_orphans) << "the round end must still kill the workers' orphans";
  EXPECT_EQ(spec.output, launcher::OutputMode::kPrefix);
}

TEST(AgentStoreSpec, ACommandThatIsNotPythonGetsPython3) {
  RunConfig config;
  config.command = {"bash", "train.sh"};
  const launcher::ProcessSpec spec = AgentStoreSpec(config, {}, 5);
  EXPECT_EQ(spec.argv[0], "python3");
  EXPECT_EQ(spec.argv[1], "-c");
}

TEST(AgentStorePort, IsTheFlagsElseMasterPortLessOne) {
  RunConfig config;
  EXPECT_EQ(AgentStorePort(config, 29500), 29499);
  config.agent_store_port = 4000;
  EXPECT_EQ(AgentStorePort(config, 29500), 4000);
}

TEST_F(AgentStoreTest, Start_ReturnsOnceTheStoreAccepts) {
  const int port = UnusedPort();
  ASSERT_GT(port, 0);
  EXPECT_FALSE(AcceptsOnLoopback(port));
  AgentStore store(supervisor_.get(), port);
  int signal = 0;
  ASSERT_TRUE(Started(&store, PythonHelper(ListenProgram(port)), absl::Seconds(60), &signal).ok());
  EXPECT_TRUE(AcceptsOnLoopback(port));
  EXPECT_GT(supervisor_->helper_pid(kAgentStoreHelper), 0);
}

TEST_F(AgentStoreTest, Start_AStoreThatExitsFirst_SaysWhy) {
  AgentStore store(supervisor_.get(), UnusedPort());
  int signal = 0;
  const absl::Status s =
      Started(&store, PythonHelper("import sys; sys.exit(78)"), absl::Seconds(60), &signal);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("exited with code 78"));
  EXPECT_THAT(s.message(), HasSubstr("torch.distributed is not importable"));
}

TEST_F(AgentStoreTest, Start_NeverListening_TimesOut) {
  AgentStore store(supervisor_.get(), UnusedPort());
  int signal = 0;
  const absl::Status s = Started(&store, PythonHelper("import time; time.sleep(60)"),
                                 absl::Milliseconds(300), &signal);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("not listening on port"));
}

TEST_F(AgentStoreTest, Start_ASignalStopsTheWait) {
  AgentStore store(supervisor_.get(), UnusedPort());
  int signal = 0;
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // blocked: the supervisor's signalfd has it.
  const absl::Status s =
      Started(&store, PythonHelper("import time; time.sleep(60)"), absl::Seconds(60), &signal);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(signal, SIGTERM);
}

v1::Assignment Round(int node_rank, int store_port, int restart_count) {
  v1::Assignment a;
  a.set_node_rank(node_rank);
  a.set_agent_store_port(store_port);
  a.set_restart_count(restart_count);
  return a;
}

// A coordinator that starts counting again (all members new to it) would
// hand the store a restart count whose keys it holds: the store is replaced.
TEST_F(AgentStoreTest, OnRound_ARestartCountServedAlready_RestartsTheStore) {
  const int port = UnusedPort();
  AgentStore store(supervisor_.get(), port);
  int signal = 0;
  ASSERT_TRUE(Started(&store, PythonHelper(ListenProgram(port)), absl::Seconds(60), &signal).ok());
  const pid_t first = supervisor_->helper_pid(kAgentStoreHelper);
  EXPECT_FALSE(store.OnRound(Round(1, port, 0))) << "not rank 0: not this store's round";
  EXPECT_FALSE(store.OnRound(Round(0, port + 1, 0))) << "another store's round";
  EXPECT_FALSE(store.OnRound(Round(0, port, 0)));
  EXPECT_FALSE(store.OnRound(Round(0, port, 1)));
  EXPECT_EQ(supervisor_->helper_pid(kAgentStoreHelper), first);
  EXPECT_TRUE(store.OnRound(Round(0, port, 1)));
  // The supervisor restarts it (after its 1 s backoff).
  pid_t second = -1;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    supervisor_->Wait(absl::Milliseconds(50));
    second = supervisor_->helper_pid(kAgentStoreHelper);
    if (second > 0 && second != first) break;
  }
  ASSERT_GT(second, 0);
  ASSERT_NE(second, first);
  // The fresh store served count 1 (the round it was restarted for).
  EXPECT_TRUE(store.OnRound(Round(0, port, 1)));
}

}  // namespace
}  // namespace trainlet::agent
