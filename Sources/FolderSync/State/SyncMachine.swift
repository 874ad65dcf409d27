import FileWatching

/// Where sync stands, as one value: the lifecycle (off, waiting for the container, syncing,
/// paused, stopped by a reset), the live engine's run when one runs (what is queued, the check
/// chain of local saves, the watch it holds), and what is remembered across runs (failures
/// reported, the maintenance cadence).
///
/// Every event (an enable that finds the container unusable or finishes its join, a pause, a
/// disable, a stop, a reset confirmed, a local save, a timer, files arriving, an export or an
/// import beginning) is a method that changes the value and returns the ``Action``s to take, in
/// order. ``FolderSync`` holds the machine in one `Mutex` and takes them after releasing it: no
/// I/O, no clock, no callback runs inside. Pure, so every transition is tested on its own
/// (`SyncMachineTests`, `LiveExportScheduleTests`).
///
///     off ──enable──▶ waitingForContainer ──available──▶ syncing ──pause──▶ paused
///      ▲                      │                            │  ▲              │
///      └──disable / stop──────┴────────────────────────────┘  └────resume────┘
///                                          syncing ──reset confirmed──▶ reset ──enable──▶ …
///
/// A live run (``Run``) exists from ``startRun(rescanInterval:)`` to the transition that stands
/// sync down; an app may start one without enabling (it then checks nothing for resets).
struct SyncMachine: Sendable {
    /// What a transition asks of ``FolderSync``, in order.
    enum Action: Sendable, Equatable {
        /// Stop watching the container for a reset.
        case stopResetWatching
        /// Release what the live run that just ended held (its watch, the shared watcher).
        case endRun(RunRelease)
        /// Unregister this device (``FolderSync/disable()``): the next enable joins anew.
        case unregister
        /// Tell the app the container cannot be used (``SyncEvent/containerUnavailable(_:)``).
        case reportUnavailable(ContainerAvailability)
        /// Tell the app sync stopped for a reset (``SyncEvent/containerReset(_:)``).
        case reportReset(ContainerResetReason)
        /// Tell the app the new state (``SyncEvent/stateChanged(_:)``).
        case announce(SyncState)
        /// Queue an export on the sync queue (for run `run`: one queued in an earlier run does nothing).
        case export(run: UInt64)
        /// Queue an import on the sync queue (likewise).
        case importAvailable(run: UInt64)
        /// Look at the local saves waiting for export after `after` (the check chain of `run`).
        case checkExports(after: Duration, run: UInt64)
        /// Look at the container again after `after` (a re-scan of `run`).
        case rescan(after: Duration, run: UInt64)
        /// Queue a reset check on the sync queue.
        case checkReset
    }

    /// What a live run held, released once it ends.
    struct RunRelease: Sendable, Equatable {
        /// The watch of the devices folder.
        var watch: InotifyWatcher.Watch?
        /// Whether the watch is on the store's shared watcher (released with it).
        var sharedWatcher: Bool

