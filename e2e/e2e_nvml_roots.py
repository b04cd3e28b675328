"""NVML in the static trainlet, in other images (issue 29, item 1): the
release binary reads NVML through the NVML reader it carries, run by the
image's own dynamic loader, in Debian 11 (bullseye, glibc 2.31: older than
the build's 2.36), 12 (bookworm) and 13 (trixie) roots made by `debootstrap
--variant=minbase` with no package added; and in a root with no loader at
all (a FROM scratch image), it says so.

In each root, `trainlet probe --format=json` runs chrooted in a private
mount namespace (/proc, /dev, /sys, a tmpfs /tmp holding the test's
directory: the static trainlet, the fake libnvidia-ml.so.1 in lib/, the
fixture), with the default --nvml-library=libnvidia-ml.so.1, which the
root's loader finds through LD_LIBRARY_PATH. The fake (topology/testing/
fake_nvml.cc) is built like the reader, against glibc 2.17's symbol
versions, so the same file loads in every root. The probe must report NVML
OK with the fixture's GPUs and their health; portable_glibc_check (exceptions,
call_once, dlopen in a program built that way) must pass in the root too.
Every mount goes away with the namespace; the test checks that none is left.

Needs the static binary (skips with the reason otherwise) and root. A
missing Debian root is skipped with the command that builds it
(scripts/debian_root.sh), except under E2E_REQUIRE_ROOTS=1 (ctest label
`roots`: e2e_nvml_roots_required), where it fails. The empty root always
runs. No network.
"""

import json
import os
import shlex
import shutil
import subprocess

import debian_roots
from harness import E2ETestCase, TRAINLET

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(os.path.dirname(HERE), "topology", "testdata")
FAKE_NVML = os.environ.get("E2E_FAKE_NVML") or os.path.join(
    os.path.dirname(TRAINLET), "topology", "fake_nvml", "libnvidia-ml.so.1")
# Built beside the fake (topology/nvml.cmake).
PORTABLE_CHECK = os.path.join(os.path.dirname(os.path.dirname(FAKE_NVML)),
                              "portable_glibc_check")
GLIBC = {"bullseye": "2.31", "bookworm": "2.36", "trixie": "2.41"}


def chrooted(root, shared_dir, command):
    """argv running `command` (a shell line) chrooted into `root` in a
    private mount namespace with /proc, /dev, /sys and a tmpfs /tmp holding
    `shared_dir` (under /tmp) at its own path. Nothing is written into the
    root; the mounts die with the namespace."""
    script = "; ".join([
        "set -e", "R=%s" % shlex.quote(root),
        'mount -t proc proc "$R/proc"',
        'mount --rbind /dev "$R/dev"',
        'mount --rbind /sys "$R/sys"',
        'mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"',
        'mkdir -p "$R"%s' % shlex.quote(shared_dir),
        'mount --bind %s "$R"%s' % (shlex.quote(shared_dir), shlex.quote(shared_dir)),
        'exec chroot "$R" /bin/sh -c %s' % shlex.quote(command),
    ])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def mounts_under(root):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if (" " + os.path.realpath(root)) in line]


class NvmlRootsCase(E2ETestCase):

    def setUp(self):
        super().setUp()
        debian_roots.require_static(TRAINLET)
        for path in (FAKE_NVML, PORTABLE_CHECK):
            if not os.path.exists(path):
                self.skipTest("built with the tests (topology/nvml.cmake): %s" % path)
        # What the root sees, under the test's directory (in /tmp).
        self.shared = self.path("shared")
        os.makedirs(os.path.join(self.shared, "lib"))
        shutil.copy2(TRAINLET, os.path.join(self.shared, "trainlet"))
        shutil.copy2(FAKE_NVML, os.path.join(self.shared, "lib", "libnvidia-ml.so.1"))
        shutil.copy2(PORTABLE_CHECK, os.path.join(self.shared, "portable_glibc_check"))
        for fixture in ("nvml_unhealthy.json", "nvml_h100x8.json"):
            shutil.copy2(os.path.join(TESTDATA, fixture), self.shared)

    def run_in(self, root, command):
        env = self.base_env()
        r = subprocess.run(chrooted(root, self.shared, command), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60, env=env)
        self.assertEqual(mounts_under(root), [], "mounts left under %s" % root)
        return r

    def probe_in(self, root, fixture="nvml_unhealthy.json"):
        s = self.shared
        r = self.run_in(root, "FAKE_NVML_FIXTURE=%s/%s LD_LIBRARY_PATH=%s/lib %s/trainlet probe "
                        "--format=json --nccl-library=none" % (s, fixture, s, s))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)


