// Drops the program's code pages from its page tables once start-up is over,
// so that its resident set is the code it runs from then on.
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

}  // namespace trainlet

#endif  // TRAINLET_COMMON_CODE_PAGES_H_
