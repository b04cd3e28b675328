#include "common/testing/temp_root.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace trainlet::testing {

TempRoot::TempRoot() {
  char tmpl[] = "/tmp/trainlet_root_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir != nullptr) path_ = dir;
}

TempRoot::~TempRoot() {
  if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
}

std::string TempRoot::Write(const std::string& relative, const std::string& content) const {
  const std::string full = path_ + "/" + relative;
  for (size_t slash = full.find('/', path_.size() + 1); slash != std::string::npos;
       slash = full.find('/', slash + 1)) {
    mkdir(full.substr(0, slash).c_str(), 0755);
  }
  std::ofstream(full) << content;
  return full;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace trainlet::testing
