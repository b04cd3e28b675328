// Helpers shared by the mpi/ unit tests: golden files and running a shell
// command. Test-only; thread-compatible.
#ifndef TRAINLET_MPI_TESTING_TEST_UTIL_H_
#define TRAINLET_MPI_TESTING_TEST_UTIL_H_

#include <string>

namespace trainlet::mpi::testing {

// Compares `actual` with mpi/testdata/<name> (a gtest expectation);
// TRAINLET_UPDATE_GOLDEN=1 rewrites the file instead.
void ExpectGolden(const std::string& name, const std::string& actual);

// Runs `command` with /bin/sh, stderr into stdout; returns its exit status
// (or -1) and its output.
int RunShell(const std::string& command, std::string* output);

}  // namespace trainlet::mpi::testing

#endif  // TRAINLET_MPI_TESTING_TEST_UTIL_H_
