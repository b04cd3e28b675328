#include "topology/testing/fake_read_nvml.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "topology/testing/sysfs_builder.h"

namespace trainlet::topology::testing {

ReadNvmlFn FakeH100Nvml(const std::vector<std::string>& bus_ids) {
  return [bus_ids](const NvmlOptions&, v1::NodeProbe* probe, std::vector<v1::Gpu>* gpus) {
    probe->mutable_nvml()->set_status(v1::Source::OK);
    probe->mutable_nvml()->set_version("550.54.15");
    probe->set_cuda_driver_version("12040");
    for (size_t i = 0; i < bus_ids.size(); ++i) {
      const std::vector<std::string>& node = DgxGpuBusIds();
      const size_t n = std::find(node.begin(), node.end(), bus_ids[i]) - node.begin();
      v1::Gpu gpu;
      gpu.set_index(static_cast<int>(i));
      gpu.set_uuid(absl::StrFormat("GPU-00000000-0000-0000-0000-%012x", n));
      gpu.set_name("NVIDIA H100 80GB HBM3");
      gpu.set_pci_bus_id("0000" + absl::AsciiStrToUpper(bus_ids[i]));  // NVML's busId.
      gpu.set_memory_bytes(85520809984ull);
      gpu.set_sm(90);
      gpu.set_vendor_id("0x10de");
      gpu.set_device_id("0x2330");
      gpu.set_link_speed("32.0 GT/s PCIe");
      gpu.set_link_width(16);
      gpu.set_cpu_affinity(n < 4 ? "0000,00000000,00ffffff,ffffffff"
                                 : "ffff,ffffffff,ff000000,00000000");
      v1::NvLink* link = gpu.add_nvlinks();
      link->set_target_bus_id("fffffff:ffff:ff");
      link->set_count(18);
      link->set_target_class("0x068000");
      gpu.mutable_health()->set_ecc_known(true);
      gpu.mutable_health()->set_ecc_enabled(true);
      gpu.set_minor_number(static_cast<int>(n));
      gpu.set_source("nvml");
      gpus->push_back(std::move(gpu));
    }
  };
}

ReadNvmlFn AbsentNvml() {
  return [](const NvmlOptions&, v1::NodeProbe* probe, std::vector<v1::Gpu>*) {
    probe->mutable_nvml()->set_status(v1::Source::ABSENT);
    probe->mutable_nvml()->set_reason(
        "dlopen libnvidia-ml.so.1: libnvidia-ml.so.1: cannot open shared object file: No such "
        "file or directory");
  };
}

}  // namespace trainlet::topology::testing
