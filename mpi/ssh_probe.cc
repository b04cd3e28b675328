#include "mpi/ssh_probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libssh/libssh.h>
#include <netdb.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/host_names.h"
#include "common/logging.h"

namespace trainlet::mpi {
namespace {

// How much of a name, an error or the command's output goes into a detail.
constexpr size_t kMaxNameInDetail = 80;
constexpr size_t kMaxTextInDetail = 200;
// A name resolving to more addresses than this is cut (a DNS answer is
// outside input).
constexpr size_t kMaxAddresses = 16;

ProbeResult Fail(ProbeStage stage, std::string detail) { return {stage, std::move(detail)}; }

// Milliseconds left until `deadline` (0 when past), for poll() and libssh.
int MillisLeft(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// connect(2) errors as short lower-case text ("connection refused").
std::string ConnectErrorText(int err) {
  switch (err) {
    case ECONNREFUSED:
      return "connection refused";
    case ETIMEDOUT:
      return "timed out";
    case EHOSTUNREACH:
      return "no route to host";
    case ENETUNREACH:
      return "network unreachable";
    default: {
      std::string text = std::strerror(err);
      if (!text.empty()) text[0] = absl::ascii_tolower(text[0]);
      return text;
    }
  }
}

// ---- Name resolution, bounded ----------------------------------------------

struct Address {
  sockaddr_storage storage;
  socklen_t length = 0;
};

std::string AddressText(const Address& address) {
  char host[NI_MAXHOST] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&address.storage), address.length, host,
              sizeof(host), nullptr, 0, NI_NUMERICHOST);
  return host;
}

// What a resolver thread hands back. Shared between the thread and the
// caller, so that a caller that gives up can leave (see Resolve).
struct Resolution {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  int rc ABSL_GUARDED_BY(mu) = 0;
  int system_errno ABSL_GUARDED_BY(mu) = 0;
  std::vector<Address> addresses ABSL_GUARDED_BY(mu);
};

void RunGetaddrinfo(const std::string& name, int port, Resolution* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &found);
  const int system_errno = errno;
  std::vector<Address> addresses;
  for (const addrinfo* ai = found; rc == 0 && ai != nullptr && addresses.size() < kMaxAddresses;
       ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Address address;
    std::memcpy(&address.storage, ai->ai_addr, ai->ai_addrlen);
    address.length = ai->ai_addrlen;
    addresses.push_back(address);
  }
  if (found != nullptr) freeaddrinfo(found);
  absl::MutexLock lock(&out->mu);
  out->done = true;
  out->rc = rc;
  out->system_errno = system_errno;
  out->addresses = std::move(addresses);
}

// getaddrinfo has no timeout of its own (the resolver's, from resolv.conf,
// can be 10 s or more), so it runs on a thread of its own, which the caller
// leaves behind when `deadline` passes: that thread ends by itself when the
// resolver gives up, and frees what it shares with the caller.
ProbeResult Resolve(const std::string& name, int port, absl::Time deadline,
                    std::vector<Address>* addresses) {
  auto resolution = std::make_shared<Resolution>();
  try {
    std::thread([resolution, name, port] {
      RunGetaddrinfo(name, port, resolution.get());
    }).detach();
  } catch (const std::system_error&) {
    RunGetaddrinfo(name, port, resolution.get());  // no thread to be had: wait for it
  }
  absl::MutexLock lock(&resolution->mu);
  resolution->mu.AwaitWithDeadline(absl::Condition(&resolution->done), deadline);
  const std::string shown = SafeForLog(name, kMaxNameInDetail);
  if (!resolution->done)
    return Fail(ProbeStage::kDns, absl::StrCat("resolving ", shown, " timed out"));
  if (resolution->rc != 0) {
    const std::string reason = resolution->rc == EAI_SYSTEM
                                   ? std::strerror(resolution->system_errno)
                                   : gai_strerror(resolution->rc);
    return Fail(ProbeStage::kDns, absl::StrCat(shown, ": ", reason));
  }
  if (resolution->addresses.empty())
    return Fail(ProbeStage::kDns, absl::StrCat(shown, ": no addresses"));
  *addresses = std::move(resolution->addresses);
  return {};
}

// ---- TCP connect, bounded --------------------------------------------------

