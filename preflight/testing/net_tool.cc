// The link measurer as a command, for multi-host tests and the benchmark
// (e2e/e2e_preflight_net.py, bench/preflight_network.py): one process per
// netns host serves and measures on command, and the driver analyses what
// they measured with the coordinator's own code.
//
//   preflight_net_tool serve --job=J --node=N --listen=ADDR:PORT
//       [--max-bytes-per-link=B] [--max-ms-per-link=MS]
//     prints "listening PORT", then reads commands on stdin, one a line:
//       measure ROUND NONCE [NODE@HOST:PORT ...]
//         takes ROUND/NONCE as its own round, measures the targets one
//         after the other, prints one JSON LinkResult a line, then
//         "done ROUND seconds=S sent=B received=B" (sent: bytes this node
//         got acknowledged this round; received: bulk bytes its server has
//         taken in all, since its neighbours may still be sending).
//     and exits at the end of stdin.
//   preflight_net_tool plan --round=R NODE...      the ring plan, one JSON object.
//   preflight_net_tool analyze [--min-bandwidth=BPS] [--median-fraction=F]
//     reads JSON LinkResults a line on stdin, prints the verdict as JSON.
//   preflight_net_tool checks [--path=DIR] [--shm=PATH] [--runs=N] NAME...
//     runs this host's node checks (NodeChecker: NAMEs resolved with
//     c-ares, DIR as --preflight-path) N times and prints the last run's
//     results, one JSON CheckResult a line, and the median micros of each.
//
// Exit 0, or 2 with a line on stderr for a usage error.
#include <stdio.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "preflight/link_client.h"
#include "preflight/link_server.h"
#include "preflight/node_checks.h"
#include "preflight/ring.h"

namespace trainlet::preflight {
namespace {

int Usage(const std::string& why) {
  std::cerr << "preflight_net_tool: " << why
            << "\nusage: preflight_net_tool serve --job=J --node=N --listen=ADDR:PORT "
               "[--max-bytes-per-link=B] [--max-ms-per-link=MS]\n"
               "       preflight_net_tool plan --round=R NODE...\n"
               "       preflight_net_tool analyze [--min-bandwidth=BPS] [--median-fraction=F]\n"
               "       preflight_net_tool checks [--path=DIR] [--shm=PATH] [--runs=N] NAME...\n";
  return 2;
}

// "--name=value" flags and the other arguments.
struct Args {
  std::map<std::string, std::string> flags;
  std::vector<std::string> rest;
};
Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 2; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--")) {
      std::pair<std::string, std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
      a.flags[kv.first] = kv.second;
    } else {
      a.rest.emplace_back(arg);
    }
  }
  return a;
}

// "HOST:PORT" or "[V6]:PORT".
bool SplitHostPort(absl::string_view text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) return false;
  *host = std::string(text.substr(0, colon));
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return absl::SimpleAtoi(text.substr(colon + 1), port) && *port >= 0 && *port <= 65535;
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) {
      out.push_back(' ');
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

int Serve(const Args& args) {
  LinkServerOptions so;
  so.job_id = args.flags.count("job") ? args.flags.at("job") : "";
  so.node_id = args.flags.count("node") ? args.flags.at("node") : "";
  if (!args.flags.count("listen") || !SplitHostPort(args.flags.at("listen"), &so.host, &so.port)) {
    return Usage("--listen=ADDR:PORT is required");
  }
  MeasureOptions mo;
  if (args.flags.count("max-bytes-per-link") &&
      !absl::SimpleAtoi(args.flags.at("max-bytes-per-link"), &mo.max_bytes)) {
    return Usage("--max-bytes-per-link: not a number");
  }
  int64_t ms = 0;
  if (args.flags.count("max-ms-per-link")) {
    if (!absl::SimpleAtoi(args.flags.at("max-ms-per-link"), &ms) || ms <= 0) {
      return Usage("--max-ms-per-link: not a positive number");
    }
    mo.max_time = absl::Milliseconds(ms);
  }
  absl::StatusOr<std::unique_ptr<LinkServer>> server = LinkServer::Start(so);
  if (!server.ok()) {
    std::cerr << "preflight_net_tool: " << server.status() << "\n";
    return 1;
  }
  std::cout << "listening " << (*server)->port() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() < 3 || words[0] != "measure") {
      std::cout << "error unknown command" << std::endl;
      continue;
    }
    v1::NetworkPlan plan;
    uint64_t round = 0, nonce = 0;
    if (!absl::SimpleAtoi(words[1], &round) || !absl::SimpleAtoi(words[2], &nonce)) {
      std::cout << "error bad round or nonce" << std::endl;
      continue;
    }
    plan.set_round(round);
    plan.set_nonce(nonce);
    bool ok = true;
    for (size_t i = 3; i < words.size(); ++i) {
      std::pair<std::string, std::string> at = absl::StrSplit(words[i], absl::MaxSplits('@', 1));
      v1::LinkTarget* t = plan.add_targets();
      t->set_node_id(at.first);
      std::string host;
      int port = 0;
      ok = ok && SplitHostPort(at.second, &host, &port);
      t->set_host(host);
      t->set_port(port);
    }
    if (!ok) {
      std::cout << "error bad target" << std::endl;
      continue;
    }
    (*server)->SetRound(round, nonce);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::vector<v1::LinkResult>> links =
        MeasurePlan(LinkIdentity{so.job_id, so.node_id, round, nonce}, plan, mo, nullptr);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (!links.ok()) {
      std::cout << "error " << links.status().message() << std::endl;
      continue;
    }
    uint64_t sent = 0;
    for (const v1::LinkResult& l : *links) {
      sent += l.total_bytes();
      std::cout << Json(l) << "\n";
    }
    std::cout << "done " << round << " seconds=" << seconds << " sent=" << sent
              << " received=" << (*server)->stats().bytes_received << std::endl;
  }
  return 0;
}

