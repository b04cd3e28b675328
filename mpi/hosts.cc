#include "mpi/hosts.h"

#include <cstdint>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/host_names.h"
#include "common/logging.h"

namespace trainlet::mpi {
namespace {

constexpr absl::string_view kKeyTypes[] = {"ssh-ed25519", "ecdsa-sha2-nistp256",
                                           "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"};

bool IsBase64Char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/' || c == '=';
}

// The SSH wire format of a public key starts with its type as a string
// (uint32 big-endian length, then the bytes).
bool BlobStartsWithType(absl::string_view blob, absl::string_view type) {
  if (blob.size() < 4 + type.size()) return false;
  const uint32_t length = (uint32_t{static_cast<uint8_t>(blob[0])} << 24) |
                          (uint32_t{static_cast<uint8_t>(blob[1])} << 16) |
                          (uint32_t{static_cast<uint8_t>(blob[2])} << 8) |
                          uint32_t{static_cast<uint8_t>(blob[3])};
  return length == type.size() && blob.substr(4, type.size()) == type;
}

absl::Status HostError(const MpiHost& host, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("MPI host of node \"", SafeForLog(host.node_id), "\": ", what));
}

}  // namespace

bool IsValidPublicKeyLine(absl::string_view line) {
  if (line.size() > kMaxPublicKeyLength) return false;
  const size_t space = line.find(' ');
  if (space == absl::string_view::npos) return false;
  const absl::string_view type = line.substr(0, space);
  const absl::string_view base64 = line.substr(space + 1);
  bool known_type = false;
  for (absl::string_view t : kKeyTypes) known_type = known_type || t == type;
  if (!known_type || base64.empty()) return false;
  for (char c : base64) {
    if (!IsBase64Char(c)) return false;
  }
  std::string blob;
  if (!absl::Base64Unescape(base64, &blob)) return false;
  return BlobStartsWithType(blob, type);
}

absl::Status ValidateHosts(const std::vector<MpiHost>& hosts) {
  std::set<std::string> names;
  for (const MpiHost& host : hosts) {
    if (!IsValidHost(host.name)) {
      return HostError(host, absl::StrCat("name \"", SafeForLog(host.name),
                                          "\" is not a DNS name (RFC 1123) or an IP address; "
                                          "check the worker's --host / advertised address"));
    }
    if (host.slots < 1 || host.slots > kMaxSlots) {
      return HostError(
          host, absl::StrCat("slots ", host.slots, " for \"", host.name, "\" is out of range 1..",
                             kMaxSlots, "; check the worker's --nproc-per-node"));
    }
    // The launcher, when it hosts slots, is not reached over SSH: no port, no key.
    const bool local = host.port == 0 && host.host_public_key.empty();
    if (!local && (host.port < 1 || host.port > 65535)) {
      return HostError(host, absl::StrCat("sshd port ", host.port, " for \"", host.name,
                                          "\" is out of range 1..65535 (0 only for the "
                                          "launcher, which has no host key)"));
    }
    if (!local && !IsValidPublicKeyLine(host.host_public_key)) {
      return HostError(host, absl::StrCat("host key \"", SafeForLog(host.host_public_key, 96),
                                          "\" for \"", host.name,
                                          "\" is not \"<type> <base64>\" with type ssh-ed25519, "
                                          "ecdsa-sha2-nistp256/384/521 or ssh-rsa"));
    }
    // DNS names are case-insensitive, and "a." is "a".
    std::string key = absl::AsciiStrToLower(host.name);
    if (key.size() > 1 && key.back() == '.') key.pop_back();
    if (!names.insert(key).second) {
      return HostError(host, absl::StrCat("name \"", host.name,
                                          "\" is used by another node too; every worker needs "
                                          "its own host name"));
    }
  }
  return absl::OkStatus();
}

int TotalSlots(const std::vector<MpiHost>& hosts) {
  int total = 0;
  for (const MpiHost& host : hosts) total += host.slots;
  return total;
}

}  // namespace trainlet::mpi
