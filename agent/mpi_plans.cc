#include "agent/mpi_plans.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/small_file.h"
#include "launcher/children.h"
#include "launcher/command_resolver.h"
#include "mpi/formats.h"
#include "mpi/keys.h"
#include "mpi/launcher_env.h"
#include "mpi/ssh_master.h"

extern char** environ;

namespace trainlet::agent {
namespace {

namespace v1 = ::trainlet::v1;

constexpr absl::Duration kCaptureTimeout = absl::Seconds(10);
constexpr size_t kMaxCapture = 64 * 1024;
// The longest directory for the multiplexing sockets: DIR/<16 hex digits>
// plus OpenSSH's 17-byte temporary suffix must fit a socket path (107 bytes).
constexpr size_t kMaxMuxBase = 64;

struct Captured {
  int exit_code = -1;
  std::string output;  // stdout and stderr together, at most kMaxCapture bytes.
};

std::vector<std::string> EnvStrings(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

// Runs argv (PATH-resolved by the caller) to completion with its output
// captured; killed after kCaptureTimeout. For `mpirun --version` and `sshd
// -t`, before the agent's loop (and its reaper) runs.
absl::StatusOr<Captured> RunCaptured(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& env) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("pipe: ", strerror(errno)));
  }
  const std::vector<std::string> env_strings = EnvStrings(env);
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : env_strings) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  Captured out;
  const absl::Time give_up = absl::Now() + kCaptureTimeout;
  char buffer[4096];
  for (;;) {
    const int wait_ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(give_up - absl::Now())));
    pollfd p{pipe_fds[0], POLLIN, 0};
    const int n = poll(&p, 1, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    const ssize_t got = read(pipe_fds[0], buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (out.output.size() < kMaxCapture) {
      out.output.append(buffer, std::min<size_t>(got, kMaxCapture - out.output.size()));
    }
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.exit_code = ExitCodeFromWaitStatus(status);
  return out;
}

std::string PathOf(const std::map<std::string, std::string>& env) {
  auto it = env.find("PATH");
  return it == env.end() ? "" : it->second;
}

std::string ReadComm(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/comm"));
  std::string comm;
  std::getline(in, comm);
  return comm;
}

}  // namespace

std::vector<mpi::MpiHost> MpiHostsFor(const v1::Assignment& assignment) {
  std::vector<mpi::MpiHost> hosts;
  auto add = [&](const v1::NodeAssignment& n) {
    mpi::MpiHost h;
    h.node_id = n.member().node_id();
    h.name = n.addr();
    h.slots = n.local_world_size();
    h.port = n.ssh().port();
    h.host_public_key = n.ssh().host_public_key();
    hosts.push_back(std::move(h));
  };
  for (const auto& n : assignment.nodes()) {
    if (n.role() == v1::ROLE_MPI_LAUNCHER && n.local_world_size() > 0) add(n);
  }
  for (const auto& n : assignment.nodes()) {
    if (n.role() == v1::ROLE_MPI_WORKER) add(n);
  }
  return hosts;
}

// ---- The launcher.

MpiLauncherPlan::MpiLauncherPlan(const MpiConfig& config,
                                 std::map<std::string, std::string> base_env, std::string state_dir,
                                 Clock* clock, bool give_terminal)
    : config_(config),
      base_env_(std::move(base_env)),
      state_dir_(std::move(state_dir)),
      clock_(clock),
      give_terminal_(give_terminal) {}

MpiLauncherPlan::~MpiLauncherPlan() {
  CancelPrepare();
  RemoveGate();
  StopMultiplexing({});
  if (mux_base_is_temp_) rmdir(mux_base_.c_str());
}

void MpiLauncherPlan::StopMultiplexing(const std::set<std::string>& keep) {
  if (mux_base_.empty()) return;
  const int stopped = mpi::StopMasters(mux_base_, keep);
  if (stopped > 0) TLOG(kDebug) << "stopped " << stopped << " SSH multiplexing master(s)";
}

