#include "topology/sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace trainlet::topology {
namespace {

constexpr size_t kMaxNics = 256;
constexpr size_t kMaxPorts = 16;
constexpr size_t kMaxNumaNodes = 1024;
constexpr size_t kMaxNetdevsPerDevice = 16;

bool AllOf(absl::string_view text, bool (*ok)(char)) {
  return std::all_of(text.begin(), text.end(), [ok](char c) { return ok(c); });
}
bool IsHexChar(char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); }
bool IsLowerHexChar(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == ':' || c == '@';
}

// A device or interface name safe to record: short, no '/', no control bytes.
bool IsSafeName(absl::string_view name) {
  return !name.empty() && name.size() <= 64 && AllOf(name, IsNameChar);
}

// "0x10de\n" -> "0x10de" when it is 0x plus `digits` hex digits; else "".
std::string HexId(std::optional<std::string> text, size_t digits) {
  if (!text.has_value()) return "";
  std::string t = absl::AsciiStrToLower(*text);
  if (t.size() != digits + 2 || !absl::StartsWith(t, "0x") ||
      !AllOf(absl::string_view(t).substr(2), IsHexChar)) {
    return "";
  }
  return t;
}

uint32_t HexValue(absl::string_view id) {
  uint32_t v = 0;
  if (!absl::ConsumePrefix(&id, "0x") || !absl::SimpleHexAtoi(id, &v)) return 0;
  return v;
}

int ReadInt(const RootFs& fs, const std::string& path, int unknown) {
  std::optional<std::string> text = fs.Read(path, 64);
  int v = 0;
  if (!text.has_value() || !absl::SimpleAtoi(*text, &v)) return unknown;
  return v;
}

// Sorts "node10" after "node9", "port 2" after "port 1".
bool NumericSuffixLess(const std::string& a, const std::string& b) {
  auto number = [](const std::string& s) {
    size_t i = s.size();
    while (i > 0 && absl::ascii_isdigit(static_cast<unsigned char>(s[i - 1]))) --i;
    int64_t n = 0;
    if (i == s.size() || !absl::SimpleAtoi(absl::string_view(s).substr(i, 9), &n))
      return int64_t{-1};
    return n;
  };
  int64_t na = number(a), nb = number(b);
  return na != nb ? na < nb : a < b;
}

std::string Dirname(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos || slash == 0 ? "/" : std::string(path.substr(0, slash));
}
absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// What sysfs says about one PCI function (resolved path `real`).
struct PciFacts {
  std::string bus_id;
  std::string pci_class, vendor, device;
  int numa_node = -1;
  std::string link_speed;  // NCCL's spelling; "" unknown.
  int link_width = 0;
  int max_width = 0;      // the device's own max_link_width.
  int current_width = 0;  // its current_link_width.
  std::vector<std::string> pci_path;
  std::string root_complex;
};

PciFacts ReadPci(const RootFs& fs, const std::string& real) {
  PciFacts f;
  f.bus_id = std::string(Basename(real));
  f.pci_class = HexId(fs.Read(real + "/class", 64), 6);
  f.vendor = HexId(fs.Read(real + "/vendor", 64), 4);
  f.device = HexId(fs.Read(real + "/device", 64), 4);
  f.numa_node = ReadInt(fs, real + "/numa_node", -1);
  if (f.numa_node < -1 || f.numa_node >= static_cast<int>(kMaxNumaNodes)) f.numa_node = -1;

  // The path to the root complex: parents that are bus ids, up to the first
  // that is not (NCCL's checkBDFFormat rule).
  std::vector<absl::string_view> parts = absl::StrSplit(real, '/', absl::SkipEmpty());
  int i = static_cast<int>(parts.size()) - 2;
  for (; i >= 0 && IsBusId(parts[i]); --i) f.pci_path.emplace_back(parts[i]);
  std::reverse(f.pci_path.begin(), f.pci_path.end());
  if (i >= 0 && absl::StartsWith(parts[i], "pci") && IsSafeName(parts[i])) {
    f.root_complex = std::string(parts[i]);
  }

  // NCCL's link rule: the smaller of the device's and its upstream port's max.
  std::optional<double> speed;
  std::optional<std::string> own_speed = fs.Read(real + "/max_link_speed", 64);
  if (own_speed.has_value()) speed = ParseLinkSpeed(*own_speed);
  f.max_width = ReadInt(fs, real + "/max_link_width", 0);
  f.current_width = ReadInt(fs, real + "/current_link_width", 0);
  int width = f.max_width;
  if (!f.pci_path.empty()) {
    const std::string parent = Dirname(real);
    if (std::optional<std::string> up = fs.Read(parent + "/max_link_speed", 64)) {
      std::optional<double> up_speed = ParseLinkSpeed(*up);
      if (up_speed.has_value()) speed = speed.has_value() ? std::min(*speed, *up_speed) : up_speed;
    }
    int up_width = ReadInt(fs, parent + "/max_link_width", 0);
    if (up_width > 0) width = width > 0 ? std::min(width, up_width) : up_width;
  }
  if (speed.has_value()) f.link_speed = FormatLinkSpeed(*speed);
  f.link_width = width > 0 && width <= 64 ? width : 0;
  return f;
}

