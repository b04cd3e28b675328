// A DNS server for tests, on 127.0.0.1 over UDP: A records for the names
// it is given, NXDOMAIN for every other name, and no answer at all for the
// names it is told to ignore (a DNS server that hangs). Enough of RFC 1035
// for c-ares's queries: one question, answers of class IN, no compression
// but the pointer to the question. One thread; stopped and joined by the
// destructor. Thread-safe.
#ifndef TRAINLET_PREFLIGHT_TESTING_FAKE_DNS_SERVER_H_
#define TRAINLET_PREFLIGHT_TESTING_FAKE_DNS_SERVER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainlet::preflight::testing {

class FakeDnsServer {
 public:
  // nullptr when no UDP socket or thread could be had (the test skips).
  static std::unique_ptr<FakeDnsServer> Start();
  ~FakeDnsServer();

  void AddA(const std::string& name, const std::string& ipv4);
  void Ignore(const std::string& name);
  // "127.0.0.1:PORT", for AresOptions::servers.
  std::string address() const;
  int queries() const;

 private:
  FakeDnsServer(int fd, int wake_fd, int port);
  void Loop();
  // The answer to one query datagram; empty for none.
  std::string Answer(const std::string& query);

  const int fd_;
  const int wake_fd_;
  const int port_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> a_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> ignore_ ABSL_GUARDED_BY(mu_);
  int queries_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace trainlet::preflight::testing

#endif  // TRAINLET_PREFLIGHT_TESTING_FAKE_DNS_SERVER_H_
