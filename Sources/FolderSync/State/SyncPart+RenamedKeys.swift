import Foundation
import Persistence

// Metadata keys that earlier versions of Concord used and that moved. A store written by one of
// them is brought up to date when sync is set up on it.

// (The keys: ``SyncMetadata/renamed``.)

extension SyncPart {
    /// Moves the entries a store has under keys of an earlier version to their keys now, in one
    /// commit under the sync lock (another process of this device may be doing the same). An entry
    /// already under its new key is kept: it is the newer one.
    func moveRenamedEntries() throws {
        let legacy = SyncMetadata.renamed.map(\.old)
        guard !(try store.syncMetadata(legacy)).isEmpty else { return }
        try syncLock.withLock { _ in
            let entries = try store.syncMetadata(legacy + SyncMetadata.renamed.map(\.new))
            var changes = SyncMetadataChanges()
            for (old, new) in SyncMetadata.renamed {
                guard let value = entries[old] else { continue }
                if !entries.contains(new) { try changes.set(new, value) }
                changes.remove(old)
            }
            guard !changes.isEmpty else { return }
            try store.commit(StoreChanges(syncMetadata: changes))
            logger.debug(
                "moved sync metadata to the keys of this version",
                metadata: ["concord.keys": "\(changes.metadataEntries.keys.sorted())"]
            )
        }
    }
}