bool MpiLauncherPlan::CloseGate() {
  const std::string gate = File("ssh-gate");
  if (gate_fd_ >= 0) {
    close(gate_fd_);
    gate_fd_ = -1;
  }
  if (unlink(gate.c_str()) != 0 && errno != ENOENT) {
    TLOG(kWarning) << "cannot remove " << gate << " (" << strerror(errno)
                   << "): COMMAND starts after the readiness check";
    // The wrapper would wait at the old FIFO for ever: hold it open.
    gate_fd_ = open(gate.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    return false;
  }
  if (mkfifo(gate.c_str(), 0600) != 0) {
    TLOG(kWarning) << "cannot make the FIFO " << gate << " (" << strerror(errno)
                   << "): COMMAND starts after the readiness check";
    return false;
  }
  return true;
}

void MpiLauncherPlan::OpenGate() {
  // Read-write: never blocks on a FIFO, and while this descriptor is open
  // every open for reading (the wrapper's wait) returns at once.
  gate_fd_ = open(File("ssh-gate").c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (gate_fd_ < 0) {
    const int error = errno;
    absl::MutexLock lock(&mu_);
    check_failure_ = absl::InternalError(absl::StrCat(
        "cannot open the ssh gate ", File("ssh-gate"), ": ", strerror(error),
        "; COMMAND's ssh would wait for ever (--early-command=false avoids the gate)"));
  }
}

void MpiLauncherPlan::RemoveGate() {
  if (!early_) return;
  if (gate_fd_ >= 0) {
    close(gate_fd_);
    gate_fd_ = -1;
  }
  unlink(File("ssh-gate").c_str());
}

absl::StatusOr<std::unique_ptr<MpiLauncherPlan>> MpiLauncherPlan::Create(
    const MpiConfig& config, const std::map<std::string, std::string>& base_env,
    const std::string& state_dir, Clock* clock, bool give_terminal,
    launcher::Supervisor* supervisor, RoundOptions* options) {
  std::unique_ptr<MpiLauncherPlan> plan(
      new MpiLauncherPlan(config, base_env, state_dir, clock, give_terminal));

  // The job key: a mounted Secret's, or a new one.
  absl::StatusOr<mpi::KeyPair> key = absl::NotFoundError("no key directory");
  if (!config.ssh_key_dir.empty()) {
    key = mpi::LoadMountedKey(config.ssh_key_dir);
    if (absl::IsNotFound(key.status())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--ssh-key-dir ", config.ssh_key_dir,
          ": no SSH private key there (looked for ssh-privatekey, id_ed25519, id_ecdsa, "
          "id_rsa); mount the job's SSH Secret there, or leave --ssh-key-dir unset for a new "
          "key"));
    }
    if (!key.ok()) return key.status();
    TLOG(kInfo) << "job key: the one mounted in " << SafeForLog(config.ssh_key_dir, 256);
  } else {
    key = mpi::GenerateEd25519();
    if (!key.ok()) return key.status();
  }
  if (absl::Status s = mpi::WriteFileAtomically(plan->File("id_job"), key->private_pem, 0600);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          mpi::WriteFileAtomically(plan->File("id_job.pub"), key->public_line + "\n", 0644);
      !s.ok()) {
    return s;
  }

  // Which MPI. `COMMAND --version` (about 10 ms) runs on a thread: the
  // launcher's own join does not wait for it; Prepare() does.
  const std::string& argv0 = config.run.command[0];
  if (config.mpi != "auto") {
    absl::StatusOr<std::optional<mpi::Flavor>> f = mpi::ParseFlavorFlag(config.mpi, "--mpi");
    if (!f.ok()) return f.status();
    plan->flavor_ = f->value_or(mpi::Flavor::kUnknown);
  } else if (mpi::ClassifyCommand(argv0) == mpi::CommandKind::kMpiRun) {
    auto detect = [argv0, base_env] {
      std::string version;
      absl::StatusOr<std::string> resolved = launcher::ResolveCommand(argv0, PathOf(base_env));
      if (resolved.ok()) {
        absl::StatusOr<Captured> out = RunCaptured({*resolved, "--version"}, base_env);
        if (out.ok()) version = out->output;
      }
      return mpi::DetectFlavor(argv0, version);
    };
    try {
      plan->detecting_ = std::async(std::launch::async, detect);
    } catch (const std::system_error&) {
      plan->flavor_ = detect();  // no thread to be had
    }
  }
  if (absl::StatusOr<std::string> ssh = launcher::ResolveCommand("ssh", PathOf(base_env));
      ssh.ok()) {
    plan->real_ssh_ = *ssh;
  } else {
    TLOG(kWarning) << "no ssh client in PATH: COMMAND will not reach the workers (install "
                      "openssh-client in the launcher's image)";
  }
  absl::StatusOr<std::string> user = mpi::CurrentUserName();
  // A pod whose user sshd cannot log in is a configuration error (78).
  if (!user.ok()) return absl::FailedPreconditionError(user.status().message());
  absl::StatusOr<std::unique_ptr<mpi::LibsshProber>> prober =
      mpi::LibsshProber::Create(key->private_pem, *user);
  if (!prober.ok()) return prober.status();
  plan->prober_ = *std::move(prober);
  if (config.ssh_multiplex && !plan->real_ssh_.empty()) {
    // The masters' sockets: OpenSSH binds "PATH.<16 random characters>"
    // first, and a socket path has at most 107 bytes.
    std::string base = plan->File("mux");
    if (base.size() > kMaxMuxBase) {
      char temp[] = "/tmp/trainlet-mux-XXXXXX";
      base = mkdtemp(temp) != nullptr ? temp : "";
      plan->mux_base_is_temp_ = !base.empty();
    } else if (mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) {
      base.clear();
    }
    if (base.empty()) {
      TLOG(kWarning) << "no short directory for the SSH multiplexing sockets (the state "
                        "directory's path is long and /tmp is not writable): COMMAND's ssh "
                        "logs in to each worker by itself";
    } else {
      plan->mux_base_ = base;
      // The check's connection (which COMMAND's sessions ride on) comes
      // from this binary's `ssh-connect`: TCP_NODELAY from the first packet
      // (mpi/ssh_connect.h).
      std::string self(4096, '\0');
      const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
      self.resize(n > 0 ? static_cast<size_t>(n) : 0);
      if (!self.empty() && access(self.c_str(), X_OK) != 0) self.clear();
      plan->master_prober_ = std::make_shared<mpi::OpenSshMasterProber>(
          plan->real_ssh_, plan->File("ssh_config"), base, EnvStrings(base_env),
          plan->prober_.get(), self);
      // Daemonized by ssh, the masters are adopted by this process: they
      // are not orphans of the workers to kill when a round starts or ends.
      supervisor->SpareAdopted([base, ssh = plan->real_ssh_](const launcher::ChildProcess& c) {
        return mpi::IsSshMaster(c, base, ssh);
      });
    }
  }

  plan->supervisor_ = supervisor;
  if (!plan->detecting_.valid()) plan->KnowFlavor();

  options->role = v1::ROLE_MPI_LAUNCHER;
  options->ssh.set_client_public_key(key->public_line);
  options->local_processes = 1;  // COMMAND
  options->local_world_size = config.launcher_as_node ? config.run.nproc_per_node : 0;
  options->want_nodes = true;  // the hostfiles list every worker.
  return plan;
}

