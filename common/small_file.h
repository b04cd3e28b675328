// Reads a small file (a /proc or cgroup entry) with one read(2), bounded:
// at most `max` bytes; "" when it cannot be opened or read. Never blocks
// on anything but the filesystem.
//
// Thread-safe.
#ifndef TRAINLET_COMMON_SMALL_FILE_H_
#define TRAINLET_COMMON_SMALL_FILE_H_

#include <cstddef>
#include <optional>
#include <string>

namespace trainlet {

std::string ReadSmallFile(const std::string& path, size_t max = 512);

// The first `max` bytes of a regular file (read to EOF or `max`); nullopt
// when `path` cannot be opened, or is anything but a regular file: a FIFO
// or device another user planted is never waited on (opened non-blocking).
std::optional<std::string> ReadRegularFile(const std::string& path, size_t max);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_SMALL_FILE_H_
