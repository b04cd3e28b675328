// NVML in the static trainlet, out of process. A fully static program cannot
// dlopen libnvidia-ml.so.1 (nvml_in_process.cc says why), so trainlet carries
// the NVML reader (nvml_reader_main.cc: nvml.cc's reading code, dynamically
// linked, gzip-compressed inside the binary, about 400 KiB) and runs it
// through the image's own dynamic loader, which then finds NVML the way any
// program in the image would (ld.so.cache, LD_LIBRARY_PATH). The binary stays
// one file. docs/topology.md, "NVML in the static build".
//
// How a read goes:
//   1. the reader is inflated into a sealed memfd;
//   2. a child is forked (a raw clone: no atfork handlers) with only its
//      pipes, default signal handling and PR_SET_PDEATHSIG;
//   3. the child execs the memfd (execveat: the kernel starts the reader's
//      ELF interpreter, /lib64/ld-linux-x86-64.so.2, from the image), or
//      where memfds may not be executed, that interpreter on
//      /proc/self/fd/N;
//   4. the answer comes back on a pipe: at most 1 MiB, framed and parsed as
//      a v1::NodeProbe, every string and list checked (the reader's output
//      is not trusted);
//   5. past NvmlOptions::reader_timeout the child is killed through its
//      pidfd (Linux 5.2; before, by pid and only while waitid(WNOWAIT) says
//      it is still our unreaped child) and reaped. In the agent, the
//      Supervisor reaps every child with waitpid(-1) and may take the
//      reader's exit status first: the answer alone then decides.
// Whatever goes wrong (no loader in the image, exec refused, a hang, a crash,
// a garbled answer) is NVML ABSENT or ERROR with the reason, never a failure
// of the probe.
//
// Threading: any thread, any number at once (one child each). Blocks the
// calling thread for at most reader_timeout plus about a second.
#ifndef TRAINLET_TOPOLOGY_NVML_READER_H_
#define TRAINLET_TOPOLOGY_NVML_READER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "topology/nvml.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology {

// Whether this build carries the reader (TRAINLET_NVML_READER, on with
// TRAINLET_STATIC on x86_64 and aarch64).
bool NvmlReaderBuiltIn();

// Seams for tests; the defaults are what ReadNvml uses.
struct NvmlReaderSeams {
  // The dynamic loader to check for and to fall back to; "" = the reader's
  // own PT_INTERP.
  std::string interpreter;
  // Skip execveat of the memfd and run the loader on /proc/self/fd/N.
  bool via_loader = false;
  // Do without a pidfd, as on a kernel before 5.2: wait by polling, and kill
  // only after waitid(WNOWAIT) says the pid is still our unreaped child.
  bool without_pidfd = false;
};

// ReadNvml (nvml.h) through the reader, in any build. options.library must
// not be empty.
void ReadNvmlThroughReader(const NvmlOptions& options, const NvmlReaderSeams& seams,
                           v1::NodeProbe* probe, std::vector<v1::Gpu>* gpus);

// Checks the reader's answer (nvml_internal.h's framing) and moves it into
// *probe (nvml, cuda_driver_version, warnings appended) and *gpus. On any
// problem neither is touched and the error says what was wrong: a wrong
// header or length, more than 1 MiB, an unparsable message, a field the
// reader never sets, a string that is not printable ASCII or longer than
// 1 KiB, more than 256 GPUs, warnings or elements in any list, an SM clock
// above 100,000 MHz, clock reasons not marked known.
absl::Status ParseNvmlReaderAnswer(absl::string_view answer, v1::NodeProbe* probe,
                                   std::vector<v1::Gpu>* gpus);

}  // namespace trainlet::topology

#endif  // TRAINLET_TOPOLOGY_NVML_READER_H_
