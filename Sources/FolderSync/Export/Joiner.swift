import Foundation
import Persistence

/// Brings a store's data into a container: the records it held before sync was on (or all of
/// them, for a container that does not hold this device's data), in batches with bounded memory,
/// and the deletions it keeps.
struct Joiner: SyncPart {
    let context: SyncContext
    let duplicates: DuplicateLedger
    let exporter: Exporter
    let compactor: Compactor
    /// What the export asks of the rest of sync.
    let host: any JoinHost

    /// Exports the store's records in batches (see ``exportExistingData(batchSize:progress:)``):
    /// those without clocks or, with `everyRecord` (a join into a container that does not hold
    /// this device's data: one it replaces, or one another device replaced), every record, each
    /// with the clocks it has. A record that goes into another container keeps its history:
    /// its creation and writes are as old as they are, so a deletion or a write made meanwhile
    /// by a device that had seen them is newer, whatever the devices' clocks read.
    func exportLocalData(
        batchSize: Int = 1000,
        progress: ((Int, Int) -> Void)? = nil,
        everyRecord: Bool,
        holding permit: SyncLock.Permit? = nil
    ) throws -> Int {
        let schema = coordinator.schema
        let batchSize = max(batchSize, 1)
        var total = 0
        for entity in schema.entities { total += try store.count(for: FetchRequest(entity: entity.name)) }
        logger.debug(
            "existing data joins sync",
            metadata: ["concord.device": "\(deviceID)", "concord.records": "\(total)"]
        )
        var examined = 0
        var exported = 0
        // Logs an interrupted join committed and did not write yet go first.
        try host.exportPending(holding: permit, containerChecked: false)
        // Entities with derived to-many sides first: their members follow each batch of them.
        let ordered =
            schema.entities.filter { !Self.derivedToMany(of: $0, in: schema).isEmpty }
            + schema.entities.filter { Self.derivedToMany(of: $0, in: schema).isEmpty }
        for entity in ordered {
            try store.enumerateRecords(of: entity.name, batchSize: batchSize) { records in
                if let log = try joinBatch(
                    records,
                    entity: entity,
                    schema: schema,
                    everyRecord: everyRecord,
                    holding: permit
                ) {
                    exported += log.records
                    try host.exportPending(holding: permit, containerChecked: false)
                }
                if !everyRecord {
                    exported += try joinMembers(
                        of: records,
                        entity: entity,
                        schema: schema,
                        batchSize: batchSize,
                        holding: permit
                    )
                }
                examined += records.count
                progress?(examined, total)
                emit(.joinProgress(examined: examined, of: total))
            }
        }
        logger.debug(
            "existing data joined sync",
            metadata: ["concord.device": "\(deviceID)", "concord.records": "\(exported)"]
        )
        return exported
    }

    /// Exports, after a batch of `entity`'s records, the members of their derived to-many sides
    /// that have no clocks (the notes of each folder), `batchSize` to a log, in the order of the
    /// records they belong to; returns how many. An importer derives those sides again from the
    /// members, rewriting each record (with its whole set) once per save in which its members
    /// arrive: members in the order of their entity's ids would spread every folder's notes
    /// over every log, and the importer would rewrite every folder in every save. The members'
    /// own entity pass then finds them in sync and skips them.
    private func joinMembers(
        of records: [Record],
        entity: EntityDescription,
        schema: Schema,
        batchSize: Int,
        holding permit: SyncLock.Permit?
    ) throws -> Int {
        let derived = Self.derivedToMany(of: entity, in: schema)
        guard !derived.isEmpty else { return 0 }
        var exported = 0
        for relationship in derived {
            guard let destination = schema.entity(relationship.destination) else { continue }
            // (A member of two of the batch's records, a note with two tags, goes once: twice in
            // one log is passed over here, and a member a log took has clocks for the next.)
            var pending: [ObjectID] = []
            var queued = Set<ObjectID>()
            func flush() throws {
                defer {
                    pending.removeAll(keepingCapacity: true)
                    queued.removeAll(keepingCapacity: true)
                }
                let members = try store.records(with: pending)
                guard !members.isEmpty,
                    let log = try joinBatch(
                        members,
                        entity: destination,
                        schema: schema,
                        everyRecord: false,
                        holding: permit
                    )
                else { return }
                exported += log.records
                try host.exportPending(holding: permit, containerChecked: false)
            }
            for record in records {
                for member in (record.toMany[relationship.name] ?? []).sorted() where queued.insert(member).inserted {
                    pending.append(member)
                    if pending.count >= batchSize { try flush() }
                }
            }
            if !pending.isEmpty { try flush() }
        }
        return exported
    }

