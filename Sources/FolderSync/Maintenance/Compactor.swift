import Foundation
import Persistence

/// Folds the store into baselines, removes this device's logs every device has applied, and
/// collects the tombstones nothing can need any more.
struct Compactor: SyncPart {
    let context: SyncContext
    let identities: ContainerIdentities
    let baselines: BaselineReader
    let acknowledger: Acknowledger

    /// Folds this device's store into a baseline in its own folder (unless another device's
    /// covers as much), then removes this device's logs that every registered device has applied
    /// and that a baseline covers. Returns how many it removed and the highest number removed
    /// (0: none). The caller holds the sync lock and wrote the outbox first.
    func compact(
        holding permit: SyncLock.Permit,
        tombstoneLifetime: Duration
    ) throws -> (removed: Int, highest: UInt64) {
        let collected = try collectTombstones(holding: permit, lifetime: tombstoneLifetime)
        if collected > 0 {
            logger.debug(
                "collected tombstones",
                metadata: ["concord.device": "\(deviceID)", "concord.tombstones": "\(collected)"]
            )
        }
        let positions = try acknowledger.baselinePositions()
        // One baseline is enough: write one only if none covers what this device has.
        if let newest = baselines.newestBaseline(), newest.device != deviceID,
            positions.allSatisfy({ newest.baseline.covers[$0.key, default: 0] >= $0.value })
        {
            removeOwnBaselines(except: nil)
        } else {
            try writeBaseline(covering: positions, holding: permit)
        }
        var safe = try appliedEverywhere(upTo: positions[deviceID] ?? 0)
        // A new device starts from the newest baseline: it must cover what is removed.
        if let newest = baselines.newestBaseline(), newest.device != deviceID {
            safe = min(safe, newest.baseline.covers[deviceID] ?? 0)
        }
        var removed = 0
        var highest: UInt64 = 0
        // Old logs under numbers this device's numbering leapt over (it was restored before they
        // arrived) stay: an acknowledgement past the leap does not say they were applied.
        let leapt = try versionsApplied(of: [deviceID])[deviceID] ?? LogVersions()
        for sequence in try layout.logSequences(device: deviceID) where sequence <= safe && !leapt.isVoid(sequence) {
            try SyncFiles.remove(layout.logURL(device: deviceID, sequence: sequence))
            removed += 1
            highest = sequence
        }
        if removed > 0 {
            logger.debug("compacted", metadata: ["concord.device": "\(deviceID)", "concord.removed": "\(removed)"])
        }
        return (removed, highest)
    }

    /// How much of a baseline's size the logs since it must reach before automatic maintenance
    /// folds them into a new one: 1/`foldShare` of the changes it holds.
    static let foldShare: UInt64 = 64

    /// Whether automatic maintenance should compact now, judged without reading a baseline whole
    /// (see ``BaselineReader/newestClaim()``). A compaction reads the newest baseline and writes
    /// the whole store, as much work as the store is large; done whenever a little changed (every
    /// launch of a one-shot command ten minutes after the last), it made each change cost what
    /// the store holds. It is worth it when:
    /// - no baseline's claim reads (a device that joins needs one), or the newest claims more
    ///   than this device has applied (ahead of it, or not to be trusted);
    /// - the logs since the newest baseline reach 1/``foldShare`` of the changes it holds;
    /// - this device has logs that the newest baseline covers and every device has applied:
    ///   removing them is what keeps the container small.
    /// Otherwise the logs wait: each is still in the container, and a device that joins applies
    /// them after the baseline.
    func isWorthwhile(positions: [String: UInt64]) throws -> Bool {
        guard let claim = baselines.newestClaim() else { return true }
        var since: UInt64 = 0
        for (device, position) in positions {
            let covered = claim.covers[device] ?? 0
            if position > covered { since += position - covered }
        }
        if claim.covers.contains(where: { $0.value > (positions[$0.key] ?? 0) }) { return true }
        if since > 0, since.multipliedReportingOverflow(by: Self.foldShare).partialValue >= claim.changeCount {
            return true
        }
        let safe = try appliedEverywhere(upTo: min(positions[deviceID] ?? 0, claim.covers[deviceID] ?? 0))
        return try layout.logSequences(device: deviceID).contains { $0 <= safe }
    }

    /// How far every other device that holds compaction back has applied this device's logs (as
    /// its acknowledgement says), at most `limit`.
    private func appliedEverywhere(upTo limit: UInt64) throws -> UInt64 {
        let acknowledgements = Dictionary(
            acknowledger.acknowledgements().map { ($0.device, $0) },
            uniquingKeysWith: { $1 }
        )
        var safe = limit
        for device in try acknowledger.devicesHoldingBack() where device != deviceID {
            safe = min(safe, acknowledgements[device]?.applied[deviceID] ?? 0)
        }
        return safe
    }

