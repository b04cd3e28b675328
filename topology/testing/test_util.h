// Helpers shared by the topology/ unit tests: golden files, a probe of a
// fixture tree, and the probe made independent of the machine running the
// test. Test-only; thread-compatible.
#ifndef TRAINLET_TOPOLOGY_TESTING_TEST_UTIL_H_
#define TRAINLET_TOPOLOGY_TESTING_TEST_UTIL_H_

#include <string>

#include "topology/probe.h"
#include "topology/testing/sysfs_builder.h"
#include "trainlet/v1/topology.pb.h"

namespace trainlet::topology::testing {

// Compares `actual` with topology/testdata/<name> (a gtest expectation);
// TRAINLET_UPDATE_GOLDEN=1 rewrites the file instead.
void ExpectGolden(const std::string& name, const std::string& actual);

// A temp dir with a SysfsBuilder over it, and ProbeOptions reading it:
// sysfs, proc and dev from the tree, /dev/shm = the temp dir, NVML and NCCL
// not asked (tests inject read_nvml), empty environment.
class FixtureTree {
 public:
  FixtureTree() : builder_(dir_.path()) {}
  SysfsBuilder& builder() { return builder_; }
  ProbeOptions Options() const;

 private:
  ScopedTempDir dir_;
  SysfsBuilder builder_;
};

// The probe without what depends on the machine that runs the test:
// hostname, shm_bytes, memlock_bytes and probe_micros cleared, cpu_arch set
// to x86_64, and the /dev/shm and memlock warnings removed.
v1::NodeProbe Stable(v1::NodeProbe probe);

// The probe's JSON as `trainlet probe --format=json` prints it (proto field
// names, every field, indented).
std::string ProbeJson(const v1::NodeProbe& probe);

}  // namespace trainlet::topology::testing

#endif  // TRAINLET_TOPOLOGY_TESTING_TEST_UTIL_H_
