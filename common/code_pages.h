// The program's memory pages around start-up: the pages start-up writes are
// mapped in bulk before it (PrefaultStartupMemory), and its code pages leave
// the page tables once it is over (DropCodePages). Both are measured in
// docs/benchmarks-history.md section 8 (start-up and agent memory); the
// threads they run on are in docs/architecture.md, "Threading in the agent".
//
// Thread-safe: a thread running code in a dropped page faults it back in.
#ifndef TRAINLET_COMMON_CODE_PAGES_H_
#define TRAINLET_COMMON_CODE_PAGES_H_

#include <cstdint>

#include "absl/status/status.h"

namespace trainlet {

// What PrefaultStartupMemory mapped, for tests: [begin, end) ranges, empty
// (begin == end) where that part was skipped or failed.
struct PrefaultedRanges {
  uintptr_t data_begin = 0, data_end = 0;
  uintptr_t heap_begin = 0, heap_end = 0;
  uintptr_t stack_begin = 0, stack_end = 0;
};

// False in sanitizer builds, where PrefaultStartupMemory does nothing (the
// sanitizer's allocator owns the heap).
bool StartupPrefaultInThisBuild();

// Maps the pages start-up writes anyway. Every first write to a page of the
// data, the bss, the heap or the stack is a page fault, and start-up (the
// static initialisers of gRPC, protobuf, OpenSSL and libssh, then options,
// probe, join and spawn) writes about 80 of them. In a VM that traps page
// faults to the hypervisor (the 2-CPU test VM, a PVM guest) each costs
// 13-17 us; MADV_POPULATE_WRITE (Linux 5.14) maps a range in one call for
// about 1 us a page: `trainlet run -- true` starts ~0.6 ms sooner there. On
// bare metal a fault costs well under a microsecond and this is close to
// free either way. Mapped in one call each:
// - the data and bss, from __data_start to _end (about 180 KiB);
// - the heap's first 256 KiB: blocks of 120 KiB (under malloc's mmap
//   threshold, so they come from the brk heap) are held until
//   ReleaseStartupHeap(), which main calls first thing, so that the static
//   initialisers' allocations land above them in pages already mapped and
//   main's reuse the blocks;
// - 32 KiB below the current stack pointer.
// Best effort: an older kernel (EINVAL), a malloc that hands out mapped
// chunks instead (glibc.malloc.mmap_threshold lowered), or a sanitizer build
// skips the part concerned. Call once, before the static initialisers, from
// the executable's .preinit_array; later calls only map again what is
// already mapped.
PrefaultedRanges PrefaultStartupMemory();

// Frees the heap blocks PrefaultStartupMemory holds. Idempotent.
void ReleaseStartupHeap();

// Drops the program's code pages from its page tables once start-up is
// over, so that its resident set is the code it runs from then on. On a
// fault in a file mapping the kernel maps every cached page of the 64 KiB
// around the one touched ("fault-around"), so each function that runs once
// leaves 16 pages resident; start-up touches ~130 such windows (static
// initialisers, option parsing, the node probe, the join): 8 MB of text
// resident for an agent that afterwards mostly waits. The pages are clean
// copies of the executable file, so dropping them only unmaps them: the page
// cache keeps them (reclaimable as before), and any the agent runs again
// come back with a minor fault. Only [__executable_start, etext) is dropped:
// the ELF header and the text, which nothing writes (no text relocations:
// position-dependent or -fPIE code); read-only data, RELRO and data keep
// their pages. madvise(MADV_DONTNEED); an error names the range and errno
// (harmless: the pages stay mapped).
absl::Status DropCodePages();

}  // namespace trainlet

#endif  // TRAINLET_COMMON_CODE_PAGES_H_
