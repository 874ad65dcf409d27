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

    /// How many logs it covers in all, saturating: what baselines are compared by. (A plain sum
    /// of a hostile file's positions overflows and traps.)
    package var total: UInt64 {
        covers.values.reduce(0) { sum, position in
            sum.addingReportingOverflow(position).overflow ? .max : sum + position
        }
    }
}

extension FolderSync {
    func baselineURL(_ device: String, _ total: UInt64) -> URL {
        let digits = String(total)
        return layout.deviceFolder(device).appendingPathComponent(
            Self.baselinePrefix + String(repeating: "0", count: max(0, 16 - digits.count)) + digits + "."
                + Self.baselineExtension
        )
    }

    /// The store as creation changes with their clocks, and its deletions.
    func writeBaseline(covering positions: [String: UInt64]) throws {
        // Clocks and records read together: a record saved between the two reads would get no
        // clock of its own.
        try withCommitLock { try writeBaseline(covering: positions, locked: ()) }
    }

    func writeBaseline(covering positions: [String: UInt64], locked: Void) throws {
        let schema = coordinator.schema
        var changes: [SyncChange] = []
        for entity in schema.entities {
            try store.enumerateRecords(of: entity.name) { batch in
                let entries = try store.metadataEntries(forKeys: batch.map { RecordClocks.key($0.id) })
                for record in batch {
                    changes.append(
                        baselineChange(of: record, clocks: Self.clocks(of: record.id, in: entries), entity: entity)
                    )
                }
            }
        }
        // Records that do not exist: their deletions, and the writes waiting for a creation.
        var removedDuplicates = Set<String>()
        var ghosts: [(key: String, value: Data)] = []
        try store.enumerateMetadataEntries(withPrefix: RecordClocks.keyPrefix, batchSize: 2000) { batch in
            ghosts += batch.filter { (try? RecordClocks.decode($0.value)).map { !$0.isAlive } == true }
        }
        for (key, data) in ghosts {
            guard let clocks = try? RecordClocks.decode(data), !clocks.isAlive,
                let id = Self.objectID(String(key.dropFirst(RecordClocks.keyPrefix.count)), entity: nil)
            else { continue }
            // A duplicate this device removed is the record as it was: another device may keep it.
            if clocks.removedAsDuplicate != nil, let entity = schema.entity(id.entity) {
                var record = clocks.ghost ?? Record(id: id)
                record.toMany = record.toMany.filter { schema.ownsRelationship(entity: entity.name, $0.key) }
                changes.append(baselineChange(of: record, clocks: clocks, entity: entity))
                removedDuplicates.insert(id.description)
                continue
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
            guard
                change.deleted != nil || !change.values.isEmpty || !change.references.isEmpty || !change.members.isEmpty
            else { continue }
            changes.append(change)
        }
        var redirects: [String: String] = [:]
        try store.enumerateMetadataEntries(withPrefix: Self.redirectPrefix, batchSize: 2000) { batch in
            for (key, data) in batch {
                let loser = String(key.dropFirst(Self.redirectPrefix.count))
                // (Receivers decide about the duplicates the baseline carries as records.)
                guard !removedDuplicates.contains(loser) else { continue }
                redirects[loser] = String(decoding: data, as: UTF8.self)
            }
        }
        let collected = try store.metadataEntries(forKeys: [Self.collectedThroughKey])[Self.collectedThroughKey]
            .flatMap { try? JSONDecoder().decode(SyncClock.self, from: $0) }
        let baseline = BaselinePayload(
            covers: positions,
            changes: changes,
            redirects: redirects,
            collectedThrough: collected
        )
        let total = baseline.total
        let log = LogFile(
            device: deviceID,
            sequence: max(total, 1),
            schemaVersion: schema.version,
            created: Date(),
            payload: try baseline.encoded(),
            container: loggedContainer()
        )
        let url = baselineURL(deviceID, total)
        do {
            try FileCoordinator().replaceContentsOfItem(at: url, with: log.encoded())
        } catch {
            throw SyncError(.ioFailed, "cannot write the baseline", url: url, underlying: error)
        }
        // Older baselines of this device are superseded.
        removeOwnBaselines(except: url.lastPathComponent)
    }

    func removeOwnBaselines(except kept: String?) {
        let folder = layout.deviceFolder(deviceID)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        where name.hasPrefix(Self.baselinePrefix) && name.hasSuffix(Self.baselineExtension) && name != kept {
            try? FileManager.default.removeItem(at: folder.appendingPathComponent(name))
        }
    }

    /// The largest total a baseline's name carries (0: none), without reading any.
    func newestBaselineTotal() -> UInt64 {
        var best: UInt64 = 0
        for device in ((try? FileManager.default.contentsOfDirectory(atPath: layout.devicesFolder.path)) ?? [])
        where ContainerLayout.isValidDeviceID(device) {
            // (The scanner's listing: a folder of thousands of logs is not listed at every pass.)
            for name in scanner.otherNames(inFolderOf: device)
            where name.hasPrefix(Self.baselinePrefix) && name.hasSuffix("." + Self.baselineExtension) {
                let digits = name.dropFirst(Self.baselinePrefix.count).dropLast(Self.baselineExtension.count + 1)
                best = max(best, UInt64(digits) ?? 0)
            }
        }
        return best
    }

    /// The baseline that covers the most, across all devices' folders.
    func newestBaseline() -> (device: String, url: URL, payload: BaselinePayload)? {
        var best: (device: String, url: URL, payload: BaselinePayload)?
        // (A baseline written for a container that was replaced, by a device that had not seen
        // the replacement, holds that container's data.)
        let replaced = replacedContainers()
        let folders = ((try? FileManager.default.contentsOfDirectory(atPath: layout.devicesFolder.path)) ?? []).sorted()
        for device in folders where ContainerLayout.isValidDeviceID(device) {
            let folder = layout.deviceFolder(device)
            for name in ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
            where name.hasPrefix(Self.baselinePrefix) && name.hasSuffix(Self.baselineExtension) {
                let url = folder.appendingPathComponent(name)
                guard let data = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize),
                    let log = try? LogFile.decode(data, url: url),
                    log.device == device, log.schemaVersion <= coordinator.schema.version,
                    log.container.map({ !replaced.contains($0) }) ?? true,
                    let payload = try? BaselinePayload.decode(from: log),
                    payload.collectedThrough?.isPlausible != false,
                    malformation(of: SyncPayload(changes: payload.changes)) == nil
                else { continue }
                if best.map({ payload.total > $0.payload.total }) ?? true {
                    best = (device, url, payload)
                }
            }
        }
        return best
    }

