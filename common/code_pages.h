// Drops the program's code pages from its page tables once start-up is over,
// so that its resident set is the code it runs from then on; and maps them
// all at once before start-up, which is cheaper than faulting them in.
//
// Why: on a fault in a file mapping the kernel maps every cached page of the
// 64 KiB around the one touched ("fault-around"), so each function that runs
// once leaves 16 pages resident. In the static trainlet (16 MB: gRPC,
// protobuf, OpenSSL, libssh) start-up touches ~130 such windows (static
// initialisers, option parsing, the node probe, the join): 8 MB of text
// resident for an agent that afterwards mostly waits. The pages are clean
// copies of the executable file, so dropping them only unmaps them: the page
// cache keeps them (reclaimable as before), and any the agent runs again come
// back with a minor fault.
//
// Only [__executable_start, etext) is dropped: the ELF header and the text,
// which nothing writes (the program has no text relocations: it is built as
// position-dependent or -fPIE code). Read-only data, RELRO and data keep
// their pages.
//
// Thread-safe: a thread running code in a dropped page faults it back in.
#ifndef TRAINLET_COMMON_CODE_PAGES_H_
#define TRAINLET_COMMON_CODE_PAGES_H_

#include "absl/status/status.h"

namespace trainlet {

// madvise(MADV_DONTNEED) over the executable's text; an error names the
// range and errno (harmless: the pages stay mapped).
absl::Status DropCodePages();

// The opposite, for start-up: maps every page of the executable's text at
// once (madvise(MADV_POPULATE_READ), Linux 5.14+), so that the static
// initialisers and the agent's start-up run without the ~50-60 page faults
// that would map the same text 64 KiB at a time. In this project's 2-CPU
// VM a fault costs more than mapping the rest of the text in one call
// (docs/benchmarks.md, section 8: about 0.5 ms of `trainlet run`'s start).
// The text is a clean copy of the executable, so the cost is the page cache
// holding all of it (about 14 MB, reclaimable, where start-up alone reads
// about 8) until DropCodePages unmaps it from the agent's resident set.
// Returns whether the kernel did it; false (an older kernel: EINVAL) changes
// nothing. Async-signal-safe and allocation-free: it runs from
// .preinit_array, before any static initialiser (agent/main.cc).
bool PrefaultCodePages() noexcept;

}  // namespace trainlet

#endif  // TRAINLET_COMMON_CODE_PAGES_H_
