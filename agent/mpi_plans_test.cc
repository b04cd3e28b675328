// The MPI plans' pure parts and the worker's session cleanup, with real
// processes. The plans end to end: e2e/e2e_mpi.py.
#include "agent/mpi_plans.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace trainlet::agent {
namespace {

namespace v1 = ::trainlet::v1;

v1::NodeAssignment Node(const std::string& id, const std::string& addr, v1::Role role, int slots,
                        int port = 2222, const std::string& key = "ssh-ed25519 AAAA") {
  v1::NodeAssignment n;
  n.mutable_member()->set_node_id(id);
  n.set_addr(addr);
  n.set_role(role);
  n.set_local_world_size(slots);
  n.mutable_ssh()->set_port(port);
  n.mutable_ssh()->set_host_public_key(key);
  return n;
}

TEST(MpiHostsFor, LauncherFirstWhenItHostsSlots_ThenWorkersInRankOrder) {
  v1::Assignment a;
  *a.add_nodes() = Node("w0", "w0.job", v1::ROLE_MPI_WORKER, 2);
  *a.add_nodes() = Node("l", "launcher.job", v1::ROLE_MPI_LAUNCHER, 1, 0, "");
  *a.add_nodes() = Node("w1", "w1.job", v1::ROLE_MPI_WORKER, 4, 2022);
  std::vector<mpi::MpiHost> hosts = MpiHostsFor(a);
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "launcher.job");
  EXPECT_EQ(hosts[0].port, 0);
  EXPECT_EQ(hosts[1].name, "w0.job");
  EXPECT_EQ(hosts[2].slots, 4);
  EXPECT_EQ(hosts[2].port, 2022);
}

TEST(MpiHostsFor, LauncherWithoutSlotsIsNotAHost) {
  v1::Assignment a;
  *a.add_nodes() = Node("l", "launcher.job", v1::ROLE_MPI_LAUNCHER, 0, 0, "");
  *a.add_nodes() = Node("w0", "w0.job", v1::ROLE_MPI_WORKER, 2);
  std::vector<mpi::MpiHost> hosts = MpiHostsFor(a);
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].node_id, "w0");
}

pid_t Spawn(const std::string& script) {
  pid_t pid = -1;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  return pid;
}

bool Alive(pid_t pid) {
  int status;
  if (waitpid(pid, &status, WNOHANG) == pid) return false;  // reaped now
  return kill(pid, 0) == 0;
}

TEST(KillSessions, KillsEverythingBelowSshdAndOtherChildren_SparesSshd) {
  // "sshd" with two sessions (one in a session of its own, as orted is),
  // and another child of ours (an adopted, daemonized orted).
  const pid_t sshd = Spawn("setsid sleep 30 & sleep 30 & exec sleep 30");
  const pid_t orphan = Spawn("exec sleep 30");
  ASSERT_GT(sshd, 0);
  ASSERT_GT(orphan, 0);
  usleep(100 * 1000);  // the sessions start
  EXPECT_GE(KillSessions(sshd, {}), 3);
  int status;
  ASSERT_EQ(waitpid(orphan, &status, 0), orphan);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(Alive(sshd));
  kill(sshd, SIGKILL);
  waitpid(sshd, &status, 0);
}

TEST(KillSessions, SparesSshdsPerConnectionProcesses_KillsTheirSessions) {
  // An ssh connection's sshd process (the launcher's multiplexing master is
  // at its other end) survives the round's end; its session's processes do
  // not.
  char dir[] = "/tmp/kill-sessions-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string connection = std::string(dir) + "/sshd-session";
  ASSERT_EQ(symlink("/bin/sleep", connection.c_str()), 0);
  const std::string pid_file = std::string(dir) + "/pid";
  const pid_t sshd =
      Spawn(connection + " 30 & echo $! > " + pid_file + "; sleep 30 & exec sleep 30");
  ASSERT_GT(sshd, 0);
  pid_t kept = -1;
  for (int i = 0; i < 200 && kept <= 0; ++i) {
    usleep(10 * 1000);
    std::ifstream in(pid_file);
    in >> kept;
  }
  ASSERT_GT(kept, 0);
  usleep(100 * 1000);                    // the processes start
  EXPECT_GE(KillSessions(sshd, {}), 1);  // the session's sleep
  EXPECT_EQ(kill(kept, 0), 0);           // the connection's process stays
  kill(kept, SIGKILL);
  kill(sshd, SIGKILL);
  int status;
  waitpid(sshd, &status, 0);
  unlink(connection.c_str());
  unlink(pid_file.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace trainlet::agent
