import ConcordSystem
import Foundation
import Persistence

/// This device's own logs that vanished from its folder in the container: a user or a tool
/// deleted them, and a sync engine carried the deletion to every machine. Nobody else can publish
/// them again, and nobody may even know they are missing: a device's last log leaves no gap, and
/// a log that no later log depends on is asked for by nobody. This part publishes them again from
/// the outbox, answers other devices' requests, folds again what it compacted away, and stands in
/// for logs lost with the store (empty logs, and this device's writes sent out again).
struct LostLogs: SyncPart {
    let context: SyncContext
    let outbox: Outbox
    let numbering: Numbering
    let healer: Healer
    let identities: ContainerIdentities
    let baselines: BaselineReader
    let acknowledger: Acknowledger
    let compactor: Compactor
    let exporter: Exporter
    let retiredLogs: RetiredLogs
    /// Exports what the outbox holds (the engine: ``FolderSync/exportPending()``).
    let host: any JoinHost

    /// Publishes again every log this device's outbox keeps that its folder no longer holds,
    /// below the export mark; says whether logs at or after the mark (``exportPending()``'s,
    /// never written or written and lost: the store cannot tell) are missing too. Looked for only
    /// when the folder changed since this process last looked or wrote into it: otherwise one
    /// `stat`.
    @discardableResult
    func republishLostLogs(holding permit: SyncLock.Permit? = nil) throws -> Bool {
        // This device's folder gone from a store folder still there is made again, as an export
        // and an acknowledgement do: the logs it held are lost like any others, and only this
        // device can publish them. (A replacement arriving file by file took a device's log, the
        // last file of its folder, and then the folder: nothing looked again until the device's
        // next save made the folder, and the record that log created lived on that device alone,
        // seed 1844.)
        if ContainerAvailability.of(layout.devicesFolder) == .available,
            ContainerAvailability.of(layout.deviceFolder(deviceID)) == .missing
        {
            try FileSystem.createDirectoryDurably(at: ownLogFolderPath)
        }
        guard let stamp = (try? FileSystem.identity(at: ownLogFolderPath)) ?? nil, stamp.kind == .directory,
            outbox.memo.withLock({ $0.folderStamp != stamp })
        else { return false }
        // Under the sync lock: compaction removes logs and then releases their outbox entries.
        let pendingMissing = try syncLock.withLock(permit) { permit -> Bool in
            let marks = try store.syncMetadata([SyncMetadata.keptFrom, SyncMetadata.outboxFrom, SyncMetadata.sequence])
            let exported = marks[SyncMetadata.outboxFrom] ?? 1
            let sequence = marks[SyncMetadata.sequence] ?? 0
            // (One listing serves both looks below.)
            let listed = try layout.logSequences(device: deviceID)
            // Logs of this device id numbered past anything this store numbered: its history,
            // arrived after it was restored (a new machine's copy of the container still
            // filling). Imports apply them, and the numbering leaps past them.
            if let highest = Self.highestPlausible(listed), highest > sequence {
                logger.warning(
                    "this device id has logs in the container past what its store numbered: restoring them",
                    metadata: ["concord.device": "\(deviceID)", "concord.file": "\(outbox.ownLogPath(highest))"]
                )
                try numbering.continueNumbering(after: highest)
            }
            // Numbers below the outbox's first entry have nothing to publish (a restored device's
            // compacted history, say): one look at the first key, however long that history.
            guard
                let first = try store.syncMetadata(in: SyncMetadata.outbox, limit: 1).first,
                let oldest = UInt64(first.suffix)
            else { return false }
            let kept = max(marks[SyncMetadata.keptFrom] ?? 1, oldest)
            guard kept <= sequence else { return false }
            let present = Set(listed)
            let missing = (kept...sequence).filter { !present.contains($0) }
            var pending = false
            for chunk in missing.chunked(500) {
                let entries = try store.syncMetadata(chunk.map(SyncMetadata.outboxLog))
                for number in chunk where entries.contains(SyncMetadata.outboxLog(number)) {
                    guard number >= exported else {
                        _ = try outbox.republish(number)
                        continue
                    }
                    // The export writes it again, even if this process wrote it before.
                    pending = true
                    outbox.memo.withLock { _ = $0.written.removeValue(forKey: number) }
                }
            }
            return pending
        }
        outbox.rememberOwnFolder()
        return pendingMissing
    }

    /// Answers requests for logs this device compacted away itself (released from its outbox:
    /// numbered below ``SyncMetadata/keptFrom``) that no baseline in the container covers any more. Every
    /// baseline that did left the container: a device that never saw it replaced the container
    /// (its engine removes what the replacing device did not have from every copy), or someone
    /// deleted it. Nobody else may hold what those logs made, and no empty stand-in would do:
    /// the devices that acknowledged them need nothing, but the one asking lacks them. This
    /// device's store holds their effect, so it writes its baseline again, as compaction does
    /// (the outbox first); the device asking catches up from it, newest or not (see
    /// ``Importer/catchUp(missing:applied:includingOwnLogs:holding:)``). It covers again the other devices' logs
    /// this device applied too; a device that removed its own logs while a baseline since gone
    /// covered them answers for them in the same way. Returns whether it wrote one. A baseline
    /// that covers them, in the container here though not yet where the request came from, is
    /// left to arrive there.
    @discardableResult
    func foldAgain(_ numbers: [UInt64], holding permit: SyncLock.Permit) throws -> Bool {
        guard !numbers.isEmpty else { return false }
        let marks = try store.syncMetadata([SyncMetadata.keptFrom, SyncMetadata.sequence])
        let kept = marks[SyncMetadata.keptFrom] ?? 1
        let sequence = marks[SyncMetadata.sequence] ?? 0
        guard let highest = numbers.filter({ $0 < kept && $0 <= sequence }).max(),
            baselines.baseline(skipping: nil, where: { ($0[deviceID] ?? 0) >= highest }) == nil
        else { return false }
        try host.exportPending(holding: permit, containerChecked: false)
        let positions = try acknowledger.baselinePositions()
        guard (positions[deviceID] ?? 0) >= highest else { return false }
        try compactor.writeBaseline(covering: positions, holding: permit)
        logger.warning(
            "logs this device compacted away are asked for and no baseline in the container covers them any more: its baseline is written again",
            metadata: ["concord.device": "\(deviceID)", "concord.sequence": "\(highest)"]
        )
        return true
    }