// A connected non-blocking socket in *fd, or kConnect naming the last
// address tried and why.
ProbeResult Connect(const std::vector<Address>& addresses, int port, absl::Time deadline, int* fd) {
  std::string last_error = "timed out";
  std::string last_address = AddressText(addresses.front());
  for (const Address& address : addresses) {
    if (MillisLeft(deadline) <= 0) break;
    last_address = AddressText(address);
    const int s = socket(address.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
      last_error = ConnectErrorText(errno);
      continue;
    }
    int err = 0;
    if (connect(s, reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        int ready;
        do {
          ready = poll(&p, 1, MillisLeft(deadline));
        } while (ready < 0 && errno == EINTR);
        if (ready == 0) {
          err = ETIMEDOUT;
        } else {
          socklen_t len = sizeof(err);
          if (ready < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
    }
    if (err == 0) {
      *fd = s;
      return {};
    }
    close(s);
    last_error = ConnectErrorText(err);
  }
  return Fail(ProbeStage::kConnect, absl::StrCat(last_address, " port ", port, ": ", last_error));
}

// ---- libssh helpers ---------------------------------------------------------

// A socket given with SSH_OPTIONS_FD is libssh's (0.10) from ssh_connect on,
// but it closes it only when the connection breaks inside one of its calls
// (the peer hangs up during the handshake, say), and then forgets it
// (ssh_get_fd says SSH_INVALID_SOCKET); ssh_disconnect and ssh_free leave it
// open. So the deleter closes what the session still holds, and never a
// number libssh already closed: another thread may have been given it since.
// Before ssh_connect, the caller closes the socket itself.
struct SessionDeleter {
  void operator()(ssh_session s) const {
    const socket_t fd = ssh_get_fd(s);
    ssh_disconnect(s);
    ssh_free(s);
    if (fd != SSH_INVALID_SOCKET) close(fd);
  }
};
struct KeyDeleter {
  void operator()(ssh_key k) const { ssh_key_free(k); }
};
struct ChannelDeleter {
  void operator()(ssh_channel c) const {
    ssh_channel_close(c);
    ssh_channel_free(c);
  }
};
using Session = std::unique_ptr<ssh_session_struct, SessionDeleter>;
using Key = std::unique_ptr<ssh_key_struct, KeyDeleter>;
using Channel = std::unique_ptr<ssh_channel_struct, ChannelDeleter>;

std::string SshError(ssh_session session) {
  return SafeForLog(ssh_get_error(session), kMaxTextInDetail);
}

// Bounds every blocking libssh call that follows by what is left of the
// attempt.
void SetTimeout(ssh_session session, absl::Time deadline) {
  const int ms = std::max(MillisLeft(deadline), 1);
  long seconds = ms / 1000;
  long micros = (ms % 1000) * 1000L;
  ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &seconds);
  ssh_options_set(session, SSH_OPTIONS_TIMEOUT_USEC, &micros);
}

std::string Fingerprint(ssh_key key) {
  unsigned char* hash = nullptr;
  size_t length = 0;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &length) != 0)
    return "(no fingerprint)";
  char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, length);
  ssh_clean_pubkey_hash(&hash);
  std::string out = text != nullptr ? text : "(no fingerprint)";
  ssh_string_free_char(text);
  return out;
}

// The host key algorithms to offer, so that a server with several host keys
// presents the pinned key's type.
std::string HostKeyAlgorithms(absl::string_view type) {
  if (type == "ssh-rsa") return "rsa-sha2-512,rsa-sha2-256,ssh-rsa";
  return std::string(type);
}

// "TYPE BASE64 [COMMENT]" -> key, or kHostKey.
ProbeResult ParsePinnedKey(const std::string& line, Key* key, std::string* type) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  const std::string shown = SafeForLog(line, 40);
  if (fields.size() < 2)
    return Fail(ProbeStage::kHostKey,
                absl::StrCat("the pinned host key '", shown, "' is not \"TYPE BASE64\""));
  *type = std::string(fields[0]);
  const ssh_keytypes_e key_type = ssh_key_type_from_name(type->c_str());
  ssh_key parsed = nullptr;
  if (key_type == SSH_KEYTYPE_UNKNOWN ||
      ssh_pki_import_pubkey_base64(std::string(fields[1]).c_str(), key_type, &parsed) != SSH_OK)
    return Fail(ProbeStage::kHostKey,
                absl::StrCat("the pinned host key '", shown, "' is not a valid public key"));
  key->reset(parsed);
  return {};
}

}  // namespace

ProbeResult ConnectTcp(const std::string& name, int port, absl::Time deadline, int* fd) {
  if (!IsValidHost(name))
    return Fail(ProbeStage::kDns, absl::StrCat("'", SafeForLog(name, kMaxNameInDetail),
                                               "' is not a valid host name or IP address"));
  if (port <= 0 || port > 65535)
    return Fail(ProbeStage::kConnect, absl::StrCat("port ", port, " is out of range"));
  std::vector<Address> addresses;
  if (ProbeResult r = Resolve(name, port, deadline, &addresses); r.stage != ProbeStage::kOk) {
    return r;
  }
  return Connect(addresses, port, deadline, fd);
}

