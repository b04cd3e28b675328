// Golden files for unit tests: compare a text with a file checked in under a
// test data folder, or rewrite the file with TRAINLET_UPDATE_GOLDEN=1.
// Test-only (gtest); thread-compatible.
#ifndef TRAINLET_COMMON_TESTING_GOLDEN_H_
#define TRAINLET_COMMON_TESTING_GOLDEN_H_

#include <string>

namespace trainlet::testing {

// Compares `actual` with <dir>/<name> (a gtest expectation; a missing file
// fails, saying how to write it); with TRAINLET_UPDATE_GOLDEN set, writes
// `actual` there instead.
void ExpectGoldenFile(const std::string& dir, const std::string& name, const std::string& actual);

}  // namespace trainlet::testing

#endif  // TRAINLET_COMMON_TESTING_GOLDEN_H_
