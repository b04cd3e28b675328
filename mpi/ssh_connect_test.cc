#include "mpi/ssh_connect.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace trainlet::mpi {
namespace {

// A listener on 127.0.0.1 and its port.
int Listen(int* port) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(s, 4) != 0) return -1;
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return s;
}

int ReceiveFd(int via) {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(via, &msg, 0) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(fd));
  return fd;
}

// What ssh gets (ProxyUseFdpass): a connected, blocking socket with
// TCP_NODELAY, over the socketpair that is the helper's stdout.
TEST(SshConnect, PassesAConnectedSocketWithNoDelay) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  ASSERT_TRUE(SshConnect("127.0.0.1", port, absl::Seconds(10), pair[0]).ok());
  const int fd = ReceiveFd(pair[1]);
  ASSERT_GE(fd, 0);
  int nodelay = 0;
  socklen_t len = sizeof(nodelay);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
  EXPECT_EQ(nodelay, 1);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  ASSERT_EQ(write(fd, "SSH-2.0", 7), 7);
  char got[8] = {};
  ASSERT_EQ(read(accepted, got, 7), 7);
  EXPECT_STREQ(got, "SSH-2.0");
  for (int f : {fd, accepted, listener, pair[0], pair[1]}) close(f);
}

TEST(SshConnect, ARefusedPortIsUnavailableAndNothingIsPassed) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);
  close(listener);  // nothing listens there now
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  absl::Status s = SshConnect("127.0.0.1", port, absl::Seconds(10), pair[0]);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(std::string(s.message()).find("connection refused"), std::string::npos) << s;
  close(pair[0]);
  char byte;
  EXPECT_EQ(read(pair[1], &byte, 1), 0);  // EOF: no descriptor came
  close(pair[1]);
}

TEST(SshConnect, ABadNameIsRefusedBeforeAnyLookup) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  absl::Status s = SshConnect("-oProxyCommand=x", 22, absl::Seconds(10), pair[0]);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(std::string(s.message()).find("not a valid host name"), std::string::npos) << s;
  close(pair[0]);
  close(pair[1]);
}

// Run by hand (stdout a terminal or a file): the error says so.
TEST(SshConnect, NoSocketToPassToIsAnError) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  absl::Status s = SshConnect("127.0.0.1", port, absl::Seconds(10), p[1]);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_NE(std::string(s.message()).find("ProxyUseFdpass"), std::string::npos) << s;
  for (int f : {p[0], p[1], listener}) close(f);
}

}  // namespace
}  // namespace trainlet::mpi
