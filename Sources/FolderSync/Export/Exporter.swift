import ConcordSystem
import Foundation
import Logging
import Persistence

/// The exporter's side of a save: every local save's changes become the next log of this
/// device, committed to the store's outbox with the save (under the sync lock, across threads and
/// processes); an import's save records the duplicates it removed. The ``Outbox`` writes the logs
/// into the container afterwards.
struct Exporter: SyncPart {
    let context: SyncContext
    let identities: ContainerIdentities
    let duplicates: DuplicateLedger
    let outbox: Outbox
    let numbering: Numbering

    /// Records a save's changes in the same commit: a local save's as a log in the outbox, an
    /// import's removals of duplicates. Returns whether it made a log (live sync then exports it).
    func record(
        _ changes: inout StoreChanges,
        origin: ChangeOrigin,
        context: ObjectContext
    ) throws -> Bool {
        // Only the entries this commit needs are read: a store's clocks grow with its records.
        let touched = (changes.inserts.map(\.id) + changes.updates.map(\.id) + changes.deletes).map {
            SyncMetadata.recordClocks($0) as any SyncMetadataNamed
        }
        let metadata = (entries: try store.syncMetadata(touched + Self.logAllocationKeys + Self.catchUpKeys), ())
        // The sync lock was taken without catching up (``performCommits(_:)``): done here, before
        // the clock ticks.
        try Self.catchUp(with: metadata.entries, clock: clock, storedClock: storedClock, device: deviceID, store: store)
        let schema = coordinator.schema
        if origin == .import {
            try recordImportCommit(&changes, context: context, entries: metadata.entries)
            return false
        }
        guard !changes.inserts.isEmpty || !changes.updates.isEmpty || !changes.deletes.isEmpty else { return false }
        let stamp = clock.tick()
        let old = try storedVersions(of: changes, entries: metadata.entries, context: context)
        // An update of a record another process of this device deleted meanwhile changes nothing
        // in the store: it is not logged either. One removed as a duplicate meanwhile is logged
        // (a newer write, it undoes the removal: see ``logUpdatesOfRemovedDuplicates``).
        let unstored = changes.updates.filter { old[$0.id] == nil }
        changes.updates.removeAll { old[$0.id] == nil }
        DerivedSides.dropElements(naming: Set(unstored.map(\.id)), from: &changes, schema: schema)
        DerivedSides.refresh(&changes, stored: old, schema: schema)
        try DerivedSides.fillInserts(&changes, schema: schema, store: store) { id in
            metadata.entries.contains(SyncMetadata.recordClocks(id)) || id.isNameBased
        }
        try DerivedSides.repairTargets(&changes, stored: old, schema: schema, store: store)
        let plan = try plan(changes, stored: old, unstored: unstored, entries: metadata.entries, stamp: stamp)
        guard !plan.isEmpty else {
            // (Nothing to log; elements that left a set for their winner are still noted.)
            for (target, record) in plan.relinked {
                changes.mark(SyncMetadata.relinked(target: target, record: record))
            }
            return false
        }
        // Winners this save writes (what its log carries: a derived side, such as a folder's
        // notes, changes no likeness and is not logged) or deletes.
        try duplicates.noteChangedWinners(plan.writtenWithoutCreation, in: &changes)
        let (_, logEntries) = try makeLog(plan.logged, stamp: stamp, entries: metadata.entries)
        try plan.apply(to: &changes)
        changes.merge(logEntries)
        return true
    }

    /// The store's version of what a save changes. An insert under a random id that the context
    /// read the store without, and that has no history here, is new: not read again.
    private func storedVersions(
        of changes: StoreChanges,
        entries: SyncMetadataSnapshot,
        context: ObjectContext
    ) throws -> [ObjectID: Record] {
        let inserted = changes.inserts.map(\.id).filter {
            $0.isNameBased || entries.contains(SyncMetadata.recordClocks($0)) || !context.storeLacked($0)
        }
        return Dictionary(
            try (inserted + changes.updates.map(\.id) + changes.deletes).chunked(1000).flatMap {
                try store.records(with: Array($0))
            }
            .map { ($0.id, $0) },
            uniquingKeysWith: { $1 }
        )
    }

