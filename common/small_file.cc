#include "common/small_file.h"

#include <fcntl.h>
#include <unistd.h>

namespace trainlet {

std::string ReadSmallFile(const std::string& path, size_t max) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string data(max, '\0');
  const ssize_t n = read(fd, data.data(), data.size());
  close(fd);
  data.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return data;
}

}  // namespace trainlet
