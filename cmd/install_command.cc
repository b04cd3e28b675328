#include "cmd/install_command.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "config/options.h"

namespace trainlet::agent {
namespace {

constexpr char kUsage[] =
    "Usage: trainlet install DEST\n"
    "Copies this trainlet binary to DEST (a file path, or an existing directory:\n"
    "DEST/trainlet), mode 0755, replacing a file there whole. The init container\n"
    "of the trainlet image runs it to put trainlet into a volume that the\n"
    "training container, any image, runs it from:\n"
    "  /trainlet install /opt/trainlet/trainlet\n"
    "Exit 0: installed; 64: bad arguments; 71: the copy failed.\n";

absl::Status Errno(int error, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", SafeForLog(path, 256)));
}

// Writes all of `n` bytes, retrying short writes and EINTR.
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> InstallBinary(const std::string& source, const std::string& dest) {
  if (dest.empty()) return absl::InvalidArgumentError("install: DEST is empty");
  std::string target = dest;
  struct stat st;
  if (stat(dest.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    target = absl::StrCat(dest, dest.back() == '/' ? "" : "/", "trainlet");
  }
  const int in = open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Errno(errno, "cannot open the binary to copy,", source);
  absl::Cleanup close_in = [in] { close(in); };
  if (fstat(in, &st) != 0) return Errno(errno, "cannot stat", source);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(SafeForLog(source, 256), " is not a regular file; nothing installed"));
  }
  // Beside the target, so that the rename stays on one filesystem.
  const std::string temp = absl::StrCat(target, ".tmp-", getpid());
  const int out = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  if (out < 0) {
    return Errno(errno,
                 "cannot create (is the volume mounted, its parent directory there and "
                 "writable?)",
                 temp);
  }
  bool keep = false;
  absl::Cleanup drop_temp = [&] {
    close(out);
    if (!keep) unlink(temp.c_str());
  };
  char buf[1 << 16];
  for (;;) {
    ssize_t r = read(in, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno(errno, "cannot read", source);
    if (r == 0) break;
    if (!WriteAll(out, buf, static_cast<size_t>(r))) {
      return Errno(errno, "cannot write (is the volume full?)", temp);
    }
  }
  // The umask may have narrowed the mode; the binary must be executable by
  // every user of the volume (the training container may run as another uid).
  if (fchmod(out, 0755) != 0) return Errno(errno, "cannot chmod 0755", temp);
  if (fsync(out) != 0) return Errno(errno, "cannot sync", temp);
  if (rename(temp.c_str(), target.c_str()) != 0) {
    return Errno(errno, "cannot rename the copy to", target);
  }
  keep = true;
  return target;
}

absl::StatusOr<InstallArgs> ParseInstallArgs(const std::vector<std::string>& args) {
  InstallArgs parsed;
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    parsed.help = true;
    return parsed;
  }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') {
    return absl::InvalidArgumentError(
        "expected one argument, DEST (a file path or a directory); usage: trainlet install DEST");
  }
  parsed.dest = args[0];
  return parsed;
}

std::string InstallHelpText() { return kUsage; }

int Install(const std::string& dest, const std::string& self, std::ostream& out,
            std::ostream& err) {
  absl::StatusOr<std::string> written = InstallBinary(self, dest);
  if (!written.ok()) {
    err << "trainlet install: " << written.status().message() << "\n";
    return kExitOsError;
  }
  out << "trainlet install: installed " << SafeForLog(*written, 256) << "\n";
  return kExitSuccess;
}

int RunInstall(const std::vector<std::string>& args, const std::string& self, std::ostream& out,
               std::ostream& err) {
  absl::StatusOr<InstallArgs> parsed = ParseInstallArgs(args);
  if (!parsed.ok()) {
    err << UsageErrorText("install", parsed.status());
    return kExitUsage;
  }
  if (parsed->help) {
    out << InstallHelpText();
    return kExitSuccess;
  }
  return Install(parsed->dest, self, out, err);
}

}  // namespace trainlet::agent
