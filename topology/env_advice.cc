#include "topology/env_advice.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/net_interfaces.h"
#include "topology/sysfs.h"

namespace trainlet::topology {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string Size(uint64_t bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0) return absl::StrCat(bytes / kGiB, " GiB");
  if (bytes >= kMiB) return absl::StrCat(bytes / kMiB, " MiB");
  if (bytes >= 1024) return absl::StrCat(bytes / 1024, " KiB");
  return absl::StrCat(bytes, " bytes");
}

bool IsShellName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool HasInfinibandDevice(const v1::NodeProbe& probe) {
  return std::any_of(probe.nics().begin(), probe.nics().end(),
                     [](const v1::Nic& n) { return n.kind() == v1::Nic::INFINIBAND; });
}

std::string SocketInterface(const v1::NodeProbe& probe, const EnvContext& context) {
  if (!context.socket_interface.empty()) return context.socket_interface;
  if (context.advertise_addr.empty()) return "";
  for (const v1::Nic& nic : probe.nics()) {
    if (nic.kind() != v1::Nic::NET) continue;
    for (const std::string& addr : nic.addrs()) {
      if (addr == context.advertise_addr) return nic.name();
    }
  }
  return "";
}

// "mlx5_0:1,mlx5_1:1" for the ACTIVE ports of the rail devices.
std::string IbHcaList(const v1::NodeProbe& probe) {
  auto active_ports = [&](const std::string& layer) {
    std::vector<std::string> out;
    for (const v1::Nic& nic : probe.nics()) {
      if (nic.kind() != v1::Nic::INFINIBAND) continue;
      for (const v1::IbPort& port : nic.ports()) {
        if (port.state() == "ACTIVE" && port.link_layer() == layer) {
          out.push_back(absl::StrCat(nic.name(), ":", port.port()));
        }
      }
    }
    return out;
  };
  std::vector<std::string> ports = active_ports("InfiniBand");
  if (ports.empty()) ports = active_ports("Ethernet");
  return absl::StrJoin(ports, ",");
}

}  // namespace

std::vector<std::string> PodLimitWarnings(const v1::NodeProbe& probe) {
  std::vector<std::string> out;
  if (probe.shm_bytes() > 0 && probe.shm_bytes() < kGiB) {
    out.push_back(absl::StrCat(
        "/dev/shm is ", Size(probe.shm_bytes()),
        " (under 1 GiB): NCCL's shared-memory transport fails with \"failed to extend "
        "/dev/shm/nccl-...\" and DataLoader workers with a bus error; mount an emptyDir with "
        "medium: Memory at /dev/shm (a sizeLimit of a few GiB)"));
  }
  const bool rdma_or_gpu = probe.gpus_size() > 0 || HasInfinibandDevice(probe);
  if (rdma_or_gpu && probe.memlock_bytes() >= 0) {
    out.push_back(absl::StrCat(
        "the memlock limit (RLIMIT_MEMLOCK) is ",
        Size(static_cast<uint64_t>(probe.memlock_bytes())),
        ": InfiniBand/RoCE memory registration and pinned host memory fail or fall back; make "
        "it unlimited (the container runtime's default ulimits, e.g. containerd's "
        "LimitMEMLOCK=infinity or docker --ulimit memlock=-1, or the IPC_LOCK capability)"));
  }
  return out;
}

bool NcclAdviceApplies(const v1::NodeProbe& probe) {
  return std::any_of(probe.gpus().begin(), probe.gpus().end(),
                     [](const v1::Gpu& g) { return g.visible(); });
}

std::string JobSocketInterface(const std::vector<std::string>& job_addrs) {
  for (const std::string& addr : job_addrs) {
    in6_addr bytes;
    if (inet_pton(AF_INET, addr.c_str(), &bytes) != 1 &&
        inet_pton(AF_INET6, addr.c_str(), &bytes) != 1) {
      continue;
    }
    return InterfaceRoutingTo(addr);
  }
  return "";
}

