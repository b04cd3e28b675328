"""Tests of check_doc_links.py on small trees written for each test.

  cd scripts && python3 -m unittest -v check_doc_links_test
"""
import os
import tempfile
import unittest

import check_doc_links


class CheckDocLinksTest(unittest.TestCase):

    def tree(self, files):
        root = tempfile.mkdtemp(prefix="doclinks-")
        self.addCleanup(lambda: __import__("shutil").rmtree(root))
        for name, text in files.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        check_doc_links._anchor_cache.clear()
        return root

    def test_links_to_files_and_headings_that_exist_pass(self):
        root = self.tree({
            "README.md": "[a](docs/a.md) [b](docs/a.md#2-launch-benchlaunchpy) [d](docs/)\n",
            "docs/a.md": "# A\n## 2. Launch (`bench/launch.py`)\n[top](#a) [up](../README.md)\n",
        })
        self.assertEqual(check_doc_links.check(root), [])

    def test_a_missing_file_is_reported_with_its_line(self):
        root = self.tree({"README.md": "x\n[gone](docs/gone.md)\n"})
        problems = check_doc_links.check(root)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("README.md:2: link docs/gone.md", problems[0])
        self.assertIn("does not exist", problems[0])

    def test_a_missing_anchor_is_reported(self):
        root = self.tree({
            "a.md": "# Title\n[x](b.md#moved-section)\n",
            "b.md": "# B\n## Another section\n",
        })
        problems = check_doc_links.check(root)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("no heading with anchor #moved-section in b.md", problems[0])

    def test_repeated_headings_get_numbered_anchors(self):
        root = self.tree({
            "a.md": "## Re-run\ntext\n## Re-run\n[1](#re-run) [2](#re-run-1) [3](#re-run-2)\n",
        })
        problems = check_doc_links.check(root)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("#re-run-2", problems[0])

    def test_headings_and_links_in_code_are_not_counted(self):
        root = self.tree({
            "a.md": "```\n## Not a heading\n[x](nowhere.md)\n```\n`[y](nowhere.md)`\n"
                    "[z](#not-a-heading)\n",
        })
        problems = check_doc_links.check(root)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("#not-a-heading", problems[0])

    def test_urls_are_not_checked(self):
        root = self.tree({"a.md": "[w](https://example.com/x.md#y) [m](mailto:a@b)\n"})
        self.assertEqual(check_doc_links.check(root), [])

    def test_a_source_comment_naming_a_missing_doc_is_reported(self):
        root = self.tree({
            "docs/real.md": "# Real\n",
            "src/x.h": "// see docs/real.md and docs/building.md\n",
        })
        problems = check_doc_links.check(root)
        self.assertEqual(problems, ["src/x.h:1: mentions docs/building.md, which does not exist"])

    def test_a_user_doc_naming_a_moved_source_file_is_reported(self):
        root = self.tree({
            "agent/round.h": "", "agent/round.cc": "", "scripts/fuzz.sh": "",
            "docs/a.md": "`agent/round.h`, agent/round, `agent/*_test.cc`,\n"
                         "`agent/round.{h,cc}`, scripts/fuzz.sh, `agent/`\n"
                         "and `agent/options.cc`, moved to config/\n",
        })
        problems = check_doc_links.check(root)
        # config/ is no folder of this tree, so "config/" names nothing of it.
        self.assertEqual(problems, ["docs/a.md:3: names agent/options.cc, which does not exist"])

    def test_history_and_sources_may_name_what_is_gone(self):
        root = self.tree({
            "agent/x.h": "",
            "docs/benchmarks-history.md": "at the time: agent/options.cc\n",
            "agent/y.h": "// once agent/options.cc\n",
        })
        self.assertEqual(check_doc_links.check(root), [])

    def test_build_trees_are_skipped(self):
        root = self.tree({"build-x/a.md": "[gone](gone.md)\n", "a.md": "# A\n"})
        self.assertEqual(check_doc_links.check(root), [])

    def test_main_exits_1_on_a_broken_link_and_0_without(self):
        broken = self.tree({"a.md": "[gone](gone.md)\n"})
        self.assertEqual(check_doc_links.main(["x", broken]), 1)
        fine = self.tree({"a.md": "# A\n[me](#a)\n"})
        self.assertEqual(check_doc_links.main(["x", fine]), 0)


if __name__ == "__main__":
    unittest.main()
