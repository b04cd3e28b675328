// Per-job shared token checks, and the bounded read of the files a token
// or a TLS key comes from.
#ifndef TRAINLET_RENDEZVOUS_TOKEN_H_
#define TRAINLET_RENDEZVOUS_TOKEN_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainlet::rendezvous {

// Compares in time that depends only on the lengths, never on where the
// first difference is, so a caller cannot guess the token byte by byte.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The whole file at `path` when it holds at most `max_bytes` (a token file,
// a mounted Secret's TLS file), and, when `mode` is set, the permission bits
// of the file opened (after symlinks: a Secret's files are links into its
// ..data directory). Errors are FailedPrecondition, named by `origin` (the
// flag it came from) and `kind` (what the file is, may be empty):
// "ORIGIN: cannot read KIND PATH: <errno's text> (...)" and
// "ORIGIN: KIND PATH is larger than N bytes".
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes,
                                            absl::string_view origin, absl::string_view kind = "",
                                            unsigned* mode = nullptr);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_TOKEN_H_
