import ConcordSystem

/// A counting semaphore with an optional timeout.
final class Semaphore: @unchecked Sendable {
    private let condition = ConditionLock()
    private var count = 0
    func signal() {
        condition.withLock {
            count += 1
            condition.broadcast()
        }
    }
    @discardableResult
    func wait(timeout: Duration?) -> Bool {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while count == 0 {
                if !condition.wait(until: deadline) && count == 0 { return false }
            }
            count -= 1
            return true
        }
    }
}