bool IsPciSubsystem(const RootFs& fs, const std::string& real) {
  std::optional<std::string> sub = fs.RealPath(real + "/subsystem");
  return sub.has_value() && absl::EndsWith(*sub, "/bus/pci");
}

// The PCI function behind a class device's "device" link, if it is one.
std::optional<PciFacts> PciBehind(const RootFs& fs, const std::string& class_dir) {
  std::optional<std::string> real = fs.RealPath(class_dir + "/device");
  if (!real.has_value() || !IsBusId(Basename(*real)) || !IsPciSubsystem(fs, *real)) {
    return std::nullopt;
  }
  return ReadPci(fs, *real);
}

void SetNicPci(const PciFacts& f, v1::Nic* nic) {
  nic->set_pci_bus_id(f.bus_id);
  nic->set_numa_node(f.numa_node);
  nic->set_pci_class(f.pci_class);
  for (const std::string& p : f.pci_path) nic->add_pci_path(p);
  nic->set_root_complex(f.root_complex);
}

bool IsAccelerator(uint32_t pci_class, uint32_t vendor) {
  const uint32_t base = pci_class >> 16;
  const uint32_t sub = pci_class >> 8;
  if (vendor == 0x10de && base == 0x03) return true;  // NVIDIA display/3D controllers.
  return sub == 0x0302 || base == 0x12;               // 3D controllers, processing accelerators.
}

// "Device Minor: \t 3" from /proc/driver/nvidia/gpus/<bdf>/information.
int MinorFromInformation(const std::optional<std::string>& text) {
  if (!text.has_value()) return -1;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Device Minor:")) continue;
    int minor = -1;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &minor) && minor >= 0 && minor < 4096) {
      return minor;
    }
  }
  return -1;
}