EnvAdvice AdviseEnv(const v1::NodeProbe& probe, const EnvContext& context) {
  EnvAdvice advice;
  advice.warnings = PodLimitWarnings(probe);
  if (!NcclAdviceApplies(probe)) {
    advice.notes.push_back(
        "no GPU visible: no NCCL variable advised (nothing uses NCCL without one)");
    return advice;
  }
  auto advise = [&](const std::string& name, const std::string& value, const std::string& why) {
    auto it = context.user_env.find(name);
    if (it != context.user_env.end()) {
      advice.notes.push_back(absl::StrCat(name, " left as the user set it (\"",
                                          SafeForLog(it->second, 64), "\"); the probe suggests \"",
                                          SafeForLog(value, 64), "\" (", why, ")"));
      return;
    }
    advice.vars.push_back({name, value});
  };

  const std::string ifname = SocketInterface(probe, context);
  if (!ifname.empty()) {
    advise("NCCL_SOCKET_IFNAME", "=" + ifname,
           "the interface that carries this node's address to its peers");
  } else if (!context.advertise_addr.empty()) {
    advice.notes.push_back(absl::StrCat("no interface of this pod carries ",
                                        SafeForLog(context.advertise_addr, 64),
                                        ": NCCL_SOCKET_IFNAME not advised"));
  }
  const std::string hca = IbHcaList(probe);
  if (!hca.empty()) advise("NCCL_IB_HCA", "=" + hca, "the ACTIVE ports of the rail HCAs");
  advise("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "CUDA ordinals in the bus order NVML uses");
  if (!context.nccl_hostid.empty()) {
    advise("NCCL_HOSTID", context.nccl_hostid, "pods of this job share the node (equal boot_id)");
    advice.notes.push_back(
        "NCCL_HOSTID makes co-located pods one host for NCCL; its SHM and P2P transports then "
        "need the pods to share the IPC namespace (hostIPC) and see each other's GPUs");
  }
  return advice;
}

std::string InterfaceRoutingTo(const std::string& numeric_addr) {
  sockaddr_storage dest = {};
  socklen_t dest_len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&dest);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&dest);
  if (inet_pton(AF_INET, numeric_addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(9);  // Any port: nothing is sent.
    dest_len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, numeric_addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(9);
    dest_len = sizeof(sockaddr_in6);
  } else {
    return "";
  }
  int fd = socket(dest.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_storage local = {};
  socklen_t local_len = sizeof(local);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&dest), dest_len) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0;
  close(fd);
  if (!ok) return "";
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      local.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
  if (inet_ntop(local.ss_family, addr, text, sizeof(text)) == nullptr) return "";
  for (const InterfaceAddress& a : ListInterfaceAddresses()) {
    if (a.addr == text) return a.interface;
  }
  return "";
}

std::string ShellQuote(absl::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string FormatEnvAdvice(const EnvAdvice& advice) {
  std::string out;
  for (const EnvVar& var : advice.vars) {
    if (!IsShellName(var.name)) continue;
    absl::StrAppend(&out, "export ", var.name, "=", ShellQuote(var.value), "\n");
  }
  for (const std::string& w : advice.warnings) {
    absl::StrAppend(&out, "# warning: ", SafeForLog(w, 1024), "\n");
  }
  for (const std::string& n : advice.notes) {
    absl::StrAppend(&out, "# note: ", SafeForLog(n, 1024), "\n");
  }
  return out;
}

std::map<std::string, std::string> NcclConfFileVars(const std::map<std::string, std::string>& env,
                                                    const std::string& root) {
  std::vector<std::string> files;
  auto conf = env.find("NCCL_CONF_FILE");
  auto home = env.find("HOME");
  if (conf != env.end() && !conf->second.empty()) {
    files.push_back(conf->second);
  } else if (home != env.end() && !home->second.empty()) {
    files.push_back(home->second + "/.nccl.conf");
  }
  files.push_back("/etc/nccl.conf");
  std::map<std::string, std::string> vars;
  const RootFs fs(root.empty() ? "/" : root);
  for (const std::string& file : files) {
    if (file.empty() || file[0] != '/') continue;
    std::optional<std::string> text = fs.Read(file, 64 * 1024);
    if (!text.has_value()) continue;
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line[0] == '#') continue;
      const size_t eq = line.find('=');
      if (eq == absl::string_view::npos || eq == 0) continue;
      std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
      vars.emplace(key, std::string(absl::StripAsciiWhitespace(line.substr(eq + 1))));
    }
  }
  return vars;
}

}  // namespace trainlet::topology
