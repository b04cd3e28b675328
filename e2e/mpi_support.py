"""Real MPI components for the MPI e2e tests and the launch benchmark: the
allreduce program built with the real compilers, plain OpenSSH sshd on
pod-like netns hosts (e2e/netns.py), the argv and environment of a bare
`mpirun`/`mpiexec.hydra` as a user would type it, and hosts that run inside
the Open MPI 5 Debian trixie root (scripts/mpi5_root.sh).

    prog = mpi_support.build_mpi_program("openmpi", self.dir)
    keys = mpi_support.ssh_keys(state)
    for h in workers: mpi_support.start_bare_sshd(cluster, h, state, 2222)
    mpi_support.wait_sshd(procs, 10)
    hostfile = mpi_support.write_hostfile(path, "openmpi", [(h.name, 2) for h in workers])
    argv, env = mpi_support.bare_mpirun_argv("openmpi", hostfile, 6, keys["key"], [prog])
    p = cluster.start(launcher, "mpirun", argv, env=self.base_env(**env))

Flavors: "openmpi" (Debian 12's Open MPI 4.1: mpicc, mpirun), "mpich"
(MPICH 4.0 hydra: mpicc.mpich, mpiexec.hydra) and "openmpi5" (Open MPI 5.0
with PRRTE, only inside the trixie root: run_in_root / chroot_prefix).

Hosts in the Open MPI 5 root: a chroot does not see /etc/netns/<ns>/hosts,
so each process started by chroot_prefix runs in a private mount namespace
(unshare --mount) that mounts /proc, /dev, /sys, the host's hosts file over
ROOT/etc/hosts, a fresh tmpfs on ROOT/tmp (a per-host /tmp, as in a pod) and
the shared directories (keys, hostfiles) at their own paths; all of it goes
away with the host's last process, so there is nothing to unmount.

Stdlib only; not thread-safe (one test thread drives it).
"""

import hashlib
import os
import pwd
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "workers", "mpi_allreduce.c")
CACHE = "/var/tmp/trainlet-e2e-cache"
MPI5_ROOT_DEFAULT = "/var/cache/trainlet/trixie-ompi5"
MPI5_PROGRAM = "/opt/trainlet-e2e/mpi_allreduce"  # inside the root
SSHD = "/usr/sbin/sshd"

FLAVORS = ("openmpi", "mpich", "openmpi5")
_COMPILERS = {"openmpi": ["mpicc.openmpi", "mpicc"], "mpich": ["mpicc.mpich"]}
_DEV_PACKAGE = {"openmpi": "libopenmpi-dev", "mpich": "libmpich-dev"}
LAUNCHERS = {"openmpi": "mpirun", "mpich": "mpiexec.hydra", "openmpi5": "mpirun"}

_RANK_RE = re.compile(r"^rank (\d+)/(\d+) host (\S+)(?: t=(\d+\.\d+))?\s*$", re.M)
_SUM_RE = re.compile(r"^allreduce sum=(-?\d+) expected=(-?\d+)\s*$", re.M)


def _check_flavor(flavor):
    if flavor not in FLAVORS:
        raise ValueError("unknown MPI flavor %r (use one of %s)" % (flavor, ", ".join(FLAVORS)))


# --- the program ---------------------------------------------------------------------

