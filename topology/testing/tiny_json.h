// A small JSON reader for the fake libnvidia-ml.so.1 (fake_nvml.cc), which
// must load in Debian 11's root and so links nothing but libc: its fixtures
// are read with this instead of protobuf's JSON. Objects, arrays, strings
// (\uXXXX beyond ASCII becomes '?'), numbers (as double), true, false, null;
// at most 64 levels deep.
//
// Test-only. No shared state: safe from any thread.
#ifndef TRAINLET_TOPOLOGY_TESTING_TINY_JSON_H_
#define TRAINLET_TOPOLOGY_TESTING_TINY_JSON_H_

#include <map>
#include <string>
#include <vector>

namespace trainlet::topology::testing {

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  // The member `key` of an object, or nullptr (also when not an object).
  const Json* Get(const std::string& key) const;
};

// Parses all of `text` into *out; false with the reason (and the offset) in
// *why otherwise.
bool ParseJson(const std::string& text, Json* out, std::string* why);

}  // namespace trainlet::topology::testing

#endif  // TRAINLET_TOPOLOGY_TESTING_TINY_JSON_H_
