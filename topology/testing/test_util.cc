#include "topology/testing/test_util.h"

#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/golden.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace trainlet::topology::testing {

void ExpectGolden(const std::string& name, const std::string& actual) {
  trainlet::testing::ExpectGoldenFile(TRAINLET_TOPOLOGY_TESTDATA, name, actual);
}

ProbeOptions FixtureTree::Options() const {
  ProbeOptions options;
  options.sysfs_root = builder_.sys();
  options.proc_root = builder_.proc();
  options.dev_root = builder_.dev();
  options.shm_path = dir_.path();
  options.nvml.library = "";
  options.nccl_library = "";
  return options;
}

v1::NodeProbe Stable(v1::NodeProbe probe) {
  probe.clear_hostname();
  probe.clear_shm_bytes();
  probe.clear_memlock_bytes();
  probe.clear_probe_micros();
  probe.set_cpu_arch("x86_64");
  google::protobuf::RepeatedPtrField<std::string> kept;
  for (const std::string& w : probe.warnings()) {
    if (absl::StartsWith(w, "/dev/shm is") || absl::StartsWith(w, "the memlock limit")) continue;
    *kept.Add() = w;
  }
  probe.mutable_warnings()->Swap(&kept);
  return probe;
}

std::string ProbeJson(const v1::NodeProbe& probe) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(probe, &out, options);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

}  // namespace trainlet::topology::testing