int Plan(const Args& args) {
  uint64_t round = 0;
  if (!args.flags.count("round") || !absl::SimpleAtoi(args.flags.at("round"), &round)) {
    return Usage("--round=R is required");
  }
  std::vector<std::string> entries;
  for (const auto& [from, targets] : PlanRings(args.rest, round)) {
    std::vector<std::string> quoted;
    for (const std::string& t : targets) quoted.push_back(Quote(t));
    entries.push_back(absl::StrCat(Quote(from), ": [", absl::StrJoin(quoted, ", "), "]"));
  }
  std::cout << "{" << absl::StrJoin(entries, ", ") << "}" << std::endl;
  return 0;
}

int Analyze(const Args& args) {
  AnalysisOptions o;
  if (args.flags.count("min-bandwidth") &&
      !absl::SimpleAtod(args.flags.at("min-bandwidth"), &o.min_bandwidth_bytes_per_second)) {
    return Usage("--min-bandwidth: not a number");
  }
  if (args.flags.count("median-fraction") &&
      !absl::SimpleAtod(args.flags.at("median-fraction"), &o.median_fraction)) {
    return Usage("--median-fraction: not a number");
  }
  std::vector<v1::LinkResult> links;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    v1::LinkResult l;
    if (!google::protobuf::util::JsonStringToMessage(line, &l).ok()) {
      return Usage(absl::StrCat("not a LinkResult: ", line.substr(0, 80)));
    }
    links.push_back(l);
  }
  const NetworkVerdict v = AnalyzeLinks(links, o);
  std::vector<std::string> flagged, unattributed;
  for (const FlaggedNode& f : v.flagged) {
    flagged.push_back(
        absl::StrCat("{\"node\": ", Quote(f.node_id), ", \"reason\": ", Quote(f.reason), "}"));
  }
  for (const BadLink& b : v.unattributed) {
    unattributed.push_back(absl::StrCat("{\"from\": ", Quote(b.from_node), ", \"to\": ",
                                        Quote(b.to_node), ", \"why\": ", Quote(b.why), "}"));
  }
  std::cout << "{\"flagged\": [" << absl::StrJoin(flagged, ", ") << "], \"unattributed\": ["
            << absl::StrJoin(unattributed, ", ")
            << "], \"median_bandwidth\": " << v.median_bandwidth << ", \"links\": " << v.links
            << "}" << std::endl;
  return 0;
}

int Checks(const Args& args) {
  NodeCheckConfig config;
  if (args.flags.count("path")) config.path = args.flags.at("path");
  const std::string shm = args.flags.count("shm") ? args.flags.at("shm") : "/dev/shm";
  int runs = 1;
  if (args.flags.count("runs") && (!absl::SimpleAtoi(args.flags.at("runs"), &runs) || runs < 1)) {
    return Usage("--runs: not a positive number");
  }
  NodeChecker checker(config, "tool", MakeAresResolver());
  std::map<std::string, std::vector<int64_t>> micros;
  std::vector<v1::CheckResult> results;
  for (int i = 0; i < runs; ++i) {
    NodeCheckInputs in;
    in.host = ReadHostLimits(shm);
    in.names = args.rest;
    results = checker.Run(in);
    for (const v1::CheckResult& r : results) micros[r.check()].push_back(r.micros());
  }
  for (const v1::CheckResult& r : results) std::cout << Json(r) << "\n";
  for (auto& [check, m] : micros) {
    std::sort(m.begin(), m.end());
    std::cout << "median_micros " << check << " " << m[m.size() / 2] << "\n";
  }
  std::cout.flush();
  return 0;
}

}  // namespace
}  // namespace trainlet::preflight

int main(int argc, char** argv) {
  using namespace trainlet::preflight;
  if (argc < 2) return Usage("a command is required");
  const std::string command = argv[1];
  const Args args = Parse(argc, argv);
  if (command == "serve") return Serve(args);
  if (command == "plan") return Plan(args);
  if (command == "analyze") return Analyze(args);
  if (command == "checks") return Checks(args);
  return Usage(absl::StrCat("unknown command '", command, "'"));
}
