#include "mpi/flavor.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace trainlet::mpi {
namespace {

// Version banners are a few lines; a huge output is not looked at past this.
constexpr size_t kMaxVersionOutput = 64 * 1024;

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// Open MPI's major version from "... (Open MPI) X.Y.Z", or -1.
int OpenMpiMajor(absl::string_view output) {
  constexpr absl::string_view kMarker = "(Open MPI) ";
  const size_t at = output.find(kMarker);
  if (at == absl::string_view::npos) return -1;
  absl::string_view rest = output.substr(at + kMarker.size());
  size_t digits = 0;
  while (digits < rest.size() && digits < 4 && absl::ascii_isdigit(rest[digits])) ++digits;
  int major = -1;
  if (digits == 0 || !absl::SimpleAtoi(rest.substr(0, digits), &major)) return -1;
  return major;
}

Flavor OpenMpiFromOutput(absl::string_view output) {
  if (absl::StrContains(output, "(PRRTE)")) return Flavor::kOpenMpi5;
  const int major = OpenMpiMajor(output);
  if (major < 0) return Flavor::kUnknown;
  return major >= 5 ? Flavor::kOpenMpi5 : Flavor::kOpenMpi4;
}

}  // namespace

absl::string_view FlavorName(Flavor flavor) {
  switch (flavor) {
    case Flavor::kUnknown:
      return "unknown";
    case Flavor::kOpenMpi4:
      return "openmpi";
    case Flavor::kOpenMpi5:
      return "openmpi5";
    case Flavor::kMpich:
      return "mpich";
    case Flavor::kIntel:
      return "intel";
  }
  return "unknown";
}

absl::StatusOr<std::optional<Flavor>> ParseFlavorFlag(absl::string_view value,
                                                      absl::string_view origin) {
  const std::string lower = absl::AsciiStrToLower(value);
  if (lower == "auto") return std::optional<Flavor>();
  for (Flavor flavor : {Flavor::kOpenMpi4, Flavor::kOpenMpi5, Flavor::kMpich, Flavor::kIntel}) {
    if (lower == FlavorName(flavor)) return std::optional<Flavor>(flavor);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(origin, ": \"", SafeForLog(value, 64),
                   "\" is not an MPI; use auto, openmpi (4.x), openmpi5, mpich or intel"));
}

CommandKind ClassifyCommand(absl::string_view argv0) {
  const absl::string_view base = Basename(argv0);
  for (absl::string_view name :
       {"mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich",
        "mpirun.openmpi", "mpiexec.openmpi"}) {
    if (base == name) return CommandKind::kMpiRun;
  }
  if (base == "deepspeed") return CommandKind::kDeepSpeed;
  if (base == "horovodrun") return CommandKind::kHorovod;
  return CommandKind::kOther;
}

Flavor DetectFlavor(absl::string_view argv0, absl::string_view version_output) {
  const absl::string_view output = version_output.substr(0, kMaxVersionOutput);
  const absl::string_view base = Basename(argv0);
  constexpr absl::string_view kIntelBanner = "Intel(R) MPI Library";
  if (absl::EndsWith(base, ".mpich")) return Flavor::kMpich;
  // Intel MPI ships an mpiexec.hydra too; its banner tells them apart.
  if (absl::EndsWith(base, ".hydra")) {
    return absl::StrContains(output, kIntelBanner) ? Flavor::kIntel : Flavor::kMpich;
  }
  if (base == "prterun") return Flavor::kOpenMpi5;
  if (absl::EndsWith(base, ".openmpi")) return OpenMpiFromOutput(output);

  // Intel's Hydra may print Hydra's banner too, so Intel is looked for first.
  if (absl::StrContains(output, kIntelBanner)) return Flavor::kIntel;
  const Flavor open_mpi = OpenMpiFromOutput(output);
  if (open_mpi != Flavor::kUnknown) return open_mpi;
  if (absl::StrContains(output, "HYDRA build details") || absl::StrContains(output, "MPICH")) {
    return Flavor::kMpich;
  }
  return Flavor::kUnknown;
}

}  // namespace trainlet::mpi