    /// Answers requests for logs of this device that neither its store nor the container holds:
    /// numbered before its store was lost and restored (a process committed them, then died
    /// before it wrote them, and the store went with the machine; or the restored store caught
    /// up on them from a baseline, which keeps records, not logs), so that nobody can publish
    /// them as they were. Each goes out empty, so that the devices waiting for it go on; and
    /// every write of this device id that the store holds goes out again in new logs
    /// (``exportOwnWrites()``), so that they get what the lost logs held that this store still
    /// knows. (Should the original turn up later after all, the devices that applied the empty
    /// one apply it too: see ``LogScanner``'s late versions.) A number some device acknowledges
    /// having applied, or that a baseline covers, existed in the container: it is left to
    /// arrive (or to catch up from the baseline), unless the copy here is damaged for good.
    /// `asked` is every number asked for (runs of them: see `missingRun`).
    func publishEmptyInstead(of numbers: [UInt64], asked: Set<UInt64>, holding permit: SyncLock.Permit) throws {
        guard !numbers.isEmpty else { return }
        let restored =
            try store.syncMetadataValue(SyncMetadata.restoreThrough) ?? 0
        var seen = baselines.newestBaseline()?.baseline.covers[deviceID] ?? 0
        for acknowledgement in acknowledger.acknowledgements() where acknowledgement.device != deviceID {
            seen = max(seen, acknowledgement.applied[deviceID] ?? 0)
        }
        let present = Set(try layout.logSequences(device: deviceID))
        // (Numbers its numbering leapt over, when it was restored without knowing how far its
        // history went, are asked for only when some device saw a later log of it.)
        let leapt = try versionsApplied(of: [deviceID])[deviceID] ?? LogVersions()
        var published = false
        let replaced = identities.replacedContainers()
        // (A copy that is damaged for good, or written for a container since replaced, stands
        // for nothing: it is replaced, whoever saw the log; a device that applied it needs
        // nothing from the stand-in.)
        // A request names a run of missing numbers from the one that holds its device back:
        // the requester cannot tell the numbers leapt over inside the run, so of those only
        // the first of a run is answered (one that holds it back).
        for number in numbers.sorted()
        where number <= restored || (leapt.isVoid(number) && !asked.contains(number &- 1)) {
            let damaged =
                present.contains(number)
                && (healer.isDamaged(device: deviceID, sequence: number)
                    || outbox.isWritten(sequence: number, forOneOf: replaced))
            guard damaged || (number > seen && !present.contains(number)) else { continue }
            let url = layout.logURL(device: deviceID, sequence: number)
            if present.contains(number) {
                try LogWriter.replace(try standInLog(number), layout: layout)
            } else {
                guard try LogWriter.writeIfAbsent(try standInLog(number), layout: layout) else { continue }
            }
            published = true
            logger.warning(
                "a log this device committed before its store was lost never reached the container; published empty so that the others go on",
                metadata: ["concord.file": "\(url.path)", "concord.device": "\(deviceID)"]
            )
            emit(.republished(url))
        }
        if published { try exportOwnWrites(holding: permit) }
    }

    /// Log `number` of this device, empty, standing in for one it lost. It depends on its own
    /// device's logs before it (which always holds when it is next, and which no other log
    /// does): that marks it as a stand-in, so that a device that applies it applies the original
    /// too should that turn up after all (``LogScanner``'s late versions).
    func standInLog(_ number: UInt64) throws -> LogFile {
        var log = try numbering.emptyLog(number)
        log.payload = try SyncPayload(changes: [], dependencies: [deviceID: try numbering.predecessor(of: number)])
            .encoded()
        return log
    }

    /// Answers other devices' requests for this device's logs: each one asked for that the
    /// container does not hold intact is published again from the outbox. So are those asked for
    /// under an id this store retired (``RetiredLogs/answerRequests(_:)``).
    func answerRequests(holding permit: SyncLock.Permit) throws {
        let asked = healer.requestsOfOthers()
        // (Logs of an id this store retired: it answers for them still.)
        try retiredLogs.answerRequests(asked)
        let wanted = asked[deviceID] ?? []
        guard !wanted.isEmpty else { return }
        let kept = try store.syncMetadata(wanted.map(SyncMetadata.outboxLog))
        var lost: [UInt64] = []
        for sequence in wanted.sorted() {
            if kept.contains(SyncMetadata.outboxLog(sequence)) {
                _ = try outbox.republish(sequence)
            } else {
                lost.append(sequence)
            }
        }
        // (Logs this device compacted away, whose baselines left the container: folded again.)
        try foldAgain(lost, holding: permit)
        try publishEmptyInstead(of: lost, asked: wanted, holding: permit)
    }
}
