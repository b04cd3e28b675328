// Kubeflow Trainer's status server, as far as a client can tell, for tests:
// an in-process HTTPS server on 127.0.0.1 that answers what
// pkg/statusserver/server.go of kubeflow/trainer v2.3.0 (commit
// 658725bdae5c7e3a0854d93ac6ff492e109a22ab) answers, and checks what it and
// the TrainJob CRD check:
//
// - TLS with the given certificate (Trainer's webhook certificate);
// - only POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/
//   trainjobs/{name}/status; any other method or path: 404 (handleDefault);
// - "Authorization: Bearer <token>" (scheme in any case, exactly two
//   words: extractRawToken), the token equal to the expected one (the real
//   server verifies the JWT's signature and audience, which a test token
//   cannot carry): else 403;
// - a body of at most 64 KiB (bodySizeLimitMiddleware): else 413;
// - the body as Go's json decoder reads UpdateTrainJobStatusRequest, and the
//   CRD's validation (trainjob_types.go): progressPercentage an integer
//   0-100, estimatedRemainingSeconds an integer 0-2^31-1, at most 256 metrics
//   with string name and value of 1-64 bytes, lastUpdatedTime present (the
//   CEL rule) and RFC 3339: else 422;
// - 200 with the request echoed on success, a metav1.Status otherwise.
//
// Modes for the failure cases: kSilent (handshake done, never answers),
// kFixedStatus (always `fixed_status`). Every request is recorded with the
// monotonic time it arrived.
//
// Threading: one server thread; the accessors are thread-safe.
#ifndef TRAINLET_KUBEFLOW_TESTING_FAKE_TRAINER_SERVER_H_
#define TRAINLET_KUBEFLOW_TESTING_FAKE_TRAINER_SERVER_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainlet::kubeflow::testing {

struct RecordedRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // names lower-cased.
  std::string body;
  int answered = 0;    // the status code sent back.
  std::string reason;  // why it was refused ("" for 200).
  absl::Time at;       // monotonic, when the request was whole.
};

class FakeTrainerServer {
 public:
  enum class Mode { kTrainer, kSilent, kFixedStatus };
  struct Options {
    std::string cert_file;  // PEM chain and key of the server.
    std::string key_file;
    std::string token;  // the bearer token it accepts.
    std::string namespace_name = "team-a";
    std::string trainjob = "llama";
    Mode mode = Mode::kTrainer;
    int fixed_status = 500;
  };
  static absl::StatusOr<std::unique_ptr<FakeTrainerServer>> Start(Options options);
  ~FakeTrainerServer();

  int port() const { return port_; }
  // The path Trainer serves for the TrainJob (statusserver.StatusUrl).
  std::string StatusPath() const;
  std::vector<RecordedRequest> requests() const;
  // Connections whose TLS handshake failed (a client that distrusts us).
  int failed_handshakes() const;

 private:
  FakeTrainerServer(Options options, int listen_fd, int stop_fd, int port, void* ctx);
  void Serve();
  void ServeOne(int fd);

  const Options options_;
  const int listen_fd_;
  const int stop_fd_;
  const int port_;
  void* const ctx_;  // SSL_CTX*
  mutable absl::Mutex mu_;
  std::vector<RecordedRequest> requests_ ABSL_GUARDED_BY(mu_);
  int failed_handshakes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// The checks of Trainer's decoder and CRD on a request body: "" when
// Trainer would accept it, else why not (for a 422).
std::string TrainerBodyError(const std::string& body);

}  // namespace trainlet::kubeflow::testing

#endif  // TRAINLET_KUBEFLOW_TESTING_FAKE_TRAINER_SERVER_H_
