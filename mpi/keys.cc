#include "mpi/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <libssh/libssh.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainlet::mpi {
namespace {

struct KeyDeleter {
  void operator()(ssh_key key) const { ssh_key_free(key); }
};
using KeyPtr = std::unique_ptr<std::remove_pointer_t<ssh_key>, KeyDeleter>;

struct CharDeleter {
  void operator()(char* text) const { ssh_string_free_char(text); }
};
using CharPtr = std::unique_ptr<char, CharDeleter>;

// Given to libssh as its passphrase callback, so that an encrypted key fails
// to import instead of OpenSSL prompting on a terminal.
int RefusePassphrase(const char*, char*, size_t, int, int, void*) { return -1; }

absl::StatusOr<std::string> PublicLine(ssh_key key) {
  const char* type = ssh_key_type_to_char(ssh_key_type(key));
  char* base64 = nullptr;
  if (type == nullptr || ssh_pki_export_pubkey_base64(key, &base64) != SSH_OK) {
    return absl::InternalError("libssh could not export the public key");
  }
  CharPtr owned(base64);
  return absl::StrCat(type, " ", base64);
}

std::string ErrnoText(int error) { return absl::StrCat(strerror(error), " (errno ", error, ")"); }

}  // namespace

absl::StatusOr<KeyPair> GenerateEd25519() {
  ssh_key raw = nullptr;
  if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &raw) != SSH_OK) {
    return absl::InternalError("libssh could not generate an ed25519 key");
  }
  KeyPtr key(raw);
  char* pem = nullptr;
  if (ssh_pki_export_privkey_base64(key.get(), nullptr, nullptr, nullptr, &pem) != SSH_OK) {
    return absl::InternalError("libssh could not export the generated private key");
  }
  CharPtr owned(pem);
  KeyPair pair;
  pair.private_pem = pem;
  if (pair.private_pem.empty() || pair.private_pem.back() != '\n') pair.private_pem += '\n';
  absl::StatusOr<std::string> public_line = PublicLine(key.get());
  if (!public_line.ok()) return public_line.status();
  pair.public_line = *std::move(public_line);
  return pair;
}

absl::StatusOr<std::string> PublicLineOf(const std::string& private_pem) {
  ssh_key raw = nullptr;
  if (private_pem.find('\0') != std::string::npos ||
      ssh_pki_import_privkey_base64(private_pem.c_str(), nullptr, RefusePassphrase, nullptr,
                                    &raw) != SSH_OK ||
      raw == nullptr) {
    return absl::InvalidArgumentError(
        "not an unencrypted private key (OpenSSH, PEM or PKCS#8; ed25519, ECDSA or RSA)");
  }
  KeyPtr key(raw);
  if (!ssh_key_is_private(key.get())) {
    return absl::InvalidArgumentError("a public key, not a private key");
  }
  return PublicLine(key.get());
}

absl::StatusOr<KeyPair> LoadMountedKey(const std::string& dir) {
  for (const char* name : kMountedKeyNames) {
    const std::string path = absl::StrCat(dir, "/", name);
    auto refuse = [&](absl::string_view why) {
      return absl::FailedPreconditionError(
          absl::StrCat("mounted SSH key ", SafeForLog(path, 512), ": ", why,
                       "; mount a readable, unencrypted private key there, or remove it so "
                       "that trainlet generates one"));
    };
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return refuse(ErrnoText(errno));
    }
    if (!S_ISREG(st.st_mode)) return refuse("not a regular file");
    if (static_cast<size_t>(st.st_size) > kMaxPrivateKeyFile) {
      return refuse(absl::StrCat(st.st_size, " bytes, over the limit of ", kMaxPrivateKeyFile));
    }
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return refuse(ErrnoText(errno));
    std::string contents;
    char buffer[8192];
    while (true) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int error = errno;
        close(fd);
        return refuse(ErrnoText(error));
      }
      if (n == 0) break;
      contents.append(buffer, static_cast<size_t>(n));
      if (contents.size() > kMaxPrivateKeyFile) {  // grew after stat
        close(fd);
        return refuse(absl::StrCat("over the limit of ", kMaxPrivateKeyFile, " bytes"));
      }
    }
    close(fd);
    absl::StatusOr<std::string> public_line = PublicLineOf(contents);
    if (!public_line.ok()) return refuse(public_line.status().message());
    // OpenSSH's parser wants the last line terminated.
    if (contents.back() != '\n') contents += '\n';
    return KeyPair{std::move(contents), *std::move(public_line)};
  }
  return absl::NotFoundError(
      absl::StrCat("no SSH private key (ssh-privatekey, id_ed25519, "
                   "id_ecdsa, id_rsa) in ",
                   SafeForLog(dir, 512)));
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents,
                                 mode_t mode) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string temp =
      absl::StrCat(dir, slash == std::string::npos ? "/" : "", ".", base, ".tmp.XXXXXX");
  auto fail = [&](absl::string_view step, int error) {
    return absl::InternalError(absl::StrCat("writing ", SafeForLog(path, 512), ": ", step, ": ",
                                            ErrnoText(error),
                                            "; check that its directory exists and is writable"));
  };
  const int fd = mkostemp(temp.data(), O_CLOEXEC);  // creates it 0600, whatever the umask
  if (fd < 0) return fail("creating a temp file", errno);
  auto abandon = [&](absl::string_view step) {
    const int error = errno;
    close(fd);
    unlink(temp.c_str());
    return fail(step, error);
  };
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return abandon("write");
    written += static_cast<size_t>(n);
  }
  if (fchmod(fd, mode) != 0) return abandon("fchmod");  // fchmod ignores the umask
  // No fsync (about 1.3 ms a file on the benchmark's disk, 9 ms for a
  // round's files, on the launch's critical path): every file here is
  // written by the pod's own agent when it starts or a round does, and a
  // machine that crashes brings a new pod that writes them anew. The
  // rename alone makes each file whole to its readers.
  if (close(fd) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return fail("close", error);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return fail("rename", error);
  }
  return absl::OkStatus();
}

}  // namespace trainlet::mpi
