#include "topology/visibility.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::topology {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Env = std::map<std::string, std::string>;

// `n` NVIDIA GPUs in the container's view; with UUIDs GPU-aaaaaaaN-... when
// `uuids`.
v1::NodeProbe Gpus(int n, bool uuids = true) {
  v1::NodeProbe probe;
  for (int i = 0; i < n; ++i) {
    v1::Gpu* g = probe.add_gpus();
    g->set_index(i);
    g->set_vendor_id("0x10de");
    g->set_visible(true);
    if (uuids) g->set_uuid(absl::StrFormat("GPU-%08x-1111-2222-3333-444444444444", 0xaaaaaaa0 + i));
  }
  return probe;
}

// The visible GPUs' indices in CUDA ordinal order.
std::vector<int> Visible(v1::NodeProbe probe, const Env& env) {
  ApplyVisibility(env, &probe);
  std::vector<int> out(probe.visible_gpu_count(), -1);
  for (const v1::Gpu& g : probe.gpus()) {
    if (!g.visible()) {
      EXPECT_EQ(g.visible_ordinal(), -1);
      continue;
    }
    EXPECT_LT(g.visible_ordinal(), probe.visible_gpu_count());
    out[g.visible_ordinal()] = g.index();
  }
  return out;
}

TEST(ApplyVisibility, NoVariablesMeansTheContainersView) {
  EXPECT_THAT(Visible(Gpus(4), {}), ElementsAre(0, 1, 2, 3));
  v1::NodeProbe probe = Gpus(4);
  probe.mutable_gpus(1)->set_visible(false);  // Not in the container.
  EXPECT_THAT(Visible(probe, {}), ElementsAre(0, 2, 3));
  v1::NodeProbe other = Gpus(2);
  other.mutable_gpus(0)->set_vendor_id("0x1002");  // Never CUDA's.
  EXPECT_THAT(Visible(other, {}), ElementsAre(1));
  ApplyVisibility({}, &probe);
  EXPECT_EQ(probe.visibility_note(), "3 GPUs in this container's view");
}

TEST(ApplyVisibility, CudaOrdinalsFollowTheListOrder) {
  EXPECT_THAT(Visible(Gpus(8), {{"CUDA_VISIBLE_DEVICES", "3,1"}}), ElementsAre(3, 1));
  EXPECT_THAT(Visible(Gpus(8), {{"CUDA_VISIBLE_DEVICES", " 2 , 5 ,7"}}), ElementsAre(2, 5, 7));
  EXPECT_THAT(Visible(Gpus(8), {{"CUDA_VISIBLE_DEVICES", "1gpu,2ampere"}}), ElementsAre(1, 2));
  v1::NodeProbe probe = Gpus(8);
  ApplyVisibility({{"CUDA_VISIBLE_DEVICES", "0,1"}}, &probe);
  EXPECT_THAT(probe.visibility_note(), HasSubstr("2 of 8 GPUs"));
  EXPECT_THAT(probe.visibility_note(), HasSubstr("CUDA_VISIBLE_DEVICES=\"0,1\""));
}

TEST(ApplyVisibility, CudaNoneAndInvalidEntries) {
  for (const char* none : {"", "-1", "none", "void", "NoDevFiles", " "}) {
    EXPECT_TRUE(Visible(Gpus(8), {{"CUDA_VISIBLE_DEVICES", none}}).empty()) << none;
  }
  EXPECT_THAT(Visible(Gpus(8), {{"CUDA_VISIBLE_DEVICES", "0,1,-1,2"}}), ElementsAre(0, 1));
  EXPECT_THAT(Visible(Gpus(8), {{"CUDA_VISIBLE_DEVICES", "0,x,2"}}), ElementsAre(0));
  EXPECT_THAT(Visible(Gpus(2), {{"CUDA_VISIBLE_DEVICES", "1,5,0"}}), ElementsAre(1));
  EXPECT_TRUE(Visible(Gpus(8), {{"CUDA_VISIBLE_DEVICES", "0,1,0"}}).empty());
  EXPECT_TRUE(Visible(Gpus(0), {{"CUDA_VISIBLE_DEVICES", "0"}}).empty());
}