void MpiLauncherPlan::KnowFlavor() {
  if (detecting_.valid()) flavor_ = detecting_.get();  // bounded: RunCaptured's 10 s
  flavor_known_ = true;
  TLOG(kInfo) << "MPI: " << mpi::FlavorName(flavor_)
              << (flavor_ == mpi::Flavor::kUnknown
                      ? " (setting the variables of Open MPI 4 and 5, MPICH and Intel MPI)"
                      : "");
  // --early-command: COMMAND's ssh must be the wrapper, whose gate holds it.
  const std::string& argv0 = config_.run.command[0];
  if (real_ssh_.empty()) {
    if (config_.early_command == MpiConfig::EarlyCommand::kOn) {
      TLOG(kWarning) << "--early-command=true: no ssh client, so no gate: COMMAND starts after "
                        "the readiness check";
    }
  } else if (config_.early_command == MpiConfig::EarlyCommand::kOn) {
    early_ = true;
  } else if (config_.early_command == MpiConfig::EarlyCommand::kAuto) {
    std::string why;
    if (mpi::ClassifyCommand(argv0) != mpi::CommandKind::kMpiRun) {
      why = "COMMAND is not mpirun or mpiexec";
    } else if (flavor_ == mpi::Flavor::kUnknown) {
      why = "its MPI is not known";
    } else {
      std::map<std::string, std::string> param_files;
      absl::StatusOr<std::string> resolved = launcher::ResolveCommand(argv0, PathOf(base_env_));
      std::vector<std::string> mpiruns;
      if (resolved.ok()) {
        mpiruns.push_back(*resolved);
        char real[PATH_MAX];
        if (realpath(resolved->c_str(), real) != nullptr) mpiruns.push_back(real);
      }
      auto var = [this](const char* name) {
        auto it = base_env_.find(name);
        return it == base_env_.end() ? std::string() : it->second;
      };
      for (const std::string& path : mpi::McaParamFiles(mpiruns, var("HOME"), var("OPAL_PREFIX"))) {
        if (std::optional<std::string> text = ReadRegularFile(path, 64 * 1024)) {
          param_files[path] = *std::move(text);
        }
      }
      why = mpi::SshBypass(base_env_, config_.run.command, param_files);
    }
    early_ = why.empty();
    if (!early_) {
      TLOG(kDebug) << "COMMAND starts after the readiness check (--early-command=auto: "
                   << SafeForLog(why, 256) << ")";
    }
  }
}

