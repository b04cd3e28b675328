#!/usr/bin/env python3
"""Checks the alert rules of every PrometheusRule in deploy/ with Prometheus's
own tools: `promtool check rules` on the groups of each (extracted from the
custom resource into a plain rule file), then `promtool test rules` on the
unit tests beside it (`alerts_test.yaml`, whose rule_files name rules.yaml).

    python3 deploy/check_rules.py            (ctest -R deploy_alert_rules)

Exit 0 when every check passes, 1 otherwise, 77 (ctest: skipped) when
promtool is not installed (apt-get install prometheus; scripts/setup.sh).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def rule_resources(root=HERE):
    """(path, PrometheusRule) for every PrometheusRule in the manifests."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "schemas")
        for name in sorted(files):
            if not name.endswith(".yaml") or name.endswith("_test.yaml"):
                continue
            path = os.path.join(folder, name)
            with open(path) as f:
                for doc in yaml.safe_load_all(f):
                    if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
                        out.append((path, doc))
    return out


def main():
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool is not installed (apt-get install prometheus): alert rules not checked")
        return SKIP
    resources = rule_resources()
    if not resources:
        print("no PrometheusRule in deploy/")
        return 1
    failed = False
    for path, doc in resources:
        where = "%s (%s)" % (os.path.relpath(path, os.path.dirname(HERE)), doc["metadata"]["name"])
        with tempfile.TemporaryDirectory(prefix="trainlet-rules-") as tmp:
            rules = os.path.join(tmp, "rules.yaml")
            with open(rules, "w") as f:
                yaml.safe_dump({"groups": doc["spec"]["groups"]}, f, sort_keys=False)
            steps = [[promtool, "check", "rules", rules]]
            test = os.path.join(os.path.dirname(path), "alerts_test.yaml")
            if os.path.exists(test):
                shutil.copy(test, os.path.join(tmp, "alerts_test.yaml"))
                steps.append([promtool, "test", "rules", os.path.join(tmp, "alerts_test.yaml")])
            else:
                print("%s: no alerts_test.yaml beside it: its alerts are not unit-tested" % where)
                failed = True
            for argv in steps:
                r = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=120)
                status = "ok" if r.returncode == 0 else "FAILED"
                print("%s: promtool %s %s: %s" % (where, argv[1], argv[2], status))
                if r.returncode != 0:
                    print(r.stdout + r.stderr)
                    failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
