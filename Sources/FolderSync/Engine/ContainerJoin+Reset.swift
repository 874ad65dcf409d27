import Foundation
import Persistence

/// What a join forgets and how it numbers on: sync metadata reset, this device id's history in
/// the container, the empty logs that fill what the container lacks.
extension ContainerJoin {
    /// Forgets what sync knew of the container: clocks (but, with `keepingDeletions`, those of
    /// deleted records and, with `keepingLiveClocks`, those of the records the store holds, for
    /// an export that carries them into another container), applied logs, the outbox (and, for
    /// a new container, the log numbering).
    /// The device id and the clock stay. With `supersedingOwnLogs` (the first attempt to join a
    /// container another device replaced), this device's logs there are replaced with empty ones.
    func resetSyncMetadata(
        keepingSequence: Bool,
        keepingDeletions: Bool,
        keepingLiveClocks: Bool = false,
        supersedingOwnLogs: Bool = false,
        holding permit: SyncLock.Permit
    ) throws {
        let metadata = SyncMetadataSnapshot(try store.metadata().entries)
        var changes = SyncMetadataChanges()
        forgetHistory(
            in: metadata,
            into: &changes,
            keepingSequence: keepingSequence,
            keepingDeletions: keepingDeletions,
            keepingLiveClocks: keepingLiveClocks
        )
        changes.remove(SyncMetadata.dependencies)
        // (The containers whose logs were applied go with the applied logs: what they brought
        // in is given up, or goes out anew with this device's data.)
        changes.remove(SyncMetadata.metContainers)
        // Numbers this device id already has in the container are never used again.
        let own = keepingSequence ? 0 : numbering.ownHistoryInContainer()
        if own > 0 {
            try changes.set(SyncMetadata.sequence, own)
            try changes.set(SyncMetadata.outboxFrom, own + 1)
        }
        if keepingSequence {
            try emptyUnwrittenLogs(in: metadata, into: &changes)
        } else {
            try forgetNumbering(in: metadata, into: &changes, own: own, supersedingOwnLogs: supersedingOwnLogs)
        }
        try store.commit(StoreChanges(syncMetadata: changes))
    }

    /// The clocks, applied logs and outbox entries a reset forgets (see
    /// ``resetSyncMetadata(keepingSequence:keepingDeletions:keepingLiveClocks:supersedingOwnLogs:holding:)``).
    private func forgetHistory(
        in metadata: SyncMetadataSnapshot,
        into changes: inout SyncMetadataChanges,
        keepingSequence: Bool,
        keepingDeletions: Bool,
        keepingLiveClocks: Bool
    ) {
        // The duplicates an import removed here are noted beside their clocks (the winner each
        // was folded into, the records whose references moved to it, the winners to decide
        // again). Where those clocks go, the notes go with them: a record the container brings
        // back under a removed duplicate's id would otherwise stand removed, and a reference
        // to it arriving later would go to a winner that may be gone, on this device only.
        let duplicateNotes = [
            SyncMetadata.loser.prefix, SyncMetadata.redirect.prefix, SyncMetadata.relinked.prefix,
            SyncMetadata.reconsider.prefix,
        ]
        for (key, value) in metadata.entries
        where SyncMetadata.recordClocks.contains(key) || SyncMetadata.applied.contains(key)
            || SyncMetadata.outbox.contains(key)
            || !keepingLiveClocks && duplicateNotes.contains(where: { key.hasPrefix($0) })
        {
            // (A record made again after its deletion is live: its clocks go, so that the join
            // exports it. A duplicate removed here keeps its removal with the live clocks: the
            // references moved off it go back if it comes back, as on every other device.)
            if keepingDeletions || keepingLiveClocks, SyncMetadata.recordClocks.contains(key),
                let clocks = SyncMetadata.recordClocks.decode(value),
                clocks.isAlive
                    ? keepingLiveClocks
                    : keepingDeletions && clocks.deleted != nil
                        || keepingLiveClocks && clocks.removedAsDuplicate != nil
            {
                continue
            }
            // Logs already in the container stay in the outbox (healing needs them).
            if keepingSequence, SyncMetadata.outbox.contains(key) { continue }
            changes.remove(named: key)
        }
    }

