import FileWatching

extension SyncMachine {
    /// A live run: what is queued on the sync queue, the check chain of local saves, and the
    /// watch of the devices folder. It begins with ``SyncMachine/startRun(rescanInterval:)`` and
    /// ends with the transition that stands sync down (or ``SyncMachine/stopRun()``): a new run
    /// starts with nothing queued, and the timers of an earlier run find another number.
    struct Run: Sendable {
        /// The run's number (``SyncMachine/runs`` when it began).
        let number: UInt64
        var exportQueued = false
        var importQueued = false
        var rescanScheduled = false
        var watch: InotifyWatcher.Watch?
        /// Whether the watch is on the store's shared watcher (released at the end).
        var usesSharedWatcher = false
        /// The first and the last local save not yet handed to an export (`nil`: none waits).
        var firstWaitingSave: ContinuousClock.Instant?
        var lastWaitingSave: ContinuousClock.Instant?
        /// The last local save in this run.
        var lastSave: ContinuousClock.Instant?
        /// Whether a chain of export checks runs: it looks again every quiet period while saves
        /// keep coming and for a linger period after the last one, so that a save in a run of
        /// saves wakes nothing (waking the sync queue costs the saving thread more than the
        /// rest of its bookkeeping).
        var checking = false
    }

    /// When live sync writes a local save's log: once saves pause for `quiet`, or once the first
    /// has waited `longest`; the checks go on for `linger` after the last save.
    struct ExportSchedule: Sendable {
        var quiet: Duration
        var longest: Duration
        var linger: Duration
    }
}
