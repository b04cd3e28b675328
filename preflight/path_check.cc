#include "preflight/path_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "preflight/check_result.h"

namespace trainlet::preflight {

namespace {

// What errno means for a checkpoint directory, in the words a user acts on.
std::string ErrnoText(int err) {
  switch (err) {
    case EROFS:
      return "read-only filesystem";
    case ENOSPC:
      return "no space left on the filesystem";
    case EDQUOT:
      return "disk quota exceeded";
    case EACCES:
    case EPERM:
      return absl::StrCat(std::strerror(err), ": this user (uid ", getuid(),
                          ") may not write there");
    case ENOENT:
      return "does not exist";
    case ENOTDIR:
      return "not a directory";
    default:
      return std::strerror(err);
  }
}

std::string FileTag(const std::string& tag) {
  std::string out;
  for (char c : tag) {
    if (out.size() == 64) break;
    out.push_back(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                          c == '_'
                      ? c
                      : '_');
  }
  return out.empty() ? "node" : out;
}

// Writes `size` bytes, fsyncs, reads them back, compares, deletes; "" when
// all went well, else what failed.
std::string RoundTrip(const std::string& file, uint64_t size) {
  std::string data(size, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + (i * 7 + 3) % 26);
  auto fail = [&file](absl::string_view step, int err, bool created) {
    if (created) unlink(file.c_str());
    return absl::StrCat(step, ": ", ErrnoText(err));
  };
  int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fail("create", errno, false);
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      return fail("write", err, true);
    }
    done += static_cast<size_t>(n);
  }
  // Many filesystems report a full disk or a lost NFS server only here.
  if (fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    return fail("fsync", err, true);
  }
  if (close(fd) != 0) return fail("close", errno, true);
  fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return fail("reopen", errno, true);
  std::string back(data.size() + 1, '\0');
  size_t got = 0;
  while (got < back.size()) {
    const ssize_t n = read(fd, back.data() + got, back.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return fail("read", err, true);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != data.size() || back.compare(0, got, data) != 0) {
    unlink(file.c_str());
    return absl::StrCat("read back ", got, " bytes that differ from the ", data.size(), " written");
  }
  if (unlink(file.c_str()) != 0) return absl::StrCat("delete: ", ErrnoText(errno));
  return "";
}

}  // namespace

std::vector<v1::CheckResult> CheckPath(const std::string& path, const std::string& tag,
                                       const PathThresholds& thresholds, BoundedRunner& runner,
                                       absl::Duration timeout) {
  if (path.empty()) {
    return {Skipped(kCheckPathFreeSpace, "no --preflight-path"),
            Skipped(kCheckPathRoundTrip, "no --preflight-path")};
  }
  static std::atomic<uint64_t> counter{0};
  const std::string file = absl::StrCat(path, path.back() == '/' ? "" : "/", ".trainlet-preflight-",
                                        FileTag(tag), "-", getpid(), "-", ++counter);
  const std::string shown = SafeForLog(path, 200);
  const double min_free = static_cast<double>(thresholds.min_free_bytes);
  const uint64_t size = thresholds.probe_file_bytes;

  struct Outcome {
    int statvfs_errno = 0;
    bool read_only = false;
    uint64_t free_bytes = 0;
    uint64_t total_bytes = 0;
    std::string round_trip_error;
    absl::Duration round_trip_time;
  };
  BoundedRunner::NoAnswer why;
  std::optional<Outcome> out = runner.Run<Outcome>(
      [path, file, size] {
        Outcome o;
        struct statvfs vfs;
        if (statvfs(path.c_str(), &vfs) != 0) {
          o.statvfs_errno = errno;
          return o;
        }
        o.read_only = (vfs.f_flag & ST_RDONLY) != 0;
        o.free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
        o.total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
        if (o.read_only) return o;
        const absl::Time start = Clock::Monotonic()->Now();
        o.round_trip_error = RoundTrip(file, size);
        o.round_trip_time = Clock::Monotonic()->Now() - start;
        return o;
      },
      timeout, &why);

  if (!out.has_value()) {
    if (why.kind == BoundedRunner::NoAnswer::kNoThread) {
      const std::string reason = absl::StrCat(shown, " not checked: ", why.text);
      return {Skipped(kCheckPathFreeSpace, reason), Skipped(kCheckPathRoundTrip, reason)};
    }
    const std::string reason =
        absl::StrCat(shown, ": the filesystem did not answer (", why.text,
                     "): a hung network filesystem? The job would block there too");
    const double secs = absl::ToDoubleSeconds(timeout);
    return {
        MakeResult(kCheckPathFreeSpace, v1::CheckResult::FAIL, reason, 0, kUnitBytes, min_free),
        MakeResult(kCheckPathRoundTrip, v1::CheckResult::FAIL, reason, secs, kUnitSeconds, secs)};
  }
  if (out->statvfs_errno != 0) {
    const std::string reason = absl::StrCat(shown, ": ", ErrnoText(out->statvfs_errno));
    return {MakeResult(kCheckPathFreeSpace, v1::CheckResult::FAIL, reason, 0, kUnitBytes, min_free),
            MakeResult(kCheckPathRoundTrip, v1::CheckResult::FAIL, reason, 0, kUnitSeconds,
                       absl::ToDoubleSeconds(timeout))};
  }
  std::vector<v1::CheckResult> results;
  const double free_bytes = static_cast<double>(out->free_bytes);
  if (out->free_bytes < thresholds.min_free_bytes) {
    results.push_back(MakeResult(
        kCheckPathFreeSpace, v1::CheckResult::FAIL,
        absl::StrCat(shown, ": ", HumanBytes(out->free_bytes), " free of ",
                     HumanBytes(out->total_bytes), ", under ",
                     HumanBytes(thresholds.min_free_bytes), ": the filesystem is nearly full"),
        free_bytes, kUnitBytes, min_free));
  } else {
    results.push_back(MakeResult(kCheckPathFreeSpace, v1::CheckResult::PASS,
                                 absl::StrCat(shown, ": ", HumanBytes(out->free_bytes), " free of ",
                                              HumanBytes(out->total_bytes)),
                                 free_bytes, kUnitBytes, min_free));
  }
  const double secs = absl::ToDoubleSeconds(out->round_trip_time);
  const double limit = absl::ToDoubleSeconds(timeout);
  if (out->read_only) {
    results.push_back(MakeResult(kCheckPathRoundTrip, v1::CheckResult::FAIL,
                                 absl::StrCat(shown, ": read-only filesystem (mounted read-only)"),
                                 0, kUnitSeconds, limit));
  } else if (!out->round_trip_error.empty()) {
    results.push_back(
        MakeResult(kCheckPathRoundTrip, v1::CheckResult::FAIL,
                   absl::StrCat(shown, ": ", size, "-byte file ", out->round_trip_error), secs,
                   kUnitSeconds, limit));
  } else {
    results.push_back(MakeResult(
        kCheckPathRoundTrip, v1::CheckResult::PASS,
        absl::StrCat(
            shown, ": wrote, synced, read back and deleted ", size, " bytes in ",
            absl::FormatDuration(absl::Trunc(out->round_trip_time, absl::Microseconds(10)))),
        secs, kUnitSeconds, limit));
  }
  return results;
}

}  // namespace trainlet::preflight