    /// What a local save logs, with the clocks it gives its records: its inserts, the updates
    /// that change something (`unstored`: of records deleted meanwhile, logged only when removed
    /// as duplicates), its deletions and the duplicates removed in favour of what it deletes.
    private func plan(
        _ changes: StoreChanges,
        stored old: [ObjectID: Record],
        unstored: [RecordUpdate],
        entries: SyncMetadataSnapshot,
        stamp: SyncClock
    ) throws -> ExportPlan {
        var plan = ExportPlan(schema: coordinator.schema, stamp: stamp)
        for record in changes.inserts {
            plan.insert(record, known: Self.clocks(of: record.id, in: entries))
        }
        for update in changes.updates {
            var clocks = Self.clocks(of: update.id, in: entries)
            var relinked: [ObjectID] = []
            let change = try loggedUpdate(
                update,
                stored: old[update.id],
                clocks: &clocks,
                stamp: stamp,
                relinked: &relinked
            )
            for target in relinked { plan.noteRelinked(target, in: update.id) }
            guard let change else { continue }
            plan.log(change, clocks: clocks)
        }
        try logUpdatesOfRemovedDuplicates(unstored, entries: entries, into: &plan)
        for id in changes.deletes { plan.delete(id, known: Self.clocks(of: id, in: entries)) }
        // The duplicates removed here in favour of a deleted record go with it. A loser this save
        // makes again (a deterministic id) is not one of them: its creation, logged above, is a
        // new record, newer than the removal, and a deletion at the same stamp would both end it
        // on every other device (a creation must be newer than the deletion) and overwrite its
        // clocks here with the old ones, while the store keeps the new record. (Losers removed in
        // favour of it go all the same.)
        let madeAgain = Set(changes.inserts.map(\.id))
        for (id, clocks) in try duplicates.removed(favouring: changes.deletes, except: Set(changes.deletes))
        where !madeAgain.contains(id) {
            plan.deleteRemovedDuplicate(id, known: clocks)
        }
        return plan
    }

    /// An import's commit: the duplicates it removed by policy become removals this device may
    /// undo, and its other deletions are stamped with the record's newest write.
    private func recordImportCommit(
        _ changes: inout StoreChanges,
        context: ObjectContext,
        entries: SyncMetadataSnapshot
    ) throws {
        // Duplicates an import removes by policy are this device's reading of what it holds,
        // not deletions: no log carries them, and a newer write undoes them (see
        // DuplicateLedger.swift). Other deletions an import makes on its own are
        // stamped with the record's newest write, which every device sees, rather than with
        // this device's clock, which the others may never pass: the tombstone can be
        // collected. During a sync import the import's own clock entries, in this commit, are
        // the newest.
        // Deletions the import applied from logs are already in them. A duplicate the import
        // itself created and removed never reaches the store: its clocks say it lives, while
        // the commit neither inserts nor keeps it.
        // Only entities with a uniqueness policy lose records that way.
        var removed = changes.deletes
        let unique = Set(coordinator.policies.uniqueEntities)
        let families = unique.map { SyncMetadata.recordClocks.narrowed(to: $0 + "/") }
        let changed =
            unique.isEmpty
            ? []
            : Set(
                (changes.inserts.map(\.id) + changes.updates.map(\.id) + changes.deletes).filter {
                    unique.contains($0.entity)
                }.map { SyncMetadata.recordClocks($0).name }
            )
        var unexplained: [ObjectID] = []
        for (key, value) in unique.isEmpty ? [:] : changes.metadataEntries
        where families.contains(where: { $0.contains(key) }) && !changed.contains(key) {
            guard let value, let clocks = SyncMetadata.recordClocks.decode(value), clocks.isAlive,
                let suffix = SyncMetadata.recordClocks.suffix(of: key),
                let id = Self.objectID(String(suffix), entity: nil)
            else { continue }
            unexplained.append(id)
        }
        if !unexplained.isEmpty {
            let present = Set(try unexplained.chunked(500).flatMap { try store.records(with: Array($0)) }.map(\.id))
            removed += unexplained.filter { !present.contains($0) }.sorted()
        }
        // A reference to a removed duplicate that arrives later goes to the winner.
        for (loser, winner) in context.duplicateRedirects
        where (try? coordinator.store(forEntity: loser.entity)) === store {
            try changes.set(SyncMetadata.redirect(loser), winner.description)
        }
        // Duplicates removed by policy: removals this device may undo, not deletions.
        try duplicates.recordDuplicateRemovals(&changes, context: context, removed: removed, entries: entries)
        for id in removed where context.duplicateRedirects[id] == nil {
            let key = SyncMetadata.recordClocks(id)
            var clocks = changes.written(key).flatMap { $0 } ?? Self.clocks(of: id, in: entries)
            guard clocks.isAlive || (clocks.created == nil && clocks.deleted == nil) else { continue }
            let stamp = clocks.newest ?? clock.tick()
            clocks.deleted = max(clocks.deleted ?? stamp, stamp)
            try changes.set(key, clocks)
        }
    }

