#!/usr/bin/env python3
"""Proves that ELF files built with topology/portable_glibc.cmake run against
an old glibc: every symbol version they need from the C library is at most
GLIBC_<max> (2.17 by default), they need no libstdc++/libgcc version (those
are linked in), and they need no shared library but glibc's own.

    check_glibc_versions.py [--max=2.17] FILE...

Reads `objdump -p` (binutils). Exit 0 and one summary line per file when all
pass; exit 1 naming each offending version or library otherwise.
"""

import argparse
import re
import subprocess
import sys

GLIBC_LIBRARIES = {
    "libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}
VERSION = re.compile(r"^GLIBC_(\d+)\.(\d+)(?:\.(\d+))?$")


def parse_version(text):
    m = VERSION.match(text)
    if not m:
        return None
    return tuple(int(x or 0) for x in m.groups())


def version_text(v):
    return "%d.%d" % v[:2] + (".%d" % v[2] if v[2] else "")


def check(path, limit):
    """Problems found in `path` (a list of lines) and its summary."""
    out = subprocess.run(["objdump", "-p", path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60)
    if out.returncode != 0:
        return ["objdump -p failed: " + out.stderr.strip()], ""
    problems = []
    needed = re.findall(r"^\s*NEEDED\s+(\S+)", out.stdout, re.M)
    for lib in needed:
        if lib not in GLIBC_LIBRARIES:
            problems.append("needs %s, which is not glibc's" % lib)
    versions = []
    section = out.stdout.split("Version References:", 1)
    if len(section) == 2:
        source = None
        for line in section[1].splitlines():
            m = re.match(r"^\s*required from (\S+):", line)
            if m:
                source = m.group(1)
                continue
            m = re.match(r"^\s*0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)", line)
            if m:
                versions.append((source, m.group(1)))
            elif line.strip() and not line.startswith(" "):
                break
    newest = (0, 0, 0)
    for source, name in versions:
        v = parse_version(name)
        if v is None:
            problems.append("needs version %s from %s" % (name, source))
        elif v > limit:
            problems.append("needs %s from %s, newer than GLIBC_%s" % (
                name, source, version_text(limit)))
        else:
            newest = max(newest, v)
    summary = "%s: needs %s; newest version GLIBC_%s" % (
        path, ", ".join(needed) or "nothing", version_text(newest))
    return problems, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", default="2.17", help="newest GLIBC_ version allowed")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    limit = parse_version("GLIBC_" + args.max)
    if limit is None:
        parser.error("--max: expected a version like 2.17")
    failed = False
    for path in args.files:
        problems, summary = check(path, limit)
        if problems:
            failed = True
            for p in problems:
                print("%s: %s" % (path, p))
        else:
            print(summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
