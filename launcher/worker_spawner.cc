#include "launcher/worker_spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/descriptors.h"
#include "launcher/command_resolver.h"

namespace trainlet {
namespace launcher {
namespace {

// What the child reports on the error pipe before it _exits.
enum ChildStage : int {
  kStageSetpgid = 1,
  kStagePdeathsig,
  kStageRedirect,
  kStageAffinity,
  kStageExec
};

// set_mempolicy(2) modes (linux/mempolicy.h), without libnuma.
constexpr int kMpolDefault = 0;
constexpr int kMpolPreferred = 1;
struct ChildFailure {
  int stage;
  int error;
};

const char* StageName(int stage) {
  switch (stage) {
    case kStageSetpgid:
      return "setpgid";
    case kStagePdeathsig:
      return "prctl(PR_SET_PDEATHSIG)";
    case kStageRedirect:
      return "redirecting stdout/stderr";
    case kStageAffinity:
      return "sched_setaffinity (--bind-numa)";
    default:
      return "exec";
  }
}

void CloseIfOpen(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// --- Child side: async-signal-safe calls only from here to execve. ---

[[noreturn]] void ChildFail(int error_fd, int stage, int error) {
  ChildFailure failure = {stage, error};
  // One write of 8 bytes to a pipe is atomic; nothing to do if it fails.
  ssize_t ignored = write(error_fd, &failure, sizeof(failure));
  (void)ignored;
  _exit(kStageExec == stage ? 127 : 126);
}

// Makes `target` (1 or 2) refer to `source`, keeping it open across exec.
bool Redirect(int source, int target) {
  if (source == target) return fcntl(target, F_SETFD, 0) == 0;  // drop CLOEXEC
  return dup2(source, target) == target;
}

// Where the child is placed; built by the parent (the child may not allocate).
struct ChildPlacement {
  const cpu_set_t* cpus = nullptr;  // nullptr: inherit.
  size_t cpus_size = 0;
  const unsigned long* nodes = nullptr;  // nullptr: no memory policy.
  unsigned long max_node = 0;
};

[[noreturn]] void RunChild(pid_t parent, const char* path, char* const argv[], char* const envp[],
                           int out_source, int err_source, int control_source, int error_fd,
                           bool foreground_tty, const ChildPlacement& placement) {
  if (setpgid(0, 0) != 0) ChildFail(error_fd, kStageSetpgid, errno);
  // Take the terminal on stdin as our foreground process group, as tini
  // does, so that the worker can read it (pdb, input()). Every signal is
  // still blocked here, so the kernel does not stop us with SIGTTOU for
  // asking from a background group. Best effort: the parent checks.
  if (foreground_tty) tcsetpgrp(STDIN_FILENO, getpid());
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) ChildFail(error_fd, kStagePdeathsig, errno);
  // The parent may have died before the prctl: then nobody would kill us.
  if (getppid() != parent) _exit(128 + SIGKILL);

  // Move sources out of the way of the targets before overwriting 1 and 2.
  if (out_source == STDERR_FILENO) out_source = fcntl(out_source, F_DUPFD_CLOEXEC, 3);
  if (err_source == STDOUT_FILENO && out_source != STDOUT_FILENO) {
    err_source = fcntl(err_source, F_DUPFD_CLOEXEC, 3);
  }
  if (out_source < 0 || err_source < 0 || !Redirect(out_source, STDOUT_FILENO) ||
      !Redirect(err_source, STDERR_FILENO)) {
    ChildFail(error_fd, kStageRedirect, errno);
  }
  // A standby's control socket at fd 3 (launcher/standby_pool.h), moving
  // the error pipe out of its way first.
  if (control_source >= 0) {
    if (error_fd == kControlFd) error_fd = fcntl(error_fd, F_DUPFD_CLOEXEC, kControlFd + 1);
    if (error_fd < 0 || !Redirect(control_source, kControlFd)) {
      ChildFail(error_fd < 0 ? kControlFd : error_fd, kStageRedirect, errno);
    }
  }

  // The agent raised its own soft descriptor limit (common/descriptors.h);
  // the process gets the one the pod was started with.
  RestoreDescriptorLimitInChild();

  if (placement.cpus != nullptr && sched_setaffinity(0, placement.cpus_size, placement.cpus) != 0) {
    ChildFail(error_fd, kStageAffinity, errno);
  }
  // Best effort: the agent checked MemoryPolicyAvailable() before asking.
  if (placement.nodes != nullptr) {
    syscall(SYS_set_mempolicy, kMpolPreferred, placement.nodes, placement.max_node);
  }

  // Handlers are reset by execve, but ignored signals (the agent ignores
  // SIGPIPE) and the blocked mask are inherited: undo both.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);  // EINVAL is fine
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);