TEST(ApplyVisibility, CudaUuidsAndPrefixes) {
  EXPECT_THAT(Visible(Gpus(4), {{"CUDA_VISIBLE_DEVICES",
                                 "GPU-aaaaaaa2-1111-2222-3333-444444444444,GPU-aaaaaaa0"}}),
              ElementsAre(2, 0));
  // An ambiguous prefix, an unknown UUID and an ordinal all end the list.
  EXPECT_THAT(Visible(Gpus(4), {{"CUDA_VISIBLE_DEVICES", "GPU-aaaaaaa1,GPU-aaaa"}}),
              ElementsAre(1));
  EXPECT_THAT(Visible(Gpus(4), {{"CUDA_VISIBLE_DEVICES", "GPU-aaaaaaa1,GPU-ffff,GPU-aaaaaaa2"}}),
              ElementsAre(1));
  EXPECT_THAT(Visible(Gpus(4), {{"CUDA_VISIBLE_DEVICES", "GPU-aaaaaaa3,1"}}), ElementsAre(3));
  EXPECT_TRUE(Visible(Gpus(4), {{"CUDA_VISIBLE_DEVICES", "GPU-aaaaaaa3,GPU-aaaaaaa3"}}).empty());
  // Without UUIDs (no NVML), by count, and said so.
  v1::NodeProbe probe = Gpus(4, /*uuids=*/false);
  EXPECT_THAT(Visible(probe, {{"CUDA_VISIBLE_DEVICES", "GPU-x,GPU-y"}}), ElementsAre(0, 1));
  ApplyVisibility({{"CUDA_VISIBLE_DEVICES", "MIG-1234"}}, &probe);
  EXPECT_EQ(probe.visible_gpu_count(), 1);
  EXPECT_THAT(probe.visibility_note(), HasSubstr("by count"));
}

TEST(ApplyVisibility, NvidiaVisibleDevices) {
  EXPECT_THAT(Visible(Gpus(4), {{"NVIDIA_VISIBLE_DEVICES", "all"}}), ElementsAre(0, 1, 2, 3));
  // The runtime's own settings keep what the container can open: "void" is
  // what CDI injection leaves (the GPU Operator with CDI), a path what the
  // device plugin's volume-mounts strategy sets.
  for (const char* kept : {"", "none", "void", "/var/run/nvidia-container-devices"}) {
    EXPECT_THAT(Visible(Gpus(4), {{"NVIDIA_VISIBLE_DEVICES", kept}}), ElementsAre(0, 1, 2, 3))
        << kept;
  }
  // The runtime already applied it: the view is the list.
  EXPECT_THAT(Visible(Gpus(2), {{"NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b"}}), ElementsAre(0, 1));
  EXPECT_THAT(Visible(Gpus(2), {{"NVIDIA_VISIBLE_DEVICES", "0,1,2"}}), ElementsAre(0, 1));
  // A node-wide view: entries pick GPUs by index or UUID...
  EXPECT_THAT(Visible(Gpus(8), {{"NVIDIA_VISIBLE_DEVICES", "5,2"}}), ElementsAre(2, 5));
  EXPECT_THAT(
      Visible(Gpus(8), {{"NVIDIA_VISIBLE_DEVICES", "GPU-AAAAAAA6-1111-2222-3333-444444444444"}}),
      ElementsAre(6));
  // ...or, when one names none of them, the first ones by count.
  EXPECT_THAT(Visible(Gpus(8), {{"NVIDIA_VISIBLE_DEVICES", "GPU-zz,GPU-yy"}}), ElementsAre(0, 1));
  // Both: CUDA never reads NVIDIA_VISIBLE_DEVICES; its ordinals index every
  // GPU it can open.
  v1::NodeProbe both = Gpus(8);
  ApplyVisibility({{"NVIDIA_VISIBLE_DEVICES", "4,5"}, {"CUDA_VISIBLE_DEVICES", "1,0"}}, &both);
  EXPECT_EQ(both.visible_gpu_count(), 2);
  EXPECT_TRUE(both.gpus(1).visible());
  EXPECT_EQ(both.gpus(1).visible_ordinal(), 0);
  EXPECT_EQ(both.gpus(0).visible_ordinal(), 1);
  EXPECT_THAT(both.visibility_note(), HasSubstr("not applied"));
  EXPECT_THAT(Visible(Gpus(8), {{"NVIDIA_VISIBLE_DEVICES", "void"}, {"CUDA_VISIBLE_DEVICES", "0"}}),
              ElementsAre(0));
}

TEST(ApplyVisibility, NoteEscapesAndBoundsTheValue) {
  v1::NodeProbe probe = Gpus(8);
  ApplyVisibility({{"CUDA_VISIBLE_DEVICES", "0\n" + std::string(500, 'x')}}, &probe);
  EXPECT_THAT(probe.visibility_note(), HasSubstr("\\n"));
  EXPECT_LT(probe.visibility_note().size(), 200u);
}

}  // namespace
}  // namespace trainlet::topology