void ScanGpus(const RootFs& sysfs, const RootFs& proc, SysfsScan* scan) {
  std::vector<std::string> devices = sysfs.List("/bus/pci/devices");
  scan->pci_found = sysfs.Exists("/bus/pci/devices");
  scan->container_view = proc.Exists("/driver/nvidia/gpus");
  std::vector<std::string> bus_ids;
  for (const std::string& name : devices) {
    if (IsBusId(name)) bus_ids.push_back(name);
  }
  std::sort(bus_ids.begin(), bus_ids.end());
  for (const std::string& bus_id : bus_ids) {
    const std::string link = "/bus/pci/devices/" + bus_id;
    uint32_t pci_class = HexValue(HexId(sysfs.Read(link + "/class", 64), 6));
    uint32_t vendor = HexValue(HexId(sysfs.Read(link + "/vendor", 64), 4));
    if (!IsAccelerator(pci_class, vendor)) continue;
    std::optional<std::string> real = sysfs.RealPath(link);
    if (!real.has_value() || Basename(*real) != bus_id) continue;
    PciFacts f = ReadPci(sysfs, *real);
    v1::Gpu gpu;
    gpu.set_index(static_cast<int>(scan->gpus.size()));
    gpu.set_pci_bus_id(f.bus_id);
    gpu.set_numa_node(f.numa_node);
    gpu.set_vendor_id(f.vendor);
    gpu.set_device_id(f.device);
    gpu.set_pci_class(f.pci_class);
    gpu.set_name(absl::StrCat(f.vendor, ":", f.device));
    gpu.set_link_speed(f.link_speed);
    gpu.set_link_width(f.link_width);
    for (const std::string& p : f.pci_path) gpu.add_pci_path(p);
    gpu.set_root_complex(f.root_complex);
    gpu.set_minor_number(-1);
    gpu.set_visible_ordinal(-1);
    gpu.set_source("sysfs");
    const bool nvidia = vendor == 0x10de;
    bool in_view = nvidia;
    if (nvidia && scan->container_view) {
      const std::string dir = "/driver/nvidia/gpus/" + bus_id;
      in_view = proc.Exists(dir);
      if (in_view) gpu.set_minor_number(MinorFromInformation(proc.Read(dir + "/information")));
      if (!in_view) ++scan->hidden_by_container;
    }
    gpu.set_visible(in_view);
    if (f.current_width > 0 && f.max_width > 0 && f.current_width < f.max_width) {
      scan->warnings.push_back(absl::StrCat(
          "GPU ", f.bus_id, " runs its PCIe link at x", f.current_width, " of x", f.max_width,
          " (current_link_width < max_link_width): a degraded link or a badly seated card; "
          "check it with `nvidia-smi -q -d PCIE` and report the node"));
    }
    scan->gpus.push_back(std::move(gpu));
  }
}

void ScanInfiniband(const RootFs& sysfs, SysfsScan* scan) {
  for (const std::string& name : sysfs.List("/class/infiniband", kMaxNics)) {
    if (!IsSafeName(name)) continue;
    const std::string dir = "/class/infiniband/" + name;
    v1::Nic nic;
    nic.set_name(name);
    nic.set_kind(v1::Nic::INFINIBAND);
    nic.set_numa_node(-1);
    if (std::optional<PciFacts> f = PciBehind(sysfs, dir)) SetNicPci(*f, &nic);
    std::vector<std::string> ports = sysfs.List(dir + "/ports", kMaxPorts);
    std::sort(ports.begin(), ports.end(), NumericSuffixLess);
    int64_t speed = 0;
    for (const std::string& p : ports) {
      int number = 0;
      if (!absl::SimpleAtoi(p, &number) || number <= 0 || number > 255) continue;
      const std::string pdir = dir + "/ports/" + p;
      v1::IbPort* port = nic.add_ports();
      port->set_port(number);
      auto field = [&](const char* file) {
        std::optional<std::string> text = sysfs.Read(pdir + "/" + file, 128);
        return text.has_value() ? SafeForLog(StripStateNumber(*text), 64) : std::string();
      };
      port->set_state(field("state"));
      port->set_phys_state(field("phys_state"));
      port->set_rate(field("rate"));
      port->set_link_layer(field("link_layer"));
      speed = std::max(speed, ParseIbRateMbps(port->rate()));
      if (port->state() != "ACTIVE") {
        scan->warnings.push_back(absl::StrCat(
            "InfiniBand ", name, " port ", number, " is ",
            port->state().empty() ? "in an unknown state" : port->state(),
            port->phys_state().empty() ? "" : absl::StrCat(" (", port->phys_state(), ")"),
            ": NCCL cannot use it; check its cable and switch port, or leave it out of "
            "NCCL_IB_HCA"));
      }
    }
    nic.set_speed_mbps(speed);
    for (const std::string& netdev : sysfs.List(dir + "/device/net", kMaxNetdevsPerDevice)) {
      if (IsSafeName(netdev)) nic.add_netdevs(netdev);
    }
    scan->nics.push_back(std::move(nic));
  }
}

