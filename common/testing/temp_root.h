// A fake filesystem root for tests: a fresh directory under /tmp, removed
// with its contents by the destructor, where files are written by their
// path below the root ("etc/volcano/worker.host"), parents created.
// Test-only; thread-compatible.
#ifndef TRAINLET_COMMON_TESTING_TEMP_ROOT_H_
#define TRAINLET_COMMON_TESTING_TEMP_ROOT_H_

#include <string>

namespace trainlet::testing {

class TempRoot {
 public:
  TempRoot();
  ~TempRoot();
  TempRoot(const TempRoot&) = delete;
  TempRoot& operator=(const TempRoot&) = delete;

  const std::string& path() const { return path_; }
  // Writes `content` to <root>/<relative>; returns the full path.
  std::string Write(const std::string& relative, const std::string& content) const;

 private:
  std::string path_;
};

// The whole content of the file at `path` ("" when it cannot be read).
std::string ReadFile(const std::string& path);

}  // namespace trainlet::testing

#endif  // TRAINLET_COMMON_TESTING_TEMP_ROOT_H_
