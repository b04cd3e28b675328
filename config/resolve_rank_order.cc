// ResolveRankOrder (run_resolvers.h): where this node sits and how it asks
// ranks to be ordered (docs/topology.md, "Rank order").
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/run_resolvers.h"
#include "config/topology_labels.h"
#include "rendezvous/protocol.h"
#include "rendezvous/rank_order.h"
#include "rendezvous/token.h"

namespace trainlet::agent {
namespace {

// A downward API file of a pod's annotations is at most 256 KiB (the API
// server's limit on all of them), its labels far less.
constexpr size_t kMaxTopologyFileBytes = 512 * 1024;

// --topology-file's entries for --topology-keys, after --topology's, and
// the scheduler's mark.
absl::Status ReadTopologyFiles(const OptionValue& files, RunInputs* in, RunConfig* c) {
  const OptionValue* given_keys = in->parsed.Find("topology-keys");
  const OptionValue keys_value =
      given_keys != nullptr
          ? *given_keys
          : OptionValue{std::string(kDefaultTopologyKeys), "default", ValueSource::kDefault};
  absl::StatusOr<std::vector<std::string>> keys =
      ParseTopologyKeys(keys_value.text, keys_value.origin);
  if (!keys.ok()) return keys.status();
  std::map<std::string, std::string> entries;
  for (absl::string_view path : absl::StrSplit(files.text, ',', absl::SkipEmpty())) {
    const std::string origin = absl::StrCat(files.origin, " ", SafeForLog(path, 128));
    // A FIFO (or a device) would block the agent's start in open() until
    // something writes to it: the downward API's files are regular files
    // (behind its ..data symlink, which stat follows).
    struct stat st;
    if (stat(std::string(path).c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(origin,
                       ": not a regular file (a downward API volume's labels or "
                       "annotations file is one)"));
    }
    absl::StatusOr<std::string> text =
        rendezvous::ReadBoundedFile(std::string(path), kMaxTopologyFileBytes, files.origin,
                                    "downward API labels or annotations file");
    if (!text.ok()) return text.status();
    absl::StatusOr<std::map<std::string, std::string>> parsed = ParseDownwardApiFile(*text, origin);
    if (!parsed.ok()) return parsed.status();
    entries.merge(*parsed);
  }
  for (const std::string& key : *keys) {
    auto it = entries.find(key);
    if (it == entries.end() || it->second.empty()) continue;
    bool given = false;  // --topology names it: that value stands.
    for (const auto& d : c->topology_domains) given |= d.first == key;
    if (given) continue;
    if (absl::Status s = rendezvous::CheckTopologyValue(it->second); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(files.origin, ": the value of ", key, ": ",
                                                     s.message(),
                                                     "; drop the key from --topology-keys"));
    }
    if (static_cast<int>(c->topology_domains.size()) >= rendezvous::kMaxTopologyDomains) {
      return absl::InvalidArgumentError(absl::StrCat(files.origin, " and --topology: more than ",
                                                     rendezvous::kMaxTopologyDomains,
                                                     " domains; narrow --topology-keys"));
    }
    c->topology_domains.emplace_back(key, it->second);
  }
  for (absl::string_view mark : kSchedulerPlacementKeys) {
    if (entries.count(std::string(mark)) != 0) {
      c->scheduler_placement = std::string(mark);
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveRankOrder(RunInputs* in, RunConfig* c) {
  c->node_rank_from_index =
      in->rank_value.has_value() && in->rank_value->source == ValueSource::kDiscovery;
  // Volcano's coordinator host made this pod node rank 0: the pod's place too.
  if (!in->rank_value.has_value() && c->node_rank_hint >= 0) c->node_rank_from_index = true;

  if (const OptionValue* v = in->parsed.Find("rank-order")) {
    if (v->text == "auto") {
      c->rank_order = v1::RANK_ORDER_AUTO;
    } else if (v->text == "index") {
      c->rank_order = v1::RANK_ORDER_INDEX;
    } else if (v->text == "topology") {
      c->rank_order = v1::RANK_ORDER_TOPOLOGY;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          v->origin, ": expected auto, index or topology, got \"", SafeForLog(v->text, 32), "\""));
    }
  }
  if (const OptionValue* v = in->parsed.Find("topology")) {
    absl::StatusOr<Domains> d = ParseTopologyPairs(v->text, v->origin);
    if (!d.ok()) return d.status();
    c->topology_domains = *std::move(d);
  }
  if (const OptionValue* files = in->parsed.Find("topology-file")) {
    if (absl::Status s = ReadTopologyFiles(*files, in, c); !s.ok()) return s;
  }
  if (c->topology_domains.empty() && c->scheduler_placement.empty()) return absl::OkStatus();
  std::string said;
  for (const auto& [key, value] : c->topology_domains) {
    absl::StrAppend(&said, said.empty() ? "" : ",", key, "=", value);
  }
  c->notes.push_back(
      absl::StrCat("topology: ", said.empty() ? "no domains" : said,
                   c->scheduler_placement.empty()
                       ? ""
                       : absl::StrCat("; placed by a scheduler (", c->scheduler_placement, ")")));
  return absl::OkStatus();
}

}  // namespace trainlet::agent
