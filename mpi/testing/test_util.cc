#include "mpi/testing/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/testing/golden.h"
#include "gtest/gtest.h"

namespace trainlet::mpi::testing {

void ExpectGolden(const std::string& name, const std::string& actual) {
  trainlet::testing::ExpectGoldenFile(TRAINLET_MPI_TESTDATA, name, actual);
}

int RunShell(const std::string& command, std::string* output) {
  FILE* pipe = popen(absl::StrCat(command, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  output->clear();
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace trainlet::mpi::testing
