// One HTTPS POST, bounded, for Kubeflow Trainer's status endpoint
// (trainer_status.h): the name resolved with c-ares (never getaddrinfo,
// which a static binary must not call: preflight/dns.h), a non-blocking
// connect, a TLS handshake that checks the server's certificate against
// the given CA file and the URL's host name, the request written, and the
// answer read up to kMaxAnswerBytes, all within one deadline; Cancel()
// ends a Post in flight at once (the agent is exiting).
//
// Why not cpp-httplib's SSLClient: it resolves with getaddrinfo, its
// timeouts are per read (a server that trickles its answer holds it for
// as long as it likes), and it has no cancel short of a second thread.
// This is one request with `Connection: close`, so the client is small.
//
// The resolver cannot be cancelled, so a name is resolved on a thread of
// its own that Post waits for only until its deadline or Cancel; while one
// such lookup is still out, a later Post fails at once instead of starting
// another (threads never pile up behind a hung resolver).
//
// Threading: Post from one thread at a time; Cancel and Reset from any.
#ifndef TRAINLET_KUBEFLOW_HTTPS_POST_H_
#define TRAINLET_KUBEFLOW_HTTPS_POST_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "preflight/dns.h"

namespace trainlet::kubeflow {

// What is kept of an answer (status line, headers and body together).
inline constexpr size_t kMaxAnswerBytes = 16 * 1024;

// Where a request goes: https://host:port/path.
struct HttpsTarget {
  std::string host;  // a DNS name or an IP address (no brackets).
  int port = 443;
  std::string path;     // starts with '/'.
  std::string ca_file;  // PEM; empty: OpenSSL's default trust store.
};

struct HttpAnswer {
  int status = 0;    // the status line's code.
  std::string body;  // what came after the headers, up to the cap.
};

// The seam the sender posts through; a fake in tests.
class HttpsPoster {
 public:
  virtual ~HttpsPoster() = default;
  // POSTs `body` (application/json) with `headers` ("Name", "value"; no CR
  // or LF in either). An error says what failed (resolve, connect, TLS,
  // write, read, timeout, cancelled) and names the host.
  virtual absl::StatusOr<HttpAnswer> Post(
      const HttpsTarget& target, const std::vector<std::pair<std::string, std::string>>& headers,
      absl::string_view body, absl::Duration timeout) = 0;
  // Ends the Post in flight, and every later one at once, until Reset().
  virtual void Cancel() {}
  virtual void Reset() {}
};

class OpenSslPoster : public HttpsPoster {
 public:
  // `resolver` resolves names that are not IP addresses.
  static absl::StatusOr<std::unique_ptr<OpenSslPoster>> Create(
      std::shared_ptr<preflight::Resolver> resolver);
  ~OpenSslPoster() override;
  OpenSslPoster(const OpenSslPoster&) = delete;
  OpenSslPoster& operator=(const OpenSslPoster&) = delete;

  absl::StatusOr<HttpAnswer> Post(const HttpsTarget& target,
                                  const std::vector<std::pair<std::string, std::string>>& headers,
                                  absl::string_view body, absl::Duration timeout) override;
  void Cancel() override;
  void Reset() override;

 private:
  struct Lookup;

  OpenSslPoster(std::shared_ptr<preflight::Resolver> resolver, int cancel_fd)
      : resolver_(std::move(resolver)), cancel_fd_(cancel_fd) {}

  // `host`'s addresses, resolved on a thread of its own, by `deadline`.
  absl::StatusOr<std::vector<std::string>> Resolve(const std::string& host, absl::Time deadline,
                                                   absl::Duration timeout);

  const std::shared_ptr<preflight::Resolver> resolver_;
  const int cancel_fd_;  // an eventfd: readable once cancelled.
  // The last lookup (shared with its thread); Post's thread only.
  std::shared_ptr<Lookup> lookup_;
};

// The contents of a file the pod mounts (the CA certificate, the token):
// symbolic links followed (kubelet's token -> ..data/token), then it must
// be a regular file of at most `max_bytes`. Never blocks: a FIFO or a
// device is refused (opening a FIFO waits for a writer, and the sender's
// thread stuck there would hold the agent's exit). The error says why,
// without the path.
absl::StatusOr<std::string> ReadMountedFile(const std::string& path, size_t max_bytes);

// The CA file's size limit: a bundle of every public root is ~200 KiB.
inline constexpr size_t kMaxCaFileBytes = 1024 * 1024;

// The answer's status code and body from what was read of it; an error
// when the status line is not "HTTP/1.x NNN ...". Exposed for tests.
absl::StatusOr<HttpAnswer> ParseHttpAnswer(absl::string_view raw);

}  // namespace trainlet::kubeflow

#endif  // TRAINLET_KUBEFLOW_HTTPS_POST_H_