class DebianRootsTest(NvmlRootsCase):

    def check_release(self, release):
        root = debian_roots.root(release)
        # The root's own glibc, older than the build's in bullseye.
        r = self.run_in(root, "cat /etc/debian_version; ldd --version | head -1; "
                        "%s/portable_glibc_check" % self.shared)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        # "13.1" once released, "trixie/sid" while in testing.
        self.assertTrue(lines[0].startswith((debian_roots.RELEASES[release], release)), lines)
        self.assertTrue(lines[1].endswith(" " + GLIBC[release]), lines)
        self.assertEqual(lines[2], "portable_glibc_check: ok")

        p = self.probe_in(root)
        self.assertEqual(p["nvml"]["status"], "OK", p["nvml"])
        self.assertEqual(p["nvml"]["version"], "550.54.15")
        self.assertIn("read from libnvidia-ml.so.1", p["nvml"]["reason"])
        gpus = p["gpus"]
        self.assertEqual([g["uuid"][-2:] for g in gpus], ["00", "01", "02", "03"], gpus)
        self.assertEqual({g["source"] for g in gpus}, {"nvml"})
        self.assertTrue(gpus[1]["health"]["remap_pending"])
        self.assertEqual(gpus[1]["health"]["ecc_dbe_volatile"], "1")
        self.assertEqual(gpus[2]["health"]["retired_pages_dbe"], 1)
        self.assertTrue(gpus[2]["health"]["retired_pages_pending"])
        self.assertEqual(gpus[3]["health"]["processes"][0]["pid"], 4242)

        # Eight GPUs with NVLinks: the fixture of the reader's benchmark.
        p = self.probe_in(root, "nvml_h100x8.json")
        self.assertEqual(p["nvml"]["status"], "OK", p["nvml"])
        self.assertEqual(len(p["gpus"]), 8)
        self.assertEqual(p["gpus"][7]["nvlinks"][0]["count"], 18)

    def test_debian_11_bullseye(self):
        self.check_release("bullseye")

    def test_debian_12_bookworm(self):
        self.check_release("bookworm")

    def test_debian_13_trixie(self):
        self.check_release("trixie")


class EmptyRootTest(NvmlRootsCase):
    """An image with no dynamic loader (FROM scratch, or musl's): NVML is
    ABSENT, saying why, and the probe goes on."""

    def test_no_loader_is_absent_with_the_reason(self):
        root = debian_roots.make_empty_root(self.path("empty"))
        s = self.shared
        r = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             "set -e; R=%s; mount -t proc proc $R/proc; mount -t tmpfs tmpfs $R/tmp; "
             "mkdir -p $R%s; mount --bind %s $R%s; "
             "exec chroot $R %s/trainlet probe --format=json --nccl-library=none "
             "--nvml-library=%s/lib/libnvidia-ml.so.1"
             % (shlex.quote(root), s, s, s, s, s)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
            env=self.base_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(mounts_under(root), [])
        p = json.loads(r.stdout)
        self.assertEqual(p["nvml"]["status"], "ABSENT", p["nvml"])
        self.assertIn("no dynamic loader /lib64/ld-linux-x86-64.so.2 in this image",
                      p["nvml"]["reason"])
        self.assertEqual(p["gpus"], [])
