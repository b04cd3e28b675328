#!/usr/bin/env python3
"""Prints a CI run's slowest build steps and slowest tests (scripts/test.sh).

  scripts/slowest.py [--ninja-log build/.ninja_log [--since EPOCH_SECONDS]]
                     [--junit build/ctest-junit.xml] [--top 10]

--since: only the build steps whose output is newer (the time this run's
build started): ninja appends to .ninja_log and compacts it now and then, so
the steps of earlier builds are told apart by their outputs' times, not by
their place in the file. A step's time is its wall time under the build's
parallelism (ninja -j).
--junit: the file `ctest --output-junit` wrote. Either may be missing: it is
then said and skipped, so a report never fails the run it reports on.
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def ninja_steps(path, since):
    # .ninja_log v5: "# ninja log v5" then "start_ms end_ms mtime output hash",
    # mtime in ns since the epoch (ninja 1.10 and later; seconds before);
    # one step with several outputs has one line per output.
    steps = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5:
                continue
            start, end, mtime, output, cmd_hash = fields
            try:
                seconds = int(mtime) / (1e9 if int(mtime) > 1e12 else 1)
            except ValueError:
                continue
            if since is not None and seconds < since:
                continue
            steps.setdefault((start, end, cmd_hash), []).append(output)
    # Outputs are relative to the build folder: named from where we are.
    folder = os.path.dirname(path)
    rows = []
    for (start, end, _), outputs in steps.items():
        name = min(outputs, key=len)
        if not os.path.isabs(name) and folder:
            name = os.path.join(folder, name)
        rows.append(((int(end) - int(start)) / 1000.0, name))
    return rows


def junit_tests(path):
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        status = case.get("status", "")
        if case.find("failure") is not None:
            status = "failed"
        elif case.find("skipped") is not None:
            status = "skipped"
        rows.append((float(case.get("time", "0") or 0), case.get("name", "?"), status))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ninja-log")
    parser.add_argument("--since", type=float)
    parser.add_argument("--junit")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    if args.ninja_log:
        if os.path.exists(args.ninja_log):
            rows = ninja_steps(args.ninja_log, args.since)
            total = sum(r[0] for r in rows)
            print(f"slowest: {len(rows)} build steps ran, {total:.0f} s of wall time in all "
                  f"({args.ninja_log})")
            for seconds, name in sorted(rows, reverse=True)[:args.top]:
                print(f"  {seconds:7.1f} s  {name}")
        else:
            print(f"slowest: no {args.ninja_log}; no build steps to report")
    if args.junit:
        if os.path.exists(args.junit):
            try:
                rows = junit_tests(args.junit)
            except ET.ParseError as e:
                print(f"slowest: {args.junit} does not parse ({e}); no tests to report")
                return 0
            total = sum(r[0] for r in rows)
            print(f"slowest: {len(rows)} tests ran, {total:.0f} s in all ({args.junit})")
            for seconds, name, status in sorted(rows, reverse=True)[:args.top]:
                note = "" if status in ("run", "") else f"  ({status})"
                print(f"  {seconds:7.1f} s  {name}{note}")
        else:
            print(f"slowest: no {args.junit}; no tests to report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
