import Synchronization

/// Sync's lifecycle as a state machine: each event (a pause, a disable, a stop, an enable that
/// finds the container unusable or finishes its join, a confirmed reset) moves the state and
/// returns what ``FolderSync`` must do, in order; ``FolderSync`` does it outside the lock
/// (`perform(_:)`). Pure: no I/O, no clock, no callback, so every transition is tested on its own
/// (`LifecycleMachineTests`).
///
///     off ──enable──▶ waitingForContainer ──available──▶ syncing ──pause──▶ paused
///      ▲                      │                            │  ▲              │
///      └──disable / stop──────┴────────────────────────────┘  └────resume────┘
///                                          syncing ──reset confirmed──▶ reset ──enable──▶ …
struct LifecycleMachine: Sendable {
    private(set) var state: SyncState = .off
    /// Bumped by every change of state and every stop, so that work begun under an earlier state
    /// (a join in progress, a check of an earlier wait for the container) does nothing.
    private(set) var generation: UInt64 = 0
    /// Whether what looks like a reset is one.
    var reset = ResetMonitor()
    /// The unavailability last reported (each is reported once per wait).
    private var lastUnavailable: ContainerAvailability?
    /// Whether a reset check is queued (checks asked for meanwhile are that one).
    private var resetCheckQueued = false

    /// What the lifecycle asks of ``FolderSync`` after a transition.
    enum Action: Hashable, Sendable {
        /// Stop reset watching and live sync.
        case standDown
        /// Unregister this device (``FolderSync/disable()``): the next enable joins anew.
        case unregister
        /// Tell the app the container cannot be used (``SyncEvent/containerUnavailable(_:)``).
        case reportUnavailable(ContainerAvailability)
        /// Tell the app sync stopped for a reset (``SyncEvent/containerReset(_:)``).
        case reportReset(ContainerResetReason)
        /// Tell the app the new state (``SyncEvent/stateChanged(_:)``).
        case announce(SyncState)
    }

    /// Moves to `state`; says whether it changed.
    private mutating func move(to state: SyncState) -> Bool {
        guard self.state != state else { return false }
        self.state = state
        generation += 1
        return true
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
        return [.standDown]
    }

    // MARK: Pausing, disabling, stopping

    /// ``FolderSync/pause()``: from any state but off, paused and reset.
    mutating func pause() -> [Action] {
        switch state {
        case .off, .paused, .reset: return []
        case .syncing, .waitingForContainer: break
        }
        _ = move(to: .paused)
        return [.standDown, .announce(.paused)]
    }

    /// ``FolderSync/disable()``: off, and an enable in progress stops short.
    mutating func disable() -> [Action] {
        _ = move(to: .off)
        generation += 1
        return [.standDown, .unregister, .announce(.off)]
    }

    /// ``FolderSync/stop()``: off without a word; an enable in progress, or a wait for the
    /// container, stops short.
    mutating func stop() -> [Action] {
        _ = move(to: .off)
        generation += 1
        return [.standDown]
    }

    // MARK: Resets

    /// Asks for a reset check; says whether one must be queued (none is queued yet, and sync runs).
    mutating func requestResetCheck() -> Bool {
        guard state == .syncing, !resetCheckQueued else { return false }
        resetCheckQueued = true
        return true
    }

    /// The queued reset check begins: a check asked for from now on is queued anew.
    mutating func resetCheckBegins() { resetCheckQueued = false }

    /// A reset was confirmed (or a replaced container found): sync stops, if it was running.
    mutating func resetConfirmed(_ reason: ContainerResetReason) -> [Action] {
        guard state == .syncing else { return [] }
        _ = move(to: .reset(reason))
        return [.standDown, .reportReset(reason), .announce(.reset(reason))]
    }
}