    /// The to-many relationships of `entity` that an importer derives from their members'
    /// owning sides.
    static func derivedToMany(of entity: EntityDescription, in schema: Schema) -> [RelationshipDescription] {
        entity.relationships.filter {
            $0.isToMany && !schema.ownsRelationship(entity: entity.name, $0.name)
                && schema.ownsRelationship(entity: $0.destination, $0.inverse)
        }
    }

    /// Commits the records of one batch that have no clocks (with `everyRecord`, all of them) as
    /// one log in the outbox, with their clocks. Returns the log's sequence number and how many
    /// records it carries, or `nil` when every record was already in sync.
    private func joinBatch(
        _ records: [Record],
        entity: EntityDescription,
        schema: Schema,
        everyRecord: Bool,
        holding permit: SyncLock.Permit?
    ) throws -> (sequence: UInt64, records: Int)? {
        try syncLock.withLock(permit) { _ in
            let keys = records.map { SyncMetadata.recordClocks($0.id) as any SyncMetadataNamed }
            let known = try store.syncMetadata(keys + Exporter.logAllocationKeys)
            let fresh = everyRecord ? records : records.filter { !known.contains(SyncMetadata.recordClocks($0.id)) }
            guard !fresh.isEmpty else { return nil }
            let stamp = clock.tick()
            var entries = SyncMetadataChanges()
            var changes: [SyncChange] = []
            changes.reserveCapacity(fresh.count)
            for record in fresh {
                // (Clocks that say the record is not there, kept by mistake, are not its history.)
                let history = known[SyncMetadata.recordClocks(record.id)]
                let (change, clocks) = ExportPlan.creation(
                    of: record,
                    entity: entity,
                    schema: schema,
                    stamp: stamp,
                    history: history?.isAlive == true ? history : nil
                )
                changes.append(change)
                try entries.set(SyncMetadata.recordClocks(record.id), clocks)
            }
            let (log, logEntries) = try exporter.makeLog(changes, stamp: stamp, entries: known)
            entries.merge(logEntries)
            try store.commit(StoreChanges(syncMetadata: entries))
            return (log.sequence, fresh.count)
        }
    }

    /// Exports, as deletions with the clocks they had, the deletions this store keeps (its
    /// tombstones), and the duplicates it removed as the records they were, `batchSize` to a
    /// log; returns how many. A device that merges its data into
    /// another container (one a device replaced with its own data) keeps its deletions final:
    /// without this, one made after the replacement stays on this device only, while the
    /// container's copy of the record lives on everywhere else. A deletion older than another
    /// device's write of the record loses to it, as any deletion does.
    func exportKeptDeletions(batchSize: Int = 1000, holding permit: SyncLock.Permit) throws -> Int {
        var deletions: [SyncChange] = []
        try store.enumerateSyncMetadata(in: SyncMetadata.recordClocks, batchSize: 1000) { batch in
            for entry in batch {
                guard let clocks = entry.value, !clocks.isAlive,
                    let id = Self.objectID(String(entry.suffix), entity: nil)
                else { continue }
                // A duplicate removed here goes as the record it was (as a baseline carries it):
                // its removal is this device's reading, and the others decide it again.
                if clocks.removedAsDuplicate != nil {
                    if let change = compactor.ghostChange(id, clocks: clocks) { deletions.append(change) }
                    continue
                }
                guard let deleted = clocks.deleted else { continue }
                var change = SyncChange(id: id)
                change.deleted = deleted
                deletions.append(change)
            }
        }
        for chunk in deletions.chunked(max(batchSize, 1)) {
            let known = try store.syncMetadata(Exporter.logAllocationKeys)
            let (_, entries) = try exporter.makeLog(Array(chunk), stamp: clock.tick(), entries: known)
            try store.commit(StoreChanges(syncMetadata: entries))
            try host.exportPending(holding: permit, containerChecked: false)
        }
        if !deletions.isEmpty {
            logger.debug(
                "deletions kept through a join exported",
                metadata: ["concord.device": "\(deviceID)", "concord.deletions": "\(deletions.count)"]
            )
        }
        return deletions.count
    }
}

/// What a join's export asks of the rest of sync (the engine).
protocol JoinHost: AnyObject, Sendable {
    /// Writes the outbox's logs into the container (see ``FolderSync/exportPending()``).
    @discardableResult
    func exportPending(holding permit: SyncLock.Permit?, containerChecked: Bool) throws -> Int
    /// Applies the logs not applied yet (see ``FolderSync/importAvailable(batchSize:)``); with
    /// `includingOwnLogs`, this device's own too.
    func importAvailable(
        batchSize: Int,
        includingOwnLogs: Bool,
        holding permit: SyncLock.Permit?
    ) throws
        -> ImportReport
}
