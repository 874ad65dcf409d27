import ConcordSystem
import Synchronization

/// The cancellation state of one coordination, with the waits to wake when it is cancelled.
final class CoordinationToken: Sendable {
    private struct State {
        var cancelled = false
        var wakers: [Int: @Sendable () -> Void] = [:]
        var nextWaker = 0
    }
    private let state = Mutex(State())

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Marks the coordination cancelled and wakes whatever it is waiting on.
    func cancel() {
        let wakers = state.withLock { state -> [@Sendable () -> Void] in
            if state.cancelled { return [] }
            state.cancelled = true
            return Array(state.wakers.values)
        }
        for wake in wakers { wake() }
    }

    /// Registers `wake` to be called on cancellation; returns a key for ``removeWaker(_:)``.
    func addWaker(_ wake: @escaping @Sendable () -> Void) -> Int {
        state.withLock { state in
            state.nextWaker += 1
            state.wakers[state.nextWaker] = wake
            return state.nextWaker
        }
    }

    /// Unregisters a waker.
    func removeWaker(_ key: Int) {
        _ = state.withLock { $0.wakers.removeValue(forKey: key) }
    }

    /// Runs `body` with `wake` registered to be called on cancellation.
    func whileRegistered<T, E: Error>(_ wake: @escaping @Sendable () -> Void, _ body: () throws(E) -> T) throws(E) -> T
    {
        let key = addWaker(wake)
        defer { removeWaker(key) }
        return try body()
    }
}

/// How a wait ended.
enum WaitOutcome: Sendable, Equatable {
    case completed
    case timedOut
    case cancelled
}

/// A value that one thread sets once and another waits for, with a deadline and cancellation.
final class OneShot<Value: Sendable>: @unchecked Sendable {
    private let condition = ConditionLock()
    private var value: Value?
    private var abandoned = false

    /// Sets the value, unless the waiter has given up.
    /// - Returns: `false` if the waiter abandoned the wait (the caller must clean up).
    @discardableResult
    func fulfil(_ newValue: Value) -> Bool {
        condition.withLock {
            if abandoned { return false }
            if value == nil { value = newValue }
            condition.broadcast()
            return true
        }
    }

    /// Waits for the value until `deadline` or cancellation; abandons the wait if it ends first.
    func wait(until deadline: Deadline?, token: CoordinationToken) -> (WaitOutcome, Value?) {
        token.whileRegistered({ [condition] in condition.withLock { condition.broadcast() } }) {
            condition.withLock {
                while true {
                    if let value { return (.completed, value) }
                    if token.isCancelled {
                        abandoned = true
                        return (.cancelled, nil)
                    }
                    if !condition.wait(until: deadline), value == nil {
                        abandoned = true
                        return (.timedOut, nil)
                    }
                }
            }
        }
    }
}
