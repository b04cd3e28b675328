#include "preflight/dns.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/logging.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {

namespace {

// One name's query, written by c-ares's callback on the resolving thread.
struct Query {
  NameAnswer* answer = nullptr;
  bool done = false;
};

void OnAddrinfo(void* arg, int status, int timeouts, struct ares_addrinfo* result) {
  auto* q = static_cast<Query*>(arg);
  q->done = true;
  if (status != ARES_SUCCESS) {
    // Cancelled and destroyed queries are the ones the deadline cut.
    if (status != ARES_ECANCELLED && status != ARES_EDESTRUCTION) {
      q->answer->error = ares_strerror(status);
    }
    if (result != nullptr) ares_freeaddrinfo(result);
    return;
  }
  for (ares_addrinfo_node* n = result != nullptr ? result->nodes : nullptr; n != nullptr;
       n = n->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = nullptr;
    if (n->ai_family == AF_INET && n->ai_addrlen >= sizeof(sockaddr_in)) {
      addr = &reinterpret_cast<const sockaddr_in*>(n->ai_addr)->sin_addr;
    } else if (n->ai_family == AF_INET6 && n->ai_addrlen >= sizeof(sockaddr_in6)) {
      addr = &reinterpret_cast<const sockaddr_in6*>(n->ai_addr)->sin6_addr;
    }
    if (addr == nullptr || inet_ntop(n->ai_family, addr, text, sizeof(text)) == nullptr) continue;
    std::vector<std::string>& addrs = q->answer->addrs;
    if (std::find(addrs.begin(), addrs.end(), text) == addrs.end()) addrs.push_back(text);
  }
  if (q->answer->addrs.empty()) q->answer->error = "no addresses";
  if (result != nullptr) ares_freeaddrinfo(result);
}

class AresResolver : public Resolver {
 public:
  explicit AresResolver(AresOptions options) : options_(std::move(options)) {
    static std::once_flag once;
    std::call_once(once, [] { ares_library_init(ARES_LIB_INIT_ALL); });
  }

  std::vector<NameAnswer> Resolve(const std::vector<std::string>& names,
                                  absl::Duration timeout) override {
    std::vector<NameAnswer> answers(names.size());
    for (size_t i = 0; i < names.size(); ++i) answers[i].name = names[i];
    const std::string timed_out = absl::StrCat(
        "timed out after ", absl::FormatDuration(absl::Trunc(timeout, absl::Milliseconds(1))));

    ares_options opts{};
    int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
    // A few tries inside the deadline, so that one lost UDP datagram does
    // not fail a name.
    opts.timeout =
        static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout) / 3, 50, 2000));
    opts.tries = 3;
    std::string lookups = options_.lookups;
    if (!lookups.empty()) {
      mask |= ARES_OPT_LOOKUPS;
      opts.lookups = lookups.data();
    }
    ares_channel channel = nullptr;
    if (const int rc = ares_init_options(&channel, &opts, mask); rc != ARES_SUCCESS) {
      for (NameAnswer& a : answers) a.error = absl::StrCat("c-ares: ", ares_strerror(rc));
      return answers;
    }
    if (!options_.servers.empty()) {
      if (const int rc = ares_set_servers_ports_csv(channel, options_.servers.c_str());
          rc != ARES_SUCCESS) {
        ares_destroy(channel);
        for (NameAnswer& a : answers) {
          a.error = absl::StrCat("c-ares: servers \"", SafeForLog(options_.servers, 64),
                                 "\": ", ares_strerror(rc));
        }
        return answers;
      }
    }

    std::vector<Query> queries(names.size());
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    for (size_t i = 0; i < names.size(); ++i) {
      queries[i].answer = &answers[i];
      ares_getaddrinfo(channel, names[i].c_str(), nullptr, &hints, OnAddrinfo, &queries[i]);
    }

    Clock* clock = Clock::Monotonic();
    const absl::Time deadline = clock->Now() + timeout;
    auto pending = [&queries] {
      return std::any_of(queries.begin(), queries.end(), [](const Query& q) { return !q.done; });
    };
    while (pending()) {
      const absl::Duration left = deadline - clock->Now();
      if (left <= absl::ZeroDuration()) break;
      ares_socket_t socks[ARES_GETSOCK_MAXNUM];
      const int bits = ares_getsock(channel, socks, ARES_GETSOCK_MAXNUM);
      pollfd fds[ARES_GETSOCK_MAXNUM];
      nfds_t n = 0;
      for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
        const bool r = ARES_GETSOCK_READABLE(bits, i);
        const bool w = ARES_GETSOCK_WRITABLE(bits, i);
        if (!r && !w) break;
        fds[n++] = pollfd{socks[i], static_cast<short>((r ? POLLIN : 0) | (w ? POLLOUT : 0)), 0};
      }
      timeval max_wait = absl::ToTimeval(left);
      timeval wait_tv{};
      const timeval* wait = ares_timeout(channel, &max_wait, &wait_tv);
      const int ms = static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(absl::DurationFromTimeval(*wait) + absl::Microseconds(999)),
          absl::ToInt64Milliseconds(left) + 1));
      const int rc = poll(fds, n, std::max(ms, 0));
      if (rc < 0 && errno != EINTR) break;
      if (rc <= 0) {
        ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // c-ares's own timeouts.
        continue;
      }
      for (nfds_t i = 0; i < n; ++i) {
        if (fds[i].revents == 0) continue;
        const bool readable = (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
        const bool writable = (fds[i].revents & POLLOUT) != 0;
        ares_process_fd(channel, readable ? fds[i].fd : ARES_SOCKET_BAD,
                        writable ? fds[i].fd : ARES_SOCKET_BAD);
      }
    }
    ares_destroy(channel);  // Answers what is left with ARES_EDESTRUCTION.
    for (NameAnswer& a : answers) {
      if (a.addrs.empty() && a.error.empty()) a.error = timed_out;
    }
    return answers;
  }

 private:
  const AresOptions options_;
};

}  // namespace

