import Foundation
import Persistence

/// Writes this device sends out again in place of logs lost with its store.
extension LostLogs {
    /// Commits to the outbox, in new logs of at most ``ownWritesPerLog`` changes, every write of
    /// this device id that the store holds (``ownWrites(in:)``), and has them exported after the
    /// import that asked for them; returns how many changes. Memory follows one batch, however
    /// large the store. Applying them again anywhere changes nothing (each keeps its clock), so
    /// they stand in for lost logs of this device: whatever those held that this store still
    /// knows goes out again.
    @discardableResult
    func exportOwnWrites(holding permit: SyncLock.Permit) throws -> Int {
        var total = 0
        var pending: [SyncChange] = []
        func flush() throws {
            guard !pending.isEmpty else { return }
            try commitOwnWrites(pending)
            total += pending.count
            pending = []
        }
        try store.enumerateSyncMetadata(in: SyncMetadata.recordClocks, batchSize: 500) { batch in
            pending += try ownWrites(in: batch)
            if pending.count >= Self.ownWritesPerLog { try flush() }
        }
        try flush()
        if total > 0 {
            outbox.memo.withLock { $0.ownLogsMissing = true }
            logger.notice(
                "this device's writes go out again in new logs, in place of logs lost with its store",
                metadata: ["concord.device": "\(deviceID)", "concord.changes": "\(total)"]
            )
        }
        return total
    }

    /// How many changes one log of ``exportOwnWrites()`` carries at most.
    static let ownWritesPerLog = 1000

    /// Commits `changes` as one new log in the outbox, or as several when they do not fit in one.
    private func commitOwnWrites(_ changes: [SyncChange]) throws {
        let known = try store.syncMetadata(Exporter.logAllocationKeys)
        let (log, entries) = try exporter.makeLog(changes, stamp: clock.tick(), entries: known)
        guard log.payload.count > LogFile.maximumPayloadSize else {
            try store.commit(StoreChanges(syncMetadata: entries))
            return
        }
        guard changes.count > 1 else {
            logger.warning(
                "a record's writes do not fit in one log: they cannot go out again",
                metadata: ["concord.object": "\(changes[0].id)", "concord.bytes": "\(log.payload.count)"]
            )
            return
        }
        let half = changes.count / 2
        try commitOwnWrites(Array(changes[..<half]))
        try commitOwnWrites(Array(changes[half...]))
    }

    /// The writes of this device id among the records whose clocks are in `batch` (a page of
    /// the store's clock entries), each with its clock: the creation (with every attribute) of
    /// each record this device id made, and otherwise the attributes, owning to-one
    /// relationships and to-many elements it wrote last; and the deletions it made that the store
    /// keeps. Creations and writes of records the store holds only: one of a record deleted since
    /// could outlive a tombstone already collected elsewhere.
    func ownWrites(in batch: [SyncMetadataEntry<RecordClocks>]) throws -> [SyncChange] {
        let schema = coordinator.schema
        var changes: [SyncChange] = []
        var histories: [ObjectID: RecordClocks] = [:]
        for entry in batch {
            guard let clocks = entry.value, let id = Self.objectID(String(entry.suffix), entity: nil) else { continue }
            if clocks.isAlive {
                histories[id] = clocks
            } else if let deleted = clocks.deleted, deleted.device == deviceID, clocks.removedAsDuplicate == nil {
                // A deletion this device made (a deletion never brings anything back).
                var change = SyncChange(id: id)
                change.deleted = deleted
                changes.append(change)
            }
        }
        for record in try store.records(with: histories.keys.sorted()) {
            guard let clocks = histories[record.id], let created = clocks.created,
                let entity = schema.entity(record.id.entity)
            else { continue }
            var change = SyncChange(id: record.id)
            let made = created.device == deviceID
            if made { change.created = created }
            for attribute in entity.attributes {
                let clock = clocks.clock(of: attribute.name) ?? created
                guard made || clock.device == deviceID else { continue }
                change.values[attribute.name] = ClockedValue(value: record[attribute.name], clock: clock)
            }
            for relationship in entity.relationships
            where schema.ownsRelationship(entity: entity.name, relationship.name) {
                if relationship.isToMany {
                    for (target, state) in clocks.members[relationship.name] ?? [:]
                    where state.clock.device == deviceID {
                        guard let id = Self.objectID(target, entity: nil) else { continue }
                        let present = record.toMany[relationship.name]?.contains(id) ?? false
                        guard present == state.present else { continue }
                        change.members[relationship.name, default: []].append(
                            ClockedMember(target: id, present: present, clock: state.clock)
                        )
                    }
                    // A creation adds the elements it made with it (without clocks of their own).
                    if made {
                        for target in (record.toMany[relationship.name] ?? []).sorted()
                        where clocks.members[relationship.name]?[target.description] == nil {
                            change.members[relationship.name, default: []].append(
                                ClockedMember(target: target, present: true, clock: created)
                            )
                        }
                    }
                } else {
                    let clock = clocks.clock(of: relationship.name) ?? created
                    guard made || clock.device == deviceID else { continue }
                    // (A target removed as a duplicate is written as it was: see `relinked`.)
                    change.references[relationship.name] = ClockedReference(
                        target: clocks.relinked?[relationship.name] ?? record.toOne[relationship.name],
                        clock: clock
                    )
                }
            }
            if made || !change.values.isEmpty || !change.references.isEmpty || !change.members.isEmpty {
                changes.append(change)
            }
        }
        return changes
    }
}
