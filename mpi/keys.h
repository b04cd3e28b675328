// The job's SSH keys: generated with libssh (ed25519), or taken from a
// Secret mounted into the pod (mpi-operator's and Kubeflow's ssh-privatekey,
// or plain id_*), and files written atomically with an exact mode.
//
// A mounted key may have any mode and owner (fsGroup makes it 0640 or 0644,
// which OpenSSH refuses), so the caller copies it into the state directory
// with WriteFileAtomically(..., 0600). The public key is always derived from
// the private key; a mounted .pub is never trusted.
//
// Functions are thread-safe (no shared state); LoadMountedKey and
// WriteFileAtomically do file I/O.
#ifndef TRAINLET_MPI_KEYS_H_
#define TRAINLET_MPI_KEYS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainlet::mpi {

// Private key files larger than this are refused (an RSA-16384 key is ~12 KB).
inline constexpr size_t kMaxPrivateKeyFile = 64 * 1024;

struct KeyPair {
  std::string private_pem;  // the private key file's text, ending in a newline
  std::string public_line;  // "ssh-ed25519 AAAA..." (type + base64, no comment)
};

// A fresh ed25519 key pair; the private key in OpenSSH's format.
absl::StatusOr<KeyPair> GenerateEd25519();

// The public line of an unencrypted private key, in any format libssh
// imports (OpenSSH, PEM PKCS#1 RSA, SEC1 EC, PKCS#8). InvalidArgument when it
// is not one (or is passphrase-protected: nothing ever prompts).
absl::StatusOr<std::string> PublicLineOf(const std::string& private_pem);

// The names LoadMountedKey looks for, in order.
inline constexpr const char* kMountedKeyNames[] = {"ssh-privatekey", "id_ed25519", "id_ecdsa",
                                                   "id_rsa"};

// The first of kMountedKeyNames present in `dir` (symlinks followed, as in a
// Secret volume), with its public line derived from it. NotFound when none is
// present (the caller then generates a key); FailedPrecondition naming the
// file when one is present but unreadable, not a regular file, over
// kMaxPrivateKeyFile, or not an unencrypted private key.
absl::StatusOr<KeyPair> LoadMountedKey(const std::string& dir);

// Writes `contents` to `path` atomically (a temp file in the same directory,
// renamed) with exactly `mode` whatever the umask, owned by the running
// user: a reader sees the old or the new file whole. Not fsync'd: the state
// directory's files are rewritten when a pod or round starts, and do not
// need to outlive a crash of the machine. On failure nothing is left behind
// and `path` is untouched.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents, mode_t mode);

}  // namespace trainlet::mpi

#endif  // TRAINLET_MPI_KEYS_H_