absl::Status MpiLauncherPlan::WriteRoundFiles(const std::vector<mpi::MpiHost>& hosts) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"hostfile", mpi::OpenMpiHostfile(hosts)},
      {"hostfile.hydra", mpi::HydraHostfile(hosts)},
      {"hosts", mpi::DiscoverHostsList(hosts)},
      {"known_hosts", mpi::KnownHosts(hosts)},
      {"ssh_config", mpi::SshClientConfig(hosts, {File("id_job"), File("known_hosts"), mux_base_})},
  };
  for (const auto& [name, text] : files) {
    if (absl::Status s = mpi::WriteFileAtomically(File(name), text, 0600); !s.ok()) return s;
  }
  if (absl::Status s = mpi::WriteFileAtomically(File("discover_hosts.sh"),
                                                mpi::DiscoverHostsScript(File("hosts")), 0700);
      !s.ok()) {
    return s;
  }
  if (!real_ssh_.empty()) {
    if (mkdir(File("bin").c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", File("bin"), ": ", strerror(errno)));
    }
    if (absl::Status s = mpi::WriteFileAtomically(
            File("bin/ssh"),
            mpi::SshWrapperScript(real_ssh_, File("ssh_config"), early_ ? File("ssh-gate") : ""),
            0700);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

std::vector<launcher::ProcessSpec> MpiLauncherPlan::CommandSpec(
    const v1::Assignment& assignment, const std::vector<mpi::MpiHost>& hosts) const {
  mpi::LauncherEnvInput in;
  in.flavor = flavor_;
  in.files.hostfile = File("hostfile");
  in.files.hydra_hostfile = File("hostfile.hydra");
  in.files.discover_hosts = File("discover_hosts.sh");
  in.files.hosts_list = File("hosts");
  in.files.ssh_config = File("ssh_config");
  in.files.identity_file = File("id_job");
  in.files.known_hosts = File("known_hosts");
  in.files.bin_dir = File("bin");
  in.hosts = hosts;
  in.restart_count = assignment.restart_count();
  in.root = getuid() == 0;
  in.path = PathOf(base_env_);
  std::map<std::string, std::string> env = base_env_;
  for (auto& [k, v] : mpi::LauncherEnv(in)) env[k] = v;
  if (real_ssh_.empty()) env["PATH"] = in.path;  // no wrapper was written.
  env["TRAINLET_JOB_ID"] = config_.run.job_id;
  env["TRAINLET_STATE_DIR"] = state_dir_;
  launcher::ProcessSpec spec;
  spec.role = launcher::ProcessRole::kWorker;
  spec.name = "COMMAND";
  spec.argv = config_.run.command;
  spec.env = EnvStrings(env);
  spec.foreground_tty = give_terminal_;
  // --progress-from-output set explicitly: the launcher's output (every
  // rank's, as the MPI launcher forwards it) is read, unchanged.
  if (config_.run.relay_output) spec.output = launcher::OutputMode::kRelay;
  return {std::move(spec)};
}

void MpiLauncherPlan::Prepare(const v1::Assignment& assignment, Ready ready) {
  CancelPrepare();  // the previous round's check, if any, is over.
  if (!flavor_known_) KnowFlavor();
  {
    absl::MutexLock lock(&mu_);
    command_started_ = absl::InfiniteFuture();
    placement_checked_ = false;
    placement_late_ = false;
    unplaced_.clear();
    unplaced_at_ = absl::InfinitePast();
    check_failure_ = absl::OkStatus();
  }
  std::vector<mpi::MpiHost> hosts = MpiHostsFor(assignment);
  for (const mpi::MpiHost& h : hosts) {
    // "host:slots" lines (Hydra, Horovod) cannot carry an IPv6 literal.
    if (h.name.find(':') != std::string::npos) {
      ready(absl::InvalidArgumentError(absl::StrCat(
          "cannot write the MPI hostfiles: node ", SafeForLog(h.node_id, 64),
          " is known only by the IPv6 address ", SafeForLog(h.name, 64),
          ", which host:slots files cannot hold; give it a DNS name (--advertise-addr)")));
      return;
    }
  }
  if (absl::Status s = mpi::ValidateHosts(hosts); !s.ok()) {
    ready(
        absl::InvalidArgumentError(absl::StrCat("cannot write the MPI hostfiles: ", s.message())));
    return;
  }
  // The masters of workers still in the job stay (a restart logs in again
  // only to the replaced pods); the others' go.
  std::set<std::string> keep;
  for (const mpi::MpiHost& h : hosts) {
    keep.insert(mpi::ControlSocketPath(h.name, h.port, h.host_public_key, mux_base_));
  }
  StopMultiplexing(keep);
  if (absl::Status s = WriteRoundFiles(hosts); !s.ok()) {
    ready(s);
    return;
  }
  std::vector<mpi::ProbeTarget> targets;
  for (const auto& n : assignment.nodes()) {
    if (n.role() != v1::ROLE_MPI_WORKER) continue;
    targets.push_back({n.member().node_id(), n.addr(), n.ssh().port(), n.ssh().host_public_key()});
  }
  // A closed gate before COMMAND can start: its ssh waits there.
  const bool early = early_ && CloseGate();
  TLOG(kInfo) << "round " << assignment.round() << ": " << targets.size() << " worker(s), "
              << mpi::TotalSlots(hosts) << " slot(s); hostfile " << File("hostfile")
              << (early ? "; starting COMMAND while checking that every worker is reachable "
                          "over SSH (its ssh waits until they are)"
                        : "; waiting until every worker is reachable over SSH");
  mpi::ReadinessOptions ro;
  ro.timeout = config_.ready_timeout;
  // An ok probe runs the worker's login shell, whose start-up files (conda,
  // pyenv) may take seconds: allow them, within the bound.
  ro.attempt_timeout = std::min(absl::Seconds(15), config_.ready_timeout);
  mpi::SshProber* prober = prober_.get();
  if (master_prober_) prober = master_prober_.get();
  waiter_ = std::make_unique<mpi::ReadinessWaiter>(prober, clock_, ro);
  std::vector<launcher::ProcessSpec> specs = CommandSpec(assignment, hosts);
  const absl::Time started = clock_->Now();
  if (early) {
    ready(std::move(specs));  // runs at once; the check goes on below.
    ready = nullptr;
  }
  ready_thread_ = std::thread([this, targets = std::move(targets), specs = std::move(specs),
                               ready = std::move(ready), started, early]() mutable {
    absl::Status s = waiter_->Wait(targets);
    if (absl::IsCancelled(s)) return;  // CancelPrepare: `ready` must not run.
    if (!s.ok()) {
      // A failed round, early or not: Tick() reports it (stopping COMMAND,
      // held at the gate, or cancelling this preparation), and the
      // coordinator's verdict reaches the workers at once (a spawn failure
      // would end the launcher, and its hosted coordinator, first: the
      // workers were left to find the coordinator lost).
      {
        absl::MutexLock lock(&mu_);
        check_failure_ = s;
      }
      if (supervisor_ != nullptr) supervisor_->Wake();
      return;
    }
    TLOG(kInfo) << "every worker is reachable (" << targets.size() << " checked in "
                << absl::FormatDuration(clock_->Now() - started) << "); "
                << (early ? "COMMAND's ssh goes on" : "starting COMMAND");
    if (early) OpenGate();
    {
      absl::MutexLock lock(&mu_);
      command_started_ = clock_->Now();
    }
    if (early) {
      if (supervisor_ != nullptr) supervisor_->Wake();  // a failed OpenGate() for Tick().
    } else {
      ready(std::move(specs));
    }
  });
}

void MpiLauncherPlan::EndRound() {
  // COMMAND started early: the check may still run (the round ended while
  // it waited); it must not open the next round's gate.
  CancelPrepare();
}

void MpiLauncherPlan::CancelPrepare() {
  if (waiter_) waiter_->Cancel();  // Wait() returns at once ...
  if (ready_thread_.joinable()) ready_thread_.join();
  if (waiter_) {
    // ... but probes in flight end only at their attempt timeout, and the
    // waiter's destructor joins them: not on the agent's thread (a stop
    // must not wait for a probe). The prober lives until they are done.
    std::thread([waiter = std::move(waiter_), prober = prober_, master = master_prober_]() mutable {
      waiter.reset();
    }).detach();
  }
}

void MpiLauncherPlan::OnReportResponse(const v1::ReportResponse& response) {
  absl::MutexLock lock(&mu_);
  unplaced_.assign(response.mpi_unplaced_nodes().begin(), response.mpi_unplaced_nodes().end());
  unplaced_at_ = clock_->Now();
}

absl::Status MpiLauncherPlan::Tick(absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    if (!check_failure_.ok()) {
      absl::Status s = std::move(check_failure_);
      check_failure_ = absl::OkStatus();
      return s;
    }
  }
  if (config_.placement_timeout <= absl::ZeroDuration()) return absl::OkStatus();
  std::vector<std::string> unplaced;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time due = command_started_ + config_.placement_timeout;
    if (placement_checked_) {
      // Warned: say so if the sessions only came late (a slow start).
      if (placement_late_ && unplaced_.empty() && unplaced_at_ > placement_warned_at_) {
        placement_late_ = false;
        TLOG(kInfo) << "placement verified after all: every worker with slots has now "
                       "received an MPI session (the warning above was a slow start)";
      }
      return absl::OkStatus();
    }
    // Decide on an answer given after the deadline, not an older one.
    if (now < due || unplaced_at_ < due) return absl::OkStatus();
    placement_checked_ = true;
    unplaced = unplaced_;
    placement_late_ = !unplaced.empty() && !config_.require_placement;
    placement_warned_at_ = unplaced_at_;
  }
  if (unplaced.empty()) {
    TLOG(kInfo) << "placement verified: every worker with slots has received an MPI session";
    return absl::OkStatus();
  }
  std::vector<std::string> named;
  for (size_t i = 0; i < unplaced.size() && i < 10; ++i)
    named.push_back(SafeForLog(unplaced[i], 64));
  std::string message = absl::StrCat(
      "COMMAND has run for ", absl::FormatDuration(config_.placement_timeout), " and ",
      unplaced.size(),
      " worker(s) that should host ranks have seen no MPI session: ", absl::StrJoin(named, ", "),
      unplaced.size() > named.size() ? ", ..." : "",
      ". The ranks are probably all on the launcher: Open MPI 5 ignores OMPI_MCA_orte_* "
      "(it reads PRTE_MCA_prte_default_hostfile, which trainlet sets with --mpi=openmpi5 or "
      "auto), or COMMAND names another hostfile or too small a -np (use $TRAINLET_HOSTFILE "
      "and -np $TRAINLET_NP)");
  if (config_.require_placement) {
    return absl::FailedPreconditionError(
        absl::StrCat(message, "; --require-placement: stopping the job"));
  }
  TLOG(kWarning) << message;
  return absl::OkStatus();
}

// ---- The worker.

absl::StatusOr<std::unique_ptr<MpiWorkerPlan>> MpiWorkerPlan::Create(
    const MpiConfig& config, const std::map<std::string, std::string>& base_env,
    const std::string& state_dir, launcher::Supervisor* supervisor, RoundOptions* options) {
  std::unique_ptr<MpiWorkerPlan> plan(new MpiWorkerPlan(state_dir, supervisor));
  if (!config.ssh_key_dir.empty()) {
    // The job's Secret is mounted here too: only its key may log in.
    absl::StatusOr<mpi::KeyPair> mounted = mpi::LoadMountedKey(config.ssh_key_dir);
    if (!mounted.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--ssh-key-dir ", SafeForLog(config.ssh_key_dir, 256), ": ", mounted.status().message()));
    }
    plan->pinned_job_key_ = mounted->public_line;
  }
  if (access(config.sshd.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sshd not found at ", SafeForLog(config.sshd, 256), " (", strerror(errno),
                     "): install openssh-server in the worker's image, or pass --sshd=PATH"));
  }
  absl::StatusOr<mpi::KeyPair> host_key = mpi::GenerateEd25519();
  if (!host_key.ok()) return host_key.status();
  mpi::SshdPaths paths;
  paths.host_key = plan->File("ssh_host_ed25519_key");
  paths.authorized_keys = plan->File("authorized_keys");
  paths.pid_file = plan->File("sshd.pid");
  paths.session_script = plan->File("session.sh");
  const std::vector<std::tuple<std::string, std::string, mode_t>> files = {
      {paths.host_key, host_key->private_pem, 0600},
      {paths.authorized_keys, "", 0600},
      {plan->File("sessions"), "", 0600},
      {plan->File("env.sh"), mpi::EnvFile(base_env), 0600},
      {paths.session_script, mpi::SessionScript(plan->File("sessions"), plan->File("env.sh")),
       0700},
      {plan->File("sshd_config"), mpi::SshdConfig(config.ssh_port, paths), 0600},
  };
  for (const auto& [path, text, mode] : files) {
    if (absl::Status s = mpi::WriteFileAtomically(path, text, mode); !s.ok()) return s;
  }
  if (getuid() == 0 && mkdir("/run/sshd", 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create sshd's privilege separation directory /run/sshd: ", strerror(errno)));
  }
  // sshd checks its config itself: its own words beat a guess.
  absl::StatusOr<Captured> test =
      RunCaptured({config.sshd, "-t", "-f", plan->File("sshd_config")}, base_env);
  if (!test.ok()) return test.status();
  if (test->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sshd refuses the generated configuration ", plan->File("sshd_config"), ": ",
                     SafeForLog(absl::StripAsciiWhitespace(test->output), 1024)));
  }
  launcher::ProcessSpec sshd;
  sshd.role = launcher::ProcessRole::kHelper;
  sshd.name = "sshd";
  sshd.restart = launcher::RestartPolicy::kAlways;
  sshd.argv = {config.sshd, "-D", "-e", "-f", plan->File("sshd_config")};
  sshd.env = EnvStrings(base_env);
  sshd.output = launcher::OutputMode::kPrefix;
  if (absl::Status s = supervisor->StartHelper(sshd); !s.ok()) return s;
  TLOG(kInfo) << "sshd listening on port " << config.ssh_port << " (" << plan->File("sshd_config")
              << ")";

  options->role = v1::ROLE_MPI_WORKER;
  options->ssh.set_host_public_key(host_key->public_line);
  options->ssh.set_port(config.ssh_port);
  options->local_processes = 0;  // ranks arrive through sshd.
  // The launcher's job key comes in Assignment.mpi_launcher_client_key: the
  // worker needs no member list.
  options->want_nodes = false;
  return plan;
}

