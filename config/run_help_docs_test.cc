// docs/configuration.md's table of `trainlet run`'s options against what
// `trainlet run --help` prints from the option table (the one place a
// default is written): every flag, its variable and its default.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "config/run_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainlet::agent {
namespace {

struct Entry {
  std::string env;  // empty: flag only.
  std::string default_text;
  bool operator==(const Entry& o) const { return env == o.env && default_text == o.default_text; }
};

std::ostream& operator<<(std::ostream& out, const Entry& e) {
  return out << "{env " << e.env << ", default " << e.default_text << "}";
}

// The entries of a --help text: "  --flag=VALUE[, --alias=VALUE]", then its
// help, then "      env NAME, default: TEXT" (or "      default: TEXT").
std::map<std::string, Entry> HelpEntries(const std::string& help) {
  std::map<std::string, Entry> out;
  std::string flag;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (absl::ConsumePrefix(&line, "  --")) {
      flag = absl::StrCat("--", line.substr(0, line.find(", --")));
      continue;
    }
    if (flag.empty() || !absl::ConsumePrefix(&line, "      ")) continue;
    Entry e;
    if (absl::ConsumePrefix(&line, "env ")) {
      const size_t comma = line.find(", default: ");
      if (comma == absl::string_view::npos) continue;
      e.env = std::string(line.substr(0, comma));
      line.remove_prefix(comma + 2);
    }
    if (!absl::ConsumePrefix(&line, "default: ")) continue;
    e.default_text = std::string(line);
    out[flag] = e;
  }
  return out;
}

// A Markdown cell as text: no code spans, links as their text, "\|" as "|".
std::string CellText(absl::string_view cell) {
  std::string s(absl::StripAsciiWhitespace(cell));
  s = absl::StrReplaceAll(s, {{"`", ""}});
  for (size_t open; (open = s.find('[')) != std::string::npos;) {
    const size_t mid = s.find("](", open);
    const size_t close = mid == std::string::npos ? mid : s.find(')', mid);
    if (close == std::string::npos) break;
    s = s.substr(0, open) + s.substr(open + 1, mid - open - 1) + s.substr(close + 1);
  }
  return s;
}

// The rows of the first table under `heading` in docs/configuration.md:
// flag -> {variable, default}.
std::map<std::string, Entry> DocEntries(absl::string_view heading) {
  std::ifstream in(std::string(TRAINLET_SOURCE_DIR) + "/docs/configuration.md");
  std::map<std::string, Entry> out;
  bool in_section = false;
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "#")) {
      if (in_table) break;
      in_section = line == heading;
      continue;
    }
    if (!in_section) continue;
    if (!absl::StartsWith(line, "|")) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (absl::StartsWith(line, "| Flag") || absl::StartsWith(line, "|---")) continue;
    const std::string escaped = absl::StrReplaceAll(line, {{"\\|", "\x01"}});
    std::vector<std::string> cells = absl::StrSplit(escaped, '|');
    if (cells.size() < 5) continue;
    for (std::string& cell : cells) cell = absl::StrReplaceAll(cell, {{"\x01", "|"}});
    Entry e{CellText(cells[2]), CellText(cells[3])};
    out[CellText(cells[1])] = e;
  }
  return out;
}

TEST(RunHelpAndDocs, ListTheSameFlagsVariablesAndDefaults) {
  std::map<std::string, Entry> help = HelpEntries(RunHelpText());
  ASSERT_GT(help.size(), 20u) << RunHelpText();
  // Every command's --strict-env has its own section (Unknown variables).
  help.erase(kStrictEnvFlag);
  const std::map<std::string, Entry> docs = DocEntries("## `trainlet run`");
  ASSERT_GT(docs.size(), 20u) << "no table under ## `trainlet run` in docs/configuration.md";
  for (const auto& [flag, entry] : help) {
    auto doc = docs.find(flag);
    if (doc == docs.end()) {
      ADD_FAILURE() << flag << " is in --help but not in docs/configuration.md: " << entry;
      continue;
    }
    EXPECT_EQ(doc->second, entry) << flag << ": docs/configuration.md vs --help";
  }
  for (const auto& [flag, entry] : docs) {
    EXPECT_TRUE(help.count(flag)) << flag << " is in docs/configuration.md but not in --help";
  }
}

TEST(RunHelpAndDocs, TheParserReadsTheHelpItChecks) {
  const std::map<std::string, Entry> help = HelpEntries(RunHelpText());
  ASSERT_TRUE(help.count("--nnodes=N|MIN:MAX"));
  EXPECT_EQ(help.at("--nnodes=N|MIN:MAX"), (Entry{"TRAINLET_NNODES", "1"}));
  ASSERT_TRUE(help.count("--coordinator=HOST[:PORT]")) << "aliases are not the flag";
  ASSERT_TRUE(help.count("--prefix-output"));
  EXPECT_EQ(help.at("--prefix-output").default_text, "false");
  EXPECT_EQ(CellText(" `a` ([x](y.md#z)) "), "a (x)");
}

}  // namespace
}  // namespace trainlet::agent
