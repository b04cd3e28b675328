#include "mpi/formats.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace trainlet::mpi {
namespace {

// A path as an OpenSSH configuration argument: '%' is a token there (and in
// ssh_config), and a path with a space must be in double quotes.
std::string ConfigPath(absl::string_view path) {
  std::string escaped = absl::StrReplaceAll(path, {{"%", "%%"}});
  if (absl::StrContains(escaped, ' ')) return absl::StrCat("\"", escaped, "\"");
  return escaped;
}

}  // namespace

std::string OpenMpiHostfile(const std::vector<MpiHost>& hosts) {
  std::string out;
  for (const MpiHost& host : hosts) absl::StrAppend(&out, host.name, " slots=", host.slots, "\n");
  return out;
}

std::string HydraHostfile(const std::vector<MpiHost>& hosts) {
  std::string out;
  for (const MpiHost& host : hosts) absl::StrAppend(&out, host.name, ":", host.slots, "\n");
  return out;
}

std::string KnownHosts(const std::vector<MpiHost>& hosts) {
  std::string out;
  for (const MpiHost& host : hosts) {
    if (host.host_public_key.empty()) continue;  // the launcher: not reached over SSH
    if (host.port == 22) {
      absl::StrAppend(&out, host.name, " ", host.host_public_key, "\n");
    } else {
      absl::StrAppend(&out, "[", host.name, "]:", host.port, " ", host.host_public_key, "\n");
    }
  }
  return out;
}

std::string ControlSocketPath(const std::string& name, int port, const std::string& host_public_key,
                              const std::string& control_dir) {
  if (control_dir.empty() || port == 0) return "";
  // FNV-1a, 64 bits: stable across builds and runs.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const std::string& part : {name, absl::StrCat(port), host_public_key}) {
    for (const char c : part) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    h = (h ^ 0xffU) * 0x100000001b3ULL;  // a separator no name or key holds
  }
  return absl::StrCat(control_dir, "/", absl::Hex(h, absl::kZeroPad16));
}

std::string SshClientConfig(const std::vector<MpiHost>& hosts, const SshClientPaths& paths) {
  std::string out = "# Written by trainlet mpi-launcher for this job's ssh (ssh -F).\n";
  for (const MpiHost& host : hosts) {
    if (host.port == 0) continue;  // the launcher: not reached over SSH
    absl::StrAppend(&out, "Host ", host.name, "\n  Port ", host.port, "\n");
    const std::string socket =
        ControlSocketPath(host.name, host.port, host.host_public_key, paths.control_dir);
    if (!socket.empty()) absl::StrAppend(&out, "  ControlPath ", ConfigPath(socket), "\n");
  }
  absl::StrAppend(&out, "Host *\n",                                              //
                  "  IdentityFile ", ConfigPath(paths.identity_file), "\n",      //
                  "  IdentitiesOnly yes\n",                                      //
                  "  UserKnownHostsFile ", ConfigPath(paths.known_hosts), "\n",  //
                  "  GlobalKnownHostsFile /dev/null\n",                          //
                  "  StrictHostKeyChecking yes\n",                               //
                  "  BatchMode yes\n",                                           //
                  "  ConnectTimeout 10\n",                                       //
                  "  ConnectionAttempts 3\n",                                    //
                  "  LogLevel ERROR\n",                                          //
                  "  ForwardX11 no\n");
  if (!paths.control_dir.empty()) absl::StrAppend(&out, "  ControlMaster no\n");
  return out;
}

std::string DiscoverHostsScript(const std::string& hosts_file) {
  return absl::StrCat(
      "#!/bin/sh\n",
      "# Horovod --host-discovery-script written by trainlet mpi-launcher: prints the\n",
      "# live hosts (name:slots), a file the launcher rewrites whenever they change.\n",
      "exec cat -- ", ShellQuote(hosts_file), "\n");
}

std::string DiscoverHostsList(const std::vector<MpiHost>& hosts) {
  std::string out;
  for (const MpiHost& host : hosts) absl::StrAppend(&out, host.name, ":", host.slots, "\n");
  return out;
}

std::string SshWrapperScript(const std::string& real_ssh, const std::string& config,
                             const std::string& gate) {
  std::string wait;
  if (!gate.empty()) {
    wait = absl::StrCat(
        "# COMMAND started early: wait until every worker passed the readiness check.\n",
        "if [ -p ", ShellQuote(gate), " ]; then : <", ShellQuote(gate), "; fi\n");
  }
  return absl::StrCat("#!/bin/sh\n",
                      "# ssh with this job's keys and pinned host keys (trainlet mpi-launcher).\n",
                      wait, "exec ", ShellQuote(real_ssh), " -F ", ShellQuote(config), " \"$@\"\n");
}

std::string SshdConfig(int port, const SshdPaths& paths) {
  return absl::StrCat("# Written by trainlet mpi-worker for its supervised sshd.\n",  //
                      "Port ", port, "\n",                                            //
                      "ListenAddress 0.0.0.0\n",                                      //
                      "ListenAddress ::\n",                                           //
                      "HostKey ", ConfigPath(paths.host_key), "\n",                   //
                      "AuthorizedKeysFile ", ConfigPath(paths.authorized_keys), "\n", "PidFile ",
                      ConfigPath(paths.pid_file), "\n",       //
                      "UsePAM no\n",                          //
                      "StrictModes no\n",                     //
                      "PasswordAuthentication no\n",          //
                      "KbdInteractiveAuthentication no\n",    //
                      "PubkeyAuthentication yes\n",           //
                      "PermitRootLogin prohibit-password\n",  //
                      // sshd hands the rest of the line to the user's shell.
                      "ForceCommand ", ShellQuote(paths.session_script), "\n",  //
                      "PermitUserEnvironment no\n",                             //
                      "X11Forwarding no\n",                                     //
                      "PrintMotd no\n",                                         //
                      "PrintLastLog no\n",                                      //
                      "MaxStartups 200:30:400\n",                               //
                      "LogLevel ERROR\n");
}

std::string SessionScript(const std::string& sessions_file, const std::string& env_file) {
  return absl::StrCat(
      "#!/bin/sh\n",  //
      "if [ \"$SSH_ORIGINAL_COMMAND\" != \"", kReadinessCommand, "\" ]; then echo \"$$\" >> ",
      ShellQuote(sessions_file), "; fi\n",  //
      ". ", ShellQuote(env_file), "\n",
      "if [ -n \"$SSH_ORIGINAL_COMMAND\" ]; then exec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"; fi\n",
      "exec \"${SHELL:-/bin/sh}\" -l\n");
}

bool IsShellVariableName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

std::string EnvFile(const std::map<std::string, std::string>& env) {
  static constexpr absl::string_view kPerSession[] = {
      "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "MAIL"};
  std::string out;
  for (const auto& [name, value] : env) {  // std::map: sorted by name
    if (!IsShellVariableName(name) || absl::StartsWith(name, "SSH_")) continue;
    if (value.find('\0') != std::string::npos) continue;
    bool per_session = false;
    for (absl::string_view skip : kPerSession) per_session = per_session || name == skip;
    if (per_session) continue;
    absl::StrAppend(&out, "export ", name, "=", ShellQuote(value), "\n");
  }
  return out;
}

std::string ShellQuote(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

}  // namespace trainlet::mpi
