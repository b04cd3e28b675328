#!/usr/bin/env python3
"""Checks that the documentation's links resolve (ctest `docs_links`).

  scripts/check_doc_links.py [ROOT]

In every Markdown file of the repository (outside build trees, third_party/
and .git/), each relative link `[text](path)`, `[text](path#anchor)` or
`[text](#anchor)` must name a file or folder that exists, and an anchor must
be a heading of the Markdown file it points into, spelt as GitHub spells it
(lower case, punctuation dropped, spaces to hyphens, -1, -2, ... for a
repeated heading). Links inside code spans and fenced blocks are not links.
Besides, every docs/<name>.md path a text file mentions (a source
comment, a CMake file) must exist, and so must every path into one of the
repository's own folders that README.md or a docs/*.md file names
(`agent/round.h`, `scripts/fuzz.sh`, `rendezvous/testing/`; `agent/round`
stands for agent/round.h or .cc), so that a moved file leaves no stale name.

Prints one line per broken link, `FILE:LINE: ...`, and exits 1 if there is
one, 0 otherwise. Standard library only.
"""
import os
import re
import sys

SKIP_DIRS = {".git", "third_party", "node_modules", "__pycache__"}
TEXT_SUFFIXES = (".md", ".h", ".cc", ".c", ".py", ".sh", ".txt", ".cmake", ".proto",
                 ".yaml", ".yml", ".json", ".html", ".js", ".css")
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
DOC_MENTION = re.compile(r"(?<![\w/.-])docs/[A-Za-z0-9_.-]+\.md")


def skipped_dir(name):
    return name in SKIP_DIRS or name.startswith("build")


def repo_files(root):
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not skipped_dir(d))
        for f in sorted(files):
            yield os.path.join(top, f)


def github_slug(heading):
    """The anchor GitHub gives a heading (before de-duplication)."""
    text = re.sub(r"<[^>]+>", "", heading)        # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)           # \w keeps letters, digits, _
    return text.replace(" ", "-")


def strip_code_spans(line):
    return re.sub(r"(`+)(.+?)\1", "", line)


def markdown_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            stripped = line.lstrip()
            marker = re.match(r"(```+|~~~+)", stripped)
            if marker:
                if fence is None:
                    fence = marker.group(1)[0] * 3
                elif stripped.startswith(fence):
                    fence = None
                continue
            if fence is None:
                yield number, line.rstrip("\n")


_anchor_cache = {}


def anchors(path):
    if path not in _anchor_cache:
        seen = {}
        found = set()
        for _, line in markdown_lines(path):
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            slug = github_slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else "%s-%d" % (slug, n))
        for _, line in markdown_lines(path):  # explicit <a name="..."> / id="..."
            for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", line):
                found.add(m.group(1))
        _anchor_cache[path] = found
    return _anchor_cache[path]


def check_markdown(root, path):
    problems = []
    rel = os.path.relpath(path, root)
    for number, line in markdown_lines(path):
        for m in LINK.finditer(strip_code_spans(line)):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                continue  # http:, https:, mailto:, ...
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else os.path.normpath(
                os.path.join(os.path.dirname(path), file_part))
            where = "%s:%d: link %s" % (rel, number, target)
            if not os.path.exists(dest):
                problems.append("%s: %s does not exist" % (where, os.path.relpath(dest, root)))
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append("%s: no heading with anchor #%s in %s" %
                                (where, anchor, os.path.relpath(dest, root)))
    return problems


def check_doc_mentions(root, path):
    problems = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except (UnicodeDecodeError, OSError):
        return problems
    for number, line in enumerate(lines, 1):
        if path.endswith(".md"):
            line = re.sub(r"\]\([^)]*\)", "]", line)  # links: check_markdown's
        for m in DOC_MENTION.finditer(line):
            if not os.path.exists(os.path.join(root, m.group(0))):
                problems.append("%s:%d: mentions %s, which does not exist" %
                                (os.path.relpath(path, root), number, m.group(0)))
    return problems


def repo_path_pattern(root):
    """Paths into the repository's own top-level folders."""
    top = sorted(d for d in os.listdir(root)
                 if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
                 and not skipped_dir(d))
    if not top:
        return None
    return re.compile(r"(?<![\w/.~$-])((?:%s)/[A-Za-z0-9_./-]*[A-Za-z0-9_/])" %
                      "|".join(re.escape(d) for d in top))


def check_source_paths(root, path, pattern):
    problems = []
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for number, line in enumerate(lines, 1):
        for m in pattern.finditer(line):
            name = m.group(1)
            after = line[m.end(1):m.end(1) + 1]
            if after in ("{", "*", "<", "$"):
                continue  # a pattern (`agent/*_test.cc`, `round.{h,cc}`), not a file
            full = os.path.join(root, name)
            if os.path.exists(full) or any(os.path.exists(full + ext)
                                           for ext in (".h", ".cc", ".py", ".sh", ".md")):
                continue
            problems.append("%s:%d: names %s, which does not exist" %
                            (os.path.relpath(path, root), number, name))
    return problems


def check(root):
    problems = []
    pattern = repo_path_pattern(root)
    user_docs = {os.path.join(root, "README.md")}
    for path in repo_files(root):
        if pattern and (path in user_docs or (
                path.endswith(".md") and os.path.dirname(path) == os.path.join(root, "docs")
                and not path.endswith("-history.md"))):
            problems += check_source_paths(root, path, pattern)
        if os.path.basename(path).startswith("check_doc_links"):
            continue  # this checker and its tests name missing docs on purpose
        if path.endswith(".md"):
            problems += check_markdown(root, path)
        if path.endswith(TEXT_SUFFIXES) or os.path.basename(path) == "CMakeLists.txt":
            problems += check_doc_mentions(root, path)
    return problems


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("%d broken link(s) or name(s): fix the link, or the heading or file it names" %
              len(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