std::shared_ptr<Resolver> MakeAresResolver(AresOptions options) {
  return std::make_shared<AresResolver>(std::move(options));
}

v1::CheckResult CheckDns(const std::vector<std::string>& names, std::shared_ptr<Resolver> resolver,
                         BoundedRunner& runner, absl::Duration timeout) {
  std::vector<std::string> unique;
  int left_out = 0;
  for (const std::string& name : names) {
    if (name.empty() || std::find(unique.begin(), unique.end(), name) != unique.end()) continue;
    if (static_cast<int>(unique.size()) == kMaxDnsNames) {
      ++left_out;
      continue;
    }
    unique.push_back(name);
  }
  if (unique.empty()) return Skipped(kCheckDns, "no names to resolve");
  const std::string not_checked =
      left_out > 0 ? absl::StrCat(" (", left_out, " more names not checked)") : "";

  Clock* clock = Clock::Monotonic();
  const absl::Time start = clock->Now();
  BoundedRunner::NoAnswer why;
  // The runner waits a little longer than the resolver's own deadline, so
  // that a resolver that keeps it answers with its per-name reasons.
  std::optional<std::vector<NameAnswer>> answers = runner.Run<std::vector<NameAnswer>>(
      [resolver, unique, timeout] { return resolver->Resolve(unique, timeout); },
      timeout + absl::Milliseconds(250), &why);
  const double count = static_cast<double>(unique.size());
  if (!answers.has_value()) {
    if (why.kind == BoundedRunner::NoAnswer::kNoThread) {
      return Skipped(kCheckDns, absl::StrCat("resolver not run: ", why.text));
    }
    return MakeResult(
        kCheckDns, v1::CheckResult::FAIL,
        absl::StrCat("the resolver gave no answer for ", unique.size(), " names (", why.text,
                     "), e.g. ", SafeForLog(unique.front(), 64), not_checked),
        count, kUnitCount, 0);
  }
  std::vector<std::string> failed;
  for (size_t i = 0; i < answers->size() && i < unique.size(); ++i) {
    const NameAnswer& a = (*answers)[i];
    if (!a.addrs.empty()) continue;
    failed.push_back(absl::StrCat(SafeForLog(unique[i], 64), " (",
                                  SafeForLog(a.error.empty() ? "no answer" : a.error, 80), ")"));
  }
  // A resolver that answered fewer names than asked leaves the rest failed.
  for (size_t i = answers->size(); i < unique.size(); ++i) {
    failed.push_back(absl::StrCat(SafeForLog(unique[i], 64), " (no answer)"));
  }
  const std::string took =
      absl::FormatDuration(absl::Trunc(clock->Now() - start, absl::Microseconds(100)));
  if (!failed.empty()) {
    return MakeResult(kCheckDns, v1::CheckResult::FAIL,
                      absl::StrCat(failed.size(), " of ", unique.size(), " names do not resolve: ",
                                   absl::StrJoin(failed, ", "), not_checked),
                      static_cast<double>(failed.size()), kUnitCount, 0);
  }
  return MakeResult(kCheckDns, v1::CheckResult::PASS,
                    absl::StrCat(unique.size(), " names resolved in ", took, not_checked), 0,
                    kUnitCount, 0);
}

}  // namespace trainlet::preflight
