import ConcordSystem
import FileCoordination
import Foundation
import Persistence

/// A snapshot of a store folded from logs: every live record with its clocks, every deletion,
/// and the positions in each device's logs it covers. A new device starts from the newest
/// baseline and applies only the logs after it.
package struct BaselinePayload: Codable, Sendable {
    package var covers: [String: UInt64]
    package var changes: [SyncChange]
    /// The duplicates removed by policy, each with the winner it was folded into (`ENTITY/UUID`
    /// both): a device that starts from the baseline redirects late references to them as the
    /// others do. (Absent in baselines written before they were carried.)
    package var redirects: [String: String]? = nil
    /// The newest history among the tombstones its writer had collected when it wrote it: a
    /// record whose whole history is no newer, and that the baseline does not carry, was
    /// deleted. (Absent in baselines written before it was carried.)
    package var collectedThrough: SyncClock? = nil
    /// For each device, what its writer kept of that device's logs beyond the positions: the
    /// numbers leapt over that it never applied, and the logs it applied in several versions (or
    /// empty), up to what it covers. A device that starts from the baseline keeps them too, so
    /// that an old log that turns up late under such a number is applied there as everywhere.
    /// (Only in format 5: `nil` when there are none.)
    package var versions: [String: LogVersions]? = nil

    /// How many logs it covers in all, saturating: what baselines are compared by. (A plain sum
    /// of a hostile file's positions overflows and traps.)
    package var total: UInt64 {
        covers.values.reduce(0) { sum, position in
            sum.addingReportingOverflow(position).overflow ? .max : sum + position
        }
    }
}

extension Compactor {
    /// The store as creation changes with their clocks, and its deletions.
    /// (Clocks and records are read together, under the sync lock: a record saved between the
    /// two reads would get no clock of its own.)
    func writeBaseline(covering positions: [String: UInt64], holding permit: SyncLock.Permit?) throws {
        try syncLock.withLock(permit) { _ in try writeBaseline(covering: positions) }
    }

    private func writeBaseline(covering positions: [String: UInt64]) throws {
        let schema = coordinator.schema
        let (spool, redirects) = try spoolRecords()
        let collected = try store.syncMetadataValue(SyncMetadata.collectedThrough)
        let start = BaselinePayload.encodedStart(covers: positions, changeCount: spool.count)
        // (Format 5 only for a baseline that carries versions: one that Concord up to format 4
        // reads otherwise.)
        let versions = try baselineVersions(covering: positions)
        let format = versions == nil ? LogFile.formatVersion : LogFile.baselineVersionsVersion
        let end = try BaselinePayload.encodedEnd(
            redirects: redirects,
            collectedThrough: collected,
            versions: versions,
            formatVersion: format
        )
        let payloadLength = start.count + (try spool.finish()) + end.count
        let total = BaselinePayload(covers: positions, changes: []).total
        let url = baselines.baselineURL(deviceID, total)
        guard payloadLength <= LogFile.maximumPayloadSize else {
            throw SyncError(
                .ioFailed,
                "the baseline would take \(payloadLength) bytes, more than a log may (\(LogFile.maximumPayloadSize))",
                url: url
            )
        }
        let log = LogFile(
            device: deviceID,
            sequence: max(total, 1),
            schemaVersion: schema.version,
            created: Date(),
            payload: Data(),
            container: identities.loggedContainer(),
            formatVersion: format
        )
        try write(log.encodedHeader(payloadLength: payloadLength), start, spool, end, to: url)
        // Older baselines of this device are superseded.
        removeOwnBaselines(except: url.lastPathComponent)
    }

