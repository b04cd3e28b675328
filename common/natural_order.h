// Natural ("version") ordering of node names: digit runs compare as numbers,
// so job-node-0-2 sorts before job-node-0-10. Used to give nodes without a
// rank hint a stable order that matches their pod indices.
#ifndef TRAINLET_COMMON_NATURAL_ORDER_H_
#define TRAINLET_COMMON_NATURAL_ORDER_H_

#include "absl/strings/string_view.h"

namespace trainlet {

// True when a sorts strictly before b.
bool NaturalLess(absl::string_view a, absl::string_view b);

}  // namespace trainlet

#endif  // TRAINLET_COMMON_NATURAL_ORDER_H_
