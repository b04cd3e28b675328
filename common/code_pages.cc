#include "common/code_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"

// Defined by the GNU and LLVM linkers' default scripts.
extern "C" char __executable_start[];
extern "C" char etext[];

namespace trainlet {

absl::Status DropCodePages() {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
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
