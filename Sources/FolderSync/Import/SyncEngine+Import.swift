import Foundation
import Persistence

extension SyncEngine {
    /// ``FolderSync/importAvailable(batchSize:)``; `containerChecked` when the caller has just looked for a
    /// reset (live sync's pass, after ``detectReset()``): the container's identity is not read
    /// again (one reset check per pass).
    func importPass(batchSize: Int = 64, containerChecked: Bool) throws -> ImportReport {
        try refuseReplacedContainer(containerChecked: containerChecked)
        let report = try importAvailable(batchSize: batchSize, includingOwnLogs: false)
        try refuseReplacedContainer(containerChecked: containerChecked)
        // This device's own logs that should be in the container and are not (lost after they
        // were written, or never written by a process that died) go out now, unless sync is
        // paused or stopped: a device that saves nothing more would otherwise never publish
        // them, and nobody else can. (Off is also an app that drives sync by hand.)
        let missing = parts.outbox.memo.withLock { memo in
            defer { memo.ownLogsMissing = false }
            return memo.ownLogsMissing
        }
        switch state {
        case .off, .syncing: if missing { _ = try? exportPending(holding: nil, containerChecked: containerChecked) }
        case .paused, .waitingForContainer, .reset: break
        }
        return report
    }

    /// ``FolderSync/importAvailable(batchSize:)``; with `includingOwnLogs`, this device's own logs not yet
    /// marked applied are applied too (its store was replaced with the container's, or lost).
    func importAvailable(
        batchSize: Int = 64,
        includingOwnLogs: Bool,
        holding permit: SyncLock.Permit? = nil
    ) throws -> ImportReport {
        // Local commits, in this process and others of this device, wait while an import reads
        // and rewrites the clocks they also rewrite.
        try syncLock.withLock(permit) { permit in
            try refuseWhenStopped()
            try parts.lostLogs.answerRequests(holding: permit)
            // (Best effort: what keeps it from looking is looked at again next time.)
            if (try? parts.lostLogs.republishLostLogs(holding: permit)) == true {
                parts.outbox.memo.withLock { $0.ownLogsMissing = true }
            }
            // (Best effort too: a device that leapt looks again at the next import.)
            try? parts.importer.leapPastHistoryShown(holding: permit)
            if machine.withLock({ $0.state }) == .syncing { try? parts.identities.recordAppearedIdentity() }
            try parts.duplicates.reconsiderChangedWinners()
            return try parts.importer.apply(batchSize: batchSize, includingOwnLogs: includingOwnLogs, holding: permit)
        }
    }

    /// Starts from the newest baseline, for a device that has applied nothing yet (see
    /// ``FolderSync/startFromBaseline()``).
    func startFromBaseline() throws -> Int {
        try syncLock.withLock(nil) { permit in
            try refuseWhenStopped()
            return try parts.importer.startFromBaseline(includingOwnHistory: false, holding: permit)
        }
    }

    /// An import after ``FolderSync/stop()`` left the saves (live sync's import queued before it, or an app
    /// driving sync by hand) would commit without sync's bookkeeping of what its save decides:
    /// the duplicates it removes would be neither recorded nor redirected, and its history would
    /// say they live. Refused, with nothing applied: ``SyncError/Code/invalidState``. (Checked
    /// under the sync lock, which ``FolderSync/stop()`` waits for before it leaves: an import that holds it
    /// first ends with sync taking part.)
    func refuseWhenStopped() throws {
        guard !takesPartInSaves else { return }
        throw SyncError(
            .invalidState,
            "sync was stopped: nothing is imported until it is enabled again",
            url: store.url
        )
    }
}
