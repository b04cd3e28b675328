// Per-job shared token checks.
#ifndef TRAINLET_RENDEZVOUS_TOKEN_H_
#define TRAINLET_RENDEZVOUS_TOKEN_H_

#include "absl/strings/string_view.h"

namespace trainlet::rendezvous {

// Compares in time that depends only on the lengths, never on where the
// first difference is, so a caller cannot guess the token byte by byte.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace trainlet::rendezvous

#endif  // TRAINLET_RENDEZVOUS_TOKEN_H_
