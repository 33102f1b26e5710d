// Test-only access to a StateStore's insides, to produce the states a crash or
// a bad disk would leave. Never used outside tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "storage/state_store.h"

namespace eps {

// Writes the blobs of checkpoint `step` (synced) exactly as WriteCheckpoint
// would, but not its manifest and no retention: what a crash between the blobs
// and the manifest would leave if they were not one batch.
Status WriteBlobsWithoutManifestForTesting(StateStore* store, Step step,
                                           const std::vector<BlobRef>& blobs);

// Replaces the stored manifest of checkpoint `step` with edit(manifest),
// bypassing every check. NotFound when there is no such manifest.
Status EditManifestForTesting(StateStore* store, Step step,
                              const std::function<void(std::string*)>& edit);

// Number of blob entries stored under checkpoint `step`, manifest or not.
StatusOr<size_t> CountBlobsForTesting(const StateStore& store, Step step);

// Bytes in the store's memtables: what a restart would replay from the log.
StatusOr<uint64_t> MemtableBytesForTesting(const StateStore& store);

}  // namespace eps