    /// The entries another process of this device may have changed that every holder of the sync
    /// lock catches up with (``catchUp(with:clock:storedClock:device:store:)``).
    static let catchUpKeys: [any SyncMetadataNamed] = [SyncMetadata.clock, SyncMetadata.device]

    /// Catches up with what other processes of this device committed, from `entries` (read under
    /// the sync lock, ``catchUpKeys`` among them): the clock they ticked, so no two writes share a
    /// timestamp; a store given another device id since stops everything under this one.
    static func catchUp(
        with entries: SyncMetadataSnapshot,
        clock: HybridClock,
        storedClock: StoredClock,
        device: String,
        store: any PersistentStore
    ) throws {
        if isAnotherDevice(entries.bytes(SyncMetadata.device), than: device) {
            throw deviceIDChangedError(entries[SyncMetadata.device], from: device, store: store.url)
        }
        // (The bytes this process last wrote or read there are known: the clock already saw them.)
        guard let data = entries.bytes(SyncMetadata.clock), !storedClock.isLast(data) else { return }
        if let stored = SyncMetadata.clock.decode(data) {
            clock.observe(stored)
            storedClock.remember(data)
        }
    }

    /// The keys ``makeLog(_:stamp:entries:)`` reads.
    static let logAllocationKeys: [any SyncMetadataNamed] = [
        SyncMetadata.sequence, SyncMetadata.dependencies, SyncMetadata.outboxFrom, SyncMetadata.keptFrom,
        SyncMetadata.container, SyncMetadata.leapFrom,
    ]

    /// The number the next log takes, and what allocating it commits besides (see ``makeLog``).
    struct LogNumber {
        /// The log's number.
        var sequence: UInt64
        /// The highest log of this device id in its folder, when the store is behind it.
        var behind: UInt64?
        /// The log the numbering leapt past, which the log names as its predecessor.
        var leapFrom: UInt64?
        /// The entries a leap or a new run commits.
        var entries = SyncMetadataChanges()
        /// Whether this device's writes go out again (numbers it used may be another life's).
        var resendOwnWrites = false
    }

    /// Makes the next log of this device from `changes` (the caller holds the sync lock and read
    /// ``logAllocationKeys`` into `entries`): a number after the last one this store made and
    /// after any this device's folder already holds (a store restored from a backup, or a
    /// fresh store under a known device name, must not reuse one), the dependencies, and the
    /// metadata entries that commit it to the outbox.
    func makeLog(
        _ changes: [SyncChange],
        stamp: SyncClock,
        entries: SyncMetadataSnapshot
    ) throws -> (LogFile, SyncMetadataChanges) {
        let next = (entries[SyncMetadata.sequence] ?? 0) + 1
        let follows = outbox.memo.withLock { $0.lastAllocated.map { $0 + 1 == next } ?? false }
        let number = try allocateNumber(next, entries: entries, follows: follows)
        let sequence = number.sequence
        var dependencies = (entries.bytes(SyncMetadata.dependencies).map(outbox.decodedDependencies) ?? [:]).filter {
            $0.key != deviceID && $0.value > 0
        }
        var commit = SyncMetadataChanges()
        // The first log after a leap names the log it follows (see `continueNumbering`).
        // (So does the first log after a leap this save makes.)
        if let from = number.leapFrom ?? entries[SyncMetadata.leapFrom] {
            dependencies[deviceID] = from
            commit.remove(SyncMetadata.leapFrom)
        }
        // (Format 6 only for a log that carries incarnations: one that Concord up to format 4
        // reads otherwise.)
        let payload = SyncPayload(
            changes: changes,
            dependencies: dependencies,
            incarnations: try incarnations(of: changes, entries: entries)
        )
        let format = payload.incarnations.isEmpty ? LogFile.formatVersion : LogFile.incarnationsVersion
        let log = LogFile(
            device: deviceID,
            sequence: sequence,
            schemaVersion: coordinator.schema.version,
            created: Date(),
            payload: try payload.encoded(formatVersion: format),
            container: identities.loggedContainer(entries[SyncMetadata.container]),
            formatVersion: format
        )
        try commit.set(SyncMetadata.outboxLog(sequence), log.encoded())
        try commit.set(SyncMetadata.sequence, sequence)
        if let behind = number.behind { try commit.set(SyncMetadata.restoreThrough, behind) }
        // (The JSON `JSONEncoder` writes, made by hand: see ``SyncClock/jsonData()``.)
        let clock = try stamp.jsonData()
        commit.setBytes(SyncMetadata.clock, clock)
        storedClock.remember(clock)
        try advanceExportMark(past: sequence, entries: entries, follows: follows, into: &commit)
        commit.merge(number.entries)
        if number.resendOwnWrites { try commit.set(SyncMetadata.resendOwnWrites, sequence) }
        return (log, commit)
    }

