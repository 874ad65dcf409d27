import Foundation
import Persistence

/// Starting and catching up from a baseline: its changes applied in batches, the positions it
/// covers marked applied.
extension Importer {
    /// How many of a baseline's changes one save applies at most.
    static let baselineChangesPerSave = 8192

    /// Applies `baseline`'s changes in saves of some thousands each (the caller holds the sync lock),
    /// then lets `finish` add to a last save what marks it applied, given the ids the batches
    /// touched (when `collectingTouched`; empty otherwise).
    func applyBaseline(
        _ baseline: BaselineFile,
        name: String,
        collectingTouched: Bool,
        finish: (ObjectContext, Set<UUID>) throws -> Void
    ) throws {
        var touched = Set<UUID>()
        var context = ObjectContext(coordinator: coordinator, origin: .import, name: name)
        var clocks: [ObjectID: RecordClocks] = [:]
        var held = 0
        var found: [CreationConflict] = []
        func save() throws {
            for (id, state) in clocks { try context.setSyncMetadata(SyncMetadata.recordClocks(id), state, in: store) }
            if collectingTouched { touched.formUnion(clocks.keys.map(\.uuid)) }
            try context.save()
            conflicts.report(found)
            found = []
            context = ObjectContext(coordinator: coordinator, origin: .import, name: name)
            clocks = [:]
            held = 0
        }
        try baseline.forEachBatch { batch in
            var untouched = batch.map(\.id).filter { clocks[$0] == nil }
            var entries = try store.syncMetadata(untouched.map { SyncMetadata.recordClocks($0) })
            // A baseline's records are creations: one that meets a record created here under
            // its id at another time is kept beside it (see ``CreationConflicts``).
            let changes = try conflicts.route(
                batch,
                incarnations: [:],
                in: context,
                clocks: &clocks,
                entries: entries,
                found: &found
            )
            if changes.map(\.id) != batch.map(\.id) {
                untouched = changes.map(\.id).filter { clocks[$0] == nil }
                entries = try store.syncMetadata(untouched.map { SyncMetadata.recordClocks($0) })
            }
            try context.prefetch(untouched)
            for change in changes {
                try merger.applyChange(change, in: context, clocks: &clocks, entries: entries)
            }
            held += changes.count
            // A save per some thousands of changes, or per thousand records updated (those a
            // batch changes again and again, the derived sides of relationships, are written
            // once per save): memory follows the save, and so does the work of each.
            if held >= Self.baselineChangesPerSave || Self.batchIsFull(context) {
                try save()
            }
        }
        if held > 0 { try save() }
        try finish(context, touched)
        try context.setSyncMetadata(SyncMetadata.clock, clock.latest, in: store)
        try context.save()
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
    /// A baseline that covers numbers this device's numbering leapt over counts in any case (see
    /// `noteRestoredHistory`).
    func catchUp(
        missing: [(device: String, sequence: UInt64)],
        applied: [String: AppliedLogs],
        includingOwnLogs: Bool = false,
        holding permit: SyncLock.Permit
    ) throws -> Bool {
        // A device restored before its copy of the container showed its history leapt over the
        // numbers of its old logs and waits for them as late versions. Those compacted away
        // meanwhile (into another device's baseline, once its own gave way to that one) never
        // arrive: a baseline that covers such a number holds what they made, and is caught up
        // from like one that covers a log compacted away. (Noting the history it shows ends it.)
        let leapt = try versionsApplied(of: [deviceID])[deviceID]
        // Behind: a device whose next log the baseline covers and the container does not hold
        // (compacted away, or never written: its device died between commit and export, then
        // lost its store), or holds damaged for good. That can become true at any later pass (the log before the gap was
        // still arriving when the baseline came), so what the newest baseline covers is kept: a
        // baseline is read again only when a newer one appeared (its name carries the total it
        // covers), or when one is needed; an idle pass reads none.
        func behind(_ covers: [String: UInt64]) -> Bool {
            covers.contains { device, position in
                if device == deviceID, leapt?.isVoid(position) == true { return true }
                let next = (applied[device]?.through ?? 0) + 1
                return (includingOwnLogs || device != deviceID) && position >= next
                    && (!SyncFiles.exists(layout.logURL(device: device, sequence: next))
                        || healer.isDamaged(device: device, sequence: next))
            }
        }
        guard let newest = try chooseBaseline(missing: missing, leapt: leapt, behind: behind) else { return false }
        let restoredHistory = try catchUp(from: newest.baseline, applied: applied, includingOwnLogs: includingOwnLogs)
        logger.info(
            "caught up from a baseline over logs compacted away",
            metadata: ["concord.baseline": "\(newest.url.path)"]
        )
        if restoredHistory { _ = try lostLogs.exportOwnWrites(holding: permit) }
        return true
    }

    /// The baseline to catch up from: one that covers a position this device is `behind` on
    /// (the newest, else an older one), or `nil` when none does. What the newest covers is kept
    /// (an idle pass reads no baseline; one is read again only when a newer one appeared).
    private func chooseBaseline(
        missing: [(device: String, sequence: UInt64)],
        leapt: LogVersions?,
        behind: ([String: UInt64]) -> Bool
    ) throws -> (device: String, url: URL, baseline: BaselineFile)? {
        let total = baselines.newestBaselineTotal()
        guard total > 0 else { return nil }
        let known = baselines.state.withLock { state in
            state.checkedBaseline.flatMap { $0.total == total ? $0.covers : nil }
        }
        // The baseline that covers the most is not the only one that can hold what this device
        // lacks: one that covers a device whose last logs were compacted away (no later log of it
        // shows a gap, so `missing` is empty) may be smaller, or of equal total. Every baseline
        // is looked at, by the covers kept per file (an idle pass reads none).
        if let known, missing.isEmpty, !behind(known), baselines.baseline(skipping: nil, where: behind) == nil {
            return nil
        }
        // Nothing kept yet (a new process): when no baseline claims a position this device is
        // behind on, none is read whole, as none would be caught up from (checked, each covers
        // what it claims or nothing). A device within its leap window reads the newest all the
        // same: what it covers of this device's history is noted (see ``historyShown()``).
        if known == nil, leapt?.voids.last == nil || leapt?.leapt == nil, !baselines.someBaselineMayCover(where: behind)
        {
            return nil
        }
        // (What the newest covers, without reading it again when this process checked it as it
        // is now: it is read whole only when it is the one to catch up from.)
        guard let newestCovers = baselines.newestBaselineCovers() else { return nil }
        baselines.state.withLock { $0.checkedBaseline = (total, newestCovers.covers) }
        let chosen: (device: String, url: URL, baseline: BaselineFile)
        if !behind(newestCovers.covers) {
            // Baselines are not ordered: the one that covers the most may lack a log that an
            // older one covers (its writer had not applied it), and nobody holds that log now.
            guard let older = baselines.baseline(skipping: newestCovers.url, where: behind) else { return nil }
            chosen = older
        } else {
            guard var newest = baselines.newestBaseline() else { return nil }
            if newest.url != newestCovers.url || newest.baseline.covers != newestCovers.covers {
                // (Replaced since: decided again on what it is now.)
                baselines.state.withLock { $0.checkedBaseline = (total, newest.baseline.covers) }
                if !behind(newest.baseline.covers) {
                    guard let older = baselines.baseline(skipping: newest.url, where: behind) else { return nil }
                    newest = older
                }
            }
            chosen = newest
        }
        return chosen
    }

    /// Merges `baseline` (in batches, each saved on its own) and counts every position it covers
    /// beyond `applied` as applied, with the last save (an interrupted catch-up is done again,
    /// and merging is idempotent). Returns whether it showed this device's restored history.
    private func catchUp(
        from baseline: BaselineFile,
        applied: [String: AppliedLogs],
        includingOwnLogs: Bool
    ) throws -> Bool {
        var restoredHistory = false
        try applyBaseline(baseline, name: "sync baseline catch-up", collectingTouched: true) { context, touched in
            try removeCollected(
                collectedThrough: baseline.collectedThrough,
                carried: touched,
                covers: baseline.covers,
                applied: applied,
                in: context
            )
            try adoptVersions(of: baseline, in: context)
            // (A restored device that leapt learns how far its history went: see
            // `noteRestoredHistory`. So does one that is not restoring any more: its history
            // compacted away may show only now.)
            restoredHistory = try noteRestoredHistory(baseline.covers, in: context)
            for (device, position) in baseline.covers
            where (includingOwnLogs || device != deviceID) && position > (applied[device]?.through ?? 0) {
                try context.setSyncMetadata(SyncMetadata.applied(device), AppliedLogs(through: position), in: store)
            }
        }
        return restoredHistory
    }

    /// ``startFromBaseline()``; with `includingOwnHistory`, this device's own logs that the
    /// baseline covers are marked applied too (a device that replaces its data with the
    /// container's then imports only its own logs past the baseline).
    func startFromBaseline(includingOwnHistory: Bool, holding permit: SyncLock.Permit? = nil) throws -> Int {
        // Local commits wait: the baseline's clocks are read and written as a whole.
        try syncLock.withLock(permit) { _ in
            guard try !store.hasSyncMetadata(in: SyncMetadata.applied), let newest = baselines.newestBaseline() else {
                return 0
            }
            let baseline = newest.baseline
            // Each batch is saved on its own; the positions count as applied only with the last
            // save (an interrupted start is done again: nothing counts as applied yet).
            try applyBaseline(baseline, name: "sync baseline", collectingTouched: false) { context, _ in
                // Late references to duplicates removed before the baseline go to their winners here too.
                for (loser, winner) in baseline.redirects ?? [:] {
                    try context.setSyncMetadata(SyncMetadata.redirect(loser), winner, in: store)
                }
                try adoptVersions(of: baseline, in: context)
                for (device, position) in baseline.covers
                where (includingOwnHistory || device != deviceID) && position > 0 {
                    try context.setSyncMetadata(SyncMetadata.applied(device), AppliedLogs(through: position), in: store)
                }
            }
            logger.debug("started from a baseline", metadata: ["concord.baseline": "\(newest.url.path)"])
            return baseline.changeCount
        }
    }
}

extension Importer {
    /// Removes, in a catch-up from a baseline, the records this device holds that the baseline's
    /// writer had deleted and forgotten: those whose whole history is no newer than what it had
    /// collected (`horizon`) and that it does not carry (`carried`: the ids the catch-up
    /// touched). A device that applied an old log of a record (its
    /// deletion compacted away before this device could apply it, a store restored from old
    /// logs) would otherwise keep the record for good.
    ///
    /// Only records whose last write the writer had seen: every log of the writing device that
    /// this device had applied (`applied`; its own, for this device) is among those the baseline
    /// `covers`. A baseline written by a device that never saw a record (it had not applied the
    /// log that made it: a smaller baseline caught up from for another device's logs) says
    /// nothing of it.
    func removeCollected(
        collectedThrough horizon: SyncClock?,
        carried: Set<UUID>,
        covers: [String: UInt64],
        applied: [String: AppliedLogs],
        in context: ObjectContext
    ) throws {
        guard let horizon else { return }
        let ownThrough = try lastLocalSequence()
        func seen(by writer: String) -> Bool {
            let through = writer == deviceID ? ownThrough : applied[writer]?.through ?? 0
            return through <= covers[writer] ?? 0
        }
        var gone: [ObjectID] = []
        try store.enumerateSyncMetadata(in: SyncMetadata.recordClocks, batchSize: 2000) { batch in
            for entry in batch {
                guard let id = Self.objectID(String(entry.suffix), entity: nil),
                    !carried.contains(id.uuid),
                    let state = entry.value, state.isAlive,
                    let latest = state.latest, latest <= horizon, seen(by: latest.device)
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