    /// Logs committed and not yet written carry what is being given up: each goes out empty
    /// instead, so the other devices see no gap in this device's numbering. A log already in the
    /// container (written after the export mark last moved) is part of the container's data: it
    /// stays as it is, and the join applies it like the rest.
    private func emptyUnwrittenLogs(in metadata: SyncMetadataSnapshot, into changes: inout SyncMetadataChanges) throws {
        let sequence = metadata[SyncMetadata.sequence] ?? 0
        let from = metadata[SyncMetadata.outboxFrom] ?? 1
        if from <= sequence {
            for number in from...sequence {
                guard let kept = metadata[SyncMetadata.outboxLog(number)] else { continue }
                if (try? Data(contentsOf: layout.logURL(device: deviceID, sequence: number))) == kept {
                    continue
                }
                try changes.set(SyncMetadata.outboxLog(number), try numbering.emptyLog(number).encoded())
            }
        }
    }

    /// For a join that starts the numbering anew (a new container): the outbox, the leaps and
    /// versions of logs met, and the tombstone horizon go; `own` (this device id's highest number
    /// in the container) is where numbering goes on.
    private func forgetNumbering(
        in metadata: SyncMetadataSnapshot,
        into changes: inout SyncMetadataChanges,
        own: UInt64,
        supersedingOwnLogs: Bool
    ) throws {
        for key in metadata.entries.keys where SyncMetadata.outbox.contains(key) { changes.remove(named: key) }
        changes.remove(SyncMetadata.keptFrom)
        // A leap, a restore and the versions of logs met belong to the container left: a
        // first log that named its leap's predecessor in the new one would wait for a log
        // of that number there, which comes after it.
        for key in metadata.entries.keys where SyncMetadata.versionsApplied.contains(key) {
            changes.remove(named: key)
        }
        changes.remove(SyncMetadata.leapFrom)
        changes.remove(SyncMetadata.restoreThrough)
        changes.remove(SyncMetadata.runFrom)
        changes.remove(SyncMetadata.numberedRuns)
        changes.remove(SyncMetadata.suspectFrom)
        // So does the horizon of the tombstones collected there: a baseline this device
        // writes in the new container would say that every record with an older history
        // it does not carry was deleted, while the others carry such records in with their
        // old clocks (a merge, a replacement), and a device that catches up from it would
        // remove them, on that device only (seed 1160).
        changes.remove(SyncMetadata.collectedThrough)
        if own == 0 {
            changes.remove(SyncMetadata.sequence)
            changes.remove(SyncMetadata.outboxFrom)
        }
        // Logs of this device id in a container it has not joined: written into it by
        // this device before it saw that the container was replaced. The numbers below
        // them, which the replacement removed, go out empty so that nobody waits for them.
        // On the first attempt to join, they are replaced with empty logs too: nobody in
        // the new container can have applied them (the numbers below them were missing),
        // what they carried is this device's local data (a merge exports it anew, a
        // replacement gives it up), and their dependencies name the old container's log
        // numbers, which would hold the others back.
        let gaps = try numbering.emptyLogsBelowOwnHistory(own, includingPresent: supersedingOwnLogs)
        if let first = gaps.keys.min() {
            for (number, log) in gaps { try changes.set(SyncMetadata.outboxLog(number), log) }
            try changes.set(SyncMetadata.outboxFrom, first)
        }
        if supersedingOwnLogs {
            let present = Set((try? layout.logSequences(device: deviceID)) ?? [])
            for (number, bytes) in gaps.sorted(by: { $0.key < $1.key }) where present.contains(number) {
                try LogWriter.replace(
                    try LogFile.decode(bytes, url: layout.logURL(device: deviceID, sequence: number)),
                    layout: layout
                )
                logger.notice(
                    "a log this device wrote into the container before it saw the container replaced is emptied",
                    metadata: ["concord.file": "\(layout.logURL(device: deviceID, sequence: number).path)"]
                )
            }
        }
    }
}
