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
        /// The last local save since live sync started.
        var lastSave: ContinuousClock.Instant?
        /// Whether a chain of export checks runs: it looks again every quiet period while saves
        /// keep coming and for a linger period after the last one, so that a save in a run of
        /// saves wakes nothing (waking the sync queue costs the saving thread more than the
        /// rest of its bookkeeping).
        var checking = false

        /// Notes a local save; returns the generation of the check chain to start, or `nil` when
        /// one runs already (or live sync is stopped).
        mutating func noteSave(at now: ContinuousClock.Instant) -> UInt64? {
            guard running else { return nil }
            lastSave = now
            lastWaitingSave = now
            if firstWaitingSave == nil { firstWaitingSave = now }
            guard !checking else { return nil }
            checking = true
            return generation
        }

        /// What a check of the chain started in `generation` finds: whether to export now
        /// (saves paused for `quiet`, or the first has waited `longest`), and when to look again
        /// (`nil`: the chain ends, nothing waits and no save came for `linger`).
        mutating func exportDue(
            at now: ContinuousClock.Instant,
            generation: UInt64,
            quiet: Duration,
            longest: Duration,
            linger: Duration
        ) -> (export: Bool, next: Duration?) {
            // (A chain of an earlier run just ends: this run has its own.)
            guard running, generation == self.generation else { return (false, nil) }
            if let first = firstWaitingSave, let last = lastWaitingSave {
                if now - last >= quiet || now - first >= longest {
                    firstWaitingSave = nil
                    lastWaitingSave = nil
                    return (true, quiet)
                }
                return (false, min(quiet - (now - last), longest - (now - first)))
            }
            if let lastSave, now - lastSave < linger { return (false, quiet) }
            checking = false
            return (false, nil)
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

    /// Stops the engine; returns whether it was running, and what must be released outside the
    /// lock.
    func stop() -> (wasRunning: Bool, watch: InotifyWatcher.Watch?, sharedWatcher: Bool) {
        machine.withLock { state in
            guard state.running else { return (false, nil, false) }
            state.running = false
            state.generation += 1
            state.firstWaitingSave = nil
            state.lastWaitingSave = nil
            state.lastSave = nil
            state.checking = false
            defer {
                state.watch = nil
                state.usesSharedWatcher = false
            }
            return (true, state.watch, state.usesSharedWatcher)
        }
    }
}
