#include "mpi/flavor.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::mpi {
namespace {

using ::testing::HasSubstr;

std::string Testdata(const std::string& name) {
  std::ifstream in(absl::StrCat(TRAINLET_MPI_TESTDATA, "/", name), std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(FlavorName, NamesEachFlavor) {
  EXPECT_EQ(FlavorName(Flavor::kUnknown), "unknown");
  EXPECT_EQ(FlavorName(Flavor::kOpenMpi4), "openmpi");
  EXPECT_EQ(FlavorName(Flavor::kOpenMpi5), "openmpi5");
  EXPECT_EQ(FlavorName(Flavor::kMpich), "mpich");
  EXPECT_EQ(FlavorName(Flavor::kIntel), "intel");
}

TEST(ParseFlavorFlag, ParsesEveryValue) {
  EXPECT_EQ(*ParseFlavorFlag("auto", "--mpi"), std::nullopt);
  EXPECT_EQ(*ParseFlavorFlag("openmpi", "--mpi"), Flavor::kOpenMpi4);
  EXPECT_EQ(*ParseFlavorFlag("openmpi5", "--mpi"), Flavor::kOpenMpi5);
  EXPECT_EQ(*ParseFlavorFlag("MPICH", "--mpi"), Flavor::kMpich);
  EXPECT_EQ(*ParseFlavorFlag("intel", "--mpi"), Flavor::kIntel);
}

TEST(ParseFlavorFlag, RefusesOthersNamingTheOrigin) {
  for (const char* bad : {"", "unknown", "openmpi4x", "lam\n"}) {
    absl::StatusOr<std::optional<Flavor>> parsed = ParseFlavorFlag(bad, "TRAINLET_MPI");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("TRAINLET_MPI"));
  }
}

TEST(ClassifyCommand, ByBasename) {
  for (const char* mpirun :
       {"mpirun", "/usr/bin/mpiexec", "orterun", "prterun", "mpiexec.hydra", "mpiexec.mpich",
        "mpirun.mpich", "/opt/x/mpirun.openmpi", "mpiexec.openmpi"}) {
    EXPECT_EQ(ClassifyCommand(mpirun), CommandKind::kMpiRun) << mpirun;
  }
  EXPECT_EQ(ClassifyCommand("/usr/local/bin/deepspeed"), CommandKind::kDeepSpeed);
  EXPECT_EQ(ClassifyCommand("horovodrun"), CommandKind::kHorovod);
  for (const char* other : {"python", "mpirun2", "/mpirun/python", "torchrun", ""}) {
    EXPECT_EQ(ClassifyCommand(other), CommandKind::kOther) << other;
  }
}

TEST(DetectFlavor, RealOpenMpi4Output) {
  EXPECT_EQ(DetectFlavor("mpirun", Testdata("openmpi-4.1.4-version.txt")), Flavor::kOpenMpi4);
}

TEST(DetectFlavor, RealMpichHydraOutput) {
  EXPECT_EQ(DetectFlavor("mpiexec", Testdata("mpich-4.0.2-hydra-version.txt")), Flavor::kMpich);
}

TEST(DetectFlavor, OpenMpi5AndIntelBanners) {
  EXPECT_EQ(DetectFlavor("mpirun", "mpirun (Open MPI) 5.0.7\n\nReport bugs to ..."),
            Flavor::kOpenMpi5);
  EXPECT_EQ(DetectFlavor("mpirun", "prterun (PRRTE) 3.0.6\n"), Flavor::kOpenMpi5);
  EXPECT_EQ(DetectFlavor("mpirun",
                         "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build "
                         "20230619 (id: c2e19c2f3e)\nCopyright 2003-2023, Intel "
                         "Corporation.\nHYDRA build details:\n"),
            Flavor::kIntel);
  EXPECT_EQ(DetectFlavor("mpirun", "MPICH Version: 3.4.1\n"), Flavor::kMpich);
}

TEST(DetectFlavor, NameWinsOverOutput) {
  EXPECT_EQ(DetectFlavor("/usr/bin/mpirun.mpich", ""), Flavor::kMpich);
  EXPECT_EQ(DetectFlavor("mpiexec.hydra", "mpirun (Open MPI) 4.1.4"), Flavor::kMpich);
  EXPECT_EQ(DetectFlavor("prterun", ""), Flavor::kOpenMpi5);
  EXPECT_EQ(DetectFlavor("/opt/intel/mpi/bin/mpiexec.hydra",
                         "Intel(R) MPI Library for Linux* OS, Version 2021.10"),
            Flavor::kIntel);
  // ".openmpi" says Open MPI but not which: the output decides, else unknown (both families).
  EXPECT_EQ(DetectFlavor("mpirun.openmpi", ""), Flavor::kUnknown);
  EXPECT_EQ(DetectFlavor("mpirun.openmpi", "mpirun (Open MPI) 5.0.7"), Flavor::kOpenMpi5);
  EXPECT_EQ(DetectFlavor("mpirun.openmpi", Testdata("openmpi-4.1.4-version.txt")),
            Flavor::kOpenMpi4);
}

TEST(DetectFlavor, UnknownOtherwise) {
  EXPECT_EQ(DetectFlavor("mpirun", ""), Flavor::kUnknown);
  EXPECT_EQ(DetectFlavor("mpirun", "mpirun: command not found"), Flavor::kUnknown);
  EXPECT_EQ(DetectFlavor("mpirun", "(Open MPI) x.y"), Flavor::kUnknown);
}

}  // namespace
}  // namespace trainlet::mpi
