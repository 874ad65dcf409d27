import Dispatch
import FileWatching
import Synchronization

/// The live engine's state: what is queued on the sync queue, and what ``FolderSync/start(watcher:rescanInterval:)``
/// set up. Methods of ``Machine`` are pure and say what to do; the caller does it unlocked.
final class LiveSync: Sendable {
    struct Machine {
        var running = false
        /// Bumped by every start and stop, so timers of an earlier run do nothing.
        var generation: UInt64 = 0
        var exportQueued = false
        var importQueued = false
        var rescanScheduled = false
        var saveListener: UInt64?
        var watch: InotifyWatcher.Watch?
        /// Whether the watch is on the store's shared watcher (released at stop).
        var usesSharedWatcher = false
        var rescanInterval: Duration = .seconds(1)
        /// The last failure logged at warning level; the same failure again is logged at debug.
        var lastFailure: String?
        /// The cause of the last export that waited for the container (likewise).
        var lastDeferredExport: String?
        /// How often live sync acknowledges what it applied and compacts.
        var maintenanceInterval: Duration = .seconds(600)
        /// When it last did (`nil`: not since it started).
        var lastMaintenance: ContinuousClock.Instant?
        /// The first and the last local save not yet handed to an export (`nil`: none waits).
        var firstWaitingSave: ContinuousClock.Instant?
        var lastWaitingSave: ContinuousClock.Instant?

        /// Notes a local save; says whether a check must be scheduled (none is pending yet).
        mutating func noteSave(at now: ContinuousClock.Instant) -> Bool {
            guard running else { return false }
            lastWaitingSave = now
            guard firstWaitingSave == nil else { return false }
            firstWaitingSave = now
            return true
        }

        /// What a check after a save finds to do.
        enum ExportCheck {
            /// Nothing (stopped, or another check took the saves).
            case none
            /// Export now: saves paused for the quiet period, or the first has waited longest.
            case export
            /// Look again after this long.
            case wait(Duration)
        }

        mutating func exportDue(
            at now: ContinuousClock.Instant,
            generation: UInt64,
            quiet: Duration,
            longest: Duration
        ) -> ExportCheck {
            guard running, generation == self.generation, let first = firstWaitingSave, let last = lastWaitingSave
            else { return .none }
            if now - last >= quiet || now - first >= longest {
                firstWaitingSave = nil
                lastWaitingSave = nil
                return .export
            }
            return .wait(min(quiet - (now - last), longest - (now - first)))
        }

        /// Whether acknowledging and compacting is due now; if so, notes that it is being done.
        mutating func takeMaintenance(now: ContinuousClock.Instant) -> Bool {
            guard running else { return false }
            if let last = lastMaintenance, now - last < maintenanceInterval { return false }
            lastMaintenance = now
            return true
        }

        /// Queues one export unless one is queued and not yet begun: saves that come while an
        /// export runs queue exactly one more.
        mutating func requestExport() -> Bool {
            guard running, !exportQueued else { return false }
            exportQueued = true
            return true
        }

        mutating func requestImport() -> Bool {
            guard running, !importQueued else { return false }
            importQueued = true
            return true
        }

        /// A re-scan after `rescanInterval`, unless one is already scheduled.
        mutating func requestRescan() -> (generation: UInt64, after: Duration)? {
            guard running, !rescanScheduled else { return nil }
            rescanScheduled = true
            return (generation, rescanInterval)
        }
    }

    let machine = Mutex(Machine())
    let queue = DispatchQueue(label: "concord.sync", qos: .utility)

    /// Stops the engine; returns what must be released outside the lock.
    func stop() -> (listener: UInt64?, watch: InotifyWatcher.Watch?, sharedWatcher: Bool) {
        machine.withLock { state in
            guard state.running else { return (nil, nil, false) }
            state.running = false
            state.generation += 1
            state.firstWaitingSave = nil
            state.lastWaitingSave = nil
            defer {
                state.saveListener = nil
                state.watch = nil
                state.usesSharedWatcher = false
            }
            return (state.saveListener, state.watch, state.usesSharedWatcher)
        }
    }
}
