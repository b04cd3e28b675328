#include "rendezvous/token.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainlet::rendezvous {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walk the expected length whatever the input, folding every difference.
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  const size_t n = b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = diff | (x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes,
                                            absl::string_view origin, absl::string_view kind,
                                            unsigned* mode) {
  const std::string named = absl::StrCat(kind, kind.empty() ? "" : " ", SafeForLog(path, 256));
  auto cannot_read = [&](int error) {
    return absl::FailedPreconditionError(
        absl::StrCat(origin, ": cannot read ", named, ": ", std::strerror(error),
                     " (a mounted Secret's file must exist and be readable by this process)"));
  };
  std::FILE* f = std::fopen(path.c_str(), "rbe");  // e: close-on-exec.
  if (f == nullptr) return cannot_read(errno);
  if (mode != nullptr) {
    // The mode of the file opened, not of a path that could change after.
    struct stat st;
    *mode = fstat(fileno(f), &st) == 0 ? static_cast<unsigned>(st.st_mode) : 0;
  }
  std::string data;
  char buf[4096];
  size_t n;
  // Reads one buffer past the bound at most (a device or a pipe never ends).
  while (data.size() <= max_bytes && (n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    data.append(buf, n);
  }
  const bool read_error = std::ferror(f) != 0;
  const int saved_errno = errno;
  std::fclose(f);
  if (read_error) return cannot_read(saved_errno);
  if (data.size() > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(origin, ": ", named, " is larger than ", max_bytes, " bytes"));
  }
  return data;
}

}  // namespace trainlet::rendezvous
