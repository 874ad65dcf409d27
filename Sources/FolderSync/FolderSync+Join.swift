import Foundation
import Persistence

extension FolderSync {
    /// Brings data the store held before sync was turned on into sync: every record that has
    /// never been exported (it has no clocks: it was neither saved nor imported while sync was
    /// on) is written to the container as a creation, with every attribute and its owning
    /// relationships, exactly as a local save that inserted it would have been.
    ///
    /// The store is read entity by entity in id order, `batchSize` records at a time, and each
    /// batch becomes one log, committed to the store's outbox together with the batch's clocks
    /// and then written into the container. Memory stays proportional to the batch, however
    /// large the store, provided the store reads metadata by key
    /// (``Persistence/PersistentStore/metadataEntries(forKeys:)``; the SQLite store does).
    ///
    /// Safe to call at any time and any number of times: records already in sync are skipped,
    /// so a second call exports nothing, and a join interrupted by a crash resumes where its
    /// last committed batch ended. Local saves and imports may run meanwhile; each batch waits
    /// for them and they for it. `progress` (and ``SyncEvent/joinProgress(examined:of:)``)
    /// reports after each batch the records examined so far, of the store's total.
    ///
    /// - Returns: how many records were exported.
    /// - Throws: the store's errors, and ``SyncError`` when a log cannot be written (a batch
    ///   committed but not yet written stays in the outbox for ``exportPending()``).
    @discardableResult
    public func exportExistingData(batchSize: Int = 1000, progress: ((Int, Int) -> Void)? = nil) throws -> Int {
        let schema = coordinator.schema
        let batchSize = max(batchSize, 1)
        var total = 0
        for entity in schema.entities { total += try store.count(for: FetchRequest(entity: entity.name)) }
        logger.debug("existing data joins sync", metadata: ["concord.device": "\(deviceID)", "concord.records": "\(total)"])
        var examined = 0
        var exported = 0
        // Outbox entries of logs this join has written, removed by the next commit.
        var written = try outboxTail()
        for entity in schema.entities {
            try store.enumerateRecords(of: entity.name, batchSize: batchSize) { records in
                if let log = try joinBatch(records, entity: entity, schema: schema, written: &written) {
                    exported += log.records
                    written.append(Self.outboxKey(log.sequence))
                    emit(.exported(logs: 1, throughSequence: log.sequence))
                }
                examined += records.count
                progress?(examined, total)
                emit(.joinProgress(examined: examined, of: total))
            }
        }
        if !written.isEmpty {
            try syncLock.withLock {
                try store.commit(StoreChanges(metadataEntries: Dictionary(uniqueKeysWithValues: written.map { ($0, nil) })))
            }
        }
        logger.debug("existing data joined sync", metadata: ["concord.device": "\(deviceID)", "concord.records": "\(exported)"])
        return exported
    }

    /// The outbox entries of the newest logs (those a join interrupted after its last commit
    /// leaves), read by key down from the last sequence number until one is missing. Each is
    /// written into the container if it is not there yet; their keys are returned for removal.
    private func outboxTail() throws -> [String] {
        return try syncLock.withLock {
            let last = try store.metadataEntries(forKeys: [Self.sequenceKey])[Self.sequenceKey]
                .flatMap { UInt64(String(decoding: $0, as: UTF8.self)) } ?? 0
            var tail: [(sequence: UInt64, data: Data)] = []
            var sequence = last
            while sequence > 0, let data = try store.metadataEntries(forKeys: [Self.outboxKey(sequence)])[Self.outboxKey(sequence)] {
                tail.append((sequence, data))
                sequence -= 1
            }
            // Written oldest first, as they were made.
            for (sequence, data) in tail.reversed() {
                let target = layout.logURL(device: deviceID, sequence: sequence)
                if !FileManager.default.fileExists(atPath: target.path) {
                    try LogWriter.write(try LogFile.decode(data, url: target), layout: layout)
                    emit(.exported(logs: 1, throughSequence: sequence))
                }
            }
            return tail.map { Self.outboxKey($0.sequence) }
        }
    }

    /// Exports the records of one batch that have no clocks as one log: commits the log to the
    /// outbox with their clocks (and removes the outbox entries in `written`, whose logs are in
    /// the container), then writes it. Returns the log's sequence number and how many records
    /// it carries, or `nil` when every record was already in sync.
    private func joinBatch(
        _ records: [Record], entity: EntityDescription, schema: Schema, written: inout [String]
    ) throws -> (sequence: UInt64, records: Int)? {
        try syncLock.withLock {
            let keys = records.map { RecordClocks.key($0.id) }
            let known = try store.metadataEntries(forKeys: keys + [Self.sequenceKey])
            let fresh = records.filter { known[RecordClocks.key($0.id)] == nil }
            guard !fresh.isEmpty else { return nil }
            let stamp = clock.tick()
            let encoder = JSONEncoder()
            var entries: [String: Data?] = [:]
            var changes: [SyncChange] = []
            changes.reserveCapacity(fresh.count)
            for record in fresh {
                let (change, clocks) = Self.creation(of: record, entity: entity, schema: schema, stamp: stamp)
                changes.append(change)
                entries[RecordClocks.key(record.id)] = .some(clocks.encoded())
            }
            let sequence = (known[Self.sequenceKey].flatMap { UInt64(String(decoding: $0, as: UTF8.self)) } ?? 0) + 1
            let log = LogFile(
                device: deviceID, sequence: sequence, schemaVersion: schema.version, created: Date(),
                payload: try SyncPayload(changes: changes).encoded())
            entries[Self.outboxKey(sequence)] = .some(log.encoded())
            entries[Self.sequenceKey] = .some(Data(String(sequence).utf8))
            entries[Self.clockKey] = .some(try encoder.encode(stamp))
            for key in written { entries[key] = .some(nil) }
            try store.commit(StoreChanges(metadataEntries: entries))
            written.removeAll()
            try LogWriter.write(log, layout: layout)
            return (sequence, fresh.count)
        }
    }

    /// The change and the clocks of a save that creates `record` at `stamp`: every attribute,
    /// and the owning sides of its relationships (the importer derives the others).
    static func creation(of record: Record, entity: EntityDescription, schema: Schema, stamp: SyncClock) -> (SyncChange, RecordClocks) {
        var change = SyncChange(id: record.id)
        change.created = stamp
        var clocks = RecordClocks(created: stamp)
        for attribute in entity.attributes {
            change.values[attribute.name] = ClockedValue(value: record[attribute.name], clock: stamp)
        }
        for relationship in entity.relationships where schema.ownsRelationship(entity: entity.name, relationship.name) {
            if relationship.isToMany {
                let targets = (record.toMany[relationship.name] ?? []).sorted()
                if !targets.isEmpty {
                    change.members[relationship.name] = targets.map { ClockedMember(target: $0, present: true, clock: stamp) }
                    clocks.members[relationship.name] = Dictionary(
                        uniqueKeysWithValues: targets.map { ($0.description, RecordClocks.MemberClock(present: true, clock: stamp)) })
                }
            } else {
                change.references[relationship.name] = ClockedReference(target: record.toOne[relationship.name], clock: stamp)
            }
        }
        return (change, clocks)
    }
}