    /// The number the next log takes: `next`, unless the container shows this device id's
    /// history past it (numbering leaps past it) or a log of this id is already under it (the
    /// store is behind its own history: numbering goes on after the highest).
    private func allocateNumber(_ next: UInt64, entries: SyncMetadataSnapshot, follows: Bool) throws -> LogNumber {
        var number = LogNumber(sequence: next)
        let sequence = next
        // Looked for when this process did not make the last number (its first save, or another
        // process of this device saved since), and every 64th log: a store behind its own history
        // shows at its first save; a log that appears later under a number this process makes
        // next is an export's to settle (a damaged copy is replaced, another log renumbered).
        // (History of this device id that the container shows in acknowledgements and baselines,
        // for a device whose numbering leapt, makes it leap again: see `historyShown`.)
        let checking = !follows || sequence % 64 == 0
        let history = checking ? try numbering.historyShown() : nil
        // A log of this device id already under the next number: history of its id the store
        // lacks (a store behind, or an earlier life's log that arrived late).
        let taken = checking && ((try? FileSystem.identity(at: outbox.ownLogPath(sequence))) ?? nil) != nil
        let highest = taken ? ((try? highestOwnLog()) ?? nil) ?? sequence : 0
        if let history, history.shown >= sequence || taken {
            // (Within the leap window, a log there is an earlier life's: more may be on the way.)
            let shown = max(history.shown, highest)
            logger.warning(
                "the container shows this device's history through log \(shown), past what its store numbered: numbering leaps past it",
                metadata: ["concord.device": "\(deviceID)", "concord.sequence": "\(sequence - 1)"]
            )
            // Logs numbered since the last leap may have taken names the earlier life had used.
            number.resendOwnWrites = sequence - 1 > history.leap.upperBound
            let (leapt, leapEntries) = try numbering.leap(after: shown, versions: history.versions)
            number.entries.merge(leapEntries)
            // (When nothing waits in the outbox, the export mark moves to the log: nothing under
            // the numbers leapt over is for it to look at.)
            if (entries[SyncMetadata.outboxFrom] ?? 1) >= sequence {
                try number.entries.set(SyncMetadata.outboxFrom, leapt)
            }
            number.sequence = leapt
            number.leapFrom = shown
        } else if taken {
            logger.warning(
                "this device's folder already holds log \(sequence): the store is behind its own history; numbering goes on after \(highest)",
                metadata: [
                    "concord.device": "\(deviceID)",
                    "concord.file": "\(layout.logURL(device: deviceID, sequence: sequence).path)",
                ]
            )
            // Logs this store numbered before may have taken names of that history (the others
            // passed them over as applied): its writes go out again at the next import.
            number.resendOwnWrites = sequence > 1
            // (The numbers passed over are that history's, not this store's: a new run starts.)
            if highest >= sequence { number.entries.merge(try numberingRunEntries(startingAt: highest + 1)) }
            number.sequence = max(sequence, highest + 1)
            // Logs of this device id the store does not hold (it was restored before they
            // arrived: a container still filling on a new machine): imports apply them.
            number.behind = highest
        }
        return number
    }

    /// Logs already in the container, byte for byte, need not be exported again: the export mark
    /// moves past them (a bounded window per save). Their entries stay for healing. Looked for
    /// when this process's export wrote the first of them and the mark lags by a batch, and every
    /// 64th log otherwise (another process's export): saves do not read the outbox and the folder
    /// each time, nor rewrite the mark (an export skips what this process wrote without reading
    /// the folder).
    private func advanceExportMark(
        past sequence: UInt64,
        entries: SyncMetadataSnapshot,
        follows: Bool,
        into commit: inout SyncMetadataChanges
    ) throws {
        let marked = entries[SyncMetadata.outboxFrom] ?? 1
        let wroteFirst = outbox.memo.withLock { memo in
            memo.lastAllocated = sequence
            return memo.written[marked] != nil
        }
        guard (wroteFirst && sequence - marked >= Outbox.exportMarkBatch) || !follows || (sequence - marked) % 64 == 0
        else { return }
        let from = try outbox.exportedThrough(
            from: marked,
            before: min(sequence, marked + 256),
            keptFrom: entries[SyncMetadata.keptFrom] ?? 1
        )
        if from != marked {
            try commit.set(SyncMetadata.outboxFrom, from)
            outbox.memo.withLock { memo in memo.written = memo.written.filter { $0.key >= from } }
        }
    }
}
