#include "launcher/command_resolver.h"

#include <unistd.h>

#include "common/exit_codes.h"
#include "gtest/gtest.h"
#include "launcher/process_test_util.h"

namespace trainlet {
namespace launcher {
namespace {

using testing::TempDir;
using testing::WriteFile;

TEST(ResolveCommand, Missing_IsNotFoundNamingCommandAndPath_Exit127) {
  absl::StatusOr<std::string> path = ResolveCommand("trainlet-no-such-command", "/usr/bin:/bin");
  ASSERT_EQ(path.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(path.status().message(),
            "trainlet: COMMAND 'trainlet-no-such-command' not found in PATH (/usr/bin:/bin)");
  EXPECT_EQ(ExitCodeForSpawnError(path.status()), kExitNotFound);
}

TEST(ResolveCommand, MissingWithSlash_IsNotFound) {
  absl::StatusOr<std::string> path = ResolveCommand("/nonexistent/train.py", "/usr/bin");
  ASSERT_EQ(path.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(path.status().message().find("/nonexistent/train.py"), absl::string_view::npos);
}

TEST(ResolveCommand, NotExecutableFile_IsPermissionDenied_Exit126) {
  TempDir dir;
  WriteFile(dir.File("train.sh"), "#!/bin/sh\n", 0644);
  absl::StatusOr<std::string> path = ResolveCommand(dir.File("train.sh"), "");
  ASSERT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(path.status().message().find("is not executable (permission denied)"),
            absl::string_view::npos)
      << path.status();
  EXPECT_EQ(ExitCodeForSpawnError(path.status()), kExitNotExecutable);
}

TEST(ResolveCommand, Directory_IsPermissionDenied) {
  TempDir dir;
  absl::StatusOr<std::string> path = ResolveCommand(dir.path(), "");
  ASSERT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(path.status().message().find("is a directory"), absl::string_view::npos);
  EXPECT_EQ(ExitCodeForSpawnError(path.status()), kExitNotExecutable);
}

TEST(ResolveCommand, RelativeWithSlash_IsUsedAsIsWithoutPathSearch) {
  TempDir dir;
  WriteFile(dir.File("train.sh"), "#!/bin/sh\n", 0755);
  char old_cwd[4096];
  ASSERT_NE(getcwd(old_cwd, sizeof(old_cwd)), nullptr);
  ASSERT_EQ(chdir(dir.path().c_str()), 0);
  absl::StatusOr<std::string> found = ResolveCommand("./train.sh", "/usr/bin:/bin");
  absl::StatusOr<std::string> missing = ResolveCommand("./sh", "/usr/bin:/bin");
  ASSERT_EQ(chdir(old_cwd), 0);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, "./train.sh");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(ResolveCommand, PathSearch_FirstExecutableMatchWins) {
  TempDir a, b, c;
  WriteFile(b.File("tool"), "#!/bin/sh\n", 0755);
  WriteFile(c.File("tool"), "#!/bin/sh\n", 0755);
  absl::StatusOr<std::string> path =
      ResolveCommand("tool", a.path() + ":" + b.path() + ":" + c.path());
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, b.File("tool"));
}

TEST(ResolveCommand, PathSearch_SkipsNonExecutableForLaterExecutable) {
  TempDir a, b;
  WriteFile(a.File("tool"), "#!/bin/sh\n", 0644);
  WriteFile(b.File("tool"), "#!/bin/sh\n", 0755);
  absl::StatusOr<std::string> path = ResolveCommand("tool", a.path() + ":" + b.path());
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, b.File("tool"));
}

TEST(ResolveCommand, PathSearch_OnlyNonExecutableMatch_IsPermissionDenied) {
  TempDir a;
  WriteFile(a.File("tool"), "#!/bin/sh\n", 0644);
  absl::StatusOr<std::string> path = ResolveCommand("tool", "/nonexistent:" + a.path());
  ASSERT_EQ(path.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(path.status().message().find(a.File("tool")), absl::string_view::npos);
}

TEST(ResolveCommand, EmptyPath_UsesDefaultPath) {
  absl::StatusOr<std::string> path = ResolveCommand("sh", "");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_TRUE(path->rfind("/usr/local/bin/", 0) == 0 || path->rfind("/usr/bin/", 0) == 0 ||
              path->rfind("/bin/", 0) == 0)
      << *path;
  absl::StatusOr<std::string> missing = ResolveCommand("trainlet-no-such-command", "");
  EXPECT_NE(missing.status().message().find("(/usr/local/bin:/usr/bin:/bin)"),
            absl::string_view::npos);
}

TEST(ResolveCommand, EmptyCommand_IsNotFound) {
  EXPECT_EQ(ResolveCommand("", "/bin").status().code(), absl::StatusCode::kNotFound);
}

TEST(ExitCodeForSpawnError, MapsCodes) {
  EXPECT_EQ(ExitCodeForSpawnError(absl::NotFoundError("x")), 127);
  EXPECT_EQ(ExitCodeForSpawnError(absl::PermissionDeniedError("x")), 126);
  EXPECT_EQ(ExitCodeForSpawnError(absl::ResourceExhaustedError("x")), kExitOsError);
  EXPECT_EQ(ExitCodeForSpawnError(absl::InternalError("x")), kExitInternal);
  EXPECT_EQ(ExitCodeForSpawnError(absl::InvalidArgumentError("x")), kExitInternal);
}

}  // namespace
}  // namespace launcher
}  // namespace trainlet