    /// Removes the tombstones (clocks of deleted records, and writes that wait for a creation)
    /// that nothing can need any more, so the store's metadata and the baselines stay
    /// proportional to live data. A record's history whose newest stamp is `d` is stable here
    /// when, for every other device that counts, its acknowledgement shows a clock at or past `d`
    /// (every log it commits from then on carries later timestamps) and this device has applied
    /// that device's logs without a gap up to the last one it had committed then (for a device
    /// that left: all its logs). Then every log that touched the record is applied here, and
    /// none to come can: a write comes after the creation it follows, a deletion after the
    /// creation it ends, each made by a device that had applied the other's log. Stable
    /// histories of records that do not exist, older than ``tombstoneLifetime``, are removed.
    /// Returns how many were removed.
    @discardableResult
    func collectTombstones(holding permit: SyncLock.Permit? = nil, lifetime tombstoneLifetime: Duration) throws -> Int {
        try syncLock.withLock(permit) { _ in
            // Clocks of records that do not exist: tombstones, and writes waiting for a creation
            // (read a page at a time: the clocks of live records are most of them).
            var tombstones: [(key: String, deleted: SyncClock)] = []
            try store.enumerateSyncMetadata(in: SyncMetadata.recordClocks, batchSize: 2000) { batch in
                for entry in batch {
                    guard let clocks = entry.value, !clocks.isAlive,
                        clocks.removedAsDuplicate == nil, let latest = clocks.latest
                    else { continue }
                    tombstones.append((entry.name, latest))
                }
            }
            guard !tombstones.isEmpty, let stable = try stableClock(entries: try appliedEntries()) else { return 0 }
            let lifetime = tombstoneLifetime.components
            let lifetimeMilliseconds = UInt64(clamping: max(0, lifetime.seconds)).multipliedReportingOverflow(by: 1000)
            let now = UInt64(max(0, self.now().timeIntervalSince1970) * 1000)
            // Histories stamped after `cutoff` are too young (saturating: no overflow either way).
            let cutoff =
                lifetimeMilliseconds.overflow || lifetimeMilliseconds.partialValue > now
                ? nil : now - lifetimeMilliseconds.partialValue
            let collectable = tombstones.filter { tombstone in
                guard let cutoff else { return false }
                return (tombstone.deleted.time, tombstone.deleted.counter) <= stable && tombstone.deleted.time <= cutoff
            }
            guard !collectable.isEmpty else { return 0 }
            // Recorded first: a baseline written later says what it no longer carries.
            let known = try store.syncMetadataValue(SyncMetadata.collectedThrough)
            let deleted = collectable.map(\.deleted).max() ?? collectable[0].deleted
            var horizon = SyncMetadataChanges()
            try horizon.set(SyncMetadata.collectedThrough, max(known ?? deleted, deleted))
            try store.commit(StoreChanges(syncMetadata: horizon))
            for chunk in collectable.chunked(1000) {
                var removed = SyncMetadataChanges()
                for tombstone in chunk { removed.remove(named: tombstone.key) }
                try store.commit(StoreChanges(syncMetadata: removed))
            }
            return collectable.count
        }
    }

    /// The latest deletion stamp that every other device is known to have passed, with every
    /// log written before it applied here (see ``collectTombstones()``); `nil` when a device
    /// holds everything back (no acknowledgement here, one from an older version, or logs not
    /// yet applied here).
    ///
    /// The devices that count are those with a folder or a registration here and every device
    /// whose logs another device's acknowledgement says it applied: a device whose files have
    /// not reached this container yet (sync engines keep no order) is known that way once it
    /// matters. A record can only be deleted by a device that has its creation, so the deleting
    /// device's acknowledgement (clock at or past the deletion) names the creating device.
    ///
    /// Only time and counter count: a device whose clock reached a deletion's time and counter
    /// stamps everything after it later, whatever the device ids.
    private func stableClock(entries: SyncMetadataSnapshot) throws -> (time: UInt64, counter: UInt32)? {
        let acknowledgements = Dictionary(
            acknowledger.acknowledgements().map { ($0.device, $0) },
            uniquingKeysWith: { $1 }
        )
        let holding = Set(try acknowledger.devicesHoldingBack()).subtracting([deviceID])
        let folders = SyncFiles.names(in: layout.devicesFolder)
            .filter(ContainerLayout.isValidDeviceID)
        var devices = holding.union(folders)
        for acknowledgement in acknowledgements.values { devices.formUnion(acknowledgement.applied.keys) }
        devices.remove(deviceID)
        // A device alone in the container has every deletion there is.
        var stable: (time: UInt64, counter: UInt32) = (.max, .max)
        for device in devices {
            // (Older versions published no `committed`: a device of theirs that left is taken at
            // its last exported log.)
            guard let acknowledgement = acknowledgements[device],
                let committed = acknowledgement.committed
                    ?? (holding.contains(device) ? nil : acknowledgement.applied[device]),
                AppliedLogs.of(device, in: entries).through >= committed
            else { return nil }
            // A device that left writes nothing more: applying all its logs is enough.
            guard holding.contains(device) else { continue }
            guard let seen = acknowledgement.clock else { return nil }
            if (seen.time, seen.counter) < stable { stable = (seen.time, seen.counter) }
        }
        return stable
    }

    /// How many tombstones this store keeps: the clocks of deleted records (kept so that a late
    /// write cannot bring one back), and writes waiting for their record's creation.
    /// ``compact()`` collects those no device can need any more.
    func tombstoneCount() throws -> Int {
        try syncLock.withLock { _ in
            var count = 0
            try store.enumerateSyncMetadata(in: SyncMetadata.recordClocks, batchSize: 2000) { batch in
                count +=
                    batch.filter {
                        $0.value.map { !$0.isAlive && $0.removedAsDuplicate == nil } == true
                    }.count
            }
            return count
        }
    }
}
