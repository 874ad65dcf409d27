import Foundation
import Persistence

/// A restored device's history that a baseline holds. A device restored before its copy of the
/// container filled leaps over numbers its old logs may still arrive under (see
/// ``FolderSync/restoreLeap``); a baseline that covers some of them, its own from before it was
/// restored or the one it catches up from, tells it how far its history went:
///
/// - those numbers are history, no longer leapt over: an old copy of such a log is not applied
///   again (its records' deletions may be forgotten by now);
/// - a baseline is folded from its writer's store, which can hold writes whose logs never left
///   the machine (committed, and lost with it before they travelled): nobody waits for those
///   logs, so the device sends its writes out again in new logs (``LostLogs/exportOwnWrites(holding:)``)
///   and every device gets them, not only those that happen to catch up from that baseline.
extension Importer {
    /// Notes in `context` that this device's history reaches as far as `covers` says, when
    /// that is a number its numbering leapt over: the numbers leapt over up to there are
    /// history. Returns whether it was.
    func noteRestoredHistory(_ covers: [String: UInt64], in context: ObjectContext) throws -> Bool {
        guard var own = try versionsApplied(of: [deviceID])[deviceID], let reach = covers[deviceID], own.isVoid(reach)
        else { return false }
        own.historyThrough = reach
        try setVersionsApplied(own, of: deviceID, in: context)
        return true
    }

    /// Merges every baseline of ``oldOwnBaselines()`` (its clocks decide: nothing newer is
    /// undone), notes the history it holds (``noteRestoredHistory(_:in:)``), and sends this
    /// device's writes out again. Returns whether it took any in. The caller holds the sync lock.
    func takeInOldOwnBaselines(holding permit: SyncLock.Permit) throws -> Bool {
        let old = try baselines.oldOwnBaselines()
        guard !old.isEmpty else { return false }
        for (url, baseline) in old {
            try applyBaseline(baseline, name: "sync restored history", collectingTouched: false) { context, _ in
                _ = try noteRestoredHistory(baseline.covers, in: context)
            }
            logger.notice(
                "took in a baseline this device wrote before it was restored: it may hold writes whose logs were lost",
                metadata: ["concord.baseline": "\(url.path)"]
            )
        }
        _ = try lostLogs.exportOwnWrites(holding: permit)
        return true
    }
}

extension LogVersions {
    /// What a baseline that covers this device's logs through `reach` carries of these: the
    /// numbers leapt over up to there that were not history, and the logs met in several
    /// versions up to there.
    func carried(through reach: UInt64) -> LogVersions {
        var kept = LogVersions(leapt: leapt)
        kept.digests = digests.filter { $0.key <= reach }
        let floor = (historyThrough ?? 0) + 1
        kept.voids = voids.compactMap { void in
            let lower = max(void.lowerBound, floor)
            let upper = min(void.upperBound, reach)
            return lower <= upper ? lower...upper : nil
        }
        return kept
    }

    /// Takes in what a baseline carries (`other`, see ``carried(through:)``): its numbers leapt
    /// over and its versions, within ``BaselinePayload/versionsLimits``; a leap dated after
    /// `now` counts as made now.
    mutating func adopt(_ other: LogVersions, now: Date) {
        for void in other.voids where !voids.contains(void) && voids.count < BaselinePayload.versionsLimits.voids {
            voids.append(void)
        }
        for (sequence, versions) in other.digests
        where digests[sequence] != nil || digests.count < BaselinePayload.versionsLimits.digests {
            digests[sequence, default: []].formUnion(versions)
        }
        if let theirs = other.leapt.map({ min($0, now) }) { leapt = max(leapt ?? theirs, theirs) }
    }
}

extension Importer {
    /// Keeps, in `context`, what `baseline` carries of the other devices' logs (see
    /// ``BaselinePayload/versions``), for a device that starts or catches up from it.
    func adoptVersions(of baseline: BaselineFile, in context: ObjectContext) throws {
        guard let carried = baseline.versions?.filter({ $0.key != deviceID }), !carried.isEmpty else { return }
        let current = try versionsApplied(of: Array(carried.keys))
        for (device, theirs) in carried {
            var mine = current[device] ?? LogVersions()
            mine.adopt(theirs, now: now())
            try setVersionsApplied(mine, of: device, in: context)
        }
    }
}

extension Importer {

    /// Leaps this device's numbering past history of its id that the container shows (see
    /// ``historyShown()``) past its last number. That history is an earlier life's (the device
    /// was restored before its copy of the container showed the rest): numbering on under it
    /// would reuse names the others have applied already. When this store has numbered logs
    /// since its last leap, or a save found the numbers taken (``makeLog(_:stamp:entries:)``),
    /// those logs' names may be the earlier life's, which the others passed over as applied: its
    /// writes go out again. The caller holds the sync lock.
    func leapPastHistoryShown(holding permit: SyncLock.Permit) throws {
        let marks = try store.syncMetadata([SyncMetadata.sequence, SyncMetadata.resendOwnWrites])
        let sequence = marks[SyncMetadata.sequence] ?? 0
        var resend = marks.contains(SyncMetadata.resendOwnWrites)
        if let (shown, _, leap) = try numbering.historyShown(), shown > sequence {
            logger.warning(
                "the container shows history of this device id past what its store numbered: numbering leaps past it",
                metadata: [
                    "concord.device": "\(deviceID)", "concord.sequence": "\(sequence)", "concord.shown": "\(shown)",
                ]
            )
            try numbering.continueNumbering(after: shown)
            resend = resend || sequence > leap.upperBound
        }
        guard resend else { return }
        let mark = try store.syncMetadataValue(SyncMetadata.resendOwnWrites.raw)
        _ = try lostLogs.exportOwnWrites(holding: permit)
        // (History found during the resend set the mark anew, with the number that found it: the
        // logs the resend numbered before may have taken names of that history. It stays due.)
        guard try store.syncMetadataValue(SyncMetadata.resendOwnWrites.raw) == mark else {
            return
        }
        var changes = SyncMetadataChanges()
        changes.remove(SyncMetadata.resendOwnWrites)
        try store.commit(StoreChanges(syncMetadata: changes))
    }

}
