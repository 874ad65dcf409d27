import Dispatch
import Foundation
import Logging
import Persistence

// The lifecycle the app drives: enabling (a join, then live sync), pausing, disabling, and
// waiting for a container that cannot be used yet.

extension SyncEngine {
    /// Enables (or resumes) sync on the sync queue, with `policy` when given (else the last one).
    func enable(policy: SyncJoinPolicy?, live: Bool?) throws -> SyncEnabling {
        settings.withLock {
            if let policy { $0.policy = policy }
            if let live { $0.live = live }
        }
        return try onQueue { try performEnable() }
    }

    /// Pauses sync (on the sync queue): no exports, imports or reset watching.
    func pause() {
        onQueue {
            let actions = machine.withLock { $0.pause() }
            guard !actions.isEmpty else { return }
            logger.debug("sync paused", metadata: ["concord.device": "\(deviceID)"])
            perform(actions)
        }
    }

    /// Disables sync (on the sync queue): live sync stops and this device's registration goes.
    func disable() throws {
        try onQueue {
            // (A store given another device id since: the old id's registration is not this
            // instance's to remove; another installation may sync under it.)
            try refuseChangedDeviceID()
            // Saves keep their history while sync is off: a merge when the device comes back
            // exports what it changed, with the clocks it had.
            try performThrowing(machine.withLock { $0.disable() })
        }
    }

    func performEnable() throws -> SyncEnabling {
        if machine.withLock({ $0.state }) == .syncing { return SyncEnabling(state: .syncing) }
        // (The app goes on after another installation under this device's id was found.)
        try clearAnotherInstallation()
        // Saves from now on keep their history, also while the container is awaited.
        joinSaves()
        let availability = ContainerAvailability.of(layout.container)
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
        let policy = settings.withLock { $0.policy }
        // Another process of this device may be enabling the same store: one joins, the other
        // then finds it registered and resumes.
        let join = try syncLock.withLock { permit in
            let join = try parts.containerJoin.join(policy: policy, holding: permit)
            guard machine.withLock({ $0.generation == started }) else { throw interrupted() }
            try parts.registrar.register()
            try recordJoined()
            return join
        }
        guard let actions = machine.withLock({ $0.joined(since: started) }) else { throw interrupted() }
        sweepStaleTemporaries()
        if settings.withLock({ $0.live }) {
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

    /// Marks the store as joined to the container (its ids recorded, the marks of a join, a
    /// disable, a rename and a deleted container cleared); the caller holds the sync lock.
    private func recordJoined() throws {
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
    }

    /// Removes this device's registration (``disable()``): what it committed goes out first, and
    /// the next enable joins anew, even if the registration cannot be removed now (an
    /// unavailable container).
    func unregister() throws {
        var marks = SyncMetadataChanges()
        marks.mark(SyncMetadata.disabled)
        try store.commit(StoreChanges(syncMetadata: marks))
        if ContainerAvailability.of(layout.storeFolder) == .available {
            // What this device committed while it synced goes out before it leaves, and its own
            // logs lost from the container are published again: the outbox holds no log it wrote
            // into the container (other devices may have applied it) that a replacement of its
            // data on return would give up as never written.
            _ = try? parts.lostLogs.republishLostLogs()
            _ = try? exportPending()
            // (The mark then says what is in the container: a new device id taken later
            // publishes again those of its logs that are lost, and only those.)
            try? parts.outbox.advanceExportMark()
            // Compaction stops waiting for a device that left.
            _ = try? parts.acknowledger.publishAcknowledgement(left: true)
            try sentinel.unregister(deviceID)
        }
        logger.debug("sync disabled", metadata: ["concord.device": "\(deviceID)"])
    }

    // MARK: Waiting for the container

    func scheduleAvailabilityCheck() {
        let generation = machine.withLock { $0.generation }
        let interval = settings.withLock { $0.availabilityInterval }
        onQueue(after: interval) { sync in
            guard sync.machine.withLock({ $0.isWaiting(since: generation) }) else { return }
            let availability = ContainerAvailability.of(sync.layout.container)
            guard availability == .available else {
                // Still waiting, in the same generation: reported if it changed, looked at again.
                guard let actions = sync.machine.withLock({ $0.containerUnavailable(availability, wait: generation) })
                else { return }
                sync.perform(actions)
                sync.scheduleAvailabilityCheck()
                return
            }
            do {
                _ = try sync.performEnable()
            } catch {
                sync.logger.warning(
                    "sync could not start on the container that became available",
                    metadata: ["concord.error": "\(error)"]
                )
                sync.emit(.failed("enable failed: \(error)"))
                sync.scheduleAvailabilityCheck()
            }
        }
    }
}
