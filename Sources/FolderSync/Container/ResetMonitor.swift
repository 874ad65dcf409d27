/// The reset monitor: whether what looks like a container reset is one.
///
/// A sync engine may replace a registration by deleting and re-creating it, and a container being
/// deleted file by file loses the registration before the folder: what looks like a reset is
/// confirmed only when it is still seen ``gracePeriod`` after it was first seen. Sync holds its
/// exports and imports meanwhile. The monitor is pure: each observation returns what the caller
/// does (hold and look again, go on, or stop), and the caller does it outside the lock that
/// guards the monitor.
struct ResetMonitor: Sendable, Equatable {
    /// What an observation asks of the caller.
    enum Action: Sendable, Equatable {
        /// Nothing looks reset: exports and imports go on.
        case proceed
        /// Something looks reset and is not confirmed yet: hold exports and imports. Schedule a
        /// look after `lookAgainAfter`; `nil` when a look is already scheduled.
        case hold(lookAgainAfter: Duration?)
        /// The reset is confirmed: sync stops for `reason`.
        case stop(ContainerResetReason)
    }

    /// How long a reset must stay in sight before sync stops.
    var gracePeriod: Duration = .milliseconds(250)
    /// When the reset in sight was first seen (`nil`: none is).
    private(set) var suspectedSince: ContinuousClock.Instant?
    /// Whether a look is scheduled and has not run yet.
    private(set) var lookScheduled = false

    /// Notes what the container shows at `now` (`reason`: the reset it shows, or `nil`).
    mutating func observe(_ reason: ContainerResetReason?, at now: ContinuousClock.Instant) -> Action {
        guard let reason else {
            suspectedSince = nil
            return .proceed
        }
        let since = suspectedSince ?? now
        suspectedSince = since
        let left = gracePeriod - (now - since)
        if left <= .zero {
            suspectedSince = nil
            return .stop(reason)
        }
        if lookScheduled { return .hold(lookAgainAfter: nil) }
        lookScheduled = true
        return .hold(lookAgainAfter: left)
    }

    /// The scheduled look is running: the next observation may schedule another.
    mutating func lookingAgain() {
        lookScheduled = false
    }
}
