import Dispatch
import Foundation
import Logging
import Persistence
import Synchronization

/// The engine behind a ``FolderSync``: the one state machine (``SyncMachine``), the serial queue
/// its work runs on, the store's watcher, the app's settings and the parts (``SyncParts``).
///
/// Every transition takes the machine's lock, returns actions, and the engine performs them
/// after releasing it (``perform(_:)``). The façade (``FolderSync``) holds the engine and is what
/// takes part in the coordinator's saves and delivers events to the app; the engine reaches it
/// weakly, for those two things only.
final class SyncEngine: SyncPart, Sendable {
    /// What the parts of sync work with (the store, the layout, this device, the clock, the lock).
    let context: SyncContext
    /// Where sync stands and what live sync has queued: the one lock every transition takes.
    let machine = Mutex(SyncMachine())
    /// Where exports, imports, checks and timers run, one at a time.
    let queue = DispatchQueue(label: "concord.sync", qos: .utility)
    /// The store's one inotify watcher, shared by live sync and reset watching.
    let syncWatcher: SyncWatcher
    /// What the app chose: how to join, whether sync runs by itself, who hears, the intervals.
    let settings = Mutex(SyncSettings())
    /// The parts of sync.
    let parts: SyncParts
    /// The façade, which takes part in saves (held weakly: it holds the engine).
    private let facade = Mutex(Facade())

    private struct Facade {
        weak var sync: FolderSync?
    }

    init(context: SyncContext, watcher: SyncWatcher) {
        self.context = context
        syncWatcher = watcher
        parts = SyncParts(context: context, watcher: watcher)
        parts.host.attach(self)
        queue.setSpecific(key: onSyncQueue, value: ObjectIdentifier(self))
    }

    /// Points the engine at its façade (once, as it is set up).
    func attach(_ sync: FolderSync) { facade.withLock { $0.sync = sync } }

    /// As sync is set up: this device's folder, and the metadata keys renamed since the store
    /// was last synced. A container that is not there yet is not an error: an enable waits for
    /// it. (Not for a new id not joined yet: its join first checks that nobody uses it, and an id
    /// given up before it joined leaves no folder behind to hold compaction back.)
    func prepareContainer(renamed: Bool) throws {
        if ContainerAvailability.of(layout.container) == .available, !renamed {
            try? SyncFiles.createFolder(layout.deviceFolder(deviceID))
        }
        try moveRenamedEntries()
    }

    /// Sync's state now.
    var state: SyncState { machine.withLock { $0.state } }

    // MARK: Saves

    /// Takes part in the coordinator's saves (again): what they commit gets its history.
    func joinSaves() {
        guard let sync = facade.withLock({ $0.sync }) else { return }
        coordinator.addSaveParticipant(sync)
    }

    /// Whether sync takes part in its coordinator's saves: from its creation, or an enable, until
    /// ``stop()`` (once the sync lock is free).
    var takesPartInSaves: Bool {
        guard let sync = facade.withLock({ $0.sync }) else { return false }
        return coordinator.saveParticipants.contains { $0 === sync }
    }

    /// Stops live sync and watching, and leaves saves once the sync lock is free (unless enabled
    /// again meanwhile); the work live sync had begun ends before this returns, unless called
    /// under the sync lock (see ``FolderSync/stop()``).
    func stop() {
        let stopped = machine.withLock { machine in
            let actions = machine.stop()
            return (actions, machine.generation)
        }
        perform(stopped.0)
        context.events.finish()
        // An import or a commit under way (on any thread, or later in the import whose event
        // called this) keeps its part in saves to the end: the bookkeeping of what it removes
        // is in its commit. Sync leaves saves once the lock is free, unless enabled again since.
        let leave: @Sendable () -> Void = { [weak self] in
            guard let self, self.machine.withLock({ $0.generation == stopped.1 }),
                let sync = self.facade.withLock({ $0.sync })
            else { return }
            self.coordinator.removeSaveParticipant(sync)
        }
        do {
            try syncLock.whenFree(leave)
        } catch {
            logger.warning(
                "cannot take the sync lock to stop: leaving saves at once",
                metadata: ["concord.error": "\(error)"]
            )
            leave()
        }
        // (Not when called under the sync lock, from an entity policy of an import's save, say:
        // the work may be waiting for that lock.)
        if !syncLock.isHeldByCurrentThread { onQueue {} }
    }

    // MARK: Actions

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

    /// Logs a failure (at warning the first time, at debug while it repeats) and reports it.
    func failed(_ operation: String, _ error: any Error) {
        let message = "\(operation) failed: \(error)"
        let repeated = machine.withLock { $0.failed(message) }
        if repeated {
            logger.debug(
                "sync failed again",
                metadata: ["concord.operation": "\(operation)", "concord.error": "\(error)"]
            )
        } else {
            logger.warning(
                "sync failed; trying again later",
                metadata: ["concord.operation": "\(operation)", "concord.error": "\(error)"]
            )
        }
        emit(.failed(message))
    }

    // MARK: The queue

    /// Runs `body` on the sync queue (directly when already on it).
    func onQueue<T>(_ body: () throws -> T) rethrows -> T {
        // This engine's queue only: another store's queue is not ours to run on.
        if DispatchQueue.getSpecific(key: onSyncQueue) == ObjectIdentifier(self) { return try body() }
        return try queue.sync(execute: body)
    }

    /// Runs `body` on the sync queue after `delay` (at least a millisecond).
    func onQueue(after delay: Duration, _ body: @escaping @Sendable (SyncEngine) -> Void) {
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(max(delay.nanoseconds, 1_000_000)))) { [weak self] in
            guard let self else { return }
            body(self)
        }
    }
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
