internal import ConcordSystem
import Foundation

/// A flag or counter that threads update and a test waits on, with a bound.
///
/// ```swift
/// let saved = Signal()
/// store.onSave = { saved.fire() }
/// #expect(saved.wait(timeout: .seconds(10)))
/// ```
public final class Signal: @unchecked Sendable {
    private let condition = ConditionLock()
    private var count = 0

    /// Creates a signal that has not fired.
    public init() {}

    /// Increments the count and wakes waiters.
    public func fire() {
        condition.withLock {
            count += 1
            condition.broadcast()
        }
    }

    /// The number of times ``fire()`` was called.
    public var value: Int { condition.withLock { count } }

    /// Waits until ``fire()`` was called at least `times` times, or `timeout` passes.
    /// - Returns: whether it was.
    @discardableResult
    public func wait(times: Int = 1, timeout: Duration = .seconds(10)) -> Bool {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while count < times {
                if !condition.wait(until: deadline) && count < times { return false }
            }
            return true
        }
    }
}

/// The milliseconds that running `body` took (on the monotonic clock).
public func milliseconds(_ body: () throws -> Void) rethrows -> Double {
    let start = Deadline.now
    try body()
    return Double(Deadline.now.nanoseconds - start.nanoseconds) / 1_000_000
}
