#include "common/small_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

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

std::optional<std::string> ReadRegularFile(const std::string& path, size_t max) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  std::optional<std::string> out;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    std::string data(max, '\0');
    size_t got = 0;
    ssize_t n;
    while (got < max && (n = read(fd, data.data() + got, max - got)) > 0) {
      got += static_cast<size_t>(n);
    }
    data.resize(got);
    out = std::move(data);
  }
  close(fd);
  return out;
}

}  // namespace trainlet