    /// Every record of the store as a creation with its clocks, then those that do not exist
    /// (deletions, writes waiting for a creation, removed duplicates), into a spool (the file's
    /// header needs their count and size first, and a whole store is never held); and the
    /// redirects of removed duplicates the baseline does not carry as records.
    private func spoolRecords() throws -> (BaselineSpool, [String: String]) {
        let schema = coordinator.schema
        let spool = try BaselineSpool()
        for entity in schema.entities {
            try store.enumerateRecords(of: entity.name) { batch in
                let entries = try store.syncMetadata(batch.map { SyncMetadata.recordClocks($0.id) })
                for record in batch {
                    try spool.append(
                        baselineChange(of: record, clocks: Self.clocks(of: record.id, in: entries), entity: entity)
                    )
                }
            }
        }
        // Records that do not exist: their deletions, and the writes waiting for a creation.
        var removedDuplicates = Set<String>()
        try store.enumerateSyncMetadata(in: SyncMetadata.recordClocks, batchSize: 2000) { batch in
            for entry in batch {
                guard let clocks = entry.value, !clocks.isAlive,
                    let id = Self.objectID(String(entry.suffix), entity: nil),
                    let change = ghostChange(id, clocks: clocks)
                else { continue }
                if clocks.removedAsDuplicate != nil { removedDuplicates.insert(id.description) }
                try spool.append(change)
            }
        }
        var redirects: [String: String] = [:]
        try store.enumerateSyncMetadata(in: SyncMetadata.redirect, batchSize: 2000) { batch in
            for entry in batch {
                let loser = String(entry.suffix)
                // (Receivers decide about the duplicates the baseline carries as records.)
                guard !removedDuplicates.contains(loser), let winner = entry.value else { continue }
                redirects[loser] = winner
            }
        }
        return (spool, redirects)
    }

    /// Writes the baseline file `url`, atomically: `header`, `start`, the spooled changes, `end`
    /// and the checksum of all of it.
    private func write(_ header: [UInt8], _ start: [UInt8], _ spool: BaselineSpool, _ end: [UInt8], to url: URL) throws
    {
        do {
            try FileCoordinator().coordinate(writingItemAt: url) { url in
                try AtomicFile.write(to: url.path) { write in
                    var crc = CRC32C.initial
                    func put(_ bytes: UnsafeRawBufferPointer) throws {
                        crc = CRC32C.update(crc, bytes)
                        try write(bytes)
                    }
                    try header.withUnsafeBytes(put)
                    try start.withUnsafeBytes(put)
                    try spool.copy(to: put)
                    try end.withUnsafeBytes(put)
                    try LogFile.encodedChecksum(CRC32C.finalize(crc)).withUnsafeBytes { try write($0) }
                }
            }
        } catch let error as SyncError {
            throw error
        } catch {
            throw SyncError(.ioFailed, "cannot write the baseline", url: url, underlying: error)
        }
    }

    /// What a baseline carries for `id`, a record that does not exist here (`clocks` not alive):
    /// a duplicate this device removed, as the record it was (another device may keep it); or
    /// the deletion and the writes waiting for a creation; `nil` for nothing.
    func ghostChange(_ id: ObjectID, clocks: RecordClocks) -> SyncChange? {
        let schema = coordinator.schema
        if clocks.removedAsDuplicate != nil, let entity = schema.entity(id.entity) {
            var record = clocks.ghost ?? Record(id: id)
            record.toMany = record.toMany.filter { schema.ownsRelationship(entity: entity.name, $0.key) }
            return baselineChange(of: record, clocks: clocks, entity: entity)
        }
        var change = SyncChange(id: id)
        change.deleted = clocks.deleted
        // The waiting writes (those after the deletion, if there is one), null values and
        // references included: a ghost record does not hold those, its clocks do.
        if let entity = schema.entity(id.entity) {
            let ghost = clocks.ghost ?? Record(id: id)
            let after = { (stamp: SyncClock) in clocks.deleted.map { stamp > $0 } ?? true }
            for (name, stamp) in clocks.properties where after(stamp) {
                if entity.attribute(name) != nil {
                    change.values[name] = ClockedValue(value: ghost[name], clock: stamp)
                } else if entity.relationship(name)?.isToMany == false {
                    change.references[name] = ClockedReference(target: ghost.toOne[name], clock: stamp)
                }
            }
            for (name, states) in clocks.members {
                let members = states.compactMap { target, state -> ClockedMember? in
                    guard after(state.clock), let parsed = Self.objectID(target, entity: nil) else { return nil }
                    return ClockedMember(target: parsed, present: state.present, clock: state.clock)
                }
                if !members.isEmpty { change.members[name] = members.sorted { $0.target < $1.target } }
            }
        }
        guard change.deleted != nil || !change.values.isEmpty || !change.references.isEmpty || !change.members.isEmpty
        else { return nil }
        return change
    }