void MpiWorkerPlan::Prepare(const v1::Assignment& assignment, Ready ready) {
  const std::string& key = assignment.mpi_launcher_client_key();
  if (key.empty()) {
    ready(absl::InvalidArgumentError(
        "the round has no MPI launcher with a job key: is the job's launcher running "
        "`trainlet mpi-launcher` (and this pod's --coordinator its address)?"));
    return;
  }
  // Exactly "<type> <base64>": nothing else (no authorized_keys options such
  // as command="...") may reach authorized_keys.
  if (!mpi::IsValidPublicKeyLine(key)) {
    ready(absl::InvalidArgumentError(absl::StrCat(
        "the launcher's job key is not an SSH public key line: \"", SafeForLog(key, 128), "\"")));
    return;
  }
  if (!pinned_job_key_.empty() && key != pinned_job_key_) {
    ready(absl::FailedPreconditionError(
        "the launcher's job key is not the one mounted in --ssh-key-dir: refusing to let it "
        "in (mount the same SSH Secret in the launcher and the workers)"));
    return;
  }
  if (key != authorized_key_) {
    if (absl::Status s = mpi::WriteFileAtomically(File("authorized_keys"), key + "\n", 0600);
        !s.ok()) {
      ready(s);
      return;
    }
    authorized_key_ = key;
  }
  // Sessions count per round.
  if (absl::Status s = mpi::WriteFileAtomically(File("sessions"), "", 0600); !s.ok()) {
    ready(s);
    return;
  }
  ready(std::vector<launcher::ProcessSpec>{});
}

