// The benchmarks' command-line parsing: `--name=value` only, and a usage
// error that names the first thing wrong. Header-only; shared by the C++
// programs under bench/.
#ifndef TRAINLET_BENCH_FLAGS_H_
#define TRAINLET_BENCH_FLAGS_H_

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainlet::bench {

// True when `arg` is `name=...`, with what follows the `=` in *value.
inline bool Flag(const char* arg, const char* name, std::string* value) {
  const size_t len = std::strlen(name);
  if (std::strncmp(arg, name, len) != 0 || arg[len] != '=') return false;
  *value = arg + len + 1;
  return true;
}

// The first problem with a program's arguments. Each parse names the flag
// it reads; Print puts "PROG: problem" on stderr, before the usage text.
class UsageProblem {
 public:
  // Keeps `why` unless a problem is already kept.
  void Add(const std::string& why) {
    if (first_.empty()) first_ = why;
  }
  // Adds `why` when `ok` is false.
  void Require(bool ok, const std::string& why) {
    if (!ok) Add(why);
  }
  // "FLAG=VALUE: at least MIN" unless value >= min.
  template <typename T>
  void AtLeast(const char* flag, T value, T min) {
    Require(value >= min, absl::StrCat(flag, "=", value, ": at least ", min));
  }
  // "FLAG=VALUE: LO to HI" unless lo <= value <= hi.
  template <typename T>
  void InRange(const char* flag, T value, T lo, T hi) {
    Require(value >= lo && value <= hi, absl::StrCat(flag, "=", value, ": ", lo, " to ", hi));
  }
  void Int(const char* flag, const std::string& v, int* out) {
    Require(absl::SimpleAtoi(v, out), absl::StrCat(flag, ": '", v, "' is not an integer"));
  }
  void Number(const char* flag, const std::string& v, double* out) {
    Require(absl::SimpleAtod(v, out), absl::StrCat(flag, ": '", v, "' is not a number"));
  }
  void Bool(const char* flag, const std::string& v, bool* out) {
    OneOf(flag, v, {"true", "false"});
    *out = v == "true";
  }
  void OneOf(const char* flag, const std::string& v, std::initializer_list<const char*> allowed) {
    for (const char* a : allowed) {
      if (v == a) return;
    }
    Add(absl::StrCat(flag, "=", v, ": not ", absl::StrJoin(allowed, " or ")));
  }
  void Executable(const char* flag, const std::string& path) {
    if (path.empty()) {
      Add(absl::StrCat(flag, "=PATH is required"));
    } else if (access(path.c_str(), X_OK) != 0) {
      Add(absl::StrCat(flag, "=", path, ": not an executable file (", std::strerror(errno), ")"));
    }
  }
  void Unknown(const char* arg) {
    Add(absl::StrCat("unknown argument '", arg, "' (flags are --name=value)"));
  }

  // Writes "prog: problem" to stderr; true when there was one.
  bool Print(const char* prog) const {
    if (first_.empty()) return false;
    std::fprintf(stderr, "%s: %s\n", prog, first_.c_str());
    return true;
  }

 private:
  std::string first_;
};

}  // namespace trainlet::bench

#endif  // TRAINLET_BENCH_FLAGS_H_
