import Foundation
import Persistence

extension FolderSync {
    /// Applies every complete log of other devices that this device has not applied yet, in an
    /// `.import` context, `batchSize` logs per save, under causal delivery: a device's logs apply
    /// in their order, each after what its writer had applied when it wrote it. Partial files wait
    /// for the next import. A log that is missing (a gap before later logs of its device, or a
    /// log another one depends on) or damaged holds back what comes after it: it is asked for
    /// (a request in this device's folder, which its owner answers by publishing it again) and,
    /// once it has been missing for ``missingLogGracePeriod``, reported
    /// (``SyncEvent/missingLog(device:sequence:url:)``, once per process); the app may give up on
    /// it with ``skipMissingLog(device:sequence:)``. Logs from a newer schema are kept for after an
    /// upgrade (``SyncEvent/newerSchemaFound(device:schemaVersion:)``), and so are logs in a newer
    /// file format (``SyncEvent/corruptLog(_:)`` with ``SyncError/Code/unsupportedLogVersion``).
    /// Applying a log twice changes nothing. When another device has replaced the container with
    /// its data, nothing is applied: sync stops (``SyncEvent/containerReset(_:)``) and
    /// ``SyncError/Code/invalidState`` is thrown.
    @discardableResult
    public func importAvailable(batchSize: Int = 64) throws -> ImportReport {
        try importPass(batchSize: batchSize, containerChecked: false)
    }

    /// ``importAvailable(batchSize:)``; `containerChecked` when the caller has just looked for a
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

    /// ``importAvailable(batchSize:)``; with `includingOwnLogs`, this device's own logs not yet
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

    /// For a device that has applied nothing yet: starts from the newest baseline, if there is
    /// one, marking the logs it covers as applied. Returns the number of changes applied.
    @discardableResult
    public func startFromBaseline() throws -> Int {
        try syncLock.withLock(nil) { permit in
            try refuseWhenStopped()
            return try parts.importer.startFromBaseline(includingOwnHistory: false, holding: permit)
        }
    }

    /// Whether this sync takes part in its coordinator's saves: from its creation, or an
    /// ``enable(policy:live:)``, until ``stop()`` (once the sync lock is free).
    var takesPartInSaves: Bool { coordinator.saveParticipants.contains { $0 === self } }

    /// An import after ``stop()`` left the saves (live sync's import queued before it, or an app
    /// driving sync by hand) would commit without sync's bookkeeping of what its save decides:
    /// the duplicates it removes would be neither recorded nor redirected, and its history would
    /// say they live. Refused, with nothing applied: ``SyncError/Code/invalidState``. (Checked
    /// under the sync lock, which ``stop()`` waits for before it leaves: an import that holds it
    /// first ends with sync taking part.)
    func refuseWhenStopped() throws {
        guard !takesPartInSaves else { return }
        throw SyncError(
            .invalidState,
            "sync was stopped: nothing is imported until it is enabled again",
            url: store.url
        )
    }

    /// Before an export or an import, and after an import: when an import (in any process of this
    /// device) found another installation writing under this device's id (see
    /// ``logOfAnotherInstallation(in:)``), sync stops, as after a reset
    /// (``ContainerResetReason/deviceIDInUse``), says so once, and ``SyncError/Code/invalidState``
    /// is thrown. Enabling sync again goes on (the other installation is found again when it
    /// leaps past this one's logs again).
    func refuseAnotherInstallation() throws {
        guard state == .syncing else { return }
        let marks = try store.syncMetadata([SyncMetadata.deviceIDInUse, SyncMetadata.device])
        if Self.isAnotherDevice(marks.bytes(SyncMetadata.device), than: deviceID) {
            logger.warning(
                "the store was given another device id: sync under this one stopped",
                metadata: ["concord.device": "\(deviceID)", "concord.store": "\(store.url.path)"]
            )
            _ = stop(after: .deviceIDChanged)
            throw Self.deviceIDChangedError(marks[SyncMetadata.device], from: deviceID, store: store.url)
        }
        guard let path = marks[SyncMetadata.deviceIDInUse] else { return }
        logger.warning(
            "another installation writes under this device's id (a copied store or a cloned machine): sync stopped, local data kept",
            metadata: ["concord.device": "\(deviceID)", "concord.file": "\(path)"]
        )
        _ = stop(after: .deviceIDInUse)
        throw SyncError(
            .invalidState,
            "another installation writes under this device's id (\((path as NSString).lastPathComponent) leapt past a log this store wrote): sync stopped",
            url: URL(fileURLWithPath: path)
        )
    }

    /// Removes the mark ``refuseAnotherInstallation()`` stops for: the app enables sync again.
    func clearAnotherInstallation() throws {
        guard try store.hasSyncMetadata(SyncMetadata.deviceIDInUse) else { return }
        var changes = SyncMetadataChanges()
        changes.remove(SyncMetadata.deviceIDInUse)
        try store.commit(StoreChanges(syncMetadata: changes))
    }
}
