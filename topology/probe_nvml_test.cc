// The probe with the real NVML reader (nvml.cc, dlopen) against the fake
// libnvidia-ml.so.1 (testing/fake_nvml.cc, built by nvml.cmake) and the
// synthetic sysfs trees: the merge by bus id end to end. Built only where
// both halves are in the tree (topology/CMakeLists.txt).
#include <stdlib.h>

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "topology/nvml_reader.h"
#include "topology/probe.h"
#include "topology/testing/sysfs_builder.h"
#include "topology/testing/test_util.h"

namespace trainlet::topology {
namespace {

using testing::DgxGpuBusIds;
using testing::FixtureTree;
using ::testing::HasSubstr;

ProbeOptions WithShim(const FixtureTree& tree, const std::string& fixture) {
  setenv("FAKE_NVML_FIXTURE", (std::string(TOPOLOGY_TESTDATA) + "/" + fixture).c_str(), 1);
  ProbeOptions options = tree.Options();
  options.nvml.library = FAKE_NVML_PATH;
  return options;
}

TEST(ProbeNodeWithNvml, DgxShimMergesWithSysfs) {
  FixtureTree tree;
  testing::BuildDgxH100(tree.builder());
  v1::NodeProbe probe = ProbeNode(WithShim(tree, "nvml_h100x8.json"));
  ASSERT_EQ(probe.nvml().status(), v1::Source::OK) << probe.nvml().reason();
  ASSERT_EQ(probe.gpus_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const v1::Gpu& g = probe.gpus(i);
    EXPECT_EQ(g.pci_bus_id(), DgxGpuBusIds()[i]);
    EXPECT_EQ(g.source(), "nvml+sysfs");
    EXPECT_EQ(g.uuid(), "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(i));
    EXPECT_EQ(g.numa_node(), i < 4 ? 0 : 1);
    EXPECT_EQ(g.pci_path_size(), 3);
    EXPECT_EQ(g.visible_ordinal(), i);
  }
  EXPECT_FALSE(probe.gpus(0).nvlinks().empty());
  EXPECT_EQ(probe.visible_gpu_count(), 8);
}

TEST(ProbeNodeWithNvml, CloudVmShimMergesWithSysfs) {
  FixtureTree tree;
  testing::BuildCloudVm(tree.builder());
  v1::NodeProbe probe = ProbeNode(WithShim(tree, "nvml_vm_1gpu.json"));
  ASSERT_EQ(probe.nvml().status(), v1::Source::OK) << probe.nvml().reason();
  ASSERT_EQ(probe.gpus_size(), 1);
  EXPECT_EQ(probe.gpus(0).source(), "nvml+sysfs");
  EXPECT_EQ(probe.gpus(0).name(), "NVIDIA A10G");
  EXPECT_EQ(probe.gpus(0).numa_node(), -1);
  EXPECT_EQ(probe.gpus(0).root_complex(), "pci0000:00");
}

// What the static build's probe reads (the NVML reader) is what a dynamic
// build's reads (in-process), GPU health included.
TEST(ProbeNodeWithNvml, ReaderAndInProcess_SameProbe) {
  if (!NvmlReaderBuiltIn()) GTEST_SKIP() << "this build carries no NVML reader";
  for (const char* fixture : {"nvml_h100x8.json", "nvml_unhealthy.json"}) {
    SCOPED_TRACE(fixture);
    FixtureTree tree;
    testing::BuildDgxH100(tree.builder());
    ProbeOptions options = WithShim(tree, fixture);
    options.nvml.via = NvmlOptions::Via::kInProcess;
    v1::NodeProbe in_process = ProbeNode(options);
    options.nvml.via = NvmlOptions::Via::kReader;
    v1::NodeProbe reader = ProbeNode(options);
    ASSERT_EQ(reader.nvml().status(), v1::Source::OK) << reader.nvml().reason();
    in_process.clear_probe_micros();
    reader.clear_probe_micros();
    std::string diff;
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(in_process, reader)) << diff;
    EXPECT_GT(reader.gpus_size(), 0);
  }
}

TEST(ProbeNodeWithNvml, AMissingLibraryIsDataAndSysfsStillCounts) {
  FixtureTree tree;
  testing::BuildDgxH100(tree.builder());
  ProbeOptions options = tree.Options();
  options.nvml.library = "/nonexistent/libnvidia-ml.so.1";
  v1::NodeProbe probe = ProbeNode(options);
  EXPECT_EQ(probe.nvml().status(), v1::Source::ABSENT);
  EXPECT_EQ(probe.gpus_size(), 8);
  EXPECT_THAT(probe.warnings(0), HasSubstr("the GPU list comes from sysfs"));
}

}  // namespace
}  // namespace trainlet::topology
