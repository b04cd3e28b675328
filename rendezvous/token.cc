#include "rendezvous/token.h"

namespace trainlet::rendezvous {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walk the expected length whatever the input, folding every difference.
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  const size_t n = b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = diff | (x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

}  // namespace trainlet::rendezvous
