import ConcordSystem
import Dispatch
import FileCoordination
import FileWatching
import Foundation
import Logging
import Persistence
import Synchronization

extension SyncEngine {
    // MARK: Watching for a reset

    /// Queues one reset check on the sync queue (checks asked for while one is queued are one).
    func requestResetCheck() {
        perform(machine.withLock { $0.requestResetCheck() })
    }

    /// On the sync queue, while enabled: whether the container was reset (then sync stops and the
    /// app is told). Called before every live export and import, and on every change the
    /// presenter or the sentinel query sees. Live sync started without ``FolderSync/enable(policy:live:)`` checks
    /// nothing.
    ///
    /// What looks like a reset is confirmed ``FolderSync/resetGracePeriod`` later before sync stops (sync
    /// holds its exports and imports meanwhile): a sync engine may replace a registration by
    /// deleting and re-creating it, and a container being deleted file by file loses the
    /// registration before the folder, and is then reported as deleted, not as a removal.
    func detectReset() -> Bool {
        guard machine.withLock({ $0.state == .syncing }) else { return false }
        let seen = parts.monitor.observedReset(stillSyncing: { machine.withLock({ $0.state }) == .syncing })
        let now = ContinuousClock.now
        switch machine.withLock({ $0.observeReset(seen, at: now) }) {
        case .proceed:
            return false
        case .hold(let lookAgain):
            if let lookAgain {
                onQueue(after: lookAgain) { sync in
                    sync.machine.withLock { $0.lookingAgainForReset() }
                    // Not a reset after all: the work held back meanwhile runs now.
                    if !sync.detectReset() {
                        sync.perform(sync.machine.withLock { $0.requestExport() + $0.requestImport() })
                    }
                }
            }
            return true
        case .stop(let reason):
            return stop(after: reason)
        }
    }

    /// Looks for a reset now, without waiting out the grace period (see ``FolderSync/checkForReset()``).
    func checkForReset() -> ContainerResetReason? {
        guard machine.withLock({ $0.state == .syncing }),
            let seen = parts.monitor.observedReset(stillSyncing: { machine.withLock({ $0.state }) == .syncing })
        else { return nil }
        return stop(after: seen) ? seen : nil
    }

    /// Sync stops for `reason` (the app is told); false when it was not syncing.
    func stop(after reason: ContainerResetReason) -> Bool {
        let actions = machine.withLock { $0.resetConfirmed(reason) }
        // Remembered across launches: the container that comes back (empty, or filled by another
        // device's join) is not the one this device's logs were in.
        if reason == .containerDeleted, !actions.isEmpty {
            do {
                try syncLock.withLock { _ in
                    var marks = SyncMetadataChanges()
                    marks.mark(SyncMetadata.containerGone)
                    try store.commit(StoreChanges(syncMetadata: marks))
                }
            } catch {
                logger.warning(
                    "cannot record that the container was deleted",
                    metadata: ["concord.device": "\(deviceID)", "concord.error": "\(error)"]
                )
            }
        }
        perform(actions)
        return !actions.isEmpty
    }

    /// Before an export or an import: a container another device replaced with its data (its
    /// identity says so) stops sync at once, and the export or import does nothing; after a
    /// reset, nothing is exported or imported until sync is enabled again. Live sync
    /// sees it through the reset monitor; this covers the exports and imports an app runs itself
    /// (sync enabled with `live: false`), which would otherwise write into the new container
    /// under the old numbering. (An identity that names none of this device's only looks like
    /// another container while a sync engine delivers the conflict copy of two devices'
    /// simultaneous starts: that alone stops nothing here.) With `containerChecked` (the caller
    /// has just looked for a reset, which reads the identity), only the state and the device id
    /// are looked at.
    func refuseReplacedContainer(containerChecked: Bool = false) throws {
        // (A join, which runs under the sync lock, exports and imports on its way back.)
        guard !syncLock.isHeldByCurrentThread else { return }
        let state = machine.withLock { $0.state }
        if case .reset(let reason) = state {
            throw SyncError(
                .invalidState,
                "sync stopped (\(reason)): enable it again to join the container",
                url: layout.storeFolder
            )
        }
        try refuseAnotherInstallation()
        guard !containerChecked, state == .syncing, parts.monitor.isReplacedContainer() else { return }
        _ = stop(after: .containerReplaced)
        throw SyncError(
            .invalidState,
            "another device replaced the container with its data; sync stopped: enable it again to join the new container",
            url: layout.storeFolder
        )
    }

    /// Before an export or an import, and after an import: when an import (in any process of this
    /// device) found another installation writing under this device's id (see
    /// `logOfAnotherInstallation(in:)`), sync stops, as after a reset
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

    /// Throws when the store was given another device id since this instance opened it.
    func refuseChangedDeviceID() throws {
        try store.refresh()
        let stored = try store.syncMetadata([SyncMetadata.device])
        if Self.isAnotherDevice(stored.bytes(SyncMetadata.device), than: deviceID) {
            throw Self.deviceIDChangedError(stored[SyncMetadata.device], from: deviceID, store: store.url)
        }
    }
}