def build_mpi_program(flavor, outdir=None):
    """Path of e2e/workers/mpi_allreduce.c compiled for `flavor` ("openmpi"
    or "mpich"), cached under `outdir` (default CACHE) by a hash of the
    source and the compiler's command line, so a second call is free.
    Raises unittest.SkipTest when the compiler or the MPI headers are missing.
    (For "openmpi5" the program is built inside the root: ompi5_root().)"""
    if flavor not in _COMPILERS:
        raise ValueError("build_mpi_program: flavor %r has no host compiler (use %s)"
                         % (flavor, " or ".join(_COMPILERS)))
    compiler = next((shutil.which(c) for c in _COMPILERS[flavor] if shutil.which(c)), None)
    if compiler is None:
        raise unittest.SkipTest("%s not found: apt-get install %s" % (
            " or ".join(_COMPILERS[flavor]), _DEV_PACKAGE[flavor]))
    show = subprocess.run([compiler, "-show" if flavor == "mpich" else "--showme"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=30).stdout
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read() + show.encode()).hexdigest()[:16]
    outdir = outdir or CACHE
    os.makedirs(outdir, exist_ok=True)
    out = os.path.join(outdir, "mpi_allreduce-%s-%s" % (flavor, digest))
    if os.access(out, os.X_OK):
        return out
    fd, tmp = tempfile.mkstemp(prefix=".mpi_allreduce-", dir=outdir)
    os.close(fd)
    try:
        r = subprocess.run([compiler, "-O2", "-Wall", "-o", tmp, SOURCE], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        if r.returncode != 0:
            if "mpi.h" in r.stdout:
                raise unittest.SkipTest("%s has no mpi.h: apt-get install %s"
                                        % (compiler, _DEV_PACKAGE[flavor]))
            raise RuntimeError("%s %s failed (rc %d):\n%s" % (compiler, SOURCE, r.returncode,
                                                             r.stdout))
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)  # atomic: tests running in parallel share the cache
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def require_launcher(flavor):
    """Path of the flavor's launcher on this machine (not for "openmpi5"),
    or unittest.SkipTest."""
    _check_flavor(flavor)
    path = shutil.which(LAUNCHERS[flavor])
    if path is None:
        raise unittest.SkipTest("%s not found: apt-get install %s" % (
            LAUNCHERS[flavor], {"openmpi": "openmpi-bin", "mpich": "mpich"}.get(flavor, "")))
    return path


def parse_ranks(stdout):
    """{rank: host} from the program's "rank R/N host H" lines. Raises
    ValueError when a rank appears twice or the lines disagree on N."""
    ranks, sizes = {}, set()
    for m in _RANK_RE.finditer(stdout):
        rank = int(m.group(1))
        if rank in ranks:
            raise ValueError("rank %d printed twice" % rank)
        ranks[rank] = m.group(3)
        sizes.add(int(m.group(2)))
    if len(sizes) > 1:
        raise ValueError("ranks disagree on the world size: %s" % sorted(sizes))
    return ranks


def parse_rank_times(stdout):
    """{rank: CLOCK_MONOTONIC seconds at the start of main} (the t= field)."""
    return {int(m.group(1)): float(m.group(4)) for m in _RANK_RE.finditer(stdout)
            if m.group(4)}


def parse_sum(stdout):
    """(sum, expected) from rank 0's "allreduce sum=S expected=E" line, or None."""
    m = _SUM_RE.search(stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_sum(stdout):
    """The sum from rank 0's "allreduce sum=S expected=E" line; AssertionError
    (quoting the output's tail) when the line is missing or S != E."""
    got = parse_sum(stdout)
    if got is None:
        raise AssertionError("no 'allreduce sum=' line in the output:\n" + stdout[-2000:])
    if got[0] != got[1]:
        raise AssertionError("allreduce sum=%d expected=%d" % got)
    return got[0]


def check_run(stdout, np, hosts=None):
    """What is wrong with one run's stdout, as a list of messages (empty when
    it is right): every rank 0..np-1 printed once, the sum line is there and
    equals np*(np+1)/2, and (when `hosts` is given) the set of hosts the ranks
    ran on is exactly `hosts`."""
    problems = []
    try:
        ranks = parse_ranks(stdout)
    except ValueError as e:
        return [str(e)]
    if sorted(ranks) != list(range(np)):
        problems.append("ranks printed: %s, expected 0..%d" % (sorted(ranks), np - 1))
    got = parse_sum(stdout)
    want = np * (np + 1) // 2
    if got is None:
        problems.append("no 'allreduce sum=' line")
    elif got != (want, want):
        problems.append("allreduce sum=%d expected=%d (np=%d wants %d)" % (got + (np, want)))
    if hosts is not None and set(ranks.values()) != set(hosts):
        problems.append("ranks ran on %s, expected %s" % (
            sorted(set(ranks.values())), sorted(set(hosts))))
    return problems


# --- ssh --------------------------------------------------------------------------------

def ssh_keys(state_dir):
    """Creates (once) in state_dir an ed25519 host key, a client key and an
    authorized_keys holding the client key; returns their paths as
    {"hostkey", "key", "authorized_keys"}."""
    os.makedirs(state_dir, exist_ok=True)
    paths = {"hostkey": os.path.join(state_dir, "ssh_host_ed25519_key"),
             "key": os.path.join(state_dir, "id_ed25519"),
             "authorized_keys": os.path.join(state_dir, "authorized_keys")}
    for name in ("hostkey", "key"):
        if not os.path.exists(paths[name]):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
                            "-f", paths[name]], check=True, timeout=30,
                           stdout=subprocess.DEVNULL)
    if not os.path.exists(paths["authorized_keys"]):
        shutil.copyfile(paths["key"] + ".pub", paths["authorized_keys"])
        os.chmod(paths["authorized_keys"], 0o600)
    return paths


