#include "common/code_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace trainlet {
namespace {

// This process's file-backed resident set (RssFile, kB).
long RssFileKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

int Fibonacci(int n) { return n < 2 ? n : Fibonacci(n - 1) + Fibonacci(n - 2); }

TEST(DropCodePages, UnmapsTheTextAndCodeStillRuns) {
  ASSERT_EQ(Fibonacci(10), 55);  // the test's own text is resident
  const long before = RssFileKb();
  ASSERT_GT(before, 0);
  ASSERT_TRUE(DropCodePages().ok());
  const long after = RssFileKb();
  // The test binary's text pages went (the shared libraries' stayed); the
  // ones this code runs come back at once.
  EXPECT_LT(after, before);
  EXPECT_EQ(Fibonacci(12), 144);
  EXPECT_TRUE(DropCodePages().ok());  // again: harmless
}

// Never touched before PrefaultStartupMemory (bss: zero-initialised).
alignas(4096) char untouched_bss[16 * 4096];

// Whether the page holding `address` is in this process's page tables
// (/proc/self/pagemap bit 63; readable without privileges).
bool Present(uintptr_t address) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(address / static_cast<uintptr_t>(getpagesize()) * 8);
  const bool ok = pread(fd, &entry, sizeof(entry), at) == sizeof(entry);
  close(fd);
  return ok && (entry >> 63) != 0;
}

// In a child, so that this process's pages (touched by the test runner) do
// not blur the picture. The child's exit code says what failed.
TEST(PrefaultStartupMemory, MapsTheBssTheHeapReserveAndTheStackTop) {
  if (!StartupPrefaultInThisBuild()) GTEST_SKIP() << "a sanitizer build does not prefault";
  if (madvise(nullptr, 0, 23 /* MADV_POPULATE_WRITE */) != 0 && errno == EINVAL) {
    GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const uintptr_t bss = reinterpret_cast<uintptr_t>(untouched_bss);
    for (uintptr_t a = bss; a < bss + sizeof(untouched_bss); a += 4096) {
      if (Present(a)) _exit(10);  // the check can see an absent page
    }
    const PrefaultedRanges r = PrefaultStartupMemory();
    if (r.data_begin > bss || r.data_end < bss + sizeof(untouched_bss)) _exit(11);
    for (uintptr_t a = bss; a < bss + sizeof(untouched_bss); a += 4096) {
      if (!Present(a)) _exit(12);
    }
    // The heap reserve: at least 256 KiB of the brk heap, all mapped.
    if (r.heap_end - r.heap_begin < 256 * 1024) _exit(13);
    for (uintptr_t a = r.heap_begin; a < r.heap_end; a += 4096) {
      if (!Present(a)) _exit(14);
    }
    if (r.stack_end - r.stack_begin != 32 * 1024) _exit(15);
    for (uintptr_t a = r.stack_begin; a < r.stack_end; a += 4096) {
      if (!Present(a)) _exit(16);
    }
    // The blocks go back to malloc, which hands their memory out again.
    ReleaseStartupHeap();
    ReleaseStartupHeap();  // again: harmless
    void* again = std::malloc(100 * 1024);
    const uintptr_t at = reinterpret_cast<uintptr_t>(again);
    if (at < r.heap_begin || at >= r.heap_end) _exit(17);
    std::free(again);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the _exit codes in the test";
}

}  // namespace
}  // namespace trainlet
