// Fuzz target: ReadTokenFile over a file holding the input. An accepted token
// is at most 4 KiB of printable ASCII with no trailing whitespace, and is the
// file's content with trailing whitespace removed. The file is a memfd (named
// /proc/self/fd/N): a disk file truncated and rewritten for every input makes
// ext4 flush it on close, 400 times slower.
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "config/options.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("trainlet-fuzz-token", 0);
  static const std::string path = absl::StrCat("/proc/self/fd/", fd);
  FUZZ_CHECK(fd >= 0, "memfd_create");
  FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate");
  FUZZ_CHECK(pwrite(fd, data, size, 0) == static_cast<ssize_t>(size), "pwrite");
  auto token = agent::ReadTokenFile({path, "--token-file", agent::ValueSource::kFlag});
  if (!token.ok()) return 0;
  FUZZ_CHECK(token->size() <= 4096, "token longer than 4 KiB");
  for (unsigned char c : *token) FUZZ_CHECK(c >= 0x20 && c <= 0x7e, "byte outside 0x20-0x7e");
  std::string expected(trainlet::fuzz::AsText(data, size));
  absl::StripTrailingAsciiWhitespace(&expected);
  FUZZ_CHECK(*token == expected, "token differs from the file content");
  return 0;
}
