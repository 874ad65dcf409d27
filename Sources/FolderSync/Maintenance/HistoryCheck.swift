import Foundation
import Persistence

/// Where a store and its sync history disagree.
public struct SyncHistoryMismatch: Sendable, Hashable, CustomStringConvertible {
    /// Records the history says exist here (created, not deleted since, not removed as a
    /// duplicate) that the store does not hold.
    public var missing: [ObjectID] = []
    /// Records the store holds that the history says are gone (deleted, or removed as a
    /// duplicate).
    public var gone: [ObjectID] = []

    /// Whether the store and its history agree.
    public var isEmpty: Bool { missing.isEmpty && gone.isEmpty }

    public var description: String {
        var parts: [String] = []
        if !missing.isEmpty {
            parts.append("missing from the store: \(missing.map(\.description).joined(separator: ", "))")
        }
        if !gone.isEmpty { parts.append("held though gone: \(gone.map(\.description).joined(separator: ", "))") }
        return parts.isEmpty ? "store and history agree" : parts.joined(separator: "; ")
    }
}

/// Compares the store with the history sync keeps for its records (``FolderSync/historyMismatches()``).
struct HistoryCheck: SyncPart {
    let context: SyncContext

    func mismatches() throws -> SyncHistoryMismatch {
        var mismatch = SyncHistoryMismatch()
        try syncLock.withLock { _ in
            try store.enumerateSyncMetadata(in: SyncMetadata.recordClocks, batchSize: 500) { batch in
                var alive: [ObjectID] = []
                var dead: [ObjectID] = []
                for entry in batch {
                    guard let id = Self.objectID(String(entry.suffix), entity: nil),
                        (try? coordinator.store(forEntity: id.entity)) === store,
                        let clocks = entry.value
                    else { continue }
                    if clocks.isAlive {
                        alive.append(id)
                    } else if clocks.created != nil || clocks.deleted != nil {
                        dead.append(id)
                    }
                }
                let held = Set(try store.records(with: alive + dead).map(\.id))
                mismatch.missing += alive.filter { !held.contains($0) }
                mismatch.gone += dead.filter { held.contains($0) }
            }
        }
        mismatch.missing.sort()
        mismatch.gone.sort()
        return mismatch
    }
}
