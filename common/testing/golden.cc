#include "common/testing/golden.h"

#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainlet::testing {

void ExpectGoldenFile(const std::string& dir, const std::string& name, const std::string& actual) {
  const std::string path = absl::StrCat(dir, "/", name);
  if (getenv("TRAINLET_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden file " << path
                         << " (TRAINLET_UPDATE_GOLDEN=1 writes it)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "golden file " << path;
}

}  // namespace trainlet::testing
