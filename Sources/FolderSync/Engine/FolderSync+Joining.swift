import Dispatch
import FileCoordination
import FileWatching
import Foundation
import Logging
import Persistence
import Synchronization

extension FolderSync {
    // MARK: Enabling

    func performEnable() throws -> SyncEnabling {
        if machine.withLock({ $0.state }) == .syncing { return SyncEnabling(state: .syncing) }
        // (The app goes on after another installation under this device's id was found.)
        try clearAnotherInstallation()
        // Saves from now on keep their history, also while the container is awaited.
        coordinator.addSaveParticipant(self)
        let availability = containerAvailability
        guard availability == .available else {
            perform(machine.withLock { $0.containerUnavailable(availability) } ?? [])
            scheduleAvailabilityCheck()
            return SyncEnabling(state: .waitingForContainer(availability))
        }
        // A pause, disable or stop while joining (from an event observer, or another thread)
        // wins: the join's work stays (each step is idempotent), but the device is not registered
        // and sync does not start.
        let started = machine.withLock { $0.generation }
        func interrupted() -> SyncError {
            SyncError(
                .invalidState,
                "sync was paused, disabled or stopped while it was being enabled",
                url: layout.container
            )
        }
        let policy = lifecycle.settings.withLock { $0.policy }
        // Another process of this device may be enabling the same store: one joins, the other
        // then finds it registered and resumes.
        let join = try syncLock.withLock { permit in
            let join = try parts.containerJoin.join(policy: policy, holding: permit)
            guard machine.withLock({ $0.generation == started }) else { throw interrupted() }
            try parts.registrar.register()
            // The container joined: the smallest of its ids (its identity file, or a conflict copy).
            // (Every id found: two devices that start a container at once each write one, and a
            // sync engine keeps one of them as a conflict copy, which may arrive later.)
            // (No identity in sight, from a copy of the container still filling, is no other
            // container: the ids recorded stay, so that a replacement is still recognised.)
            let ids = parts.identities.containerIDs()
            var marks = SyncMetadataChanges()
            marks.mark(SyncMetadata.contributed)
            marks.remove(SyncMetadata.joining)
            marks.remove(SyncMetadata.disabled)
            marks.remove(SyncMetadata.renamedFrom)
            marks.remove(SyncMetadata.renamedTo)
            marks.remove(SyncMetadata.containerGone)
            if !ids.isEmpty { try marks.set(SyncMetadata.container, ids.sorted()) }
            // Only the marks that change are committed: a launch that resumes finds them all as it
            // leaves them, and a commit costs a write to disk (a whole-file store rewrites itself).
            let stored = try store.metadataEntries(forKeys: Array(marks.metadataEntries.keys))
            let changed = marks.metadataEntries.filter { key, value in stored[key] != value }
            if !changed.isEmpty { try store.commit(StoreChanges(metadataEntries: changed)) }
            return join
        }
        guard let actions = machine.withLock({ $0.joined(since: started) }) else { throw interrupted() }
        sweepStaleTemporaries()
        if lifecycle.settings.withLock({ $0.live }) {
            do {
                try parts.monitor.startWatching { [weak self] in self?.requestResetCheck() }
                try start()
            } catch {
                perform(machine.withLock { $0.startFailed() })
                throw error
            }
        }
        logger.debug("sync enabled", metadata: ["concord.device": "\(deviceID)", "concord.join": "\(join)"])
        emit(.enabled(join))
        perform(actions)
        return SyncEnabling(state: .syncing, join: join)
    }
}