def ssh_args(key, port=2222, connect_timeout=5, known_hosts=None):
    """The ssh client options of a bare baseline run: the port, the key, and
    either no host key pinning (known_hosts None: StrictHostKeyChecking=no,
    known_hosts /dev/null, as users commonly do by hand) or the host keys
    pinned by `known_hosts` (StrictHostKeyChecking=yes; write_known_hosts).
    One string, for *_rsh_args variables."""
    if known_hosts is None:
        pin = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    else:
        pin = "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s" % known_hosts
    return ("-p %d -i %s %s -o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=%d"
            % (port, key, pin, connect_timeout))


def write_known_hosts(path, names, hostkey_pub, port=2222):
    """Writes a known_hosts pinning `hostkey_pub` (the path of a host's
    public key, e.g. ssh_keys(state)["hostkey"] + ".pub") for every name in
    `names` on `port` ("[name]:port key" lines); returns path."""
    with open(hostkey_pub) as f:
        fields = f.read().split()
    key = " ".join(fields[:2])
    pattern = "%s" if port == 22 else "[%s]:" + str(port)
    with open(path, "w") as f:
        f.write("".join("%s %s\n" % (pattern % n, key) for n in names))
    return path


def write_sshd_config(state_dir, port=2222):
    """Writes state_dir/sshd_config for a plain OpenSSH sshd that listens on
    `port`, uses ssh_keys(state_dir), runs without PAM and with StrictModes
    off (the keys live under /tmp); returns its path."""
    keys = ssh_keys(state_dir)
    path = os.path.join(state_dir, "sshd_config-%d" % port)
    with open(path, "w") as f:
        f.write("\n".join([
            "Port %d" % port,
            "HostKey %s" % keys["hostkey"],
            "AuthorizedKeysFile %s" % keys["authorized_keys"],
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            "AcceptEnv *",
            "LogLevel INFO",
            ""]))
    return path


def clean_home_prefix(host, home_dir):
    """Like netns.Cluster.prefix (netns `host`, its hostname), plus a private
    mount namespace in which the running user's home directory is replaced by
    `home_dir` (an empty directory, say). For sshd: every ssh session runs the
    user's shell, which for root on a development machine may source a slow
    ~/.bashrc (pyenv init: +0.55 s per session here), which a pod does not
    have. Nothing to clean up: the mount goes with the namespace."""
    home = pwd.getpwuid(os.geteuid()).pw_dir
    return ["ip", "netns", "exec", host.ns, "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-c",
            'set -e; mount --bind "$1" "$2"; hostname "$0"; shift 2; exec "$@"',
            host.name, os.path.abspath(home_dir), home]