void ScanNet(const RootFs& sysfs, SysfsScan* scan) {
  for (const std::string& name : sysfs.List("/class/net", kMaxNics)) {
    if (name == "lo" || !IsSafeName(name)) continue;
    const std::string dir = "/class/net/" + name;
    std::optional<std::string> operstate = sysfs.Read(dir + "/operstate", 64);
    if (!operstate.has_value()) continue;  // Not an interface (bonding_masters).
    v1::Nic nic;
    nic.set_name(name);
    nic.set_kind(v1::Nic::NET);
    nic.set_numa_node(-1);
    nic.set_operstate(SafeForLog(*operstate, 32));
    if (std::optional<PciFacts> f = PciBehind(sysfs, dir)) SetNicPci(*f, &nic);
    int64_t speed = 0;
    std::optional<std::string> text = sysfs.Read(dir + "/speed", 64);
    if (text.has_value() && absl::SimpleAtoi(*text, &speed) && speed > 0) {
      nic.set_speed_mbps(speed);
    }
    scan->nics.push_back(std::move(nic));
  }
}

void ScanNuma(const RootFs& sysfs, SysfsScan* scan) {
  std::vector<std::string> names;
  for (const std::string& name : sysfs.List("/devices/system/node", kMaxNumaNodes + 16)) {
    absl::string_view digits = name;
    int id = 0;
    if (absl::ConsumePrefix(&digits, "node") && absl::SimpleAtoi(digits, &id) && id >= 0 &&
        id < static_cast<int>(kMaxNumaNodes)) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end(), NumericSuffixLess);
  for (const std::string& name : names) {
    const std::string dir = "/devices/system/node/" + name;
    v1::NumaNode node;
    int id = 0;
    (void)absl::SimpleAtoi(absl::string_view(name).substr(4), &id);
    node.set_id(id);
    std::optional<std::string> cpulist = sysfs.Read(dir + "/cpulist", 8192);
    if (cpulist.has_value() && IsCpulist(*cpulist)) node.set_cpulist(*cpulist);
    std::optional<std::string> cpumap = sysfs.Read(dir + "/cpumap", 8192);
    if (cpumap.has_value() && IsCpumap(*cpumap)) node.set_cpumap(*cpumap);
    scan->numa_nodes.push_back(std::move(node));
  }
}

}  // namespace

// ---- RootFs

