#include "topology/nccl_xml.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "topology/sysfs.h"

namespace trainlet::topology {
namespace {

constexpr int kMaxAttrs = 16;      // NCCL's MAX_ATTR_COUNT.
constexpr size_t kMaxStr = 255;    // MAX_STR_LEN - 1.
constexpr int kMaxChildren = 640;  // MAX_SUBS.
constexpr int kMaxNodes = 256;     // NCCL_TOPO_XML_MAX_NODES.
constexpr char kNvSwitchId[] = "fffffff:ffff:ff";

// ---- Validation shared by the writer and the linter.

bool IsHexId(absl::string_view v, size_t digits) {
  if (v.size() != digits + 2 || !absl::StartsWith(v, "0x")) return false;
  return std::all_of(v.begin() + 2, v.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsPlainWord(absl::string_view v) {
  return !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool IsInt(absl::string_view v) {
  int n = 0;
  return absl::SimpleAtoi(v, &n);
}

// ---- The writer's tree.

struct Element;
int CountElements(const Element& e);

struct Element {
  std::string tag;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<std::unique_ptr<Element>> children;

  Element* Add(std::string child_tag) {
    children.push_back(std::make_unique<Element>());
    children.back()->tag = std::move(child_tag);
    return children.back().get();
  }
  void Set(const char* name, std::string value) { attrs.emplace_back(name, std::move(value)); }
};

int CountElements(const Element& e) {
  int n = 1;
  for (const auto& c : e.children) n += CountElements(*c);
  return n;
}

const std::string* BusIdOf(const Element& e) {
  for (const auto& [name, value] : e.attrs) {
    if (name == "busid") return &value;
  }
  return nullptr;
}

// Children in bus id order, as NCCL keeps the PCI devices it finds (its issue
// #820: the order decides which NIC a GPU's channel is given first).
void SortByBusId(Element* e) {
  std::stable_sort(e->children.begin(), e->children.end(),
                   [](const std::unique_ptr<Element>& a, const std::unique_ptr<Element>& b) {
                     const std::string* x = BusIdOf(*a);
                     const std::string* y = BusIdOf(*b);
                     return x != nullptr && y != nullptr && *x < *y;
                   });
  for (auto& child : e->children) SortByBusId(child.get());
}

void Write(const Element& e, int depth, std::string* out) {
  out->append(2 * depth, ' ');
  absl::StrAppend(out, "<", e.tag);
  for (const auto& [name, value] : e.attrs) absl::StrAppend(out, " ", name, "=\"", value, "\"");
  if (e.children.empty()) {
    absl::StrAppend(out, "/>\n");
    return;
  }
  absl::StrAppend(out, ">\n");
  for (const auto& child : e.children) Write(*child, depth + 1, out);
  out->append(2 * depth, ' ');
  absl::StrAppend(out, "</", e.tag, ">\n");
}

// A device to place: its bus id, NUMA node, PCI path and leaf attributes.
struct Leaf {
  std::string bus_id;
  int numa_node = -1;
  std::vector<std::string> pci_path;
  std::vector<std::pair<std::string, std::string>> attrs;  // after busid.
};

void AddLinkAttrs(const std::string& speed, int width, Leaf* leaf) {
  if (!speed.empty() && ParseLinkSpeed(speed).has_value()) {
    leaf->attrs.emplace_back("link_speed", speed);
  }
  if (width > 0 && width <= 64) leaf->attrs.emplace_back("link_width", absl::StrCat(width));
}

std::vector<Leaf> Leaves(const v1::NodeProbe& probe) {
  std::vector<Leaf> out;
  std::set<std::string> seen;
  auto path_ok = [](const auto& path, const std::string& root_complex) {
    return !root_complex.empty() &&
           std::all_of(path.begin(), path.end(), [](const std::string& p) { return IsBusId(p); });
  };
  for (const v1::Gpu& g : probe.gpus()) {
    if (!IsBusId(g.pci_bus_id()) || !path_ok(g.pci_path(), g.root_complex())) continue;
    if (!seen.insert(g.pci_bus_id()).second) continue;
    Leaf leaf{g.pci_bus_id(), g.numa_node(), {g.pci_path().begin(), g.pci_path().end()}, {}};
    if (IsHexId(g.pci_class(), 6)) leaf.attrs.emplace_back("class", g.pci_class());
    if (IsHexId(g.vendor_id(), 4)) leaf.attrs.emplace_back("vendor", g.vendor_id());
    if (IsHexId(g.device_id(), 4)) leaf.attrs.emplace_back("device", g.device_id());
    AddLinkAttrs(g.link_speed(), g.link_width(), &leaf);
    out.push_back(std::move(leaf));
  }
  for (const v1::Nic& n : probe.nics()) {
    if (!IsBusId(n.pci_bus_id()) || !path_ok(n.pci_path(), n.root_complex())) continue;
    if (!seen.insert(n.pci_bus_id()).second) continue;  // RoCE netdev of an IB device.
    Leaf leaf{n.pci_bus_id(), n.numa_node(), {n.pci_path().begin(), n.pci_path().end()}, {}};
    if (IsHexId(n.pci_class(), 6)) leaf.attrs.emplace_back("class", n.pci_class());
    out.push_back(std::move(leaf));
  }
  return out;
}

// ---- The linter.

class Linter {
 public:
  explicit Linter(absl::string_view text) : s_(text) {}

  absl::Status Run() {
    size_t tab = s_.find('\t');
    if (tab != absl::string_view::npos)
      return Error(tab, "a tab (NCCL skips only ' ', '\\n', '\\r')");
    SkipSpaceAndComments();
    if (absl::StartsWith(s_.substr(pos_), "<?")) {
      return Error(pos_, "an XML declaration (NCCL fails with \"expected >, got '?'\")");
    }
    if (!status_.ok()) return status_;
    absl::Status st = ParseElement("");
    if (!st.ok()) return st;
    SkipSpaceAndComments();
    if (!status_.ok()) return status_;
    if (pos_ != s_.size()) return Error(pos_, "text after </system>");
    return absl::OkStatus();
  }

 private:
  absl::Status Error(size_t at, absl::string_view what) {
    int line =
        1 + static_cast<int>(std::count(s_.begin(), s_.begin() + std::min(at, s_.size()), '\n'));
    return absl::InvalidArgumentError(absl::StrCat("NCCL topology XML, line ", line, ": ", what));
  }
  bool At(absl::string_view token) const { return absl::StartsWith(s_.substr(pos_), token); }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  void SkipSpaceAndComments() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (At("<!--")) {
        size_t end = s_.find("-->", pos_ + 4);
        if (end == absl::string_view::npos) {
          status_ = Error(pos_, "an unterminated comment");
          pos_ = s_.size();
          return;
        }
        pos_ = end + 3;
      } else {
        return;
      }
    }
  }

  static bool Allowed(absl::string_view parent, absl::string_view child) {
    static const auto* tree = new std::map<std::string, std::set<std::string>>{
        {"", {"system"}},           {"system", {"cpu"}},
        {"cpu", {"pci", "nic"}},    {"pci", {"pci", "gpu", "nic", "pcilink"}},
        {"gpu", {"nvlink", "c2c"}}, {"nic", {"net"}},
    };
    auto it = tree->find(std::string(parent));
    return it != tree->end() && it->second.count(std::string(child)) > 0;
  }

  absl::Status CheckAttrs(size_t at, const std::string& tag,
                          const std::map<std::string, std::string>& a) {
    auto has = [&](const char* n) { return a.count(n) > 0; };
    auto get = [&](const char* n) { return a.at(n); };
    if (tag == "system" && (!has("version") || get("version") != "1")) {
      return Error(at, "<system> needs version=\"1\" (NCCL: \"wrong version\")");
    }
    if (tag == "cpu") {
      if (!has("numaid") || !IsInt(get("numaid")))
        return Error(at, "<cpu> needs an integer numaid");
      if (has("affinity") && !IsCpumap(get("affinity"))) {
        return Error(
            at, "cpu affinity must be hex cpumap groups (\"ffffffff,00000000\"), not a cpulist");
      }
    }
    if (tag == "pci") {
      if (!has("busid") || !IsBusId(get("busid"))) {
        return Error(at, "<pci> needs busid in lowercase %04x:%02x:%02x.%x");
      }
      if (has("class") && !IsHexId(get("class"), 6))
        return Error(at, "pci class must be 0x plus 6 lowercase hex digits");
      if (has("link_width") && !IsInt(get("link_width")))
        return Error(at, "link_width must be an integer");
    }
    if (tag == "pcilink" && (!has("target") || !IsBusId(get("target")))) {
      return Error(at, "<pcilink> needs target in lowercase %04x:%02x:%02x.%x");
    }
    if (tag == "nvlink" && has("target") && !IsBusId(get("target")) &&
        get("target") != kNvSwitchId) {
      return Error(at, "nvlink target must be a lowercase bus id or fffffff:ffff:ff");
    }
    if (tag == "net" && !has("name")) return Error(at, "<net> needs a name");
    return absl::OkStatus();
  }

  absl::Status ParseElement(const std::string& parent) {
    const size_t start = pos_;
    if (Peek() != '<')
      return Error(pos_, parent.empty() ? "expected <system>" : "text between elements");
    ++pos_;
    size_t name_start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ' ' && s_[pos_] != '>' && s_[pos_] != '/' &&
           s_[pos_] != '\n' && s_[pos_] != '\r') {
      ++pos_;
    }
    std::string tag(s_.substr(name_start, pos_ - name_start));
    if (tag.empty() || tag.size() > kMaxStr)
      return Error(start, "an element name empty or over 255 characters");
    if (!Allowed(parent, tag)) {
      return Error(start, parent.empty()
                              ? absl::StrCat("the root must be <system>, not <", tag, ">")
                              : absl::StrCat("<", tag, "> may not be inside <", parent, ">"));
    }
    if (++nodes_ > kMaxNodes)
      return Error(start, "more than 256 elements (NCCL_TOPO_XML_MAX_NODES)");
    std::map<std::string, std::string> attrs;
    while (true) {
      char c = Peek();
      if (c == '\n' || c == '\r') return Error(pos_, "a newline inside a tag");
      if (c == '>' || At("/>")) break;
      if (c != ' ') return Error(pos_, "expected ' ', '>' or '/>' inside a tag");
      ++pos_;
      c = Peek();
      if (c == '>' || At("/>"))
        return Error(pos_, "a space before '>' or '/>' (NCCL adds an empty attribute)");
      if (c == ' ') return Error(pos_, "two spaces between attributes");
      size_t name_at = pos_;
      while (pos_ < s_.size() && s_[pos_] != '=' && s_[pos_] != ' ' && s_[pos_] != '>' &&
             s_[pos_] != '\n' && s_[pos_] != '\r' && s_[pos_] != '/') {
        ++pos_;
      }
      std::string name(s_.substr(name_at, pos_ - name_at));
      if (Peek() != '=')
        return Error(pos_, absl::StrCat("attribute \"", name.substr(0, 32), "\" has no =value"));
      ++pos_;
      char quote = Peek();
      if (quote != '"' && quote != '\'') return Error(pos_, "an unquoted attribute value");
      ++pos_;
      size_t end = s_.find(quote, pos_);
      if (end == absl::string_view::npos) return Error(pos_, "an unterminated attribute value");
      absl::string_view value = s_.substr(pos_, end - pos_);
      if (value.find_first_of("\n\r") != absl::string_view::npos)
        return Error(pos_, "a newline inside a tag");
      if (name.empty() || name.size() > kMaxStr || value.size() > kMaxStr) {
        return Error(name_at, "an attribute name or value over 255 characters");
      }
      if (!attrs.emplace(name, std::string(value)).second) {
        return Error(name_at, absl::StrCat("attribute \"", name, "\" twice"));
      }
      if (static_cast<int>(attrs.size()) > kMaxAttrs)
        return Error(name_at, "more than 16 attributes");
      pos_ = end + 1;
    }
    absl::Status st = CheckAttrs(start, tag, attrs);
    if (!st.ok()) return st;
    if (At("/>")) {
      pos_ += 2;
      return absl::OkStatus();
    }
    ++pos_;  // '>'
    int children = 0;
    while (true) {
      SkipSpaceAndComments();
      if (!status_.ok()) return status_;
      if (pos_ >= s_.size()) return Error(pos_, absl::StrCat("<", tag, "> is never closed"));
      if (At("</")) {
        size_t close_at = pos_;
        pos_ += 2;
        size_t end = s_.find('>', pos_);
        if (end == absl::string_view::npos || s_.substr(pos_, end - pos_) != tag) {
          return Error(close_at, absl::StrCat("the close tag does not match <", tag, ">"));
        }
        pos_ = end + 1;
        return absl::OkStatus();
      }
      if (++children > kMaxChildren) return Error(pos_, "more than 640 children in one element");
      st = ParseElement(tag);
      if (!st.ok()) return st;
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
  int nodes_ = 0;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::string> NcclTopologyXml(const v1::NodeProbe& probe) {
  Element system;
  system.tag = "system";
  system.Set("version", "1");

  // One <cpu> per NUMA node, plus numaid -1 for devices with no NUMA node.
  std::map<int, Element*> cpus;
  std::vector<Leaf> leaves = Leaves(probe);
  std::set<int> ids;
  for (const v1::NumaNode& n : probe.numa_nodes()) ids.insert(n.id());
  for (const Leaf& l : leaves) ids.insert(l.numa_node < 0 ? -1 : l.numa_node);
  std::map<int, std::string> cpumaps;
  for (const v1::NumaNode& n : probe.numa_nodes()) cpumaps[n.id()] = n.cpumap();
  const bool x86 = probe.cpu_arch() == "x86_64";
  for (int id : ids) {
    if (id == -1) continue;  // Last, below.
    Element* cpu = system.Add("cpu");
    cpu->Set("numaid", absl::StrCat(id));
    if (IsCpumap(cpumaps[id])) cpu->Set("affinity", cpumaps[id]);
    cpus[id] = cpu;
  }
  if (ids.count(-1) > 0) {
    cpus[-1] = system.Add("cpu");
    cpus[-1]->Set("numaid", "-1");
  }
  for (auto& [id, cpu] : cpus) {
    if (IsPlainWord(probe.cpu_arch())) cpu->Set("arch", probe.cpu_arch());
    if (x86 && IsPlainWord(probe.cpu_vendor())) {
      cpu->Set("vendor", probe.cpu_vendor());
      cpu->Set("familyid", absl::StrCat(probe.cpu_family()));
      cpu->Set("modelid", absl::StrCat(probe.cpu_model()));
    }
  }

  // The switch chain NCCL builds: from the device up, every second bus id
  // (a switch's upstream port), until the parent or grandparent is the root
  // complex.
  std::map<std::string, Element*> switches;
  for (const Leaf& leaf : leaves) {
    Element* parent = cpus[leaf.numa_node < 0 ? -1 : leaf.numa_node];
    std::vector<std::string> chain;
    for (int i = static_cast<int>(leaf.pci_path.size()) - 2; i >= 0; i -= 2) {
      chain.push_back(leaf.pci_path[i]);
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      auto found = switches.find(*it);
      if (found == switches.end()) {
        Element* sw = parent->Add("pci");
        sw->Set("busid", *it);
        sw->Set("class", "0x060400");
        found = switches.emplace(*it, sw).first;
      }
      parent = found->second;
    }
    Element* pci = parent->Add("pci");
    pci->Set("busid", leaf.bus_id);
    for (const auto& [name, value] : leaf.attrs) pci->attrs.emplace_back(name, value);
  }

  for (auto& cpu : system.children) SortByBusId(cpu.get());
  // NCCL loads the file into the same 256-node arena in which each rank then
  // adds its own <gpu> (with up to 18 <nvlink> peers and a <c2c>) and a
  // <nic><net> per network device, before trimming: leave that room.
  const int room = 2 + 18 + 2 * probe.nics_size();
  const int elements = CountElements(system);
  if (elements + room > kMaxNodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NCCL topology file for this node would have ", elements, " elements, and NCCL adds ",
        room, " of its own to a limit of ", kMaxNodes,
        " (NCCL_TOPO_XML_MAX_NODES); leave NCCL_TOPO_FILE unset so that NCCL detects the "
        "topology itself"));
  }
  std::string out;
  Write(system, 0, &out);
  absl::Status lint = LintNcclXml(out);
  if (!lint.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the NCCL topology file for this node would be rejected (", lint.message(),
                     "); leave NCCL_TOPO_FILE unset so that NCCL detects the topology itself"));
  }
  return out;
}

absl::Status LintNcclXml(absl::string_view text) { return Linter(text).Run(); }

}  // namespace trainlet::topology