def start_bare_sshd(cluster, host, state_dir, port=2222, root=None, clean_home=False):
    """Starts Debian's /usr/sbin/sshd (or, with `root`, the trixie root's) in
    `host` with its own hostname, in the foreground, logging to its stderr
    file; returns the harness Proc (its pid is sshd's). state_dir holds the
    keys and the config and must be reachable from `root` (see
    run_in_root's shared_dirs: state_dir is shared automatically). With
    clean_home (not with root), sessions get an empty home directory
    (clean_home_prefix). Call wait_sshd before connecting."""
    config = write_sshd_config(state_dir, port)
    argv = [SSHD, "-D", "-e", "-f", config,
            "-o", "PidFile=%s" % os.path.join(state_dir, "sshd-%s.pid" % host.name)]
    name = "sshd-%s" % host.name
    if root is None:
        os.makedirs("/run/sshd", exist_ok=True)  # the privilege-separation directory
        if clean_home:
            home = os.path.join(state_dir, "home")
            os.makedirs(home, exist_ok=True)
            p = cluster.test.start(name, argv, prefix=clean_home_prefix(host, home))
            cluster.procs.append(p)
            return p
        return cluster.start(host, name, argv)
    return run_in_root(cluster, host, root, name, argv, shared_dirs=[state_dir])


def wait_sshd(procs, timeout=10.0):
    """Waits until every sshd Proc logs that it listens; AssertionError (with
    its log) when one exits or the timeout passes."""
    deadline = time.monotonic() + timeout
    pending = list(procs)
    while pending:
        for p in list(pending):
            if "Server listening on" in p.stderr:
                pending.remove(p)
            elif not p.running():
                raise AssertionError("sshd exited before listening\n" + p.describe())
        if pending and time.monotonic() >= deadline:
            raise AssertionError("sshd not listening after %.1fs\n%s" % (
                timeout, "\n".join(p.describe() for p in pending)))
        if pending:
            time.sleep(0.02)


# --- hostfiles and the bare launcher ------------------------------------------------------

def write_hostfile(path, flavor, hosts_slots):
    """Writes a hand-written hostfile: `host slots=N` lines for Open MPI,
    `host:N` for MPICH hydra; returns path. hosts_slots: [(name, slots)]."""
    _check_flavor(flavor)
    fmt = "%s:%d" if flavor == "mpich" else "%s slots=%d"
    with open(path, "w") as f:
        f.write("".join((fmt % (h, n)) + "\n" for h, n in hosts_slots))
    return path


def bare_mpirun_argv(flavor, hostfile, np, key, program, port=2222, hostfile_via=None,
                     known_hosts=None):
    """(argv, env) of a bare launcher run on the launcher host, as a user
    would write it: `program` (a list) started as np ranks over `hostfile`,
    ssh with `key` to `port` (ssh_args). env holds only the variables to add
    (pass them through test.base_env(**env)).

    hostfile_via says how the hostfile reaches the launcher:
      "flag"     --hostfile H (Open MPI) / -f H (hydra); default for openmpi, mpich
      "env"      the flavor's own variable: OMPI_MCA_orte_default_hostfile (4),
                 PRTE_MCA_prte_default_hostfile (5; its default), HYDRA_HOST_FILE
      "orte-env" only the Open MPI 4 names (OMPI_MCA_orte_default_hostfile,
                 OMPI_MCA_plm_rsh_args) whatever the flavor: with openmpi5 this
                 reproduces the silent run of every rank on the launcher, rc 0,
                 as long as np <= the launcher's cores (PRRTE's default slots;
                 with more it fails with "not enough slots", rc 1).
    The ssh options go in OMPI_MCA_plm_rsh_args (4), PRTE_MCA_plm_ssh_args (5)
    or HYDRA_LAUNCHER_EXTRA_ARGS (hydra; mpi-operator's HYDRA_LAUNCH_EXTRA_ARGS
    is not a name hydra 4.0 reads). known_hosts: as in ssh_args (None: no
    pinning)."""
    _check_flavor(flavor)
    via = hostfile_via or ("env" if flavor == "openmpi5" else "flag")
    if via not in ("flag", "env", "orte-env"):
        raise ValueError("hostfile_via %r: use flag, env or orte-env" % via)
    ssh = ssh_args(key, port, known_hosts=known_hosts)
    env = {}
    if flavor == "mpich":
        argv = ["mpiexec.hydra", "-launcher", "ssh", "-np", str(np)]
        env["HYDRA_LAUNCHER_EXTRA_ARGS"] = ssh
    else:
        argv = ["mpirun", "-np", str(np)]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env["PRTE_MCA_plm_ssh_args" if flavor == "openmpi5" else "OMPI_MCA_plm_rsh_args"] = ssh
    if via == "flag":
        argv += ["-f" if flavor == "mpich" else "--hostfile", hostfile]
    elif via == "orte-env":
        env.pop("PRTE_MCA_plm_ssh_args", None)
        env.pop("HYDRA_LAUNCHER_EXTRA_ARGS", None)
        env.update(OMPI_MCA_orte_default_hostfile=hostfile, OMPI_MCA_plm_rsh_args=ssh)
    else:
        env[{"openmpi": "OMPI_MCA_orte_default_hostfile",
             "openmpi5": "PRTE_MCA_prte_default_hostfile",
             "mpich": "HYDRA_HOST_FILE"}[flavor]] = hostfile
    return argv + list(program), env


