#include "common/code_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"

// Defined by the GNU and LLVM linkers' default scripts.
extern "C" char __executable_start[];
extern "C" char etext[];
extern "C" char __data_start[];
extern "C" char _end[];

namespace trainlet {
namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kSanitizer = true;
#else
constexpr bool kSanitizer = false;
#endif
#else
constexpr bool kSanitizer = false;
#endif

constexpr uintptr_t kHeapBytes = 256 * 1024;
constexpr size_t kHeapBlock = 120 * 1024;  // under glibc's default mmap threshold (128 KiB)
constexpr int kMaxHeapBlocks = 4;
constexpr uintptr_t kStackBytes = 32 * 1024;

// Held from PrefaultStartupMemory to ReleaseStartupHeap; only main's thread
// touches them (before any other thread exists).
void* held_blocks[kMaxHeapBlocks] = {};

uintptr_t PageSize() { return static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)); }

// Populates [begin, end) after rounding it out to whole pages; false (and
// nothing mapped) on error.
bool Populate(uintptr_t* begin, uintptr_t* end) {
  const uintptr_t page = PageSize();
  *begin &= ~(page - 1);
  *end = (*end + page - 1) & ~(page - 1);
  if (*end <= *begin ||
      madvise(reinterpret_cast<void*>(*begin), *end - *begin, MADV_POPULATE_WRITE) != 0) {
    *begin = *end = 0;
    return false;
  }
  return true;
}

}  // namespace

bool StartupPrefaultInThisBuild() { return !kSanitizer; }

PrefaultedRanges PrefaultStartupMemory() {
  PrefaultedRanges r;
  if (kSanitizer) return r;
  r.data_begin = reinterpret_cast<uintptr_t>(__data_start);
  r.data_end = reinterpret_cast<uintptr_t>(_end);
  if (!Populate(&r.data_begin, &r.data_end) && errno == EINVAL) {
    return PrefaultedRanges{};  // no MADV_POPULATE_WRITE: nothing else will work
  }

  // Blocks from the brk heap until it reaches kHeapBytes past the first one.
  if (held_blocks[0] == nullptr) {
    for (int i = 0; i < kMaxHeapBlocks; ++i) {
      void* block = std::malloc(kHeapBlock);
      const uintptr_t brk_now = reinterpret_cast<uintptr_t>(sbrk(0));
      const uintptr_t at = reinterpret_cast<uintptr_t>(block);
      if (block == nullptr || at >= brk_now) {  // mapped apart from the heap
        std::free(block);
        break;
      }
      held_blocks[i] = block;
      r.heap_begin = reinterpret_cast<uintptr_t>(held_blocks[0]);
      r.heap_end = brk_now;
      if (r.heap_end - r.heap_begin >= kHeapBytes) break;
    }
    if (r.heap_end > r.heap_begin) Populate(&r.heap_begin, &r.heap_end);
  }

  char here = 0;
  r.stack_end = reinterpret_cast<uintptr_t>(&here) & ~(PageSize() - 1);  // this page is mapped
  r.stack_begin = r.stack_end - kStackBytes;
  Populate(&r.stack_begin, &r.stack_end);
  return r;
}

void ReleaseStartupHeap() {
  for (void*& block : held_blocks) {
    std::free(block);
    block = nullptr;
  }
}

absl::Status DropCodePages() {
  const uintptr_t page = PageSize();
  // Whole pages only: the page holding etext may also hold what follows it.
  const uintptr_t start = reinterpret_cast<uintptr_t>(__executable_start) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(etext) & ~(page - 1);
  if (end <= start) return absl::OkStatus();
  if (madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED) != 0) {
    const int error = errno;
    return absl::InternalError(absl::StrFormat("madvise(MADV_DONTNEED) of the text at %#x-%#x: %s",
                                               start, end, std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace trainlet
