import Foundation
import Persistence

// Metadata keys that earlier versions of Concord used and that moved. A store written by one of
// them is brought up to date when sync is set up on it.

extension FolderSync {
    /// Where earlier versions kept ``sequenceKey``: the key sorted after every record's clocks,
    /// so each save's commit rewrote a page of its own for it.
    static let legacySequenceKey = "sync.seq"
    /// Where earlier versions kept ``clockKey`` (likewise, before the outbox).
    static let legacyClockKey = "sync.clock"

    /// Each key of an earlier version, and the key its entry moved to.
    static let renamedKeys = [legacySequenceKey: sequenceKey, legacyClockKey: clockKey]

    /// Moves the entries a store has under keys of an earlier version to their keys now, in one
    /// commit under the sync lock (another process of this device may be doing the same). An entry
    /// already under its new key is kept: it is the newer one.
    func moveRenamedEntries() throws {
        let legacy = Array(Self.renamedKeys.keys)
        guard !(try store.metadataEntries(forKeys: legacy)).isEmpty else { return }
        try syncLock.withLock {
            let entries = try store.metadataEntries(forKeys: legacy + Array(Self.renamedKeys.values))
            var changes: [String: Data?] = [:]
            for (old, new) in Self.renamedKeys {
                guard let value = entries[old] else { continue }
                if entries[new] == nil { changes[new] = .some(value) }
                changes[old] = .some(nil)
            }
            guard !changes.isEmpty else { return }
            try store.commit(StoreChanges(metadataEntries: changes))
            logger.debug(
                "moved sync metadata to the keys of this version",
                metadata: ["concord.keys": "\(changes.keys.sorted())"]
            )
        }
    }
}