# --- the Open MPI 5 root -------------------------------------------------------------------

def ompi5_root():
    """Path of the trixie root with Open MPI 5 built by scripts/mpi5_root.sh
    (TRAINLET_MPI5_ROOT overrides the default), with the program compiled
    from the current source; unittest.SkipTest saying what to run otherwise."""
    root = os.environ.get("TRAINLET_MPI5_ROOT") or MPI5_ROOT_DEFAULT
    if not os.path.isfile(os.path.join(root, ".ready")):
        raise unittest.SkipTest("no Open MPI 5 root at %s: run scripts/mpi5_root.sh first "
                                "(as root; debootstrap, a few minutes)" % root)
    built_src = os.path.join(root, MPI5_PROGRAM.lstrip("/") + ".c")
    try:
        with open(built_src, "rb") as a, open(SOURCE, "rb") as b:
            fresh = a.read() == b.read()
    except FileNotFoundError:
        fresh = False
    if not fresh or not os.access(os.path.join(root, MPI5_PROGRAM.lstrip("/")), os.X_OK):
        raise unittest.SkipTest("%s in %s is missing or older than %s: run "
                                "scripts/mpi5_root.sh again" % (MPI5_PROGRAM, root, SOURCE))
    return root


def chroot_prefix(host, root, shared_dirs=()):
    """argv prefix that runs a command in netns `host`, with its hostname,
    chrooted into `root` (see the module docstring for the private mount
    namespace). shared_dirs: host directories made visible at the same path
    inside (under /tmp: on the host's private tmpfs; elsewhere the mount
    point is created in the root once and left there)."""
    lines = ['set -e', 'R=%s' % shlex.quote(root),
             'mount -t proc proc "$R/proc"',
             'mount --rbind /dev "$R/dev"',
             'mount --rbind /sys "$R/sys"',
             '[ -e "$R/etc/hosts" ] || : > "$R/etc/hosts"',
             'mount --bind /etc/hosts "$R/etc/hosts"',
             'mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"',
             'mkdir -p "$R/run/sshd"']
    for d in shared_dirs:
        d = os.path.abspath(d)
        lines += ['mkdir -p "$R"%s' % shlex.quote(d),
                  'mount --bind %s "$R"%s' % (shlex.quote(d), shlex.quote(d))]
    lines += ['hostname %s' % shlex.quote(host.name), 'exec chroot "$R" "$@"']
    return ["ip", "netns", "exec", host.ns, "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-c", "; ".join(lines), "mpi5-host"]


def run_in_root(cluster, host, root, name, argv, env=None, shared_dirs=()):
    """Starts argv (paths as seen inside `root`) in `host` chrooted into
    `root`, through the cluster's test harness like cluster.start; returns
    the Proc. `shared_dirs` as in chroot_prefix; the test's own dir is always
    shared (hostfiles and outputs can be written there)."""
    test = cluster.test
    dirs = list(dict.fromkeys(list(shared_dirs) + [test.dir]))
    p = test.start(name, argv, env=env, prefix=chroot_prefix(host, root, dirs))
    cluster.procs.append(p)
    return p
