// Test-only access to what a sparse table writes into its store, to produce the
// stores a bad disk would leave. Never used outside tests.
#pragma once

#include <string>

#include "server/sparse_table.h"

namespace eps {

// The identity a table opened with `options` gives its SparseRowStore
// (SparseStoreOptions::identity): a store opened with it is that table's.
std::string SparseStoreIdentityForTesting(const SparseTableOptions& options);

}  // namespace eps
