#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A point on the monotonic clock after which a wait gives up.
public struct Deadline: Sendable, Comparable {
    /// Nanoseconds on `CLOCK_MONOTONIC`.
    public var nanoseconds: UInt64

    /// The instant `nanoseconds` on `CLOCK_MONOTONIC`.
    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    /// The current instant.
    public static var now: Deadline {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Deadline(nanoseconds: UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec))
    }

    /// The instant `duration` from now; `nil` for no deadline.
    public static func after(_ duration: Duration?) -> Deadline? {
        guard let duration else { return nil }
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return now }
        // Saturate: a timeout of centuries means "practically never", not an overflow trap.
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        let (nanos, overflow2) = whole.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000))
        let (total, overflow3) = now.nanoseconds.addingReportingOverflow(nanos)
        return Deadline(nanoseconds: overflow || overflow2 || overflow3 ? UInt64.max / 2 : total)
    }

    /// Whether the deadline is now or in the past.
    public var hasPassed: Bool { Deadline.now >= self }

    /// Whether `lhs` comes before `rhs`.
    public static func < (lhs: Deadline, rhs: Deadline) -> Bool { lhs.nanoseconds < rhs.nanoseconds }
}

/// A mutex with a condition variable on the monotonic clock.
///
/// The building block for the blocking waits of the coordination layer, which need deadlines
/// (`Synchronization.Mutex` has no condition variable).
public final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    /// Creates an unlocked mutex and its condition.
    public init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Takes the mutex, waiting as long as it takes.
    public func lock() { pthread_mutex_lock(mutex) }
    /// Releases the mutex.
    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Runs `body` with the mutex held.
    @inline(__always)
    public func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Waits for a broadcast, with the mutex held on entry and on return.
    ///
    /// - Returns: `false` if `deadline` passed first.
    @discardableResult
    public func wait(until deadline: Deadline?) -> Bool {
        guard let deadline else {
            pthread_cond_wait(condition, mutex)
            return true
        }
        if deadline.hasPassed { return false }
        var spec = timespec(
            tv_sec: Int(deadline.nanoseconds / 1_000_000_000),
            tv_nsec: Int(deadline.nanoseconds % 1_000_000_000)
        )
        return pthread_cond_timedwait(condition, mutex, &spec) != ETIMEDOUT
    }

    /// Wakes every waiter.
    public func broadcast() { pthread_cond_broadcast(condition) }
}