absl::string_view ProbeStageName(ProbeStage stage) {
  switch (stage) {
    case ProbeStage::kOk:
      return "ok";
    case ProbeStage::kDns:
      return "DNS";
    case ProbeStage::kConnect:
      return "connect";
    case ProbeStage::kHandshake:
      return "SSH handshake";
    case ProbeStage::kHostKey:
      return "host key";
    case ProbeStage::kAuth:
      return "auth";
    case ProbeStage::kCommand:
      return "command";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<LibsshProber>> LibsshProber::Create(
    const std::string& private_key_pem, const std::string& user) {
  if (user.empty())
    return absl::InvalidArgumentError(
        "the SSH login name for the readiness probe is empty; pass the running user's name");
  ssh_set_log_level(SSH_LOG_NOLOG);
  ssh_key key = nullptr;
  if (ssh_pki_import_privkey_base64(private_key_pem.c_str(), nullptr, nullptr, nullptr, &key) !=
      SSH_OK)
    return absl::InvalidArgumentError(
        "the job's SSH private key does not parse (expected an unencrypted OpenSSH or PEM "
        "private key); check the key in the state directory or the mounted Secret");
  ssh_key_free(key);
  return std::unique_ptr<LibsshProber>(new LibsshProber(private_key_pem, user));
}

ProbeResult LibsshProber::Probe(const ProbeTarget& target, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  // Where an attempt's time goes, at DEBUG (profiling the launch: docs/mpi.md).
  std::string steps;
  absl::Time mark = start;
  auto step = [&](absl::string_view name) {
    const absl::Time now = absl::Now();
    absl::StrAppend(&steps, " ", name, " ", absl::ToDoubleMilliseconds(now - mark), "ms");
    mark = now;
  };
  // libssh's own log level is per thread; the session's is set below.
  ssh_set_log_level(SSH_LOG_NOLOG);

  Key pinned;
  std::string pinned_type;
  if (ProbeResult r = ParsePinnedKey(target.host_public_key, &pinned, &pinned_type);
      r.stage != ProbeStage::kOk)
    return r;
  if (!IsValidHost(target.name))
    return Fail(ProbeStage::kDns, absl::StrCat("'", SafeForLog(target.name, kMaxNameInDetail),
                                               "' is not a valid host name or IP address"));
  if (target.port <= 0 || target.port > 65535)
    return Fail(ProbeStage::kConnect, absl::StrCat("port ", target.port, " is out of range"));

  std::vector<Address> addresses;
  if (ProbeResult r = Resolve(target.name, target.port, deadline, &addresses);
      r.stage != ProbeStage::kOk)
    return r;
  step("dns");
  int fd = -1;
  if (ProbeResult r = Connect(addresses, target.port, deadline, &fd); r.stage != ProbeStage::kOk)
    return r;
  step("connect");

  Session session(ssh_new());
  if (!session) {
    close(fd);
    return Fail(ProbeStage::kHandshake, "could not allocate an SSH session");
  }
  int verbosity = SSH_LOG_NOLOG;
  bool process_config = false;  // never ~/.ssh/config or /etc/ssh/ssh_config
  int port = target.port;
  const std::string algorithms = HostKeyAlgorithms(pinned_type);
  ssh_options_set(session.get(), SSH_OPTIONS_LOG_VERBOSITY, &verbosity);
  ssh_options_set(session.get(), SSH_OPTIONS_PROCESS_CONFIG, &process_config);
  ssh_options_set(session.get(), SSH_OPTIONS_HOST, target.name.c_str());
  ssh_options_set(session.get(), SSH_OPTIONS_PORT, &port);
  ssh_options_set(session.get(), SSH_OPTIONS_USER, user_.c_str());
  ssh_options_set(session.get(), SSH_OPTIONS_KNOWNHOSTS, "/dev/null");
  ssh_options_set(session.get(), SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
  if (ssh_options_set(session.get(), SSH_OPTIONS_HOSTKEYS, algorithms.c_str()) != SSH_OK) {
    close(fd);
    return Fail(ProbeStage::kHostKey,
                absl::StrCat("the pinned host key's type '", SafeForLog(pinned_type, 40),
                             "' is not supported"));
  }
  const std::string where = absl::StrCat(SafeForLog(target.name, kMaxNameInDetail), ":", port);
  SetTimeout(session.get(), deadline);
  // From here on the session's deleter closes the socket (see SessionDeleter).
  ssh_options_set(session.get(), SSH_OPTIONS_FD, &fd);
  if (ssh_connect(session.get()) != SSH_OK)
    return Fail(ProbeStage::kHandshake, absl::StrCat(where, ": ", SshError(session.get())));

  step("handshake");
  ssh_key server_key_raw = nullptr;
  if (ssh_get_server_publickey(session.get(), &server_key_raw) != SSH_OK)
    return Fail(ProbeStage::kHostKey, absl::StrCat(where, ": the server presented no host key"));
  Key server_key(server_key_raw);
  if (ssh_key_cmp(server_key.get(), pinned.get(), SSH_KEY_CMP_PUBLIC) != 0)
    return Fail(ProbeStage::kHostKey,
                absl::StrCat(where, " presented host key ", Fingerprint(server_key.get()), " (",
                             ssh_key_type_to_char(ssh_key_type(server_key.get())),
                             ") but the worker pinned ", Fingerprint(pinned.get()), " (",
                             ssh_key_type_to_char(ssh_key_type(pinned.get())), ")"));

  ssh_key job_key_raw = nullptr;
  if (ssh_pki_import_privkey_base64(private_key_pem_.c_str(), nullptr, nullptr, nullptr,
                                    &job_key_raw) != SSH_OK)
    return Fail(ProbeStage::kAuth, "the job's private key does not parse");
  Key job_key(job_key_raw);
  SetTimeout(session.get(), deadline);
  const int auth = ssh_userauth_publickey(session.get(), nullptr, job_key.get());
  const std::string user = SafeForLog(user_, kMaxNameInDetail);
  switch (auth) {
    case SSH_AUTH_SUCCESS:
      break;
    case SSH_AUTH_DENIED:
      return Fail(ProbeStage::kAuth,
                  absl::StrCat(where, ": the job key was refused for user '", user, "'"));
    case SSH_AUTH_PARTIAL:
      return Fail(ProbeStage::kAuth, absl::StrCat(where, ": the job key was accepted for user '",
                                                  user, "' but the server wants more methods"));
    default:
      return Fail(ProbeStage::kAuth, absl::StrCat(where, ": public-key auth as '", user,
                                                  "' failed: ", SshError(session.get())));
  }

  step("auth");
  SetTimeout(session.get(), deadline);
  Channel channel(ssh_channel_new(session.get()));
  if (!channel || ssh_channel_open_session(channel.get()) != SSH_OK)
    return Fail(ProbeStage::kCommand,
                absl::StrCat(where, ": could not open a session: ", SshError(session.get())));
  if (ssh_channel_request_exec(channel.get(), kReadinessCommand) != SSH_OK)
    return Fail(ProbeStage::kCommand, absl::StrCat(where, ": could not run '", kReadinessCommand,
                                                   "': ", SshError(session.get())));
  // Keep the first bytes the command prints (a ForceCommand's or a
  // nologin shell's complaint); drop the rest.
  std::string output;
  char buffer[512];
  auto keep = [&output](const char* data, int n) {
    if (n > 0 && output.size() < kMaxTextInDetail) output.append(data, n);
  };
  while (!ssh_channel_is_eof(channel.get())) {
    const int left = MillisLeft(deadline);
    if (left <= 0)
      return Fail(ProbeStage::kCommand,
                  absl::StrCat(where, ": '", kReadinessCommand,
                               "' did not finish in time (a slow login shell?)"));
    const int n =
        ssh_channel_read_timeout(channel.get(), buffer, sizeof(buffer), 0, std::min(left, 100));
    if (n == SSH_ERROR)
      return Fail(ProbeStage::kCommand, absl::StrCat(where, ": reading from '", kReadinessCommand,
                                                     "' failed: ", SshError(session.get())));
    keep(buffer, n);
    keep(buffer, ssh_channel_read_nonblocking(channel.get(), buffer, sizeof(buffer), 1));
  }
  keep(buffer, ssh_channel_read_nonblocking(channel.get(), buffer, sizeof(buffer), 1));
  SetTimeout(session.get(), deadline);
  const int status = ssh_channel_get_exit_status(channel.get());
  step("command");
  TLOG(kDebug) << "SSH probe of " << SafeForLog(target.name, kMaxNameInDetail) << ":" << steps;
  if (status == 0) return {};
  std::string said;
  if (!output.empty())
    said = absl::StrCat(" and printed '", SafeForLog(output, kMaxTextInDetail), "'");
  if (status < 0)
    return Fail(ProbeStage::kCommand, absl::StrCat(where, ": '", kReadinessCommand,
                                                   "' ended without an exit status", said));
  return Fail(ProbeStage::kCommand,
              absl::StrCat(where, ": '", kReadinessCommand, "' exited with status ", status, said));
}

absl::StatusOr<std::string> CurrentUserName() {
  const uid_t uid = geteuid();
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  const int rc = getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr || found->pw_name == nullptr || found->pw_name[0] == '\0')
    return absl::NotFoundError(absl::StrCat(
        "uid ", uid,
        " has no passwd entry, so sshd cannot log it in; run the pods as a user listed in "
        "/etc/passwd (or use nss_wrapper)"));
  return std::string(found->pw_name);
}

}  // namespace trainlet::mpi
