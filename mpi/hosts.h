// The hosts an MPI job runs on, as the launcher writes them into hostfiles,
// known_hosts and its SSH client configuration, and their validation.
//
// Everything here comes from the network (a worker's join: its name, slots,
// sshd port and host key), so ValidateHosts runs before any file is written:
// a name or key that could break a hostfile line, inject an ssh_config
// keyword or a second known_hosts entry is refused, never escaped.
//
// Pure functions; thread-safe.
#ifndef TRAINLET_MPI_HOSTS_H_
#define TRAINLET_MPI_HOSTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainlet::mpi {

inline constexpr int kMaxSlots = 1024;
inline constexpr int kDefaultSshPort = 2222;
// A public key line longer than this is refused (an RSA-16384 key is ~2.8 KB).
inline constexpr size_t kMaxPublicKeyLength = 8192;

struct MpiHost {
  std::string node_id;          // for error messages
  std::string name;             // written into hostfiles: RFC 1123 name or IP literal
  int slots = 1;                // 1..kMaxSlots
  int port = kDefaultSshPort;   // its sshd, 1..65535; 0 for the launcher (no sshd)
  std::string host_public_key;  // "ssh-ed25519 AAAA..." (type + base64 only); empty iff port 0
};

// True for "<type> <base64>" with type one of ssh-ed25519,
// ecdsa-sha2-nistp256/384/521 or ssh-rsa, exactly one space, no comment, and
// a base64 blob that decodes to a key of that same type.
bool IsValidPublicKeyLine(absl::string_view line);

// InvalidArgument naming the node id and the bad value (escaped) for a name
// that is not IsValidHost, slots or port out of range, a key that is not
// IsValidPublicKeyLine, or a name given twice. A host with port 0 and an
// empty key is the launcher itself (it hosts slots but is not reached over
// SSH); port 0 with a key, or no key with a port, is refused. Writers call it
// first, so nothing is written when it fails.
absl::Status ValidateHosts(const std::vector<MpiHost>& hosts);

// Sum of the hosts' slots (the job's default process count).
int TotalSlots(const std::vector<MpiHost>& hosts);

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_HOSTS_H_