  execve(path, argv, envp);
  ChildFail(error_fd, kStageExec, errno);
}

struct ChildArgs {
  pid_t parent;
  const char* path;
  char* const* argv;
  char* const* envp;
  int out_source;
  int err_source;
  int control_source;
  int error_fd;
  bool foreground_tty;
  ChildPlacement placement;
};

int ChildEntry(void* raw) {
  const ChildArgs* a = static_cast<const ChildArgs*>(raw);
  RunChild(a->parent, a->path, a->argv, a->envp, a->out_source, a->err_source, a->control_source,
           a->error_fd, a->foreground_tty, a->placement);
}

// --- Parent side. ---

absl::Status ResourceError(const std::string& command, const char* what, int error) {
  std::string message = absl::StrCat("trainlet: cannot start COMMAND '", command, "': ", what,
                                     " failed: ", strerror(error));
  if (error == EAGAIN || error == ENOMEM || error == EMFILE || error == ENFILE) {
    return absl::ResourceExhaustedError(
        absl::StrCat(message, "; check the pod's memory, pids and open-files limits"));
  }
  return absl::InternalError(message);
}

absl::Status ExecError(const std::string& command, const std::string& path, int error) {
  std::string message = absl::StrCat("trainlet: cannot execute COMMAND '", command, "' ('", path,
                                     "'): ", strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(
          absl::StrCat(message, "; if it is a script, check that its #! interpreter exists"));
    case ENOEXEC:
      return absl::PermissionDeniedError(absl::StrCat(
          message, "; it is neither a binary for this machine nor a script with a #! line"));
    case EACCES:
    case EPERM:
    case EISDIR:
    case ETXTBSY:
    case ELIBBAD:
    case ELOOP:
    case ENAMETOOLONG:
      return absl::PermissionDeniedError(message);
    case E2BIG:
    case ENOMEM:
    case EAGAIN:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

constexpr int kMaxPlacementCpus = 65536;
constexpr int kMaxPlacementNodes = 4096;

std::string PathFromEnv(const std::vector<std::string>& env) {
  for (const std::string& entry : env) {
    if (absl::StartsWith(entry, "PATH=")) return entry.substr(5);
  }
  return "";
}

}  // namespace

absl::StatusOr<SpawnedWorker> SpawnWorker(const ProcessSpec& spec, int stdout_fd, int stderr_fd,
                                          int control_fd) {
  if (spec.argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainlet: worker with local rank ", spec.local_rank, " has an empty argv"));
  }
  const std::string& command = spec.argv[0];
  absl::StatusOr<std::string> path = ResolveCommand(command, PathFromEnv(spec.env));
  if (!path.ok()) return path.status();

  // Everything the child needs is built here: the child may not allocate.
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const std::string& arg : spec.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(spec.env.size() + 1);
  for (const std::string& var : spec.env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);

  int error_pipe[2] = {-1, -1};
  OutputPipes pipes;
  auto close_all = [&] {
    for (int* fd : {&error_pipe[0], &error_pipe[1]}) {
      CloseIfOpen(fd);
    }
  };
  if (pipe2(error_pipe, O_CLOEXEC) != 0) return ResourceError(command, "pipe", errno);
  if (Relayed(spec.output)) {
    if (absl::Status made = pipes.Make(absl::StrCat("COMMAND '", command, "'")); !made.ok()) {
      close_all();
      return made;
    }
    stdout_fd = pipes.stdout_write();
    stderr_fd = pipes.stderr_write();
  }

  // clone(CLONE_VM | CLONE_VFORK), as posix_spawn does, rather than fork():
  // no copy of the agent's page tables (fork of the ~17 MB agent costs
  // ~0.8 ms more per worker), and this thread sleeps until the child has
  // exec'd or failed. The child runs on its own stack and touches no memory
  // but that stack (and errno). Every signal is blocked around the clone so
  // no handler can run in the child before RunChild resets them.
  ChildArgs args{getpid(),  path->c_str(), argv.data(),   envp.data(),         stdout_fd,
                 stderr_fd, control_fd,    error_pipe[1], spec.foreground_tty, {}};
  // The placement's masks, built here for the same reason.
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> cpus(nullptr, [](cpu_set_t* p) { CPU_FREE(p); });
  std::vector<unsigned long> nodes;
  if (!spec.cpus.empty()) {
    const int max_cpu = *std::max_element(spec.cpus.begin(), spec.cpus.end());
    if (max_cpu < 0 || max_cpu >= kMaxPlacementCpus) {
      close_all();
      return absl::InvalidArgumentError(absl::StrCat("trainlet: CPU ", max_cpu, " for local rank ",
                                                     spec.local_rank, " is out of range (0..",
                                                     kMaxPlacementCpus - 1, ")"));
    }
    cpus.reset(CPU_ALLOC(max_cpu + 1));
    args.placement.cpus_size = CPU_ALLOC_SIZE(max_cpu + 1);
    CPU_ZERO_S(args.placement.cpus_size, cpus.get());
    for (int c : spec.cpus) {
      if (c >= 0) CPU_SET_S(c, args.placement.cpus_size, cpus.get());
    }
    args.placement.cpus = cpus.get();
  }
  if (spec.numa_node >= 0 && spec.numa_node < kMaxPlacementNodes) {
    constexpr int kBits = 8 * sizeof(unsigned long);
    nodes.assign(spec.numa_node / kBits + 1, 0);
    nodes[spec.numa_node / kBits] |= 1UL << (spec.numa_node % kBits);
    args.placement.nodes = nodes.data();
    // The kernel reads maxnode - 1 bits.
    args.placement.max_node = nodes.size() * kBits + 1;
  }
  constexpr size_t kChildStackSize = 64 * 1024;
  std::unique_ptr<char[]> child_stack(new char[kChildStackSize]);
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  const pid_t pid = clone(ChildEntry, child_stack.get() + kChildStackSize,
                          CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int clone_error = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    close_all();
    return ResourceError(command, "clone", clone_error);
  }

  // Also here, so that the group exists before Start() returns whatever the
  // child's progress; EACCES (child already exec'd) and ESRCH are fine.
  setpgid(pid, pid);
  CloseIfOpen(&error_pipe[1]);
  pipes.CloseWriteEnds();

  // CLONE_VFORK: clone() returned once the child exec'd or exited, so a
  // failure it reports is in the pipe already. Read without waiting for
  // EOF: a process another thread forked meanwhile (a probe's helper) may
  // hold a copy of the write end for as long as it lives.
  ChildFailure failure = {0, 0};
  fcntl(error_pipe[0], F_SETFL, O_NONBLOCK);
  ssize_t n;
  do {
    n = read(error_pipe[0], &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) n = 0;  // nothing written: the exec succeeded
  CloseIfOpen(&error_pipe[0]);
  if (n != 0) {
    // The child reported a failure and is exiting (or, if the pipe broke, is
    // in an unknown state): make sure it is gone, then reap exactly it.
    kill(pid, SIGKILL);
    int wait_status;
    while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    close_all();
    if (n != static_cast<ssize_t>(sizeof(failure))) {
      return absl::InternalError(
          absl::StrCat("trainlet: cannot start COMMAND '", command, "': lost the exec status"));
    }
    if (failure.stage == kStageExec) return ExecError(command, *path, failure.error);
    return absl::InternalError(absl::StrCat("trainlet: cannot start COMMAND '", command,
                                            "': ", StageName(failure.stage),
                                            " failed in the child: ", strerror(failure.error)));
  }

  if (Relayed(spec.output)) return pipes.Release(pid);
  SpawnedWorker spawned;
  spawned.pid = pid;
  return spawned;
}

OutputPipes::~OutputPipes() {
  for (int* fd : {&out_[0], &out_[1], &err_[0], &err_[1]}) CloseIfOpen(fd);
}

absl::Status OutputPipes::Make(const std::string& what) {
  if (pipe2(out_, O_CLOEXEC) != 0 || pipe2(err_, O_CLOEXEC) != 0) {
    const int error = errno;
    for (int* fd : {&out_[0], &out_[1], &err_[0], &err_[1]}) CloseIfOpen(fd);
    return absl::ResourceExhaustedError(absl::StrCat("trainlet: cannot start ", what,
                                                     ": pipe failed: ", strerror(error),
                                                     "; check the pod's open-files limit"));
  }
  return absl::OkStatus();
}

void OutputPipes::CloseWriteEnds() {
  CloseIfOpen(&out_[1]);
  CloseIfOpen(&err_[1]);
}

SpawnedWorker OutputPipes::Release(pid_t pid) {
  CloseWriteEnds();
  SpawnedWorker spawned;
  spawned.pid = pid;
  fcntl(out_[0], F_SETFL, O_NONBLOCK);
  fcntl(err_[0], F_SETFL, O_NONBLOCK);
  spawned.stdout_pipe = std::exchange(out_[0], -1);
  spawned.stderr_pipe = std::exchange(err_[0], -1);
  return spawned;
}

bool MemoryPolicyAvailable() { return syscall(SYS_set_mempolicy, kMpolDefault, nullptr, 0) == 0; }

}  // namespace launcher
}  // namespace trainlet
