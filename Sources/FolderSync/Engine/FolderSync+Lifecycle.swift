import Dispatch
import FileCoordination
import FileWatching
import Foundation
import Logging
import Persistence
import Synchronization

/// What the lifecycle keeps beside the machine: the settings the app gave.
final class Lifecycle: Sendable {
    /// What the app chose.
    let settings = Mutex(SyncSettings())
}

/// What the app chose for the lifecycle: how to join, whether sync runs by itself, who hears.
struct SyncSettings: Sendable {
    var policy: SyncJoinPolicy = .default
    /// Whether sync runs by itself once enabled (``FolderSync/enable(policy:live:)``).
    var live = true
    weak var delegate: (any FolderSyncDelegate)?
    var availabilityInterval: Duration = .seconds(2)
    var tombstoneLifetime: Duration = .seconds(30 * 24 * 3600)
}

let onSyncQueue = DispatchSpecificKey<ObjectIdentifier>()

extension Duration {
    var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}

extension FolderSync {
    // MARK: Public lifecycle

    /// Sync's state now.
    public var state: SyncState { machine.withLock { $0.state } }

    /// Told of resets and state changes; held weakly.
    public var delegate: (any FolderSyncDelegate)? {
        get { lifecycle.settings.withLock { $0.delegate } }
        set { lifecycle.settings.withLock { $0.delegate = newValue } }
    }

    /// How often a container that cannot be used is looked at again (default 2 s).
    public var availabilityCheckInterval: Duration {
        get { lifecycle.settings.withLock { $0.availabilityInterval } }
        set { lifecycle.settings.withLock { $0.availabilityInterval = newValue } }
    }

    /// How long what looks like a container reset must last before sync stops for it (default
    /// 250 ms): a sync engine that replaces a registration by deleting and re-creating it is not
    /// a reset, and a container deleted file by file is reported as deleted.
    public var resetGracePeriod: Duration {
        get { machine.withLock { $0.resetGracePeriod } }
        set { machine.withLock { $0.resetGracePeriod = newValue } }
    }

    /// How long a deleted record's tombstone (the clock of its deletion, kept in the store and in
    /// baselines) is kept at least, counted from the deletion (default 30 days). Compaction
    /// collects a tombstone only once every device has seen its deletion and this device has
    /// applied every log written before that, and then only after this long: a device that was
    /// away for longer and merges its old data back (``SyncJoinChoice/mergeLocalIntoContainer``)
    /// brings back records deleted meanwhile.
    public var tombstoneLifetime: Duration {
        get { lifecycle.settings.withLock { $0.tombstoneLifetime } }
        set { lifecycle.settings.withLock { $0.tombstoneLifetime = newValue } }
    }

    /// Whether the container can be used now.
    public var containerAvailability: ContainerAvailability { ContainerAvailability.of(layout.container) }

    /// Turns sync on: checks the sentinel, joins the container as its situation and `policy`
    /// say, registers this device, and starts live sync (``start(watcher:rescanInterval:)``).
    ///
    /// - A device registered since it last synced (after ``pause()`` or a relaunch) resumes: the
    ///   saves it made meanwhile are exported, what arrived is imported.
    /// - An empty container is started with the local data.
    /// - A device that never synced with a container holding data, or a device that synced before
    ///   and is no longer registered (it was disabled, or the container was reset), asks `policy`
    ///   (``SyncJoinChoice``); whatever it chooses keeps the data it says to keep.
    /// - A container that cannot be used (missing, not mounted, read-only) is reported
    ///   (``SyncEvent/containerUnavailable(_:)``), the state becomes
    ///   ``SyncState/waitingForContainer(_:)``, and the container is looked at every
    ///   ``availabilityCheckInterval`` until it can be used; then sync starts by itself.
    ///
    /// While syncing, the container and the sentinel are watched: if the container disappears or
    /// this device's registration is removed, sync stops (``SyncState/reset(_:)``), the local store
    /// stays intact and usable, and the app is told once: the delegate, ``SyncEvent/containerReset(_:)``
    /// and `Notification.Name.concordSyncContainerReset`.
    ///
    /// - Returns: the state reached: ``SyncState/syncing``, or ``SyncState/waitingForContainer(_:)``.
    /// - Throws: the store's errors, ``SyncError`` when the container or the sentinel cannot be
    ///   written or read; sync is then not started, and the local data is as the failed step left
    ///   it (each step is idempotent: enabling again completes it).
    ///
    /// - Parameter policy: what to do in each situation the container can be found in.
    /// - Parameter live: whether sync then runs by itself (exports after saves, imports on
    ///   arrival, reset watching); `false` for a process that drives ``exportPending()`` and
    ///   ``importAvailable(batchSize:)`` itself, such as a one-shot command-line tool.
    @discardableResult
    public func enable(policy: SyncJoinPolicy = .default, live: Bool = true) throws -> SyncEnabling {
        lifecycle.settings.withLock {
            $0.policy = policy
            $0.live = live
        }
        return try onQueue { try performEnable() }
    }