    /// Catches up from the newest baseline when it covers a log this device still needs that is
    /// no longer in the container (its device compacted it away before this device's folder or
    /// acknowledgement reached it: a device that joined from an older baseline, one back from a
    /// long absence). The baseline is merged like any log (its clocks decide, so nothing newer is
    /// undone) and every position it covers beyond what is applied counts as applied. Returns
    /// whether it did. The caller holds the sync lock.
    ///
    /// With `includingOwnLogs` (a device restoring its own history, whose store was lost or
    /// replaced) this device's own logs count too: those compacted away come from the baseline.
    func catchUp(
        missing: [(device: String, sequence: UInt64)],
        applied: [String: AppliedLogs],
        includingOwnLogs: Bool = false
    ) throws -> Bool {
        // Behind: a device whose next log the baseline covers and the container does not hold
        // (compacted away, or never written: its device died between commit and export, then
        // lost its store). That can become true at any later pass (the log before the gap was
        // still arriving when the baseline came), so what the newest baseline covers is kept: a
        // baseline is read again only when a newer one appeared (its name carries the total it
        // covers), or when one is needed; an idle pass reads none.
        func behind(_ covers: [String: UInt64]) -> Bool {
            covers.contains { device, position in
                let next = (applied[device]?.through ?? 0) + 1
                return (includingOwnLogs || device != deviceID) && position >= next
                    && !FileManager.default.fileExists(atPath: layout.logURL(device: device, sequence: next).path)
            }
        }
        let total = newestBaselineTotal()
        guard total > 0 else { return false }
        let known = healing.withLock { state in state.checkedBaseline.flatMap { $0.total == total ? $0.covers : nil } }
        if let known, missing.isEmpty, !behind(known) { return false }
        guard let baseline = newestBaseline() else { return false }
        healing.withLock { $0.checkedBaseline = (total, baseline.payload.covers) }
        guard behind(baseline.payload.covers) else { return false }
        let entries = try store.metadataEntries(forKeys: baseline.payload.changes.map { RecordClocks.key($0.id) })
        var clocks: [ObjectID: RecordClocks] = [:]
        let context = ObjectContext(coordinator: coordinator, origin: .import, name: "sync baseline catch-up")
        importing.withLock { $0 = true }
        defer { importing.withLock { $0 = false } }
        try context.prefetch(baseline.payload.changes.map(\.id))
        for change in baseline.payload.changes {
            try applyChange(change, in: context, clocks: &clocks, entries: entries)
        }
        try removeCollected(baseline.payload, in: context, clocks: clocks)
        for (id, state) in clocks { context.setMetadata(state.encoded(), forKey: RecordClocks.key(id), in: store) }
        for (device, position) in baseline.payload.covers
        where (includingOwnLogs || device != deviceID) && position > (applied[device]?.through ?? 0) {
            context.setMetadata(
                try JSONEncoder().encode(AppliedLogs(through: position)),
                forKey: Self.appliedPrefix + device,
                in: store
            )
        }
        context.setMetadata(try JSONEncoder().encode(clock.latest), forKey: Self.clockKey, in: store)
        try context.save()
        logger.info(
            "caught up from a baseline over logs compacted away",
            metadata: ["concord.baseline": "\(baseline.url.path)"]
        )
        return true
    }

