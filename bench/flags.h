// The benchmarks' command-line parsing: `--name=value` only. Header-only;
// shared by bench/coordinator_load.cc, bench/rendezvous_scale.cc and
// bench/topology_probe.cc.
#ifndef TRAINLET_BENCH_FLAGS_H_
#define TRAINLET_BENCH_FLAGS_H_

#include <cstring>
#include <string>

namespace trainlet::bench {

// True when `arg` is `name=...`, with what follows the `=` in *value.
inline bool Flag(const char* arg, const char* name, std::string* value) {
  const size_t len = std::strlen(name);
  if (std::strncmp(arg, name, len) != 0 || arg[len] != '=') return false;
  *value = arg + len + 1;
  return true;
}

}  // namespace trainlet::bench

#endif  // TRAINLET_BENCH_FLAGS_H_