void MpiWorkerPlan::DecorateReport(v1::ReportRequest* report) {
  std::optional<std::string> data = ReadRegularFile(File("sessions"), 1 << 20);
  if (!data) return;
  report->set_mpi_sessions(static_cast<int>(std::count(data->begin(), data->end(), '\n')));
}

void MpiWorkerPlan::EndRound() {
  // The supervisor's word, not sshd's pid file (stale after a crash).
  const int killed = KillSessions(supervisor_->helper_pid("sshd"), {});
  if (killed > 0) TLOG(kInfo) << "killed " << killed << " process(es) left by MPI sessions";
}

int KillSessions(pid_t sshd_pid, const std::vector<pid_t>& keep) {
  std::set<pid_t> spare(keep.begin(), keep.end());
  // The listener stays (it serves the next round); a listener we do not
  // know is recognised by name among our children.
  if (sshd_pid > 0) spare.insert(sshd_pid);
  if (absl::StatusOr<std::vector<launcher::ChildProcess>> children = launcher::ListChildren();
      children.ok()) {
    for (const auto& c : *children) {
      if (c.comm == "sshd" && sshd_pid <= 0) spare.insert(c.pid);
    }
  }
  std::set<pid_t> killed;
  for (int pass = 0; pass < 5; ++pass) {
    absl::StatusOr<std::vector<pid_t>> all = launcher::ListDescendants(getpid());
    if (!all.ok()) break;
    int fresh = 0;
    for (pid_t pid : *all) {
      if (spare.count(pid) != 0) continue;
      // sshd's own per-connection processes (OpenSSH 9.8+: sshd-session,
      // sshd-auth) stay: the connection is the launcher's multiplexing
      // master, which the next round reuses (mpi/ssh_master.h); what its
      // sessions started (shells, orted, ranks) goes.
      if (absl::StartsWith(ReadComm(pid), "sshd")) continue;
      if (killed.insert(pid).second) ++fresh;
      kill(pid, SIGKILL);
    }
    if (fresh == 0) break;
    usleep(20 * 1000);  // let the kernel reparent their children to us.
  }
  return static_cast<int>(killed.size());
}

}  // namespace trainlet::agent
