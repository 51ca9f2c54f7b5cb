// Exact aggregation's dense factorization (proxy::ProductFactorizer) on libtorch's linear
// algebra: what the bucketrl binary hands to the torch-free proxy library.
#pragma once

#include "proxy/aggregate.h"

namespace brl::launch {

// One process-wide instance (stateless).
const proxy::ProductFactorizer& aten_factorizer();

}  // namespace brl::launch