    /// Pauses sync: no exports, no imports, no reset watching; the device stays registered and its
    /// saves keep their history, which ``resume(policy:)`` exports.
    public func pause() {
        onQueue {
            let actions = machine.withLock { $0.pause() }
            guard !actions.isEmpty else { return }
            logger.debug("sync paused", metadata: ["concord.device": "\(deviceID)"])
            perform(actions)
        }
    }

    /// Resumes paused sync: the same as ``enable(policy:live:)``, with the policy last given unless
    /// `policy` is (it is asked only if this device's registration disappeared meanwhile).
    @discardableResult
    public func resume(policy: SyncJoinPolicy? = nil) throws -> SyncEnabling {
        if let policy { lifecycle.settings.withLock { $0.policy = policy } }
        return try onQueue { try performEnable() }
    }

    /// Turns sync off for this device: live sync stops, this device's registration is removed
    /// from the sentinel (its logs stay for the others). The local data stays, and saves keep their
    /// history: enabling sync again later joins as a returning device, and a merge then exports
    /// what changed meanwhile with the clocks it had.
    public func disable() throws {
        try onQueue {
            // (A store given another device id since: the old id's registration is not this
            // instance's to remove; another installation may sync under it.)
            try refuseChangedDeviceID()
            // Saves keep their history while sync is off: a merge when the device comes back
            // exports what it changed, with the clocks it had.
            try performThrowing(machine.withLock { $0.disable() })
        }
    }

    /// Removes this device's registration (``disable()``): what it committed goes out first, and
    /// the next enable joins anew, even if the registration cannot be removed now (an
    /// unavailable container).
    private func unregister() throws {
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
        let interval = lifecycle.settings.withLock { $0.availabilityInterval }
        onQueue(after: interval) { sync in
            guard sync.machine.withLock({ $0.isWaiting(since: generation) }) else { return }
            let availability = sync.containerAvailability
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

    /// Does what the machine asks, in order, once its lock is released. Only a disable asks for
    /// work that can fail (``performThrowing(_:)``).
    func perform(_ actions: [SyncMachine.Action]) {
        do {
            try performThrowing(actions)
        } catch {
            failed("sync", error)
        }
    }

    /// Does what the machine asks, in order; the first failure ends it and is thrown.
    func performThrowing(_ actions: [SyncMachine.Action]) throws {
        for action in actions {
            switch action {
            case .stopResetWatching:
                parts.monitor.stopWatching()
            case .endRun(let ended):
                release(ended)
            case .unregister:
                try unregister()
            case .checkReset:
                queue.async { [self] in
                    machine.withLock { $0.resetCheckBegins() }
                    _ = detectReset()
                }
            case .reportUnavailable(let availability):
                logger.info(
                    "the container cannot be used yet; waiting",
                    metadata: [
                        "concord.container": "\(layout.container.path)", "concord.availability": "\(availability)",
                    ]
                )
                emit(.containerUnavailable(availability))
            case .reportReset(let reason):
                logger.warning(
                    "the container was reset; sync stopped, local data kept",
                    metadata: ["concord.device": "\(deviceID)", "concord.reason": "\(reason.rawValue)"]
                )
                emit(.containerReset(reason))
            case .announce(let state):
                emit(.stateChanged(state))
            case .export, .importAvailable, .checkExports, .rescan:
                performLive(action)
            }
        }
    }

    // MARK: Helpers

    /// Runs `body` on the sync queue (directly when already on it).
    func onQueue<T>(_ body: () throws -> T) rethrows -> T {
        // This instance's queue only: another FolderSync's queue is not ours to run on.
        if DispatchQueue.getSpecific(key: onSyncQueue) == ObjectIdentifier(self) { return try body() }
        return try queue.sync(execute: body)
    }
}