RootFs::RootFs(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string RootFs::Host(absl::string_view path) const { return absl::StrCat(root_, path); }

std::optional<std::string> RootFs::Read(absl::string_view path, size_t max) const {
  // O_NONBLOCK: a FIFO in a hostile or broken tree must not hang the probe.
  int fd = open(Host(path).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  std::string out(max, '\0');
  size_t got = 0;
  while (got < max) {
    ssize_t n = read(fd, out.data() + got, max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return std::nullopt;  // sysfs attributes fail reads with EINVAL, say.
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(got);
  return std::string(absl::StripAsciiWhitespace(out));
}

std::optional<std::string> RootFs::ReadLink(absl::string_view path) const {
  char buffer[PATH_MAX];
  ssize_t n = readlink(Host(path).c_str(), buffer, sizeof(buffer) - 1);
  if (n < 0) return std::nullopt;
  return std::string(buffer, static_cast<size_t>(n));
}

std::optional<std::string> RootFs::RealPath(absl::string_view path) const {
  constexpr int kMaxLinks = 40;  // As the kernel's MAXSYMLINKS.
  std::vector<std::string> done;
  std::deque<std::string> todo;
  for (absl::string_view c : absl::StrSplit(path, '/', absl::SkipEmpty())) todo.emplace_back(c);
  std::string host = root_;
  int links = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.pop_front();
    if (c == ".") continue;
    if (c == "..") {
      if (!done.empty()) {
        host.resize(host.size() - done.back().size() - 1);
        done.pop_back();
      }
      continue;
    }
    const size_t before = host.size();
    absl::StrAppend(&host, "/", c);
    struct stat st;
    if (lstat(host.c_str(), &st) != 0) return std::nullopt;
    if (!S_ISLNK(st.st_mode)) {
      done.push_back(std::move(c));
      continue;
    }
    if (++links > kMaxLinks) return std::nullopt;
    char buffer[PATH_MAX];
    ssize_t n = readlink(host.c_str(), buffer, sizeof(buffer) - 1);
    if (n < 0) return std::nullopt;
    host.resize(before);
    absl::string_view target(buffer, static_cast<size_t>(n));
    if (absl::StartsWith(target, "/")) {
      done.clear();
      host = root_;
    }
    std::vector<absl::string_view> parts = absl::StrSplit(target, '/', absl::SkipEmpty());
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.emplace_front(*it);
  }
  return absl::StrCat("/", absl::StrJoin(done, "/"));
}

std::vector<std::string> RootFs::List(absl::string_view dir, size_t max) const {
  std::vector<std::string> out;
  DIR* d = opendir(Host(dir).c_str());
  if (d == nullptr) return out;
  while (struct dirent* entry = readdir(d)) {
    absl::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (out.size() >= max) break;
    out.emplace_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool RootFs::Exists(absl::string_view path) const {
  struct stat st;
  return stat(Host(path).c_str(), &st) == 0;
}

// ---- Parsers

std::optional<std::string> NormalizeBusId(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  std::vector<absl::string_view> colon = absl::StrSplit(text, ':');
  if (colon.size() != 2 && colon.size() != 3) return std::nullopt;
  absl::string_view domain = colon.size() == 3 ? colon[0] : "0";
  absl::string_view bus = colon[colon.size() - 2];
  std::vector<absl::string_view> dot = absl::StrSplit(colon.back(), '.');
  if (dot.size() != 2) return std::nullopt;
  uint32_t d = 0, b = 0, dev = 0, fn = 0;
  auto hex = [](absl::string_view s, size_t max_digits, uint32_t limit, uint32_t* out) {
    return !s.empty() && s.size() <= max_digits && AllOf(s, IsHexChar) &&
           absl::SimpleHexAtoi(s, out) && *out <= limit;
  };
  if (!hex(domain, 8, 0xffff, &d) || !hex(bus, 2, 0xff, &b) || !hex(dot[0], 2, 0x1f, &dev) ||
      !hex(dot[1], 1, 7, &fn)) {
    return std::nullopt;
  }
  return absl::StrFormat("%04x:%02x:%02x.%x", d, b, dev, fn);
}

bool IsBusId(absl::string_view t) {
  if (t.size() != 12 || t[4] != ':' || t[7] != ':' || t[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    if (!IsLowerHexChar(t[i])) return false;
  }
  return true;
}

std::optional<double> ParseLinkSpeed(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  absl::string_view number = text.substr(0, text.find(' '));
  absl::string_view rest = text.substr(number.size());
  rest = absl::StripAsciiWhitespace(rest);
  if (!absl::ConsumePrefix(&rest, "GT/s")) return std::nullopt;
  rest = absl::StripAsciiWhitespace(rest);
  if (!rest.empty() && rest != "PCIe") return std::nullopt;
  double gts = 0;
  if (number.empty() || number.size() > 6 || !absl::SimpleAtod(number, &gts)) return std::nullopt;
  if (FormatLinkSpeed(gts).empty()) return std::nullopt;
  return gts;
}

std::string FormatLinkSpeed(double gts) {
  for (double known : {2.5, 5.0, 8.0, 16.0, 32.0, 64.0}) {
    if (std::fabs(gts - known) < 0.01) return absl::StrFormat("%.1f GT/s PCIe", known);
  }
  return "";
}

std::string StripStateNumber(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  size_t colon = text.find(':');
  if (colon != absl::string_view::npos &&
      AllOf(text.substr(0, colon), [](char c) { return absl::ascii_isdigit(c) != 0; })) {
    text = absl::StripAsciiWhitespace(text.substr(colon + 1));
  }
  return std::string(text);
}

int64_t ParseIbRateMbps(absl::string_view text) {
  std::vector<absl::string_view> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (words.size() < 2 || words[1] != "Gb/sec") return 0;
  double gbps = 0;
  if (!absl::SimpleAtod(words[0], &gbps) || gbps <= 0 || gbps > 1e6) return 0;
  return static_cast<int64_t>(std::llround(gbps * 1000));
}

bool IsCpumap(absl::string_view text) {
  if (text.empty() || text.size() > 8192) return false;
  for (absl::string_view group : absl::StrSplit(text, ',')) {
    if (group.empty() || group.size() > 8 || !AllOf(group, IsHexChar)) return false;
  }
  return true;
}

bool IsCpulist(absl::string_view text) {
  if (text.size() > 8192) return false;
  if (text.empty()) return true;
  for (absl::string_view range : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
    if (ends.size() > 2) return false;
    for (absl::string_view e : ends) {
      if (e.empty() || e.size() > 7 ||
          !AllOf(e, [](char c) { return absl::ascii_isdigit(c) != 0; })) {
        return false;
      }
    }
  }
  return true;
}

std::string NcclArch(absl::string_view machine) {
  if (machine == "aarch64" || machine == "arm64") return "arm64";
  if (absl::StartsWith(machine, "ppc64")) return "ppc64";
  if (machine == "x86_64" || machine == "amd64") return "x86_64";
  return IsSafeName(machine) ? std::string(machine) : "";
}

// ---- Scans

SysfsScan ScanSysfs(const RootFs& sysfs, const RootFs& proc) {
  SysfsScan scan;
  ScanGpus(sysfs, proc, &scan);
  ScanInfiniband(sysfs, &scan);
  ScanNet(sysfs, &scan);
  ScanNuma(sysfs, &scan);
  std::map<int, const v1::NumaNode*> by_id;
  for (const v1::NumaNode& n : scan.numa_nodes) by_id[n.id()] = &n;
  for (v1::Gpu& gpu : scan.gpus) {
    auto it = by_id.find(gpu.numa_node());
    if (it != by_id.end()) gpu.set_cpu_affinity(it->second->cpumap());
  }
  return scan;
}

void ReadHostFacts(const RootFs& proc, const std::string& shm_path, v1::NodeProbe* probe) {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) probe->set_hostname(SafeForLog(host, 253));

  std::optional<std::string> boot_id = proc.Read("/sys/kernel/random/boot_id", 64);
  if (boot_id.has_value() && boot_id->size() == 36 &&
      AllOf(*boot_id, [](char c) { return IsLowerHexChar(c) || c == '-'; })) {
    probe->set_boot_id(*boot_id);
  }
  std::optional<std::string> ipc = proc.ReadLink("/self/ns/ipc");
  if (ipc.has_value()) {
    absl::string_view inode = *ipc;
    if (absl::ConsumePrefix(&inode, "ipc:[") && absl::ConsumeSuffix(&inode, "]") &&
        !inode.empty() && inode.size() <= 20 &&
        AllOf(inode, [](char c) { return absl::ascii_isdigit(c) != 0; })) {
      probe->set_ipc_namespace(*ipc);
    }
  }

  struct statvfs vfs;
  if (!shm_path.empty() && statvfs(shm_path.c_str(), &vfs) == 0) {
    probe->set_shm_bytes(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize);
  }
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
    probe->set_memlock_bytes(
        limit.rlim_cur == RLIM_INFINITY
            ? -1
            : static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, INT64_MAX)));
  }

  struct utsname uts;
  if (uname(&uts) == 0) probe->set_cpu_arch(NcclArch(uts.machine));
  // The first processor's block is at the top; its first few KiB are enough.
  std::optional<std::string> cpuinfo = proc.Read("/cpuinfo", 8192);
  if (!cpuinfo.has_value()) return;
  bool vendor = false, family = false, model = false;
  for (absl::string_view line : absl::StrSplit(*cpuinfo, '\n')) {
    if (line.empty()) break;  // End of the first processor's block.
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    int number = 0;
    if (key == "vendor_id" && !vendor && IsSafeName(value)) {
      probe->set_cpu_vendor(std::string(value));
      vendor = true;
    } else if (key == "cpu family" && !family && absl::SimpleAtoi(value, &number)) {
      probe->set_cpu_family(number);
      family = true;
    } else if (key == "model" && !model && absl::SimpleAtoi(value, &number)) {
      probe->set_cpu_model(number);
      model = true;
    }
  }
}

int CountNvidiaDevices(const std::string& dev_root) {
  int count = 0;
  const RootFs dev(dev_root);
  for (const std::string& name : dev.List("/", 1024)) {
    absl::string_view n = name;
    if (absl::ConsumePrefix(&n, "nvidia") && !n.empty() &&
        std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      ++count;
    }
  }
  return count;
}

}  // namespace trainlet::topology
