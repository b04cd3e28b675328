#include "cmd/command.h"

#include <iostream>

namespace trainlet::cmd {

int Fail(absl::string_view command, int code, absl::string_view message, std::string* reason) {
  std::cerr << "trainlet " << command << ": " << message << "\n";
  if (reason != nullptr) *reason = std::string(message);
  return code;
}

}  // namespace trainlet::cmd