        static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.watch === rhs.watch && lhs.sharedWatcher == rhs.sharedWatcher
        }
    }

    // MARK: The lifecycle

    /// The lifecycle's state.
    private(set) var state: SyncState = .off
    /// Bumped by every change of state and every stop, so that work begun under an earlier state
    /// (a join in progress, a check of an earlier wait for the container) does nothing.
    private(set) var generation: UInt64 = 0
    /// Whether what looks like a reset is one.
    private(set) var resetMonitor = ResetMonitor()
    /// The unavailability last reported (each is reported once per wait).
    private var lastUnavailable: ContainerAvailability?
    /// Whether a reset check is queued (checks asked for meanwhile are that one).
    private var resetCheckQueued = false

    // MARK: The live engine

    /// The live run, while live sync runs.
    private(set) var run: Run?
    /// The number of the last run begun (each run's timers carry it).
    private(set) var runs: UInt64 = 0
    /// What the last run was asked to re-scan at (kept for the next run).
    private(set) var rescanInterval: Duration = .seconds(1)
    /// The last failure logged at warning level; the same failure again is logged at debug.
    private var lastFailure: String?
    /// The cause of the last export that waited for the container (likewise).
    private var lastDeferredExport: String?
    /// How often live sync acknowledges what it applied and compacts.
    var maintenanceInterval: Duration = .seconds(600)
    /// When it last did (`nil`: not since this process began).
    private(set) var lastMaintenance: ContinuousClock.Instant?

    /// Moves to `state`; says whether it changed.
    private mutating func move(to state: SyncState) -> Bool {
        guard self.state != state else { return false }
        self.state = state
        generation += 1
        return true
    }

    /// Ends the live run and stops reset watching: what each transition that stands sync down
    /// asks first.
    private mutating func standDown() -> [Action] {
        var actions: [Action] = [.stopResetWatching]
        if let ended = endRun() { actions.append(.endRun(ended)) }
        return actions
    }

    // MARK: Enabling

    /// An enable found the container unusable: sync waits for it. Reported once per
    /// availability: an enable or a check that finds the same again says nothing.
    ///
    /// - Parameter wait: for a check of a wait begun earlier, the generation it was begun in: a
    ///   check that is no longer current (sync was enabled, paused, disabled meanwhile) returns
    ///   `nil` and changes nothing, and a current one keeps the generation.
    mutating func containerUnavailable(_ availability: ContainerAvailability, wait: UInt64? = nil) -> [Action]? {
        if let wait {
            guard isWaiting(since: wait) else { return nil }
            state = .waitingForContainer(availability)
        } else {
            _ = move(to: .waitingForContainer(availability))
        }
        guard lastUnavailable != availability else { return [] }
        lastUnavailable = availability
        return [.reportUnavailable(availability), .announce(.waitingForContainer(availability))]
    }

    /// Whether the wait for the container begun in `generation` is still the current state.
    func isWaiting(since generation: UInt64) -> Bool {
        guard self.generation == generation, case .waitingForContainer = state else { return false }
        return true
    }

    /// A join begun in `generation` finished: sync runs, unless it was paused, disabled or
    /// stopped meanwhile (`nil`: the enable was interrupted, and the state is what that made it).
    mutating func joined(since generation: UInt64) -> [Action]? {
        guard self.generation == generation else { return nil }
        lastUnavailable = nil
        _ = move(to: .syncing)
        return [.announce(.syncing)]
    }

    /// Live sync could not start after a join: sync is off again.
    mutating func startFailed() -> [Action] {
        _ = move(to: .off)
        return standDown()
    }

    // MARK: Pausing, disabling, stopping

    /// ``FolderSync/pause()``: from any state but off, paused and reset.
    mutating func pause() -> [Action] {
        switch state {
        case .off, .paused, .reset: return []
        case .syncing, .waitingForContainer: break
        }
        _ = move(to: .paused)
        return standDown() + [.announce(.paused)]
    }

    /// ``FolderSync/disable()``: off, and an enable in progress stops short.
    mutating func disable() -> [Action] {
        _ = move(to: .off)
        generation += 1
        return standDown() + [.unregister, .announce(.off)]
    }

    /// ``FolderSync/stop()``: off without a word; an enable in progress, or a wait for the
    /// container, stops short.
    mutating func stop() -> [Action] {
        _ = move(to: .off)
        generation += 1
        return standDown()
    }

    // MARK: Resets

    /// Asks for a reset check: one is queued unless one is queued already or sync does not run.
    mutating func requestResetCheck() -> [Action] {
        guard state == .syncing, !resetCheckQueued else { return [] }
        resetCheckQueued = true
        return [.checkReset]
    }

    /// The queued reset check begins: a check asked for from now on is queued anew.
    mutating func resetCheckBegins() { resetCheckQueued = false }

    /// What the container shows at `now` (`seen`: the reset it shows, or `nil`): go on, hold and
    /// look again, or stop (``resetConfirmed(_:)``, which does nothing unless sync is on). The
    /// caller looks only while syncing; a stop meanwhile still holds the work that looked.
    mutating func observeReset(_ seen: ContainerResetReason?, at now: ContinuousClock.Instant) -> ResetMonitor.Action {
        resetMonitor.observe(seen, at: now)
    }

    /// A look scheduled by ``observeReset(_:at:)`` runs.
    mutating func lookingAgainForReset() { resetMonitor.lookingAgain() }

    /// How long what looks like a reset must last before sync stops for it.
    var resetGracePeriod: Duration {
        get { resetMonitor.gracePeriod }
        set { resetMonitor.gracePeriod = newValue }
    }

    /// A reset was confirmed (or a replaced container found): sync stops, if it was running.
    mutating func resetConfirmed(_ reason: ContainerResetReason) -> [Action] {
        guard state == .syncing else { return [] }
        _ = move(to: .reset(reason))
        return standDown() + [.reportReset(reason), .announce(.reset(reason))]
    }

    // MARK: Failures

    /// Notes a failure; says whether the same one was the last noted (then it is logged at debug).
    mutating func failed(_ message: String) -> Bool {
        defer { lastFailure = message }
        return lastFailure == message
    }

    /// An export or an import succeeded: the next failure is reported at warning again.
    /// Says whether acknowledging and compacting is due now (and if so notes that it is done).
    mutating func succeeded(at now: ContinuousClock.Instant) -> Bool {
        lastFailure = nil
        guard run != nil else { return false }
        if let last = lastMaintenance, now - last < maintenanceInterval { return false }
        lastMaintenance = now
        return true
    }

    /// Notes that an export waits for the container for `cause`; says whether it waited for the
    /// same cause last time (`nil`: an export went through, the next wait is reported anew).
    mutating func exportDeferred(_ cause: String?) -> Bool {
        defer { lastDeferredExport = cause }
        return cause != nil && lastDeferredExport == cause
    }

    // MARK: The live run

    /// Whether a live run is on.
    var isLive: Bool { run != nil }

    // MARK: Starting and stopping

    /// Begins a live run that re-scans every `rescanInterval`: its number, or `nil` when one runs
    /// already.
    mutating func startRun(rescanInterval: Duration) -> UInt64? {
        guard run == nil else { return nil }
        runs += 1
        run = Run(number: runs)
        self.rescanInterval = rescanInterval
        return runs
    }

    /// Run `number`'s watch is set up; `false` when that run ended meanwhile (the caller releases
    /// the watch: a run begun since has its own).
    mutating func runWatches(_ watch: InotifyWatcher.Watch, sharedWatcher: Bool, run number: UInt64) -> Bool {
        guard run?.number == number else { return false }
        run?.watch = watch
        run?.usesSharedWatcher = sharedWatcher
        return true
    }

    /// Ends the live run, if one runs (a transition stands sync down): what it held, to release.
    /// With `number`, only if that run is the one on (its start failed: a run begun since stays).
    mutating func endRun(_ number: UInt64? = nil) -> RunRelease? {
        guard let ended = run, number == nil || ended.number == number else { return nil }
        run = nil
        return RunRelease(watch: ended.watch, sharedWatcher: ended.usesSharedWatcher)
    }

    // MARK: Local saves

    /// A local save committed at `now`: starts the check chain (a check after the quiet period)
    /// unless one runs already or no run is on.
    mutating func noteSave(at now: ContinuousClock.Instant, schedule: ExportSchedule) -> [Action] {
        guard var run else { return [] }
        defer { self.run = run }
        run.lastSave = now
        run.lastWaitingSave = now
        if run.firstWaitingSave == nil { run.firstWaitingSave = now }
        guard !run.checking else { return [] }
        run.checking = true
        return [.checkExports(after: schedule.quiet, run: run.number)]
    }

    /// A check of the chain of run `number` at `now`: an export when saves paused for the quiet
    /// period or the first waited the longest, and the next check (none: the chain ends, nothing
    /// waits and no save came for the linger period).
    mutating func checkExports(
        at now: ContinuousClock.Instant,
        run number: UInt64,
        schedule: ExportSchedule
    ) -> [Action] {
        // (A chain of an earlier run just ends: this run has its own.)
        guard let run, run.number == number else { return [] }
        if let first = run.firstWaitingSave, let last = run.lastWaitingSave {
            if now - last >= schedule.quiet || now - first >= schedule.longest {
                self.run?.firstWaitingSave = nil
                self.run?.lastWaitingSave = nil
                return requestExport() + [.checkExports(after: schedule.quiet, run: number)]
            }
            let next = min(schedule.quiet - (now - last), schedule.longest - (now - first))
            return [.checkExports(after: next, run: number)]
        }
        if let lastSave = run.lastSave, now - lastSave < schedule.linger {
            return [.checkExports(after: schedule.quiet, run: number)]
        }
        self.run?.checking = false
        return []
    }

    /// ``FolderSync/waitForQueuedWork()``: the saves waiting for a pause in saving are exported now.
    mutating func flushWaitingSaves() -> [Action] {
        guard run?.firstWaitingSave != nil else { return [] }
        run?.firstWaitingSave = nil
        run?.lastWaitingSave = nil
        return requestExport()
    }

    // MARK: Exports, imports, re-scans

    /// Queues one export unless one is queued and not yet begun: saves that come while an
    /// export runs queue exactly one more.
    mutating func requestExport() -> [Action] {
        guard let run, !run.exportQueued else { return [] }
        self.run?.exportQueued = true
        return [.export(run: run.number)]
    }

    /// An export queued in run `number` begins: whether to do it (that run is still on; a stopped
    /// one writes nothing more, and a run begun since queued its own).
    mutating func exportBegins(run number: UInt64) -> Bool {
        guard run?.number == number else { return false }
        run?.exportQueued = false
        return true
    }

    /// Queues one import unless one is queued and not yet begun.
    mutating func requestImport() -> [Action] {
        guard let run, !run.importQueued else { return [] }
        self.run?.importQueued = true
        return [.importAvailable(run: run.number)]
    }

    /// An import queued in run `number` begins: whether to do it.
    mutating func importBegins(run number: UInt64) -> Bool {
        guard run?.number == number else { return false }
        run?.importQueued = false
        return true
    }

    /// A re-scan after the run's re-scan interval, unless one is already scheduled.
    mutating func requestRescan() -> [Action] {
        guard let run, !run.rescanScheduled else { return [] }
        self.run?.rescanScheduled = true
        return [.rescan(after: rescanInterval, run: run.number)]
    }

    /// The re-scan scheduled in run `number` is due: an export (a failed one is retried: its logs
    /// are still in the outbox) and an import, if that run is still on.
    mutating func rescanDue(run number: UInt64) -> [Action] {
        guard run?.number == number else { return [] }
        run?.rescanScheduled = false
        return requestExport() + requestImport()
    }
}