    /// Removes this device's baselines but `kept`, except those from before it was restored that
    /// it has not taken in yet (see ``takeInOldOwnBaselines()``).
    func removeOwnBaselines(except kept: String?) {
        let folder = layout.deviceFolder(deviceID)
        let old = Set(((try? baselines.oldOwnBaselines()) ?? []).map(\.url.lastPathComponent))
        for name in SyncFiles.names(in: folder)
        where name.hasPrefix(ContainerLayout.baselinePrefix) && name.hasSuffix(ContainerLayout.baselineExtension)
            && name != kept
            && !old.contains(name)
        {
            try? SyncFiles.remove(folder.appendingPathComponent(name))
        }
    }
}

/// What a baseline file that passed ``BaselineFile``'s check says of itself: what tells whether
/// it can be used, and what it covers.
struct BaselineFacts: Sendable {
    let device: String
    let schemaVersion: Int
    let container: String?
    let collectedThroughIsPlausible: Bool
    let covers: [String: UInt64]

    init(_ file: BaselineFile) {
        device = file.log.device
        schemaVersion = file.log.schemaVersion
        container = file.log.container
        collectedThroughIsPlausible = file.collectedThrough?.isPlausible != false
        covers = file.covers
    }
}

extension Compactor {
    /// `record` as a baseline carries it: a creation with its clocks, references as they were
    /// written (a target removed here as a duplicate, not its winner), and removed elements with
    /// the clocks of their removal.
    func baselineChange(of record: Record, clocks: RecordClocks, entity: EntityDescription) -> SyncChange {
        let schema = coordinator.schema
        // A winner as its logs made it, without what merging its duplicates changed (the
        // baseline carries those duplicates too: the receiver merges them, and can undo it).
        var record = record
        DuplicateLedger.restorePremerge(clocks, in: &record)
        let created = clocks.created ?? clock.latest
        var change = SyncChange(id: record.id)
        change.created = created
        change.deleted = clocks.deleted  // an earlier incarnation's end
        for attribute in entity.attributes {
            change.values[attribute.name] = ClockedValue(
                value: record[attribute.name],
                clock: clocks.properties[attribute.name] ?? created
            )
        }
        for relationship in entity.relationships where schema.ownsRelationship(entity: entity.name, relationship.name) {
            let name = relationship.name
            guard relationship.isToMany else {
                change.references[name] = ClockedReference(
                    target: clocks.relinked?[name] ?? record.toOne[name],
                    clock: clocks.properties[name] ?? created
                )
                continue
            }
            let states = clocks.members[name] ?? [:]
            let held = record.toMany[name] ?? []
            // Elements written but held as their winners: the winners have no clock of their own.
            let relinked = states.filter { $0.value.present }.compactMap { Self.objectID($0.key, entity: nil) }
                .filter { !held.contains($0) }
            var members: [ClockedMember] = []
            for target in held.sorted() {
                let known = states[target.description]
                if known == nil, !relinked.isEmpty { continue }
                members.append(ClockedMember(target: target, present: true, clock: known?.clock ?? created))
            }
            for target in relinked.sorted() {
                members.append(ClockedMember(target: target, present: true, clock: states[target.description]!.clock))
            }
            // Removals keep their clocks, so an older addition arriving later loses.
            for (target, state) in states.sorted(by: { $0.key < $1.key }) where !state.present {
                if let parsed = Self.objectID(target, entity: relationship.destination) {
                    members.append(ClockedMember(target: parsed, present: false, clock: state.clock))
                }
            }
            if !members.isEmpty { change.members[name] = members }
        }
        return change
    }
}

extension Compactor {
    /// What a baseline covering `positions` carries of each device's ``LogVersions`` (see
    /// ``BaselinePayload/versions``); `nil` for nothing.
    func baselineVersions(covering positions: [String: UInt64]) throws -> [String: LogVersions]? {
        var carried: [String: LogVersions] = [:]
        for (device, versions) in try versionsApplied(of: Array(positions.keys)) {
            let kept = versions.carried(through: positions[device] ?? 0)
            if !kept.isEmpty { carried[device] = kept }
        }
        return carried.isEmpty ? nil : carried
    }
}