    /// For a device that has applied nothing yet: starts from the newest baseline, if there is
    /// one, marking the logs it covers as applied. Returns the number of changes applied.
    @discardableResult
    public func startFromBaseline() throws -> Int {
        try startFromBaseline(includingOwnHistory: false)
    }

    /// ``startFromBaseline()``; with `includingOwnHistory`, this device's own logs that the
    /// baseline covers are marked applied too (a device that replaces its data with the
    /// container's then imports only its own logs past the baseline).
    func startFromBaseline(includingOwnHistory: Bool) throws -> Int {
        // Local commits wait: the baseline's clocks are read and written as a whole.
        try syncLock.withLock {
            guard try !store.hasMetadataEntries(withPrefix: Self.appliedPrefix), let baseline = newestBaseline() else {
                return 0
            }
            var clocks: [ObjectID: RecordClocks] = [:]
            let entries = try store.metadataEntries(forKeys: baseline.payload.changes.map { RecordClocks.key($0.id) })
            let context = ObjectContext(coordinator: coordinator, origin: .import, name: "sync baseline")
            importing.withLock { $0 = true }
            defer { importing.withLock { $0 = false } }
            try context.prefetch(baseline.payload.changes.map(\.id))
            for change in baseline.payload.changes {
                try applyChange(change, in: context, clocks: &clocks, entries: entries)
            }
            let encoder = JSONEncoder()
            for (id, state) in clocks { context.setMetadata(state.encoded(), forKey: RecordClocks.key(id), in: store) }
            // Late references to duplicates removed before the baseline go to their winners here too.
            for (loser, winner) in baseline.payload.redirects ?? [:] {
                context.setMetadata(Data(winner.utf8), forKey: Self.redirectPrefix + loser, in: store)
            }
            for (device, position) in baseline.payload.covers
            where (includingOwnHistory || device != deviceID) && position > 0 {
                context.setMetadata(
                    try JSONEncoder().encode(AppliedLogs(through: position)),
                    forKey: Self.appliedPrefix + device,
                    in: store
                )
            }
            context.setMetadata(try encoder.encode(clock.latest), forKey: Self.clockKey, in: store)
            try context.save()
            logger.debug("started from a baseline", metadata: ["concord.baseline": "\(baseline.url.path)"])
            return baseline.payload.changes.count
        }
    }
}

extension FolderSync {
    /// `record` as a baseline carries it: a creation with its clocks, references as they were
    /// written (a target removed here as a duplicate, not its winner), and removed elements with
    /// the clocks of their removal.
    func baselineChange(of record: Record, clocks: RecordClocks, entity: EntityDescription) -> SyncChange {
        let schema = coordinator.schema
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

extension FolderSync {
    /// The newest history among the tombstones this store collected (see
    /// ``BaselinePayload/collectedThrough``).
    static let collectedThroughKey = "sync.collectedThrough"

    /// Removes, in a catch-up from `baseline`, the records this device holds that the baseline's
    /// writer had deleted and forgotten: those whose whole history is no newer than what it had
    /// collected and that it does not carry. A device that applied an old log of a record (its
    /// deletion compacted away before this device could apply it, a store restored from old
    /// logs) would otherwise keep the record for good.
    func removeCollected(
        _ baseline: BaselinePayload,
        in context: ObjectContext,
        clocks: [ObjectID: RecordClocks]
    ) throws {
        guard let horizon = baseline.collectedThrough else { return }
        let carried = Set(baseline.changes.map(\.id))
        var gone: [ObjectID] = []
        try store.enumerateMetadataEntries(withPrefix: RecordClocks.keyPrefix, batchSize: 2000) { batch in
            for (key, data) in batch {
                guard let id = Self.objectID(String(key.dropFirst(RecordClocks.keyPrefix.count)), entity: nil),
                    !carried.contains(id), clocks[id] == nil,
                    let state = try? RecordClocks.decode(data), state.isAlive,
                    let latest = state.latest, latest <= horizon
                else { continue }
                gone.append(id)
            }
        }
        for id in gone where try context.record(with: id) != nil {
            logger.debug("removing a record deleted and forgotten elsewhere", metadata: ["concord.record": "\(id)"])
            try context.deleteWithoutRules(id)
        }
    }
}
