// Reads a small file (a /proc or cgroup entry) with one read(2), bounded:
// at most `max` bytes; "" when it cannot be opened or read. Never blocks
// on anything but the filesystem.
//
// Thread-safe.
#ifndef TRAINLET_COMMON_SMALL_FILE_H_
#define TRAINLET_COMMON_SMALL_FILE_H_

#include <cstddef>
#include <string>

namespace trainlet {

std::string ReadSmallFile(const std::string& path, size_t max = 512);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_SMALL_FILE_H_
